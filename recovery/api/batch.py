"""BatchBolt and BatchSpout: components that process and produce their tuples as Arrow record
batches (Trident-style), with the same per-tuple tracking and failure localization as row
components.

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

The message timeout (`topology.message.timeout.secs`) bounds each `process_batch` call as it
bounds a row bolt's `process`: an `emit_batch`, `fail_rows` or `log` past the deadline raises
TupleTimeout, and a call that raises it or ends past its deadline fails every row of its batch
with the timeout (but rows it failed before with `fail_rows`, which keep their error), its
outputs and keyed-state writes discarded; no bisection. A call that never returns is ended by the
watchdog, and the task's retry fails that batch's rows without running them. Keyed state
(`self.state`) is the row bolts' KeyedState; batch bolts get no tick tuples.

A BatchSpout produces root tuples a batch at a time:

    class Numbers(BatchSpout):
        def open(self, conf, context):
            self.next = 0

        def next_batch(self):                      # nothing emitted: the spout is exhausted
            if self.next < 10_000:
                n = pa.array(range(self.next, self.next + 1000))
                self.emit_batch(pa.record_batch([n], names=["n"]), message_ids=n)
                self.next += 1000

`emit_batch(batch, message_ids=None, stream="default")` makes each row of `batch` (a column
per field of `stream`) a root tuple, with message id `message_ids[i]` (unique within a run,
as a row spout's `tup_id`), or, without them, the pair (task index, position of the row among
the rows this task emitted). Each root gets the root id, tuple ids, routes and ledger
contributions a row spout's `emit(values, tup_id=message_id)` would give it, and its spout is
told its fate the same way: `ack(message_id)` once its tree completes, `fail(message_id)`
once it is dead. Root replay re-runs the spout and keeps only the failed rows.

Run by a row runtime (the plain PySpark bench, a harness that calls `process` or
`next_tuple`), a BatchBolt processes each tuple as a batch of one row, and a BatchSpout emits
its batches' rows one by one, with the same message ids.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from recovery.api.collector import BatchOutputCollector
from recovery.api.components import Bolt, Spout, Tuple


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


class BatchSpout(Spout):
    """A spout whose root tuples come in pyarrow.RecordBatches; see the module's documentation."""

    _row_runtime = False    # set while `next_tuple` runs next_batch for a row runtime
    _rows_emitted = 0       # rows emitted under a row runtime: the default message ids' positions

    def next_batch(self) -> Any:
        """Emit the next batch(es) with emit_batch; emitting nothing (or returning False)
        ends a bounded run's spout, as next_tuple does."""
        raise NotImplementedError

    def emit_batch(self, batch: Any, message_ids: Sequence[Any] | Any = None, stream: str = "default") -> None:
        """Emit each row of `batch` (a pyarrow.RecordBatch or Table, a column per field of
        `stream`) as a root tuple with message id `message_ids[i]` (None: (task index, row
        position))."""
        if not self._row_runtime:   # the batch runtime's collector (runtime.batch)
            cast(BatchOutputCollector, self._collector).emit_root_batch(batch, message_ids, stream)
            return
        n = batch.num_rows
        declared = self.context.workflow.component(self.context.component_id).stream(stream)
        names = list(declared.fields) if declared is not None else list(batch.schema.names)
        columns = [batch.column(name).to_pylist() for name in names]
        rows = list(zip(*columns)) if columns else [()] * n
        mids = message_ids_as_list(message_ids) if message_ids is not None else None
        if mids is not None and len(mids) != n:
            raise ValueError(f"{self.context.component_id!r}: {len(mids)} message ids for {n} rows")
        start, index = self._rows_emitted, self.context.task_index
        self._rows_emitted = start + n
        for i, values in enumerate(rows):
            self.emit(list(values), stream, tup_id=mids[i] if mids is not None else (index, start + i))

    def next_tuple(self) -> Any:
        """A row runtime's step: next_batch, its rows emitted one by one."""
        self._row_runtime = True
        try:
            return self.next_batch()
        finally:
            self._row_runtime = False


def message_ids_as_list(message_ids: Any) -> list[Any]:
    """Message ids as Python values (what msgpack stores, and stable_hash hashes alike in every
    process): a pyarrow array's or a numpy array's items, or any sequence's."""
    if hasattr(message_ids, "to_pylist"):
        return list(message_ids.to_pylist())
    if hasattr(message_ids, "tolist"):
        return list(message_ids.tolist())
    return list(message_ids)
