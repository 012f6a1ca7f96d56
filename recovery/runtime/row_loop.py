"""The row mode's loop (runtime.modes): a bolt's input one tuple at a time. Also what the chunk
mode (runtime.chunks) runs a small chunk by, and the rest of a task whose Bolt keeps a tuple.

`executor` makes the execution of one input tuple: its Tuple, its outstanding entry, the
guarded call of process() (runtime.guard) and, for a BasicBolt, its ack. `run_rows` drives it
over the task's input, with tick tuples between tuples when the component has them.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from recovery.api.tuples import SYSTEM_COMPONENT, TICK_STREAM, Tuple
from recovery.runtime import guard, wire
from recovery.runtime.collector import Output, format_error

if TYPE_CHECKING:
    from recovery.runtime.collector import TaskCollector
    from recovery.runtime.timeouts import MessageTimeouts
    from recovery.tracking.tracker import TaskTracker

Execute = Callable[[str, int, list], None]   # (source component, its task, record)
Records = Iterable[tuple[Any, wire.Chunk]]   # a task's input: (key, chunk) pairs


class LoopHost(Protocol):
    """What the row and chunk modes' loops use of their task (runtime.task.TaskRunner)."""

    collector: TaskCollector
    timeouts: MessageTimeouts
    tracker: TaskTracker | None
    stats: dict[str, float]
    component_id: str
    task_id: int
    injections: list[Any]
    user_code: guard.UserCode
    fields_of: dict[tuple[str, str], tuple[str, ...]]

    def fields(self, src: str, stream: str) -> tuple[str, ...]: ...


def executor(host: LoopHost, bolt: Any, auto_ack: bool) -> Execute:
    """The execution of one input tuple by `bolt` (its process(), the guarded call of
    runtime.guard; its ack when `auto_ack`). Made once per task, after the timeouts started:
    it runs once per tuple, so what it uses of the task is read here, once."""
    collector, user_code = host.collector, host.user_code
    outstanding, replayed, stats = collector.outstanding, collector.replayed, host.stats
    fields_of, fields, task_id = host.fields_of, host.fields, host.task_id
    inject = bool(host.injections)
    guarded, stuck, process = user_code.call, user_code.stuck, bolt.process
    ok = guard.OK

    def execute(src: str, src_task: int, rec: list) -> None:
        tid, roots, stream, values = rec[0], rec[1], rec[2], rec[3]
        attempt = 1
        if len(rec) > 4:   # replayed from a failed position's queue
            attempt = rec[4]
            replayed.add(tid)
        f = fields_of.get((src, stream))
        if f is None:
            f = fields(src, stream)
        tup = Tuple(tid, src, stream, task_id, values, f, roots, src_task, attempt)
        outstanding[tid] = tup
        stats["executed"] += 1
        if stuck(tid):
            collector.fail(tup, user_code.stuck_error())
            return
        collector.current = tup
        try:
            outcome = guarded(tid, process, tup, (tup,) if inject else ())
        finally:
            collector.current = None
        if outcome != ok:
            user_code.settle_row(outcome, tup, tid in outstanding, collector)
        elif auto_ack and tid in outstanding:
            collector.ack(tup)
    return execute


def run_rows(host: LoopHost, bolt: Any, records: Records, execute: Execute, tick_every: float) -> Iterator[Output]:
    """`execute` over every input tuple, in order; with `tick_every` > 0 a tick tuple to
    process_tick every `tick_every` seconds between tuples, and a last one at the end of the
    input, so windowing bolts can flush."""
    collector = host.collector
    next_tick = time.monotonic() + tick_every
    for _, blob in records:
        src, src_task, recs = wire.unpack_rows(blob)
        for rec in recs:
            if tick_every > 0 and time.monotonic() >= next_tick:
                _tick(host, bolt, tick_every)
                next_tick = time.monotonic() + tick_every
            execute(src, src_task, rec)
            if collector.ready:
                yield from collector.take_ready()
    if tick_every > 0:
        _tick(host, bolt, tick_every)


def _tick(host: LoopHost, bolt: Any, secs: float) -> None:
    tick = Tuple(0, SYSTEM_COMPONENT, TICK_STREAM, -1, [int(secs)])
    try:
        bolt.process_tick(tick)
    except Exception as err:   # broad-except: user code (process_tick) can raise anything
        host.collector.log(f"process_tick raised {format_error(err)[0]}", "error")
