"""The chunk mode (runtime.modes): a Python bolt runs an input chunk of tuples as one unit.

A BasicBolt's contract (each input anchors what process() emits for it and is acked when
process() returns, failed when it raises) lets the runtime keep the per-emit bookkeeping out of
the loop. process() is called row by row with one reused Tuple (a new one only when the
component kept a reference to the last); an emit appends its values, stream, row and emit index
to the chunk's `RowEmits`; a row that fails drops what it emitted (its emits are the tail of the
lists). When the chunk ends, numpy derives every emit's ids by the per-tuple derivation, bit for
bit (tracking.ids), routes them (runtime.routing's route_many), XORs the ledger contributions per
root, and the output records are buffered per consumer task as the per-tuple path buffers them:
the same ids, routes, chunks, contributions, failures and queues.

A Bolt (explicit anchors and acks) runs here too, as long as each row's emits are anchored to
that row alone and the row is acked or failed by the end of its process(). The switch to the
row mode's loop (`execute`, runtime.row_loop) in mid-task is made in two cases, and the rows it
runs are counted in the task's stats as `per_tuple_rows`:
- a chunk of fewer than SMALL_CHUNK rows (numpy's fixed cost per chunk is more than the row
  loop's for a few rows); the next chunk is run as a chunk again;
- a Bolt that keeps its tuple past process() or emits other than anchored to it alone (an
  escape): from that row on, the task goes on tuple by tuple.
Both modes share the collector's buffers, ledger and failure records.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from recovery.api.components import Component
from recovery.api.tuples import Tuple
from recovery.runtime import guard, timeouts, wire
from recovery.runtime.blocks import Block, route_blocks
from recovery.runtime.collector import Output
from recovery.runtime.row_loop import LoopHost
from recovery.tracking import ids

if TYPE_CHECKING:
    from recovery.runtime.collector import TaskCollector
    from recovery.runtime.routing import Router

U64 = np.uint64
Records = Iterable[tuple[Any, wire.Chunk]]   # a task's input: (key, chunk) pairs


# The chunk mode is on for every Python bolt (runtime.modes); off, every bolt takes the row
# mode (what the equivalence tests compare it with).
ENABLED = True
# A chunk of fewer rows goes by the per-tuple path: numpy's fixed cost per chunk is
# more than that path's cost for a few rows (a recovery round's replays arrive a few at a time).
SMALL_CHUNK = 8
_UNDECLARED: Any = object()


class EmitTargets(Sequence[int]):
    """What an emit on the chunk path returns: the task ids it goes to (Storm's emit), worked
    out only when read (its id is derived at the chunk's end)."""

    __slots__ = ("_args", "_tasks")

    def __init__(self, router: Router, stream: str, values: list, anchor: int, n: int):
        self._args: tuple[Router, str, list, int, int] | None = (router, stream, values, anchor, n)
        self._tasks: list[int] = []

    def _get(self) -> list[int]:
        if self._args is not None:
            router, stream, values, anchor, n = self._args
            self._args = None
            base = ids.derive3(anchor, router.salts.get(stream, 0), n)
            self._tasks = [t for _, t, _ in router.route(stream, values, base, None)]
        return self._tasks

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[int]:
        return iter(self._get())

    def __eq__(self, other: object) -> bool:
        return list(self._get()) == (list(other) if isinstance(other, Sequence) else other)

    __hash__ = None   # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._get())


class RowEmits:
    """The emits of one input chunk's rows, by column, and the row being processed."""

    __slots__ = ("router", "fixed", "direct", "tid", "open", "n", "mark", "row", "values", "streams", "rows",
                 "ns", "directs", "failed", "basic", "escape", "collector", "timeouts", "ack", "fail", "log",
                 "spout_record")

    def __init__(self, collector: TaskCollector, basic: bool, escape: Callable[[], None]):
        self.collector = collector
        self.router = router = collector.router
        self.timeouts = collector.timeouts
        # the rest of the OutputCollector protocol: the collector's own (it knows the row)
        self.ack, self.fail, self.log = collector.ack, collector.fail, collector.log
        self.spout_record = collector.spout_record
        self.basic = basic    # a BasicBolt: its emits are anchored to the row, always
        # a Bolt's emit that is not anchored to its row alone: the task takes the per-tuple
        # path from there on (escape() moves the row there), and that emit goes it too
        self.escape = escape
        self.fixed = {s: router.fixed_targets(s) for s in router.routes}
        self.direct = router.direct
        self.tid = 0          # the row's tuple id
        self.open = False     # neither acked nor failed yet
        self.n = 0            # the row's emits so far (its next emit's index)
        self.mark = 0         # where its emits start in the columns
        self.row = 0
        self.values: list[list] = []
        self.streams: list[str] = []
        self.rows: list[int] = []
        self.ns: list[int] = []
        self.directs: dict[int, int] = {}   # emit position -> its direct task
        self.failed: list[int] = []         # rows failed

    def clear(self) -> None:
        self.values, self.streams, self.rows, self.ns = [], [], [], []
        self.directs, self.failed = {}, []

    def emit(self, component: Any, values: Any, stream: str, anchors: tuple, direct_task: int | None,
             message_id: Any) -> Sequence[int]:
        """The OutputCollector's emit, the component's while its chunk runs."""
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()
        if type(values) is not list:
            values = list(values)
        return self.add(values, stream, anchors, direct_task)

    def add(self, values: list, stream: str, anchors: tuple, direct_task: int | None) -> Sequence[int]:
        """An emit during the row: appended to the columns (its ids and routes come at the
        chunk's end), or, for a Bolt's emit not anchored to its row, the per-tuple path."""
        n = self.n
        self.n = n + 1
        fixed = self.fixed.get(stream, _UNDECLARED)
        if direct_task is None and self.open and fixed is not _UNDECLARED and (
                (self.basic and not anchors) or (len(anchors) == 1 and anchors[0].id == self.tid)):
            self.values.append(values)
            self.streams.append(stream)
            self.rows.append(self.row)
            self.ns.append(n)
            if fixed is not None:
                return list(fixed)
            return EmitTargets(self.router, stream, values, self.tid, n)
        tid = self.tid
        if fixed is _UNDECLARED:
            raise ValueError(f"{self.router.component!r} emitted on undeclared stream {stream!r}")
        if direct_task is not None and direct_task not in self.direct[stream]:
            raise ValueError(f"task {direct_task} does not subscribe to {self.router.component!r} "
                             f"stream {stream!r} with a direct grouping")
        for a in anchors:
            if a.id != tid:
                if self.basic:   # every tuple before this one was acked or failed
                    raise ValueError(f"emit anchored to tuple {a.id:#x}, which was already acked or failed")
                self.n = n
                return self._escaped(values, stream, anchors, direct_task)
        if not anchors and not self.basic:   # a Bolt's unanchored emit
            self.n = n
            return self._escaped(values, stream, anchors, direct_task)
        if not self.open:
            raise ValueError(f"emit anchored to tuple {tid:#x}, which was already acked or failed")
        if direct_task is not None:
            self.directs[len(self.values)] = direct_task
        self.values.append(values)
        self.streams.append(stream)
        self.rows.append(self.row)
        self.ns.append(n)
        if direct_task is not None:
            return [direct_task]
        if fixed is not None:
            return list(fixed)
        return EmitTargets(self.router, stream, values, tid, n)

    def _escaped(self, values: list, stream: str, anchors: tuple, direct_task: int | None) -> Any:
        self.escape()
        return self.collector.emit(None, values, stream, anchors, direct_task, None)

    def drop_row(self) -> None:
        """The row failed: nothing it emitted flows on."""
        mark = self.mark
        del self.values[mark:], self.streams[mark:], self.rows[mark:], self.ns[mark:]
        if self.directs:
            self.directs = {p: t for p, t in self.directs.items() if p < mark}
        self.open = False
        self.failed.append(self.row)


def run_chunks(runner: LoopHost, bolt: Any, records: Records,
               execute: Callable[[str, int, list], None]) -> Iterator[Output]:
    """`bolt`'s process() over the task's input, chunk by chunk (the caller has started the
    message timeouts; the finish and the end of the task are its own). A Bolt that keeps a
    tuple unacked past its process(), or emits other than anchored to it, goes on by the
    per-tuple path (`execute`) from that tuple on."""
    yield from ChunkLoop(runner, bolt, execute).run(records)


class ChunkLoop:
    """The chunk path's loop over one task's input."""

    def __init__(self, runner: LoopHost, bolt: Any, execute: Callable[[str, int, list], None]):
        self.runner = runner
        self.collector = runner.collector
        self.bolt = bolt
        self.execute = execute
        self.auto_ack = bool(getattr(bolt, "auto_ack", False))
        self.emits = RowEmits(self.collector, self.collector.auto_anchor, self.escape)
        self.escaped = False
        self.recs: list = []
        self.tup: Tuple | None = None

    def run(self, records: Records) -> Iterator[Output]:
        collector = self.collector
        self.emit_to_chunk()
        try:
            for _, blob in records:
                src, src_task, recs = wire.unpack_rows(blob)
                if self.escaped:
                    yield from self.per_tuple(src, src_task, recs)
                    continue
                if len(recs) < SMALL_CHUNK:
                    yield from self.small(src, src_task, recs)
                    continue
                self.recs = recs
                done = self.chunk(src, src_task, recs)
                if done < len(recs):   # escaped at row `done`: the rest goes by the per-tuple path
                    yield from self.per_tuple(src, src_task, recs[done + 1:])
                elif not self.escaped:
                    self.runner.stats["executed"] += len(recs)
                    self.runner.stats["acked"] += len(recs) - len(self.emits.failed)
                    flush(collector, self.emits, recs)
                if collector.ready:
                    yield from collector.take_ready()
        finally:
            self.runner.timeouts.running = None
            self.emit_to_collector()

    def emit_to_chunk(self) -> None:
        """The chunk path's emits go to the chunk's columns (the component's straight there: one
        call less per emit)."""
        self.collector.rows = self.emits
        if isinstance(self.bolt, Component):
            self.bolt.bind(self.emits, self.bolt.conf, self.bolt.context)

    def emit_to_collector(self) -> None:
        """The per-tuple path's emits go to the collector."""
        self.collector.rows = None
        if isinstance(self.bolt, Component):
            self.bolt.bind(self.collector, self.bolt.conf, self.bolt.context)

    def small(self, src: str, src_task: int, recs: list) -> Iterator[Output]:
        """A small chunk by the per-tuple path (its emits go to the collector, the component is
        bound to it meanwhile). The chunk path resumes at the next chunk unless a Bolt still
        holds a tuple: then, as after an escape, the per-tuple path goes on."""
        self.emit_to_collector()
        yield from self.per_tuple(src, src_task, recs)
        if self.collector.outstanding:
            self.escaped = True
            return
        self.emit_to_chunk()

    def per_tuple(self, src: str, src_task: int, recs: list) -> Iterator[Output]:
        """`recs` by the row mode's loop: the switch counted (per_tuple_rows)."""
        collector, execute, stats = self.collector, self.execute, self.runner.stats
        if recs:
            stats["per_tuple_rows"] = stats.get("per_tuple_rows", 0) + len(recs)
        for rec in recs:
            execute(src, src_task, rec)
            if collector.ready:
                yield from collector.take_ready()

    def chunk(self, src: str, src_task: int, recs: list) -> int:
        """The rows of one chunk; returns where it escaped to the per-tuple path (that row
        finished there), or len(recs)."""
        runner, collector, emits = self.runner, self.collector, self.emits
        limits, tracker, user_code = runner.timeouts, runner.tracker, runner.user_code
        component_id, task_id = runner.component_id, runner.task_id
        inject = bool(runner.injections)
        guarded, stuck, ok = user_code.call, user_code.stuck, guard.OK
        process = self.bolt.process
        getrefcount = sys.getrefcount
        fields_of, fields = runner.fields_of, runner.fields
        auto_ack, outstanding = self.auto_ack, collector.outstanding
        stream = ""
        tup = self.tup = Tuple(0, src, "", task_id, [], (), (), src_task)
        baseline = getrefcount(tup)
        for i, rec in enumerate(recs):
            tid = rec[0]
            if rec[2] != stream or i == 0:
                stream = rec[2]
                f = fields_of.get((src, stream))
                tup.stream, tup.fields = stream, f if f is not None else fields(src, stream)
            tup.id, tup.values, tup.roots = tid, rec[3], tuple(rec[1])
            replayed = len(rec) > 4   # replayed from a failed position's queue
            tup.attempt = rec[4] if replayed else 1
            emits.row, emits.tid, emits.open, emits.n, emits.mark = i, tid, True, 0, len(emits.values)
            if stuck(tid):
                collector.fail(tup, user_code.stuck_error())
                continue
            outcome = guarded(tid, process, tup, (tup,) if inject else ())
            is_open = (tid in outstanding) if self.escaped else emits.open
            if outcome != ok:
                user_code.settle_row(outcome, tup, is_open, collector)
            elif is_open and not auto_ack and not self.escaped:
                self.escape()   # a Bolt holds it past process(): it waits for its ack as before
            elif is_open and auto_ack:
                if self.escaped:
                    collector.ack(tup)
                else:
                    emits.open = False
            if self.escaped:
                return i
            if replayed and tracker is not None and (not emits.failed or emits.failed[-1] != i):
                tracker.replay_done(component_id, task_id, tid)
            if getrefcount(tup) > baseline:   # the bolt kept it: the next row gets its own
                tup = self.tup = Tuple(0, src, stream, task_id, [], tup.fields, (), src_task)
        limits.running = None
        return len(recs)

    def escape(self) -> None:
        """From the row in process() on, the per-tuple path: the rows before it are flushed,
        the row becomes an outstanding tuple with its emits held (their ids as before)."""
        collector, emits, runner = self.collector, self.emits, self.runner
        tup = self.tup
        assert tup is not None
        i, mark, tid = emits.row, emits.mark, emits.tid
        mine = [(v, s, n, emits.directs.get(mark + k)) for k, (v, s, n) in
                enumerate(zip(emits.values[mark:], emits.streams[mark:], emits.ns[mark:]))]
        row_open, count = emits.open, emits.n
        row_failed = bool(emits.failed) and emits.failed[-1] == i
        del emits.values[mark:], emits.streams[mark:], emits.rows[mark:], emits.ns[mark:]
        emits.directs = {p: t for p, t in emits.directs.items() if p < mark}
        failed_before = len(emits.failed) - row_failed
        runner.stats["executed"] += i + 1
        runner.stats["acked"] += i - failed_before
        if row_failed:
            emits.failed.pop()
        flush(collector, emits, self.recs[:i])
        self.emit_to_collector()
        self.escaped = True
        if row_failed:
            return
        # the row as the per-tuple path has it: outstanding (acked at once if it was), its
        # emits so far held for it, with the emit indexes they had
        recs = self.recs
        if len(recs[i]) > 4:
            collector.replayed.add(tid)
        collector.outstanding[tid] = tup
        for values, stream, n, direct in mine:
            collector.emit_counts[tid] = n
            collector.emit(None, values, stream, (tup,), direct, None)
        collector.emit_counts[tid] = count
        if not row_open:
            collector.ack(tup)


def flush(collector: TaskCollector, emits: RowEmits, recs: list) -> None:
    """A chunk's end: its emits' ids derived and routed, their records buffered per consumer
    task, and (tracked) the XOR of every id made and acked, per root."""
    tracked = collector.tracker is not None
    n_emits = len(emits.values)
    if not recs or (not n_emits and not tracked):
        emits.clear()
        return
    tids = np.fromiter([rec[0] for rec in recs], dtype=U64, count=len(recs))
    x_emit = np.zeros(n_emits, dtype=U64)
    if n_emits:
        if emits.directs:
            _release_one_by_one(collector, emits, recs, x_emit)
        else:
            _release(collector, emits, recs, tids, x_emit)
    if tracked:
        ok = np.ones(len(recs), dtype=bool)
        if emits.failed:
            ok[emits.failed] = False
        x_row = np.where(ok, tids, U64(0))
        if n_emits:
            np.bitwise_xor.at(x_row, np.asarray(emits.rows, dtype=np.intp), x_emit)
        lens = [len(rec[1]) for rec in recs]
        if min(lens) == 1 == max(lens):
            roots = np.fromiter([rec[1][0] for rec in recs], dtype=U64, count=len(recs))
        else:
            counts = np.asarray(lens, dtype=np.intp)
            roots = np.fromiter(chain.from_iterable(rec[1] for rec in recs), dtype=U64, count=int(counts.sum()))
            x_row, ok = np.repeat(x_row, counts), np.repeat(ok, counts)
        collector.add_contributions(roots[ok], x_row[ok])
    emits.clear()


def _release(collector: TaskCollector, emits: RowEmits, recs: list, tids: np.ndarray, x_emit: np.ndarray) -> None:
    """The chunk's emits (none direct) routed with numpy and buffered per consumer task in
    emit order."""
    router = collector.router
    streams, values = emits.streams, emits.values
    rows = np.asarray(emits.rows, dtype=np.intp)
    ns = np.asarray(emits.ns, dtype=U64)
    first = streams[0]
    groups: list[Block] = []
    if streams.count(first) == len(streams):
        bases = ids.derive_many(tids[rows], router.salts.get(first, 0), ns)
        groups.append((first, None, bases, values, [recs[r][1] for r in emits.rows]))
    else:
        names = np.asarray(streams, dtype=object)
        for stream in dict.fromkeys(streams):
            pos = np.flatnonzero(names == stream)
            bases = ids.derive_many(tids[rows[pos]], router.salts.get(stream, 0), ns[pos])
            plist = pos.tolist()
            groups.append((stream, pos, bases, [values[p] for p in plist], [recs[emits.rows[p]][1] for p in plist]))
    route_blocks(collector, groups, len(values), x_emit)


def _release_one_by_one(collector: TaskCollector, emits: RowEmits, recs: list, x_emit: np.ndarray) -> None:
    """A chunk with direct emits: routed emit by emit, as the per-tuple path does."""
    router = collector.router
    for e, (values, stream, row, n) in enumerate(zip(emits.values, emits.streams, emits.rows, emits.ns)):
        rec = recs[row]
        base = ids.derive3(rec[0], router.salts.get(stream, 0), n)
        x = 0
        for key, _, tid in router.route(stream, values, base, emits.directs.get(e)):
            collector.add_records(key, [[tid, rec[1], stream, values]])
            x ^= tid
        x_emit[e] = x
