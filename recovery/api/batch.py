"""BatchBolt: a bolt that processes its input tuples as Arrow record batches (Trident-style),
with the same per-tuple tracking and failure localization as a row bolt.

    import pyarrow.compute as pc
    from recovery import BatchBolt

    class Upper(BatchBolt):
        def process_batch(self, batch):            # a pyarrow.RecordBatch, one row per tuple
            words = pc.utf8_upper(batch.column("word"))
            self.emit_batch(pa.record_batch([words], names=["word"]))   # row i <- input row i

`process_batch` gets the input tuples' declared fields as columns (one batch holds tuples of
one source component and stream; `recovery.batch.size` rows at most). Output goes through
`emit_batch(batch, anchors=None, stream="default")`: `batch` has a column per field of
`stream` (by name; extra columns are ignored) and `anchors` says, per output row, which input
row it derives from: a sequence of row indices (ints), or of lists of indices (a row derived
from several inputs, Storm's multi-anchoring). `anchors=None` anchors output row i to input row
i and needs as many output rows as input rows.

Every input row is acked when `process_batch` returns, but for the rows named in
`fail_rows(rows, errors)`: those fail, each with its own error, as a row bolt's `fail` or
exception would, and what was emitted anchored to them does not flow on. When
`process_batch` raises, the runtime bisects: it re-runs the two halves of the batch (and their
halves) until each failing row fails alone with its own exception; the other rows' outputs
flow on. Outputs and keyed-state writes of a call that raised are discarded, so
`process_batch` should have no other side effects.

Keyed state (`self.state`) is the row bolts' KeyedState. The message timeout
(`topology.message.timeout.secs`) is not enforced inside `process_batch`, and batch bolts get
no tick tuples.

Run by a row runtime (the plain PySpark bench, a harness that calls `process`), a BatchBolt
processes each tuple as a batch of one row.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from recovery.api.collector import BatchOutputCollector
from recovery.api.components import Bolt, Tuple


class BatchBolt(Bolt):
    """A bolt whose input comes in pyarrow.RecordBatches; see the module's documentation."""

    auto_anchor = True
    auto_ack = True
    _row_inputs: list[Tuple] | None = None    # set while `process` runs one tuple as a batch

    def process_batch(self, batch: Any) -> None:
        raise NotImplementedError

    def emit_batch(self, batch: Any, anchors: Sequence[Any] | Any = None, stream: str = "default") -> None:
        """Emit the rows of `batch` (a pyarrow.RecordBatch or Table) on `stream`, each anchored
        to the input row(s) `anchors` names (None: output row i to input row i)."""
        if self._row_inputs is None:   # the batch runtime's collector (runtime.batch)
            cast(BatchOutputCollector, self._collector).emit_batch(batch, anchors, stream)
            return
        # a row runtime: the input batch is one tuple, every output row is anchored to it
        declared = self.context.workflow.component(self.context.component_id).stream(stream)
        names = list(declared.fields) if declared is not None else list(batch.schema.names)
        columns = [batch.column(n).to_pylist() for n in names]
        for values in zip(*columns):
            self.emit(list(values), stream, anchors=self._row_inputs)

    def fail_rows(self, rows: Sequence[int] | Any, errors: Sequence[str] | str) -> None:
        """Fail input rows `rows` (indices into the batch), each with its error (one string
        for all, or one per row), instead of raising."""
        if self._row_inputs is None:
            cast(BatchOutputCollector, self._collector).fail_rows(rows, errors)
            return
        if len(list(rows)):
            raise RowFailed(errors if isinstance(errors, str) else list(errors)[0])

    def process(self, tup: Tuple) -> None:
        import pyarrow as pa
        batch = pa.RecordBatch.from_arrays([pa.array([v]) for v in tup.values], names=list(tup.fields))
        self._row_inputs = [tup]
        try:
            self.process_batch(batch)
        finally:
            self._row_inputs = None


class RowFailed(Exception):
    """fail_rows under a row runtime: the one tuple fails with the given error."""
