"""What runs inside a Spark task: one component's task over its partition of tuples.

A task's output is a stream of ((consumer, consumer_task_index), chunk) records (runtime.wire
says what a chunk holds). The same bytes travel through Spark's shuffle and, with tracking on,
into the task's spill file (tracking/spill.py) as its in-flight tuples.

A TaskRunner owns the parts of a task, each with one job: the component it builds and binds,
its collector (runtime.collector: emits, acks, fails, the output chunks and ledger
contributions), its message timeout (runtime.timeouts), its spout roots (runtime.roots) and
its tracker (tracking.tracker: what the task commits), its guarded calls of the component's
code (runtime.guard). The runner hosts the loop of its component's execution mode (the row
mode's runtime.row_loop, the chunk mode's runtime.chunks; runtime.batch's for the batch modes)
over its input and commits at the end.
"""
from __future__ import annotations

import functools
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Self

import msgpack
from redis import Redis

from recovery.api.components import Component as UserComponent
from recovery.api.tuples import Tuple
from recovery.controlplane import connection
from recovery.faults import injections
from recovery.model import config as config_decl
from recovery.model.graph import ChainPlan, ComponentContext, Mode, TaskMap
from recovery.model.run import RunSpec, TaskIdentity
from recovery.model.workflow import Component, Workflow
from recovery.multilang.bolt import ShellBolt
from recovery.runtime import blocks, chunks, factory, guard, lineage, modes, row_loop, wire
from recovery.runtime.collector import Output, TaskCollector, format_error
from recovery.runtime.roots import SpoutRoots
from recovery.runtime.routing import Router
from recovery.runtime.timeouts import MessageTimeouts
from recovery.tracking import keys
from recovery.tracking.state import KeyedState, LocalState, state_key
from recovery.tracking.tracker import TaskTracker

log = logging.getLogger(__name__)

Records = Iterable[tuple[Any, wire.Chunk]]   # a task's input: (key, chunk) pairs


# --- per-process caches (a Python worker runs many tasks) --------------------------------
_workflows: dict[str, tuple[Workflow, TaskMap, Workflow]] = {}
_plans: dict[tuple[str, bool], ChainPlan] = {}
_clients: dict[str, Redis] = {}


def workflow_of(spec: RunSpec) -> tuple[Workflow, TaskMap, Workflow]:
    """(the workflow this round runs, its task numbering, the submitted workflow)."""
    cache_key = spec.workflow_json + (spec.original_json or "") + (spec.code or "")
    got = _workflows.get(cache_key)
    if got is None:
        code_dir = shipped_code_dir(spec.code)
        wf = Workflow.from_task_json(spec.workflow_json).model_copy(update={"code_dir": code_dir})
        tm, original = TaskMap.of(wf), wf
        if spec.original_json:
            original = Workflow.from_task_json(spec.original_json).model_copy(update={"code_dir": code_dir})
            tm = TaskMap.of(original).extended(wf)
        got = _workflows[cache_key] = (wf, tm, original)
        folder = wf.code_folder
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    return got


def shipped_code_dir(name: str | None) -> str | None:
    """Where this executor unpacked the workflow's shipped code (engine/shipping.py): its
    SparkFiles folder's `name`; None when nothing was shipped."""
    if not name:
        return None
    from pyspark import SparkFiles  # (only tasks of a cluster's rounds get here)
    return os.path.abspath(os.path.join(SparkFiles.getRootDirectory(), name))


def chain_plan_of(spec: RunSpec) -> ChainPlan:
    """The chains (stages) of the workflow this round runs and its components' execution modes
    (model.graph.ChainPlan, runtime.modes), cached (per setting of the chunk mode's switch)."""
    key = (spec.workflow_json, chunks.ENABLED)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = modes.plan_of(workflow_of(spec)[0])
    return plan


@contextmanager
def injected_client(redis_url: str | None, client: Redis) -> Iterator[None]:
    """While inside, tasks of runs against `redis_url` use `client` instead of connecting (an
    in-process run's client: recovery.testing injects fakeredis or a test's Redis this way)."""
    key = redis_url or ""
    previous = _clients.get(key)
    _clients[key] = client
    try:
        yield
    finally:
        if previous is None:
            _clients.pop(key, None)
        else:
            _clients[key] = previous


def redis_of(spec: RunSpec) -> Redis:
    client = _clients.get(spec.redis_url or "")
    if client is None:
        client = _clients[spec.redis_url or ""] = connection.connect(spec.redis_url, start=False)
    return client


# --- the collector's young-generation threshold -------------------------------------------
# A task allocates several container objects per tuple that live until their chunk is sealed
# or their anchor acked; at CPython's default threshold (700) the cyclic collector runs every
# few hundred tuples and keeps re-scanning them, about a quarter of the runtime's per-tuple
# CPU (measured on bench/framework_cost.py's chain). While a task runs, the young generation
# is collected every GC_YOUNG_THRESHOLD allocations instead: cycles are still found, later.
GC_YOUNG_THRESHOLD = 50_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """The young-generation threshold raised while inside; nested and interleaved users (task
    generators of one worker) share it, and the last one out restores what was set before."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0] < GC_YOUNG_THRESHOLD:
                gc.set_threshold(GC_YOUNG_THRESHOLD, *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


# --- the task runner -----------------------------------------------------------------------
class TaskRunner:
    """Runs one component's task: builds the component, drives it over the task's input
    (run_bolt, run_spout) and commits what it did. Built-in sources get it as their
    connectors.runner.SourceRunner."""

    def __init__(self, spec: RunSpec, component_id: str, index: int):
        self.spec = spec
        self.wf, self.tm, self.original = workflow_of(spec)
        self.comp: Component = self.wf.component(component_id)
        self.component_id = component_id
        self.index = index
        self.task_id = self.tm.task_id(component_id, index)
        self.task = TaskIdentity(spec.run_id, spec.round, component_id, index, self.task_id)
        self.conf = self.wf.conf(component_id)
        self.plan = chain_plan_of(spec)
        self.mode = self.plan.mode(component_id)   # what the task runs by (runtime.modes)
        chain = self.plan.chain_of(component_id)
        # the members this one feeds in its chain: their task `index` gets its tuples (routing)
        chained = frozenset(m for m in chain.members[1:] if self.wf.component(m).inputs[0].source == component_id)
        self.router = Router(self.wf, self.tm, component_id, index, chained)
        # set by runtime.chain.ChainTask: it checks the done marker once for all its members,
        # and commits them together; a member's finish() only leaves its commit to it
        self.in_chain = False
        self.tracking = spec.tracking
        client = redis_of(spec) if (spec.tracking or self._needs_redis()) else None
        self.client = client
        self.tracker: TaskTracker | None = None
        if self.tracking and client is not None:   # tracking always has a client
            self.tracker = TaskTracker(client, self.task, self.conf, generation=spec.generation,
                                       spill_dir=spec.spill_dir, parallelism=self.comp.parallelism,
                                       round_tasks=sum(c.parallelism for c in self.wf.components),
                                       root_replay=spec.root_replay)
        self.injections = injections(self.conf, component_id)
        self.stats: dict[str, float] = {"executed": 0, "acked": 0, "failed": 0, "emitted": 0, "roots": 0, "dead": 0}
        self.fields_of: dict[tuple[str, str], tuple[str, ...]] = {}
        self.state: KeyedState | None = None
        timeout = config_decl.settings(self.conf).message_timeout_secs
        self.timeouts = MessageTimeouts(self.task, timeout, self.tracker, builtin_sink=self.comp.impl.kind == "sink")
        # every call of the component's code goes through it (runtime.guard)
        self.user_code = guard.UserCode(component_id, self.timeouts, self.injections)
        self.roots = SpoutRoots(spec, component_id, self.stats, lambda: self.client or redis_of(self.spec))
        self.collector = self._make_collector()
        # a built-in source calls these per record (SourceRunner): the collector's, bound once
        self.spout_record = self.collector.spout_record
        self.message_gone = self.collector.message_gone
        self.replay_to = self.collector.replay_to
        self.log = self.collector.log

    def _make_collector(self) -> TaskCollector:
        return TaskCollector(self.task, self.tm, self.comp.is_spout,
                             self.router, self.tracker, self.timeouts, self.roots, self.stats)

    def _needs_redis(self) -> bool:
        impl = self.comp.impl
        return impl.kind == "sink" and impl.type in ("redis", "capture") or (
            impl.kind == "source" and impl.type in ("queue", "redis-stream", "kafka"))

    # -- component set-up -----------------------------------------------------------------
    def _context(self) -> ComponentContext:
        return ComponentContext(self.wf, self.component_id, self.task_id, self.tm, run_id=self.spec.run_id,
                           round=self.spec.round, redis=self.client,
                           fence=self.tracker.check_fence if self.tracker is not None else None)

    def _make_state(self) -> KeyedState:
        if self.tracker is not None:   # tracking
            return KeyedState(self.tracker.client, state_key(self.spec.run_id, self.component_id))
        return LocalState()

    def instantiate(self) -> Any:
        """The component, built and bound to this task's collector, with its keyed state."""
        obj: UserComponent = factory.build(self.comp, self.wf)
        obj.bind(self.collector, self.conf, self._context())
        obj.state = self.state = self._make_state()
        return obj

    def fields(self, src: str, stream: str) -> tuple[str, ...]:
        """The declared fields of `src`'s `stream` (cached in fields_of)."""
        key = (src, stream)
        f = self.fields_of.get(key)
        if f is None:
            for wf in (self.wf, self.original):   # a replayed tuple's source may not re-run
                try:
                    sd = wf.component(src).stream(stream)
                except KeyError:
                    continue
                f = sd.fields if sd else ()
                break
            else:
                f = ()
            self.fields_of[key] = f
        return f

    # -- bolts ----------------------------------------------------------------------------
    def run_bolt(self, records: Records) -> Iterator[Output]:
        if self.spec.lineage_roots:   # a sandbox's tree of these roots (runtime/lineage.py)
            records = lineage.recording(redis_of(self.spec), self.spec, self.component_id, self.task_id, records)
        with relaxed_gc():
            yield from self._run_bolt(records)

    def _run_bolt(self, records: Records) -> Iterator[Output]:
        if not self.in_chain and self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        started = time.time()
        bolt = yield from self.start_bolt(records, started)
        if bolt is None:
            return
        collector = self.collector
        collector.auto_anchor = getattr(bolt, "auto_anchor", False)
        auto_ack = getattr(bolt, "auto_ack", False)
        self.timeouts.start(bolt)
        execute = row_loop.executor(self, bolt, auto_ack)
        try:
            if self.mode is Mode.CHUNK:
                # its input chunk by chunk, its bookkeeping once a chunk (a Bolt that holds a
                # tuple goes on by the row mode's `execute`)
                yield from chunks.run_chunks(self, bolt, records, execute)
            else:
                # the row mode; a shell bolt sends ticks to its program itself
                tick_every = config_decl.settings(self.conf).tick_tuple_freq_secs
                yield from row_loop.run_rows(self, bolt, records, execute,
                                             0.0 if isinstance(bolt, ShellBolt) else tick_every)
            self.user_code.finish(bolt, collector)
        finally:
            self.timeouts.stop()
        for tup in list(collector.outstanding.values()):
            collector.fail(tup, f"not acked by {self.component_id}")
        try:
            bolt.cleanup()
        except Exception as err:   # broad-except: user code (cleanup) can raise anything
            collector.log(f"cleanup raised {format_error(err)[0]}", "error")
        yield from self.finish(started)

    def start_bolt(self, records: Records, started: float) -> Generator[Output, None, Any]:
        """The prepared bolt; None when its __init__ or prepare raised: then its tuples have
        failed here and the task has finished (what that yields is yielded), the run goes on."""
        try:
            bolt = self.instantiate()
            bolt.prepare(bolt.conf, bolt.context)
        except Exception as err:   # broad-except: user code (a bolt's __init__/prepare) can raise anything
            msg, tb = format_error(err)
            yield from self.fail_input(records, f"{self.component_id} could not start: {msg}", tb)
            yield from self.finish(started)
            return None
        return bolt

    def fail_input(self, records: Records, error: str, tb: str) -> Iterator[Output]:
        """Every input tuple fails with `error` (the component could not start)."""
        collector = self.collector
        for _, blob in records:
            src, src_task, recs = wire.unpack_rows(blob)
            for rec in recs:
                tid, roots, stream, values = rec[0], rec[1], rec[2], rec[3]
                if len(rec) > 4:
                    collector.replayed.add(tid)
                tup = Tuple(tid, src, stream, self.task_id, values, self.fields(src, stream), roots,
                            src_task, rec[4] if len(rec) > 4 else 1)
                collector.outstanding[tid] = tup
                self.stats["executed"] += 1
                collector.fail(tup, error, tb)
        return iter(())

    # -- spouts ---------------------------------------------------------------------------
    def run_spout(self, emit_source: Callable[[Self], Iterable[object]] | None) -> Iterator[Output]:
        """`emit_source` drives a built-in source over this runner (its SourceRunner); None
        means the component is a Spout class."""
        with relaxed_gc():
            yield from self._run_spout(emit_source)

    def _run_spout(self, emit_source: Callable[[Self], Iterable[object]] | None) -> Iterator[Output]:
        if not self.in_chain and self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        started = time.time()
        collector = self.collector
        if emit_source is not None:
            for _ in emit_source(self):
                if collector.ready:
                    yield from collector.take_ready()
        else:
            spout = self.instantiate()
            spout.open(spout.conf, spout.context)
            spout.activate()
            step = self.spout_step(spout)
            try:
                while True:
                    before = collector.spout_emits
                    more = step()
                    if collector.ready:
                        yield from collector.take_ready()
                    if more is False or collector.spout_emits == before:
                        break
            finally:
                spout.deactivate()
                spout.close()
        yield from self.finish(started)

    def spout_block(self, name: str, offsets: list[int], raws: list[bytes], decode: Callable[[bytes], list],
                    stream: str = "default", fmt: str = "") -> None:
        """Lines of a file source (message ids (name, offset)): what spout_record does for
        each, the bookkeeping done once for the block (runtime.chunks) in the block-source mode."""
        if self.mode is not Mode.BLOCK_SOURCE:
            for offset, raw in zip(offsets, raws):
                self.spout_record((name, offset), functools.partial(decode, raw), raw, stream, fmt)
            return
        blocks.source_block(self.collector, name, offsets, raws, decode, stream, fmt)

    def spout_step(self, spout: Any) -> Callable[[], Any]:
        """One step of a spout class: its next_tuple (runtime.batch's runner: a BatchSpout's
        next_batch)."""
        return spout.next_tuple

    # -- end of task ------------------------------------------------------------------------
    def finish(self, started: float) -> Iterator[Output]:
        """The task's end: its last chunks sealed, and, tracked, everything it did committed
        at once (outputs, ledger contributions, failures, stats, keyed state)."""
        ready = self.collector.seal_all()
        self.stats["seconds"] = round(time.time() - started, 3)
        if self.tracker is not None and not self.in_chain:   # a chain commits its members at once
            if not self.tracker.commit(self.collector.contributions(), self.stats, self.state,
                                       self.commit_extra()):
                # its run was taken over (or cleared) while it ran: it committed nothing, so
                # nothing of its output may flow on (the job fails; its driver says why)
                raise self.tracker.fenced_error()
            self.drop_consumed_outputs(self.tracker, [self.component_id])
        return iter(ready)

    def commit_extra(self) -> Callable[[Any], Any] | None:
        """What the commit writes besides the tracker's own: a spout's message ids waiting for
        their fates, or the removal of the task's timeout marks."""
        if self.roots.messages:
            messages_key = keys.spout_messages(self.spec.run_id, self.component_id)
            field = f"{self.spec.round}:{self.index}"
            messages = msgpack.packb(self.roots.messages, default=repr)
            return lambda pipe: pipe.hset(messages_key, field, messages)
        if self.timeouts.timed_out:   # a committed task never runs again: its marks are done
            marks = self.timeouts.marks_key()
            return lambda pipe: pipe.delete(marks)
        return None

    def drop_consumed_outputs(self, tracker: TaskTracker, members: list[str]) -> None:
        """Once every task reading an upstream stage's output has committed, nothing can need
        that stage's stored output again (a committed task never re-executes): drop its spill
        files now, so the store holds about two stages of in-flight tuples, not the whole round.
        `members`: the components of this task's stage; a stage's spill is its chain head's."""
        done_key = keys.task_done(self.spec.run_id, self.spec.round)
        plan, inside = self.plan, set(members)
        sources = dict.fromkeys(i.source for m in members for i in self.wf.component(m).inputs
                                if i.source not in inside)
        for src in dict.fromkeys(plan.chain_of(s) for s in sources if s in plan.of):
            readers = plan.readers(self.wf, src.head)
            if all(tracker.client.hmget(done_key, readers)):
                tracker.drop_outputs(src.head, src.parallelism)
