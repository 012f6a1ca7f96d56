"""The collector a component's emits, acks, fails and logs go to: anchoring, ids, output chunks,
held tuples and failure records."""
from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

import msgpack

from recovery.api.components import Tuple
from recovery.model.failed import FailedTuple
from recovery.runtime import timeouts
from recovery.tracking import ids

if TYPE_CHECKING:
    from recovery.model.run import RunSpec
    from recovery.runtime.routing import Router
    from recovery.tracking.tracker import TaskTracker

CHUNK = 2048          # tuples per blob
ERROR_CAP = 4000      # characters of an error/traceback kept with a failed tuple


def format_error(err: BaseException) -> tuple[str, str]:
    message = f"{type(err).__name__}: {err}"
    tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return message[:ERROR_CAP], tb[-ERROR_CAP:]


class Collector:
    """The OutputCollector side of a task (part of TaskRunner): emits with their anchors and
    routes, acks, fails and logs."""

    # The runner's state this part reads and writes (TaskRunner.__init__ sets it all).
    spec: RunSpec
    component_id: str
    task_id: int
    is_spout: bool
    auto_anchor: bool
    router: Router
    tracker: TaskTracker | None
    stats: dict[str, float]      # counts, and the task's seconds
    contrib: dict[int, int]
    out: dict[tuple[str, int], list]
    ready: list[tuple[tuple[str, int], bytes]]
    replayed: set[int]
    spout_messages: list[list]
    _spout_roots: set[int]
    current: Tuple | None
    outstanding: dict[int, Tuple]
    held: dict[int, list]
    emit_counts: dict[int, int]
    unanchored_seq: int
    spout_emits: int
    _running: tuple[int | str, float] | None

    if TYPE_CHECKING:   # the runner's other parts
        def _raise_timeout(self) -> None: ...
        def _count_root(self, replayed: bool) -> None: ...
        def _root_salt(self, epoch: int) -> int: ...
        def _selected(self, message_id: Any) -> bool: ...

    # -- collector protocol ---------------------------------------------------------------
    def emit(self, component: Any, values: Any, stream: str, anchors: tuple, direct_task: int | None,
             message_id: Any) -> list[int]:
        running = self._running
        if running is not None and timeouts.clock() > running[1]:
            self._raise_timeout()
        if type(values) is not list:
            values = list(values)
        if self.is_spout:
            # every emit counts, a root replay's unselected ones too: run_spout takes only a
            # next_tuple() that called emit not once for the end of the spout
            self.spout_emits += 1
            if message_id is None:
                self.unanchored_seq += 1
                # the round keeps a later round's unanchored tuples apart from this one's
                return self._emit(values, stream, (), ids.derive3(self.task_id, self.unanchored_seq,
                                                                  self.spec.round), direct_task, hold=None)
            if not self._selected(message_id):
                return []
            root = ids.root_id(self._root_salt(self.spec.root_epoch), message_id)
            if root in self._spout_roots:
                # ids are derived from message ids: a second root under one id would cancel the
                # first one's XORs and share its queue fields, losing one of them silently
                raise ValueError(f"spout {self.component_id!r} emitted message id {message_id!r} twice in "
                                 f"one task; message ids must be unique within a run")
            base = ids.derive3(root, self.router.salts.get(stream, 0), 0)
            targets = self._emit(values, stream, (root,), base, direct_task, hold=None, root_xor=root)
            # only an emit that routed makes a root: one that raised (an undeclared stream...)
            # would otherwise count as complete and be acked to its spout
            self._count_root(False)
            self._spout_roots.add(root)
            self.spout_messages.append([root, message_id])
            return targets
        if not anchors:
            if self.auto_anchor and self.current is not None:
                anchors = (self.current,)
        elif len(anchors) > 1:
            # one tuple named twice is one anchor: XORed with itself it would make an anchor key
            # of 0, and ids that every task and round share
            anchors = tuple({a.id: a for a in anchors}.values())
        if len(anchors) == 1:
            # the common case (a BasicBolt's emit), _emit's held path inlined: one anchor
            a = anchors[0]
            key = a.id
            counts = self.emit_counts
            n = counts.get(key, 0)
            counts[key] = n + 1
            router = self.router
            copies = router.route(stream, values, ids.derive3(key, router.salts.get(stream, 0), n), direct_task)
            if key not in self.outstanding:
                raise ValueError(f"emit anchored to tuple {key:#x}, which was already acked or failed")
            anchor_roots = a.roots
            if len(copies) == 1:   # one consumer task: no comprehensions to set up
                to, t, tid = copies[0]
                entry = [1, [(to, [tid, anchor_roots, stream, values])], False]
                targets = [t]
            else:
                entry = [1, [(to, [tid, anchor_roots, stream, values]) for to, _, tid in copies], False]
                targets = [t for _, t, _ in copies]
            waiting = self.held.get(key)
            if waiting is None:
                self.held[key] = [entry]
            else:
                waiting.append(entry)
            return targets
        if anchors:
            key = 0
            roots: list[int] = []
            for a in anchors:
                key ^= a.id
                for r in a.roots:
                    if r not in roots:
                        roots.append(r)
            n = self.emit_counts.get(key, 0)
            self.emit_counts[key] = n + 1
            base = ids.derive3(key, self.router.salts.get(stream, 0), n)
            return self._emit(values, stream, tuple(roots), base, direct_task, hold=anchors)
        self.unanchored_seq += 1
        base = ids.derive(self.task_id, self.router.salts.get(stream, 0), self.unanchored_seq, 1,
                          self.spec.round)
        return self._emit(values, stream, (), base, direct_task, hold=None)

    def _emit(self, values, stream, roots, base, direct_task, hold, root_xor: int = 0) -> list[int]:
        copies = self.router.route(stream, values, base, direct_task)
        # (output key, record): the record is what the chunk holds
        if len(copies) == 1:
            to, t, tid = copies[0]
            recs = [(to, [tid, roots, stream, values])]
            targets = [t]
        else:
            recs = [(to, [tid, roots, stream, values]) for to, _, tid in copies]
            targets = [t for _, t, _ in copies]
        if hold:
            outstanding, held = self.outstanding, self.held
            entry = [len(hold), recs, False]
            for a in hold:
                if a.id not in outstanding:
                    raise ValueError(f"emit anchored to tuple {a.id:#x}, which was already acked or failed")
                waiting = held.get(a.id)
                if waiting is None:
                    held[a.id] = [entry]
                else:
                    waiting.append(entry)
        else:
            if root_xor and self.tracker is not None:   # untracked, no ledger reads it
                x = 0
                for _, rec in recs:
                    x ^= rec[0]
                self.contrib[root_xor] = self.contrib.get(root_xor, 0) ^ x
            self._release(recs, xor_roots=False)
        return targets

    def _release(self, recs: list, xor_roots: bool = True) -> None:
        out, contrib = self.out, self.contrib
        # the ledger's contributions go to Redis at the commit: untracked, nothing reads them
        xor_roots = xor_roots and self.tracker is not None
        for key, rec in recs:
            if xor_roots:
                tid = rec[0]
                for r in rec[1]:
                    contrib[r] = contrib.get(r, 0) ^ tid
            buf = out.get(key)
            if buf is None:
                buf = out[key] = []
            buf.append(rec)
            if len(buf) >= CHUNK:
                self._seal(key)
        self.stats["emitted"] += len(recs)

    def _seal(self, key: tuple[str, int]) -> None:
        blob = msgpack.packb([self.component_id, self.task_id, self.out.pop(key)])
        self.ready.append((key, blob))
        if self.tracker is not None:
            self.tracker.add_output(key, blob)

    def ack(self, tup: Tuple) -> None:
        running = self._running
        if running is not None and timeouts.clock() > running[1]:
            self._raise_timeout()
        tid = tup.id
        if self.outstanding.pop(tid, None) is None:
            return  # already acked or failed: Storm ignores it too
        self.stats["acked"] += 1
        if self.tracker is not None:   # untracked, no ledger reads the contributions
            contrib = self.contrib
            for r in tup.roots:
                contrib[r] = contrib.get(r, 0) ^ tid
            if tid in self.replayed:
                self.tracker.replay_done(self.component_id, self.task_id, tid)
        entries = self.held.pop(tid, None)
        if entries is not None:
            for entry in entries:
                entry[0] -= 1
                if entry[0] == 0 and not entry[2]:
                    self._release(entry[1])

    def fail(self, tup: Tuple, error: str | None = None, tb: str = "") -> None:
        if self._running is not None and timeouts.clock() > self._running[1]:
            self._raise_timeout()
        if self.outstanding.pop(tup.id, None) is None:
            return
        self.stats["failed"] += 1
        for entry in self.held.pop(tup.id, ()):
            entry[2] = True   # nothing emitted on a failed tuple's behalf flows on
        if self.tracker is not None:
            rec = FailedTuple(id=tup.id, roots=list(tup.roots), src_component=tup.component,
                              src_task=tup.source_task, stream=tup.stream, values=tup.values,
                              attempt=tup.attempt, error=error or f"failed by {self.component_id}",
                              traceback=tb)
            self.tracker.failure(rec)
            if rec.dead:
                self.stats["dead"] += 1
        else:
            self.log(f"tuple {tup.id:#x} failed: {error}", "error")

    def log(self, message: str, level: str = "info") -> None:
        if self._running is not None and timeouts.clock() > self._running[1]:
            self._raise_timeout()
        if self.tracker is not None:
            self.tracker.log(level, message)
