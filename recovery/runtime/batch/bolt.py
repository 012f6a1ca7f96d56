"""The batch bolt's task loop: a BatchBolt's task, the row runtime's semantics a batch at a time.

Input tuples are gathered per (source component, stream) into batches of at most
`recovery.batch.size` rows and handed to `process_batch` as pyarrow.RecordBatches; what a
successful call emitted is settled by the task's BatchCollector (runtime.batch.collector).

Failure localization: a call that raises (or emits something invalid) is discarded, outputs
and keyed-state writes alike, and its two halves are run again, recursively, until each
failing row fails alone with its own error: the FailedTuple a row bolt's exception gives. The
task's stats count the re-executions (`bisect_runs`, and `bisect_rows`, the rows they ran
again) and the rows isolated that way (`bisect_isolated`): at most 2*log2(batch size) runs per
isolated failure. Rows named in `fail_rows` fail without bisection.

Tuples replayed from a failed position's queue come in as any others (with their attempt) and
are batched the same way, so recovery replays failed rows through the same batch component.

The message timeout (runtime.timeouts) bounds each process_batch call as one execution: its
collector calls past the deadline raise TupleTimeout, and a call that raises it or returns late
fails its batch's rows with the timeout, without bisection (a timeout is no row's fault, and
halves would each wait again). The watchdog marks every row of a call that never returns; the
task's retry fails the marked rows without running them. Each call, and finish(), is the
guarded call of user code every mode makes (runtime.guard): finish() is bounded by the message
timeout too, and one an earlier attempt was killed in is not run again.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from recovery.runtime import guard, timeouts
from recovery.runtime.batch.collector import BatchCall
from recovery.runtime.batch.host import BatchHost
from recovery.runtime.batch.rows import Rows, pieces
from recovery.runtime.collector import Output, format_error
from recovery.runtime.task import Records


def run(runner: BatchHost, records: Records) -> Iterator[Output]:
    """A BatchBolt's task over `records`, to its commit."""
    started = time.time()
    bolt = yield from runner.start_bolt(records, started)
    if bolt is None:
        return
    collector, size = runner.collector, runner.batch_size
    loop = _BatchBoltLoop(runner, bolt)
    pending: dict[tuple[str, str, bool], tuple[list[Rows], int]] = {}
    runner.timeouts.start(bolt)
    try:
        for piece in pieces(records):
            key = (piece.src, piece.stream, piece.values is None)
            parts, n = pending.pop(key, ([], 0))
            parts.append(piece)
            n += len(piece)
            if n < size:
                pending[key] = (parts, n)
                continue
            rows = Rows.concat(parts)
            full = n - n % size
            for lo in range(0, full, size):
                loop.run_batch(rows.part(lo, lo + size))
            if full < n:
                pending[key] = ([rows.part(full, n)], n - full)
            if collector.ready:
                yield from collector.take_ready()
        for parts, _ in pending.values():
            loop.run_batch(Rows.concat(parts))
        # every row is acked or failed by its call: a finish that raises fails nothing (it
        # is logged), but it is bounded by the message timeout as every bolt's is
        runner.user_code.finish(bolt, collector)
    finally:
        runner.timeouts.stop()
    try:
        bolt.cleanup()
    except Exception as err:   # broad-except: user code (cleanup) can raise anything
        collector.log(f"cleanup raised {format_error(err)[0]}", "error")
    yield from runner.finish(started)


class _BatchBoltLoop:
    """Runs the batches of one task through its prepared BatchBolt."""

    def __init__(self, runner: BatchHost, bolt: Any):
        self.runner = runner
        self.bolt = bolt
        self.collector = runner.collector
        self.stats = runner.stats
        self.component_id = runner.component_id

    def run_batch(self, rows: Rows) -> None:
        self.stats["executed"] += len(rows)
        limits = self.runner.timeouts
        if limits.timed_out:
            # rows of a call an earlier attempt of this task was killed in (the watchdog's
            # marks): they fail with the timeout they had, and are not run again
            marked = np.fromiter((m for m in limits.timed_out if isinstance(m, int)), dtype=np.uint64)
            stuck = np.isin(rows.tids, marked)
            if stuck.any():
                for i in np.flatnonzero(stuck).tolist():
                    self.collector.fail_row(rows, i, self.runner.user_code.stuck_error(), "")
                rows = rows.take(np.flatnonzero(~stuck))
                if not len(rows):
                    return
        self._attempt(rows, isolating=False)

    def _attempt(self, rows: Rows, isolating: bool) -> None:
        """One process_batch call over `rows`, the guarded call of runtime.guard (the message
        timeout bounds it as one execution); on an exception, its halves (bisection)."""
        runner, collector, state = self.runner, self.collector, self.runner.state
        user_code = runner.user_code
        saved = state.snapshot() if state is not None else None
        call = collector.call = BatchCall()
        outputs: list[tuple[str, Any, Any]] = []

        def process(rows: Rows) -> None:
            self.bolt.process_batch(self._record_batch(rows))
            outputs.extend(self._resolve(stream, out, anchors, len(rows)) for stream, out, anchors in call.emits)
            for r in call.failed:
                if not 0 <= r < len(rows):
                    raise IndexError(f"fail_rows: row {r} is not in a batch of {len(rows)}")
        running = tuple(rows.tids.tolist()) if runner.timeouts.timed else ()
        try:
            # (recovery.faults acts per tuple, as at a row bolt)
            outcome = user_code.call(running, process, rows, self._tuples(rows) if runner.injections else ())
        finally:
            collector.call = None
        if outcome == guard.OK:
            collector.settle(rows, call.failed, outputs)
            return
        if state is not None:   # nothing of a call that raised or returned late stays
            state.restore(saved)
        if outcome == guard.LATE:   # it returned past its deadline, with no collector call to raise at
            self._time_out(rows, call)
            return
        raised = user_code.error
        if isinstance(raised, timeouts.TupleTimeout) or user_code.late:
            user_code.error = None
            self._time_out(rows, call)
            return
        if len(rows) == 1:
            msg, tb = user_code.take_error()
            if isolating:
                self.stats["bisect_isolated"] += 1
            collector.fail_row(rows, 0, msg, tb)
            return
        user_code.error = None
        mid = len(rows) // 2
        self.stats["bisect_runs"] += 2
        self.stats["bisect_rows"] += len(rows)
        self._attempt(rows.part(0, mid), True)
        self._attempt(rows.part(mid, len(rows)), True)

    def _tuples(self, rows: Rows) -> Iterator[Any]:
        """The batch's rows as Tuples (what an injected fault is given)."""
        fields = self.runner.fields(rows.src, rows.stream)
        for i in range(len(rows)):
            yield rows.as_tuple(i, self.runner.task_id, fields)

    def _time_out(self, rows: Rows, call: BatchCall) -> None:
        """A call over `rows` passed the message timeout: its outputs are discarded and its rows
        fail with the timeout, but those it failed in time, which keep their own error."""
        error = f"TupleTimeout: {self.runner.timeouts.text()}"
        for i in range(len(rows)):
            self.collector.fail_row(rows, i, call.failed.get(i, error), "")

    def _record_batch(self, rows: Rows) -> Any:
        import pyarrow as pa
        fields = self.runner.fields(rows.src, rows.stream)
        if rows.values is not None:
            if list(rows.values.schema.names) == list(fields) or not fields:
                return rows.values
            return pa.RecordBatch.from_arrays(rows.values.columns, names=list(fields))
        values = rows.python_values()
        width = len(values[0]) if values else len(fields)
        names = list(fields) if len(fields) == width else [f"_{j}" for j in range(width)]
        for v in values:
            if len(v) != width:
                raise ValueError(f"tuple from {rows.src!r} stream {rows.stream!r} has {len(v)} values "
                                 f"for {width} fields ({', '.join(names)})")
        columns = [pa.array([v[j] for v in values]) for j in range(width)]
        return pa.RecordBatch.from_arrays(columns, names=names)

    def _resolve(self, stream: str, out: Any, anchors: Any, n_in: int) -> tuple[str, Any, Any]:
        """(stream, the output rows as a record batch of the stream's fields, anchors as an
        int array or a list of lists), checked: a declared stream, its fields as columns,
        anchors within the batch."""
        import pyarrow as pa
        cid = self.component_id
        declared = self.runner.comp.stream(stream)
        if declared is None or stream not in self.runner.router.routes:
            raise ValueError(f"{cid!r} emitted on undeclared stream {stream!r}")
        names = set(out.schema.names)
        missing = [f for f in declared.fields if f not in names]
        if missing:
            raise ValueError(f"{cid!r}: the batch emitted on stream {stream!r} has no "
                             f"column {missing[0]!r} (fields: {' '.join(declared.fields)})")
        m = out.num_rows
        if isinstance(out, pa.Table):
            out = out.combine_chunks()
            chunks = out.to_batches()
            out = chunks[0] if chunks else pa.RecordBatch.from_pylist([], schema=out.schema)
        out = out.select(list(declared.fields))
        if anchors is None:
            if m != n_in:
                raise ValueError(f"{cid!r}: emit_batch without anchors needs one output "
                                 f"row per input row ({n_in} in, {m} out)")
            return stream, out, np.arange(m, dtype=np.int64)
        if hasattr(anchors, "to_pylist"):
            anchors = anchors.to_pylist()
        arr = np.asarray(anchors, dtype=object) if not isinstance(anchors, np.ndarray) else anchors
        if len(arr) != m:
            raise ValueError(f"{cid!r}: {len(arr)} anchors for {m} output rows")
        if arr.dtype.kind in "iu" or (m and all(isinstance(a, (int, np.integer)) for a in arr)):
            single = arr.astype(np.int64)
            if m and (single.min() < 0 or single.max() >= n_in):
                raise IndexError(f"{cid!r}: an anchor is not a row of the input batch "
                                 f"of {n_in} rows")
            return stream, out, single
        multi = [[int(r) for r in (a if isinstance(a, (list, tuple, np.ndarray)) else [a])] for a in arr]
        if any(not 0 <= r < n_in for a in multi for r in a):
            raise IndexError(f"{cid!r}: an anchor is not a row of the input batch "
                             f"of {n_in} rows")
        return stream, out, multi
