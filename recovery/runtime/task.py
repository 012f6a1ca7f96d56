"""What runs inside a Spark task: one component's task over its partition of tuples.

A task's output is a stream of ((consumer, consumer_task_index), blob) records, a blob being a
msgpack chunk [source component, source task id, [[id, roots, stream, values(, attempt)], ...]].
The same bytes travel through Spark's shuffle and, with tracking on, into the task's spill file
(tracking/spill.py) as its in-flight tuples. Routing happens here, at emit time, as in Storm:
the emitter knows the target tasks, so `emit` can return them and the ids it creates can be
XORed into the ledger.
"""
from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
from redis import Redis

from recovery.api.components import SYSTEM_COMPONENT, TICK_STREAM, Tuple
from recovery.faults import injections
from recovery.model import config as config_decl
from recovery.model.failed import FailedTuple
from recovery.model.graph import TaskContext, TaskMap, subscribers
from recovery.model.run import RunSpec
from recovery.model.workflow import Component, Workflow
from recovery.redis import connection
from recovery.runtime import factory, timeouts
from recovery.runtime.collector import Collector, format_error
from recovery.runtime.routing import Router
from recovery.runtime.timeouts import FINISH, MessageTimeouts
from recovery.tracking import ids, keys
from recovery.tracking.state import KeyedState, LocalState
from recovery.tracking.tracker import TaskTracker

log = logging.getLogger(__name__)


# --- per-process caches (a Python worker runs many tasks) --------------------------------
_workflows: dict[str, tuple[Workflow, TaskMap, Workflow]] = {}
_clients: dict[str, Redis] = {}


def workflow_of(spec: RunSpec) -> tuple[Workflow, TaskMap, Workflow]:
    """(the workflow this round runs, its task numbering, the submitted workflow)."""
    cache_key = spec.workflow_json + (spec.original_json or "")
    got = _workflows.get(cache_key)
    if got is None:
        wf = Workflow.from_task_json(spec.workflow_json)
        tm, original = TaskMap.of(wf), wf
        if spec.original_json:
            original = Workflow.from_task_json(spec.original_json)
            tm = TaskMap.of(original).extended(wf)
        got = _workflows[cache_key] = (wf, tm, original)
        if wf.base_dir and wf.base_dir not in sys.path:
            sys.path.insert(0, wf.base_dir)
    return got


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
class TaskRunner(MessageTimeouts, Collector):
    """Hosts one component's task: collector for its emits/acks/fails, ledger contributions,
    failure records, output chunks, commit."""

    def __init__(self, spec: RunSpec, component_id: str, index: int):
        self.spec = spec
        self.wf, self.tm, self.original = workflow_of(spec)
        self.comp: Component = self.wf.component(component_id)
        self.is_spout = self.comp.is_spout
        self._salts: dict[int, int] = {}
        self.auto_anchor = False
        self.component_id = component_id
        self.index = index
        self.task_id = self.tm.task_id(component_id, index)
        self.conf = self.wf.conf(component_id)
        self.router = Router(self.wf, self.tm, component_id)
        self.tracking = spec.tracking
        client = redis_of(spec) if (spec.tracking or self._needs_redis()) else None
        self.client = client
        self.tracker: TaskTracker | None = None
        if self.tracking and client is not None:   # tracking always has a client
            self.tracker = TaskTracker(client, spec.run_id, spec.round, component_id, index,
                                       self.task_id, self.conf, generation=spec.generation,
                                       spill_dir=spec.spill_dir, parallelism=self.comp.parallelism)
        self.contrib: dict[int, int] = {}
        self.out: dict[tuple[str, int], list] = {}
        self.ready: list[tuple[tuple[str, int], bytes]] = []
        self.replays: dict[tuple, list] = {}
        self.replayed: set[int] = set()
        self.spout_messages: list[list] = []   # (root, message id): acked/failed later
        self._spout_roots: set[int] = set()     # roots this spout task made (message ids are unique)
        self._replay_roots: frozenset[int] | None = None   # root replay: the round's replay set
        self.injections = injections(self.conf, component_id)
        self.stats: dict[str, float] = {"executed": 0, "acked": 0, "failed": 0, "emitted": 0, "roots": 0, "dead": 0}
        self.fields_of: dict[tuple[str, str], tuple[str, ...]] = {}
        # Bolt bookkeeping
        self.current: Tuple | None = None
        self.outstanding: dict[int, Tuple] = {}
        self.held: dict[int, list] = {}
        self.emit_counts: dict[int, int] = {}
        self.unanchored_seq = 0
        self.spout_emits = 0                  # emit calls of a spout, selected or not
        self.component_obj: Any = None
        self.state: Any = None
        self._timeout = config_decl.settings(self.conf).message_timeout_secs
        self._timed = False                 # this task's executions have a deadline
        # (what runs: a tuple id or FINISH, its deadline): one object, so that the watchdog
        # thread reads both at once; None between executions
        self._running: tuple[int | str, float] | None = None
        self._timed_out: set[int | str] = set()   # marks left by a killed earlier attempt
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = threading.Event()

    def _needs_redis(self) -> bool:
        impl = self.comp.impl
        return impl.kind == "sink" and impl.type == "redis" or (
            impl.kind == "source" and impl.type in ("queue", "redis-stream"))

    # -- component set-up -----------------------------------------------------------------
    def _context(self) -> TaskContext:
        ctx = TaskContext(self.wf, self.component_id, self.task_id, self.tm)
        ctx.run_id = self.spec.run_id        # type: ignore[attr-defined]
        ctx.round = self.spec.round          # type: ignore[attr-defined]
        ctx.redis = self.client              # type: ignore[attr-defined]
        # raises unless this task's driver still owns the run (a sink calls it right before it
        # publishes a part: connectors.sinks); None without tracking
        ctx.fence = self.tracker.check_fence if self.tracker is not None else None  # type: ignore[attr-defined]
        return ctx

    def _make_state(self) -> Any:
        if self.tracker is not None:   # tracking
            return KeyedState(self.tracker.client, keys.state(self.spec.run_id, self.component_id))
        return LocalState()

    def _instantiate(self) -> Any:
        obj = factory.build(self.comp, self.wf)
        obj._collector = self
        obj.conf = self.conf
        obj.context = self._context()
        obj.state = self.state = self._make_state()
        return obj

    def _fields(self, src: str, stream: str) -> tuple[str, ...]:
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
    def run_bolt(self, records: Iterable[tuple[Any, bytes]]) -> Iterator[tuple[Any, bytes]]:
        with relaxed_gc():
            yield from self._run_bolt(records)

    def _run_bolt(self, records: Iterable[tuple[Any, bytes]]) -> Iterator[tuple[Any, bytes]]:
        if self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        started = time.time()
        bolt = yield from self._start_bolt(records, started)
        if bolt is None:
            return
        self.auto_anchor = getattr(bolt, "auto_anchor", False)
        auto_ack = getattr(bolt, "auto_ack", False)
        tick_every = config_decl.settings(self.conf).tick_tuple_freq_secs
        # shell bolts send ticks to their program themselves
        ticks = tick_every > 0 and not hasattr(bolt, "metrics")
        next_tick = time.monotonic() + tick_every
        self._start_timing(bolt)
        try:
            for _, blob in records:
                src, src_task, recs = msgpack.unpackb(blob)
                for rec in recs:
                    if ticks and time.monotonic() >= next_tick:
                        self._tick(bolt, tick_every)
                        next_tick = time.monotonic() + tick_every
                    self._execute(bolt, src, src_task, rec, auto_ack)
                    if self.ready:
                        yield from self._drain()
            if ticks:   # a last tick at the end of the input, so windowing bolts can flush
                self._tick(bolt, tick_every)
            self._run_finish(bolt)
        finally:
            self._stop()
        for tup in list(self.outstanding.values()):
            self.fail(tup, f"not acked by {self.component_id}")
        try:
            bolt.cleanup()
        except Exception as err:   # broad-except: user code (cleanup) can raise anything
            self.log(f"cleanup raised {format_error(err)[0]}", "error")
        yield from self._finish(started)

    def _start_bolt(self, records: Iterable[tuple[Any, bytes]], started: float
                    ) -> Generator[tuple[Any, bytes], None, Any]:
        """The prepared bolt; None when its __init__ or prepare raised: then its tuples have
        failed here and the task has finished (what that yields is yielded), the run goes on."""
        try:
            bolt = self._instantiate()
            self.component_obj = bolt
            bolt.prepare(bolt.conf, bolt.context)
        except Exception as err:   # broad-except: user code (a bolt's __init__/prepare) can raise anything
            msg, tb = format_error(err)
            yield from self._fail_all(records, f"{self.component_id} could not start: {msg}", tb)
            yield from self._finish(started)
            return None
        return bolt

    def _run_finish(self, bolt: Any) -> None:
        """finish() under the message timeout too: past it, what is outstanding fails."""
        timeout_error = f"{self.component_id}.finish raised TupleTimeout: {self._timeout_text()}"
        if FINISH in self._timed_out:   # an earlier attempt was killed in it: never again
            for tup in list(self.outstanding.values()):
                self.fail(tup, timeout_error)
            return
        running = self._running = (FINISH, timeouts.clock() + self._timeout) if self._timed else None
        try:
            bolt.finish()
        except Exception as err:   # broad-except: user code (finish) can raise anything
            self._running = None
            msg, tb = format_error(err)
            for tup in list(self.outstanding.values()):
                self.fail(tup, f"{self.component_id}.finish raised {msg}", tb)
        else:
            self._running = None
            if running is not None and timeouts.clock() > running[1]:
                for tup in list(self.outstanding.values()):
                    self.fail(tup, timeout_error)
        finally:
            self._running = None

    def _tick(self, bolt: Any, secs: float) -> None:
        tick = Tuple(0, SYSTEM_COMPONENT, TICK_STREAM, -1, [int(secs)])
        try:
            bolt.process_tick(tick)
        except Exception as err:   # broad-except: user code (process_tick) can raise anything
            self.log(f"process_tick raised {format_error(err)[0]}", "error")

    def _fail_all(self, records: Iterable[tuple[Any, bytes]], error: str, tb: str
                  ) -> Iterator[tuple[Any, bytes]]:
        for _, blob in records:
            src, src_task, recs = msgpack.unpackb(blob)
            for rec in recs:
                tid, roots, stream, values = rec[0], rec[1], rec[2], rec[3]
                if len(rec) > 4:
                    self.replayed.add(tid)
                tup = Tuple(tid, src, stream, self.task_id, values, self._fields(src, stream), roots,
                            src_task, rec[4] if len(rec) > 4 else 1)
                self.outstanding[tid] = tup
                self.stats["executed"] += 1
                self.fail(tup, error, tb)
        return iter(())

    def _execute(self, bolt: Any, src: str, src_task: int, rec: list, auto_ack: bool) -> None:
        tid, roots, stream, values = rec[0], rec[1], rec[2], rec[3]
        attempt = 1
        if len(rec) > 4:   # replayed from a failed position's queue
            attempt = rec[4]
            self.replayed.add(tid)
        fields = self.fields_of.get((src, stream))
        if fields is None:
            fields = self._fields(src, stream)
        tup = Tuple(tid, src, stream, self.task_id, values, fields, roots, src_task, attempt)
        outstanding = self.outstanding
        outstanding[tid] = tup
        self.stats["executed"] += 1
        if self._timed_out and tid in self._timed_out:
            # an earlier attempt of this task was killed running it (see _watch): it fails
            # with the timeout it had, and is not run again
            self.fail(tup, f"TupleTimeout: {self._timeout_text()} (stuck: its worker was ended)")
            return
        self.current = tup
        running = self._running = (tid, timeouts.clock() + self._timeout) if self._timed else None
        try:
            if self.injections:
                for inj in self.injections:
                    inj.before_process(tup)
            bolt.process(tup)
        # user code (process) can raise anything: a bolt's bug fails its tuple, never the task
        except (Exception, SystemExit) as err:  # broad-except: user code
            self._running = None
            msg, tb = format_error(err)
            if tid in outstanding:
                self.fail(tup, msg, tb)
            else:   # acked (or failed) before: as in Storm, that stands
                self.log(f"{self.component_id}.process raised {msg} after tuple {tid:#x} was "
                         "acked or failed", "warn")
        else:
            self._running = None
            if running is not None and timeouts.clock() > running[1]:
                # it returned late without a collector call to raise at (between tuples)
                if tid in outstanding:
                    self.fail(tup, f"TupleTimeout: {self._timeout_text()}")
                else:   # acked (or failed) in time: as in Storm, that stands
                    self.log(f"tuple {tid:#x} was acked, then {self.component_id}.process "
                             f"ran past the {self._timeout:g}s timeout", "warn")
            elif auto_ack and tid in outstanding:
                self.ack(tup)
        finally:
            self._running = None
            self.current = None

    # -- spouts ---------------------------------------------------------------------------
    def run_spout(self, emit_source: Callable[[TaskRunner], Iterable[object]] | None) -> Iterator[tuple[Any, bytes]]:
        """`emit_source` drives a built-in source; None means the component is a Spout class."""
        with relaxed_gc():
            yield from self._run_spout(emit_source)

    def _run_spout(self, emit_source: Callable[[TaskRunner], Iterable[object]] | None) -> Iterator[tuple[Any, bytes]]:
        if self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        started = time.time()
        if emit_source is not None:
            for _ in emit_source(self):
                if self.ready:
                    yield from self._drain()
        else:
            spout = self._instantiate()
            self.component_obj = spout
            spout.open(spout.conf, spout.context)
            spout.activate()
            try:
                while True:
                    before = self.spout_emits
                    more = spout.next_tuple()
                    if self.ready:
                        yield from self._drain()
                    if more is False or self.spout_emits == before:
                        break
            finally:
                spout.deactivate()
                spout.close()
        yield from self._finish(started)

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False) -> None:
        """One record of a built-in source: a root tuple, or a failure at the spout position
        with the raw record kept when it cannot be decoded."""
        if not self._selected(message_id):
            return
        root = ids.root_id(self._root_salt(self.spec.root_epoch), message_id)
        self._count_root(replayed)
        try:
            values = decode()
        # a record's decoder (JSON, text, a shell spout's refused emit) raises many types
        except Exception as err:   # broad-except: whatever it raises, this record fails
            self.stats["failed"] += 1
            # The root stays pending: its "tuple" (the raw record) was created, never acked
            # (a replay that fails again was created already).
            if not replayed:
                self.contrib[root] = self.contrib.get(root, 0) ^ root
            msg, tb = format_error(err)
            if self.tracker is not None:
                rec = FailedTuple(id=root, roots=[root], src_component=self.component_id,
                                  src_task=self.task_id, stream=stream, values=None,
                                  raw=raw, message_id=message_id, format=fmt,
                                  attempt=attempt, error=msg, traceback=tb)
                self.tracker.failure(rec)
                if rec.dead:
                    self.stats["dead"] += 1
            return
        if replayed and self.tracker is not None:
            # a replayed spout record: its pending "raw tuple" is acked now
            self.contrib[root] = self.contrib.get(root, 0) ^ root
            self.tracker.replay_done(self.component_id, self.task_id, root)
        base = ids.derive3(root, self.router.salts.get(stream, 0), 0)
        self._emit(values, stream, (root,), base, None, hold=None, root_xor=root)

    def _drop_consumed_outputs(self, tracker: TaskTracker) -> None:
        """Once every task reading an upstream component has committed, nothing can need that
        component's stored output again (a committed task never re-executes): drop its spill
        files now, so the store holds about two stages of in-flight tuples, not the whole round."""
        done_key = keys.task_done(self.spec.run_id, self.spec.round)
        for src in dict.fromkeys(i.source for i in self.comp.inputs):
            try:
                upstream = self.wf.component(src)
            except KeyError:
                continue
            readers = [f"{c.id}:{i}" for c, _ in subscribers(self.wf, src) for i in range(c.parallelism)]
            if all(tracker.client.hmget(done_key, readers)):
                tracker.drop_outputs(src, upstream.parallelism)

    def replay_to(self, component: str, task: int, rec: FailedTuple, attempt: int) -> None:
        """Send a cached failed tuple, unchanged but for its attempt, to the task it failed at."""
        key = (component, self.tm.index(component, task))
        group = (key, rec.src_component, rec.src_task)
        self.replays.setdefault(group, []).append([rec.id, rec.roots, rec.stream, rec.values, attempt])
        self.stats["emitted"] += 1

    def _count_root(self, replayed: bool) -> None:
        """`roots` counts each root once over a run's rounds: a replay (from a queue, or a
        root replay) is counted apart."""
        if replayed or self.spec.root_replay:
            self.stats["replayed_roots"] = self.stats.get("replayed_roots", 0) + 1
        else:
            self.stats["roots"] += 1

    def _root_salt(self, epoch: int) -> int:
        salt = self._salts.get(epoch)
        if salt is None:   # a blake2b per record would cost more than the record's routing
            salt = self._salts[epoch] = (ids.name_salt(self.component_id, str(epoch)) if epoch
                                         else ids.name_salt(self.component_id))
        return salt

    def _selected(self, message_id: Any) -> bool:
        """Root replay re-reads the source and emits only the failed roots (by their old ids),
        read from the round's replay set once per task (it holds failed roots only)."""
        if not self.spec.root_replay:
            return True
        return ids.root_id(self._root_salt(self.spec.filter_epoch), message_id) in self.replay_root_set()

    def replay_root_set(self) -> frozenset[int]:
        """The failed roots a root-replay round re-emits (its replay set, read once per task)."""
        if self._replay_roots is None:
            client = self.client or redis_of(self.spec)
            members = client.smembers(keys.root_replay_set(self.spec.run_id, self.spec.round))
            self._replay_roots = frozenset(int(r) for r in members)
        return self._replay_roots

    # -- end of task ------------------------------------------------------------------------
    def _contributions(self) -> dict[int, int] | tuple[Any, Any]:
        """The task's XOR contributions per root, as its commit stores them."""
        return self.contrib

    def _drain(self) -> Iterator[tuple[Any, bytes]]:
        ready, self.ready = self.ready, []
        return iter(ready)

    def _finish(self, started: float) -> Iterator[tuple[Any, bytes]]:
        for key in list(self.out):
            self._seal(key)
        for (key, src, src_task), recs in self.replays.items():
            blob = msgpack.packb([src, src_task, recs])
            self.ready.append((key, blob))
            if self.tracker is not None:
                self.tracker.add_output(key, blob)
        self.replays.clear()
        ready, self.ready = self.ready, []
        self.stats["seconds"] = round(time.time() - started, 3)
        if self.tracker is not None:
            extra = None
            if self.spout_messages:
                messages_key = keys.spout_messages(self.spec.run_id, self.component_id)
                field = f"{self.spec.round}:{self.index}"
                messages = msgpack.packb(self.spout_messages, default=repr)
                extra = lambda pipe: pipe.hset(messages_key, field, messages)   # noqa: E731
            elif self._timed_out:   # a committed task never runs again: its marks are done
                marks = self._marks_key()
                extra = lambda pipe: pipe.delete(marks)   # noqa: E731
            if not self.tracker.commit(self._contributions(), self.stats, self.state, extra):
                # its run was taken over (or cleared) while it ran: it committed nothing, so
                # nothing of its output may flow on (the job fails; its driver says why)
                raise self.tracker.fenced_error()
            self._drop_consumed_outputs(self.tracker)
        return iter(ready)
