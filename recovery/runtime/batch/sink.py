"""The batch sink's task loop: a built-in sink whose inputs are all batch components
(runtime.modes.is_batch_sink) gets their Arrow chunks and writes the columns as they
are, with the row sink's bytes and guarantees.

The task streams its rows into its part as they come (connectors.sink_base: a bounded chunk at
a time) and commits it once at the end of its input. The message timeout
(topology.message.timeout.secs) bounds that commit (what is left to write, then the publish),
and is checked where the commit publishes the part (the task context's `fence`, which every built-in sink
calls right before its part becomes visible: the rename of a file part, a Delta commit, a
PostgreSQL COMMIT, the Redis HSET). A write past its deadline there publishes nothing and its
rows fail with the timeout, queued for `recover`, as timed-out row tuples. A write whose
publish passed in time stays acked even when it returns late (logged): its rows are durable,
and failing them would write them a second time."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from recovery.connectors.sink_base import Journal
from recovery.runtime import timeouts
from recovery.runtime.batch.host import BatchHost
from recovery.runtime.batch.rows import Rows, pieces
from recovery.runtime.collector import Output, format_error
from recovery.runtime.task import Records


def run(runner: BatchHost, records: Records) -> Iterator[Output]:
    """A built-in sink over Arrow chunks: the row sink's semantics, a chunk at a time. Each
    chunk's rows are encoded column-wise (sink.encode_batch); a row that cannot be encoded
    (or that an injected fault hits) fails alone, as the row sink's `process` fails it. The
    encoded chunks stream into the task's part (sink.add_chunk: written once a chunk's worth is
    queued), and at the end of the input the part is committed once (sink.commit); only then
    are the written rows acked, vectorized, from their ids and roots; a write or commit that
    raises fails them all, as the row sink's `finish`, read back from the task's journal."""
    started = time.time()
    sink = yield from runner.start_bolt(records, started)
    if sink is None:
        return
    collector, cid = runner.collector, runner.component_id
    written = _WrittenRows()   # the ids and roots of the rows written, to ack after the commit
    journal = Journal()        # the pieces written (with their values), to fail them if it fails
    try:
        for rows in pieces(records):
            n = len(rows)
            runner.stats["executed"] += n
            ok = np.ones(n, dtype=bool)
            fields = runner.fields(rows.src, rows.stream)
            failed: dict[int, BaseException] = {}
            for inj in runner.injections:   # recovery.faults acts per tuple, as at a row sink
                for i in range(n):
                    if i not in failed:
                        try:
                            inj.before_process(rows.as_tuple(i, runner.task_id, fields))
                        except Exception as err:   # broad-except: an injected fault fails its row
                            failed[i] = err
            keep = np.flatnonzero(~np.isin(np.arange(n), list(failed))) if failed else None
            if rows.values is not None:
                values = rows.values if keep is None else rows.values.take(keep)
                chunk, bad = sink.encode_batch(values, fields)
                for j, error in bad.items():
                    failed[int(keep[j]) if keep is not None else j] = error
            else:   # msgpack tuples (replays): the row sink's encode, one by one
                encoded = []
                for i in (range(n) if keep is None else keep.tolist()):
                    try:
                        encoded.append(sink.encode(rows.as_tuple(i, runner.task_id, fields)))
                    except Exception as err:   # broad-except: what encode raises fails that row alone
                        failed[i] = err
                chunk = sink.chunk_of(encoded)
            for i in sorted(failed):
                ok[i] = False
                msg, tb = format_error(failed[i])
                collector.fail_row(rows, i, msg, tb)
            if ok.any():
                sink.add_chunk(chunk, int(ok.sum()))
                written.add(rows, ok)
                journal.add((rows, ok))
        write = _TimedWrite(runner, sink)
        try:
            write.run()
        except Exception as err:   # broad-except: a write that raises (disk full, Redis down) fails what it held
            if write.expired:
                msg, tb = f"TupleTimeout: {runner.timeouts.text()}", ""
            else:
                msg, tb = format_error(err)
                msg = f"{cid}.finish raised {msg}"
            for rows, ok in journal.pieces():
                for i in np.flatnonzero(ok).tolist():
                    collector.fail_row(rows, i, msg, tb)
        else:
            if write.late():
                collector.log(f"{cid} published its part in time, then its write ran past the "
                              f"{runner.timeouts.timeout:g}s timeout; its rows stay acked", "warn")
            acked = written.rows()
            if acked is not None:
                collector.ack_rows(acked, np.ones(len(acked), dtype=bool))
    finally:
        journal.close()
    try:
        sink.cleanup()
    except Exception as err:   # broad-except: cleanup can raise anything
        collector.log(f"cleanup raised {format_error(err)[0]}", "error")
    yield from runner.finish(started)


class _WrittenRows:
    """The ids, roots and attempts of the rows written, in compact arrays (no values)."""

    def __init__(self) -> None:
        self.tids: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.roots: list[np.ndarray] = []
        self.attempts: list[np.ndarray] = []

    def add(self, rows: Rows, ok: np.ndarray) -> None:
        picked = np.flatnonzero(ok)
        k = (rows.root_off[1:] - rows.root_off[:-1])[picked]
        starts = rows.root_off[:-1][picked]
        pos = np.repeat(starts - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
        self.tids.append(rows.tids[picked].astype(np.uint64))
        self.counts.append(k)
        self.roots.append(rows.root_flat[pos].astype(np.uint64))
        self.attempts.append(rows.attempts[picked])

    def rows(self) -> Rows | None:
        """The rows written, as Rows without values (what ack_rows reads), None when none."""
        if not self.tids:
            return None
        tids = np.concatenate(self.tids)
        offsets = np.zeros(len(tids) + 1, dtype=np.int64)
        np.cumsum(np.concatenate(self.counts), out=offsets[1:])
        return Rows("", "", tids, offsets, np.concatenate(self.roots), None, None, np.concatenate(self.attempts),
                    np.zeros(len(tids), dtype=np.int64))


class _TimedWrite:
    """The sink's commit (what is left to write, then the publish) under the message timeout:
    its task context's `fence` (called
    by every built-in sink right before it publishes) raises TupleTimeout past the deadline,
    before the fence's own check (the driver still owns the run)."""

    def __init__(self, runner: BatchHost, sink: Any):
        self.limits = runner.timeouts
        self.context = sink.context
        self.sink = sink
        self.deadline: float | None = None
        self.expired = False     # the deadline passed at the publish point: nothing was published

    def run(self) -> None:
        fence = self.context.fence
        self.deadline = timeouts.clock() + self.limits.timeout

        def fence_in_time() -> None:
            if self.deadline is not None and timeouts.clock() > self.deadline:
                self.expired = True
                raise self.limits.expired()
            if fence is not None:
                fence()

        self.context.fence = fence_in_time
        try:
            self.sink.commit()
        finally:
            self.context.fence = fence

    def late(self) -> bool:
        return self.deadline is not None and timeouts.clock() > self.deadline
