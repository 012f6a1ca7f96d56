"""ShellBolt: a bolt whose logic is a multilang program (see the package docstring for how it
keeps the child busy and what happens when the child misbehaves)."""
from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from recovery.api.components import Bolt
from recovery.api.tuples import HEARTBEAT_STREAM, SYSTEM_COMPONENT, TICK_STREAM, Tuple
from recovery.model import config as config_decl
from recovery.model.workflow import ShellImpl
from recovery.multilang import process
from recovery.multilang.base import EMIT_ERRORS, ShellBase, ShellError
from recovery.multilang.process import READ_DELAY, ChildProcess
from recovery.multilang.protocol import (
    END_OF_MESSAGE,
    ProtocolError,
    dumps,
    encode_compact,
    quote,
)

OUT_LIMIT = 1 << 18         # bytes buffered for the child's stdin before process() waits
WRITE_BATCH = 16384         # process() writes when this much is buffered...
WRITE_DELAY = 0.002         # ...or this long after the last write
IDLE_DELAY = 0.0005         # ...or the child has nothing else to do and this much passed


class ShellBolt(ShellBase, Bolt):
    """A bolt implemented by a multilang program (Storm's ShellBolt)."""

    max_outstanding = 1000    # tuples written to the child and not yet acked or failed
    max_resends = 3           # times a tuple moves to a fresh child after unexplained failures
    _read_delay = READ_DELAY

    def __init__(self, impl: ShellImpl, base_dir: str):
        self._shell_init(impl, base_dir)
        self._pending: dict[str, Tuple] = {}
        self._touched: set[str] = set()
        # tuples this host failed (an emit for them raised) that the child still works on:
        # what it emits for them is dropped, their ack or fail ignored
        self._failed_here: set[str] = set()
        self._resent: dict[str, int] = {}
        self._out = bytearray()
        self._unsent = 0                      # tuples in _out not written yet
        self._urgent = False                  # _out holds an answer the child waits for
        self._last_write = 0.0
        self._prefixes: dict[tuple, str] = {}
        self._hb_sent = 0                     # heartbeats sent to the current child...
        self._syncs = 0                       # ...and its syncs (answers), at most as many
        self._tick_barrier = 0                # syncs needed before the last tick is done
        self.heartbeats = 0                   # heartbeats sent, all children
        self.syncs = 0                        # syncs received, all children
        self._next_hb = 0.0
        self._next_tick = float("inf")
        self._next_timer = float("inf")
        self._tick_secs = 0.0
        self._hb_secs = 1.0
        self._engine_ticks = False
        self._seq = 0
        self._last_progress = 0.0
        self._last_kind = ""
        self._handlers = {"emit": self._on_emit, "ack": self._on_ack, "fail": self._on_fail,
                          "log": self._on_log, "error": self._on_error,
                          "metrics": self._on_metrics, "sync": self._on_sync}

    # -- the runtime's calls ----------------------------------------------------------------

    def prepare(self, conf: dict, context: Any) -> None:
        self._configure(conf, context)
        settings = config_decl.settings(conf)
        self._tick_secs = max(0.0, settings.tick_tuple_freq_secs)
        hb = settings.multilang_heartbeat_interval_secs
        self._hb_secs = hb if hb > 0 else 1.0
        try:
            self._start()
        except ShellError:
            self._remove_pid_dir()
            raise

    def process(self, tup: Tuple) -> None:
        if self._child is None and not self._restart(tup):
            return
        tid = str(tup.id) if type(tup.id) is int else dumps(str(tup.id))[1:-1]
        if tid in self._pending or tid in self._failed_here:   # the same tuple twice at once
            self._seq += 1
            tid = f"{tid}#{self._seq}"
        try:
            data = self._encode(tup, tid)
        except (TypeError, ValueError) as exc:
            self._collector.fail(tup, f"cannot send the tuple to shell process `{self.label}`: "
                                      f"its values are not JSON ({exc})")
            return
        if tup.stream == TICK_STREAM and tup.is_tick:
            self._engine_ticks = True
            self._next_tick = float("inf")
        if not self._pending:
            self._last_progress = process.monotonic()
        self._pending[tid] = tup
        self._out += data
        self._unsent += 1
        self._pump()
        if len(self._pending) >= self.max_outstanding or len(self._out) > OUT_LIMIT:
            self._service(self._below_limits)

    def finish(self) -> None:
        self._pump()
        self._service(self._all_done)
        if self._child is not None and self._syncs < self._tick_barrier:
            # what the child emits for the last tick still belongs to this task: a heartbeat
            # sent after the tick is answered once the tick has been processed
            if self._hb_sent < self._tick_barrier:
                self._send_heartbeat(process.monotonic())
            self._service(self._tick_done)

    def cleanup(self) -> None:
        self._shutdown()

    # -- writing ------------------------------------------------------------------------------

    def _encode(self, tup: Tuple, tid: str) -> bytes:
        key = (tup.component, tup.stream, tup.source_task)   # (a tick is known by the first two)
        prefix = self._prefixes.get(key)
        if prefix is None:
            if tup.is_tick:
                prefix = f'{{"comp":"{SYSTEM_COMPONENT}","stream":"{TICK_STREAM}","task":-1,"id":"'
            else:
                prefix = (f'{{"comp":{dumps(tup.component)},"stream":{dumps(tup.stream)},'
                          f'"task":{int(tup.source_task)},"id":"')
            self._prefixes[key] = prefix
        return (prefix + tid + '","tuple":' + encode_compact(tup.values) + "}\nend\n").encode()

    def _send_system(self, stream: str, values: list) -> None:
        self._seq += 1
        self._out += (f'{{"id":"{stream}-{self._seq}","comp":"{SYSTEM_COMPONENT}",'
                      f'"stream":"{stream}","task":-1,"tuple":{dumps(values)}}}\nend\n').encode()

    def _timers(self, now: float) -> bool:
        """Send a tick when one is due, and a heartbeat every interval while tuples are
        outstanding (one at a time: the next goes after the child's `sync`). True when it
        sent something."""
        sent = False
        if now >= self._next_tick:
            sent = True
            secs = self._tick_secs
            self._send_system(TICK_STREAM, [int(secs) if secs == int(secs) else secs])
            self._next_tick = now + secs
            self._tick_barrier = self._hb_sent + 1
        answered = self._syncs >= self._hb_sent
        if self._pending and answered and now >= self._next_hb:
            self._send_heartbeat(now)
            answered = False
            sent = True
        nxt = self._next_tick
        if answered:
            nxt = min(nxt, self._next_hb if self._pending else now + self._hb_secs)
        self._next_timer = nxt
        return sent

    def _send_heartbeat(self, now: float) -> None:
        self._send_system(HEARTBEAT_STREAM, [])
        self._hb_sent += 1
        self.heartbeats += 1
        self._next_hb = now + self._hb_secs

    def _tick_done(self) -> bool:
        return self._syncs >= self._tick_barrier

    def _on_started(self) -> None:
        now = process.monotonic()
        self._hb_sent = self._syncs = self._tick_barrier = 0
        self._next_hb = now + self._hb_secs
        self._last_progress = now
        self._last_kind = ""
        if self._tick_secs > 0 and not self._engine_ticks:
            self._next_tick = now + self._tick_secs
        self._next_timer = min(self._next_tick, self._next_hb)

    # -- reading ------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Without blocking: write what the child takes, handle what it sent, run timers.
        Tuples are written in batches (WRITE_BATCH bytes, WRITE_DELAY seconds, sooner when
        the child has nothing else to work on): fewer, larger writes cost both processes
        much less than one per tuple. Task-id answers, ticks and heartbeats go at once."""
        child = self._child
        if child is None:
            return
        if self._backlog is not None:
            items, self._backlog = self._backlog, None
            if not self._handle(items):
                return
        q = child.queue
        while not q.empty():
            if not self._handle(q.get()):
                return
        now = process.monotonic()
        if now >= self._next_timer and self._timers(now):
            self._urgent = True
        out = self._out
        if out and (self._urgent or len(out) >= WRITE_BATCH
                    or now - self._last_write >= WRITE_DELAY
                    or (len(self._pending) <= self._unsent
                        and now - self._last_write >= IDLE_DELAY)):
            self._urgent = False
            self._last_write = now
            if not child.write(out):
                # stdin closed: the child is going away; handle what it sent until its EOF
                self._service(lambda: self._child is not child)
                return
            if not out:
                self._unsent = 0

    def _write(self) -> None:
        if self._out:
            assert self._child is not None   # output is queued only for a running child
            self._child.write(self._out)
            if not self._out:
                self._unsent = 0

    def _below_limits(self) -> bool:
        return len(self._pending) < self.max_outstanding and len(self._out) <= OUT_LIMIT

    def _all_done(self) -> bool:
        return not self._pending

    def _service(self, done: Callable[[], bool]) -> None:
        """Block until done(): handle messages, send ticks and heartbeats, and lose the child
        when it stops answering for the subprocess timeout."""
        child: ChildProcess | None = None
        start = 0.0
        while True:
            if self._child is not child:
                child = self._child
                start = process.monotonic()
                if child is None:
                    return
            if self._backlog is not None:
                items, self._backlog = self._backlog, None
                if not self._handle(items):
                    continue
            self._write()
            if done():
                return
            now = process.monotonic()
            if now >= self._next_timer:
                self._timers(now)
                self._write()
            limit = self._timeout
            assert child is not None   # without a child the loop ended at done() above
            silent = now - max(child.clock[0], start)
            if silent > limit:
                self._lose(self._hung(child))
                continue
            if self._pending and now - max(self._last_progress, start) > limit:
                self._lose(f"did not ack or fail any of {len(self._pending)} outstanding "
                           f"tuples for {limit:g} s" + ("; it answered heartbeats"
                                                         if self._syncs else ""),
                           fail_all=True)
                continue
            wait = min(self._next_timer - now, limit - silent + 0.01,
                       0.02 if self._out else 0.25)
            try:
                item = child.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                if child.exited() is not None and process.monotonic() - child.clock[0] > 1.0:
                    # it is gone but something it started holds its stdout open
                    self._lose(f"exited with code {child.exited()} (its output stayed open)")
                continue
            if self._handle(item):
                q = child.queue
                while not q.empty() and self._handle(q.get()):
                    pass

    def _on_emit(self, msg: dict) -> None:
        values = msg.get("tuple")
        if values.__class__ is not list:
            raise ProtocolError(f"sent an emit without a tuple list: {quote(msg)}")
        anchors: tuple = ()
        ids = msg.get("anchors")
        anchored_to_failed = False
        if ids:
            pending = self._pending
            found = []
            for aid in ids:
                if aid.__class__ is not str:
                    aid = str(aid)
                t = pending.get(aid)
                if t is not None:
                    found.append(t)
                    self._touched.add(aid)
                elif self._failed_here and aid in self._failed_here:
                    anchored_to_failed = True
            anchors = tuple(found)
        stream = msg.get("stream") or "default"
        task = msg.get("task")
        if task is not None and (task.__class__ is not int):
            raise ProtocolError(f"sent an emit whose task is not a number: {quote(msg)}")
        self._last_progress = process.monotonic()
        self._last_kind = "emit"
        if anchored_to_failed:
            # on behalf of a tuple failed here: it must not flow (the tuple is replayed, and
            # emitted unanchored it would flow untracked and twice); its other anchors fail
            # too, as a Python bolt's emit onto a failed tuple raises and fails its input
            for t in anchors:
                self._fail_tuple(t, f"shell process `{self.label}` emitted {quote(msg)} "
                                    f"anchored to a tuple that already failed here")
            task_ids = []
        else:
            try:
                task_ids = self._collect_emit(values, stream, anchors, task, None)
            except EMIT_ERRORS as exc:
                error = f"shell process `{self.label}` emitted {quote(msg)}: {exc}"
                if anchors:
                    for t in anchors:
                        self._fail_tuple(t, error)
                else:
                    self._log(error, "error")
                task_ids = []
        if task is None and msg.get("need_task_ids", True):
            self._out += encode_compact(list(task_ids or ())).encode() + END_OF_MESSAGE
            self._urgent = True
            assert self._child is not None   # the child that sent the emit
            self._child.read_delay[0] = 0.0   # it waits for answers: read without delay

    def _fail_tuple(self, tup: Tuple, error: str) -> None:
        for tid, t in self._pending.items():
            if t is tup:
                del self._pending[tid]
                self._touched.discard(tid)
                self._failed_here.add(tid)
                self._collector.fail(tup, error)
                return

    def _on_ack(self, msg: dict) -> None:
        tid = msg.get("id")
        if tid.__class__ is not str:
            tid = str(tid)
        tup = self._pending.pop(tid, None)
        self._last_progress = process.monotonic()
        self._last_kind = "ack"
        self._strikes = self._explained = 0
        if tup is not None:
            if self._touched:
                self._touched.discard(tid)
            self._collector.ack(tup)
        elif self._failed_here:
            self._failed_here.discard(tid)    # failed here already: that fail stands

    def _on_fail(self, msg: dict) -> None:
        tid = msg.get("id")
        if tid.__class__ is not str:
            tid = str(tid)
        tup = self._pending.pop(tid, None)
        self._last_progress = process.monotonic()
        self._last_kind = "fail"
        error, self._last_error = self._last_error, None
        if tup is not None:
            self._touched.discard(tid)
            self._collector.fail(tup, error or f"failed by shell process `{self.label}`")
        elif self._failed_here:
            self._failed_here.discard(tid)

    def _on_error(self, msg: dict) -> None:
        super()._on_error(msg)
        self._last_progress = process.monotonic()
        self._last_kind = "error"

    def _on_sync(self, msg: dict) -> None:
        self.syncs += 1
        if self._syncs < self._hb_sent:
            self._syncs += 1
            if self._next_hb < self._next_timer:
                self._next_timer = self._next_hb

    # -- losing a child -----------------------------------------------------------------------

    def _lose(self, problem: str, fail_all: bool = False) -> None:
        """The child is unusable: kill it, fail the tuples it was working on, give the
        untouched ones to a fresh child."""
        explained = self._last_kind == "fail"
        last_error = self._last_error
        pid = self._child.pid if self._child else "?"
        child, code = self._stop_child()
        self._last_error = last_error
        error = self._describe(f"shell process `{self.label}` (pid {pid}) {problem}", child, code)
        self._last_error = None
        self.errors.append(error)
        self._log(error, "error")
        self._out.clear()
        self._unsent = 0
        pending, self._pending = self._pending, {}
        touched, self._touched = self._touched, set()
        self._failed_here.clear()             # the fresh child knows none of them
        resent, self._resent = self._resent, {}
        blame_first = not (fail_all or explained or touched.intersection(pending))
        again: list[tuple[str, Tuple, int]] = []
        fail = self._collector.fail
        for tid, tup in pending.items():
            if fail_all or tid in touched:
                fail(tup, error)
            elif blame_first:
                blame_first = False
                fail(tup, error)
            else:
                n = resent.get(tid, 0) + (0 if explained else 1)
                if n > self.max_resends:
                    fail(tup, error + " (outstanding in an earlier failure too)")
                else:
                    again.append((tid, tup, n))
        self._strike(error, explained)
        if not again:
            return                               # start a fresh child when a tuple comes
        if not self._restart(None):
            for _, tup, _ in again:
                fail(tup, self._broken or self.errors[-1])
            return
        for tid, tup, n in again:
            self._pending[tid] = tup
            if n:
                self._resent[tid] = n
            self._out += self._encode(tup, tid)
        self._write()

    def _restart(self, tup: Tuple | None) -> bool:
        """Start a fresh child; on failure fail `tup` (when given) and return False."""
        if self._broken is None:
            try:
                self._start()
                self.restarts += 1
                return True
            except ShellError as exc:
                error = str(exc)
                self.errors.append(error)
                self._log(error, "error")
                self._strike(error)
        else:
            error = self._broken
        if tup is not None:
            self._collector.fail(tup, self._broken or error)
        return False
