"""The collector a component's emits, acks, fails and logs go to (recovery.api.collector's
OutputCollector): anchoring, ids, output chunks, held tuples and failure records.

Routing happens here, at emit time, as in Storm: the emitter knows the target tasks, so `emit`
can return them and the ids it creates can be XORed into the ledger. Output is sealed into
row chunks of CHUNK tuples (runtime.wire); with tracking on, each is also stored as the task's
in-flight tuples (tracking/spill.py).
"""
from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from recovery.api.tuples import Tuple
from recovery.model.failed import FailedTuple
from recovery.runtime import timeouts, wire
from recovery.tracking import ids
from recovery.tracking.xors import XorAccumulator

if TYPE_CHECKING:
    from recovery.model.graph import TaskMap
    from recovery.model.run import TaskIdentity
    from recovery.runtime.roots import SpoutRoots
    from recovery.runtime.routing import Router
    from recovery.runtime.timeouts import MessageTimeouts
    from recovery.tracking.tracker import TaskTracker

CHUNK = 2048          # tuples per blob
ERROR_CAP = 4000      # characters of an error/traceback kept with a failed tuple

Output = tuple[tuple[str, int], wire.Chunk]   # ((consumer, consumer task index), chunk)


class Rows(Protocol):
    """The chunk path's rows (runtime.chunks.RowEmits), as the collector sees them."""

    tid: int     # the row's tuple id
    open: bool   # the row is neither acked nor failed

    def add(self, values: list, stream: str, anchors: tuple, direct_task: int | None) -> Sequence[int]: ...

    def drop_row(self) -> None: ...


def format_error(err: BaseException) -> tuple[str, str]:
    message = f"{type(err).__name__}: {err}"
    tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return message[:ERROR_CAP], tb[-ERROR_CAP:]


class TaskCollector:
    """The OutputCollector of one task: emits with their anchors and routes, acks, fails and
    logs, and what they leave for the task's commit (output chunks, ledger contributions).

    Bookkeeping of the tuples a bolt task runs: `outstanding` (id -> Tuple: received, not yet
    acked or failed), `current` (the tuple in process(): a BasicBolt's emits are anchored to
    it), `held` (per anchor id, the emits waiting for it: an entry [anchors not yet acked,
    records, failed] is released when its last anchor is acked, dropped when one fails)."""

    def __init__(self, task: TaskIdentity, task_map: TaskMap, is_spout: bool,
                 router: Router, tracker: TaskTracker | None, timeouts: MessageTimeouts, roots: SpoutRoots,
                 stats: dict[str, float]):
        self.task = task
        # (read at every emit: plain attributes)
        self.component_id, self.task_id, self.round = task.component_id, task.task_id, task.round
        self.task_map = task_map
        self.is_spout = is_spout
        self.router = router
        self.tracker = tracker
        self.timeouts = timeouts
        self.roots = roots
        self.stats = stats            # counts, shared with the task runner
        self.auto_anchor = False      # a BasicBolt's: unanchored emits go to `current`
        # the task's ledger contributions (tracking.xors): `contrib`, root -> XOR of this
        # task's ids, is its dict of one-id updates; arrays (a chunk's, ack_many's) go to `xors`
        self.xors = XorAccumulator()
        self.contrib: dict[int, int] = self.xors.scalar
        self.out: dict[tuple[str, int], list] = {}        # (consumer, index) -> records
        self.ready: list[Output] = []                     # sealed chunks, not yet handed on
        self.replays: dict[tuple, list] = {}
        self.replayed: set[int] = set()                   # ids of tuples replayed from a queue
        self.current: Tuple | None = None
        self.outstanding: dict[int, Tuple] = {}
        self.held: dict[int, list] = {}
        self.emit_counts: dict[int, int] = {}
        self.unanchored_seq = 0
        self.spout_emits = 0          # emit calls of a spout, selected or not
        # in a chain (runtime.chain): chunks for `local` consumers stay in the stage, in memory,
        # and are never spilled; the others go to the chain's one spill file, `spill`'s
        self.local: frozenset[str] = frozenset()
        self.spill: TaskTracker | None = tracker
        # the chunk path (runtime.chunks): while `rows` is set, a BasicBolt's input chunk runs
        # as one unit; its emits wait in `rows` until the chunk ends
        self.rows: Rows | None = None

    # -- the OutputCollector protocol ----------------------------------------------------------
    def emit(self, component: Any, values: Any, stream: str, anchors: tuple, direct_task: int | None,
             message_id: Any) -> Sequence[int]:
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()
        if type(values) is not list:
            values = list(values)
        rows = self.rows
        if rows is not None:
            return rows.add(values, stream, anchors, direct_task)
        if self.is_spout:
            return self._emit_root(values, stream, direct_task, message_id)
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
                          self.round)
        return self._emit(values, stream, (), base, direct_task, hold=None)

    def ack(self, tup: Tuple) -> None:
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()
        tid = tup.id
        rows = self.rows
        if rows is not None:
            if rows.open and tid == rows.tid:
                rows.open = False   # acked: what it emitted so far flows on at the chunk's end
            return
        if self.outstanding.pop(tid, None) is None:
            return  # already acked or failed: Storm ignores it too
        # no emit can anchor to it any more: its count goes, or the task would keep one per input
        self.emit_counts.pop(tid, None)
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
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()
        rows = self.rows
        if rows is not None:
            if rows.open and tup.id == rows.tid:
                rows.drop_row()   # nothing emitted on a failed tuple's behalf flows on
                self.record_failure(tup, error, tb)
            return
        if self.outstanding.pop(tup.id, None) is None:
            return
        self.emit_counts.pop(tup.id, None)
        for entry in self.held.pop(tup.id, ()):
            entry[2] = True   # nothing emitted on a failed tuple's behalf flows on
        self.record_failure(tup, error, tb)

    def record_failure(self, tup: Tuple, error: str | None, tb: str) -> None:
        """`tup` failed here: its failure record goes to the tracker (its queue and the failed
        set, at the commit)."""
        self.stats["failed"] += 1
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

    # -- a built-in sink's input (connectors.sink_base): no Tuple held per tuple written ---------
    def detach(self, tup: Tuple) -> None:
        """`tup` leaves `outstanding`, neither acked nor failed: a built-in sink that wrote it
        keeps only its id and roots, and answers for it: `ack_many` after its commit, or
        `attach` to hand it back (then it fails with the rest of what is outstanding)."""
        self.outstanding.pop(tup.id, None)

    def attach(self, tup: Tuple) -> None:
        """`tup` outstanding again (a built-in sink's part that could not be committed)."""
        self.outstanding[tup.id] = tup

    def ack_many(self, tids: Any, root_off: Any, root_flat: Any) -> None:
        """Ack tuples given by arrays, not Tuples: tuple i has id tids[i] and roots
        root_flat[root_off[i]:root_off[i + 1]] (numpy uint64, int64, uint64), as `ack` acks
        each. For tuples `detach`ed: no outstanding check."""
        import numpy as np
        n = len(tids)
        if n == 0:
            return
        self.stats["acked"] += n
        if self.emit_counts:
            for tid in tids.tolist():
                self.emit_counts.pop(tid, None)
        if self.tracker is not None:   # untracked, no ledger reads the contributions
            # as arrays, folded in bulk (not a dict entry of about 100 bytes per root: a sink
            # task of 10M roots would hold a gigabyte)
            self.xors.add(root_flat, np.repeat(tids, np.diff(root_off)))
            if self.replayed:
                for tid in tids.tolist():
                    if tid in self.replayed:
                        self.tracker.replay_done(self.component_id, self.task_id, tid)
        if self.held:
            for tid in tids.tolist():
                for entry in self.held.pop(tid, ()):
                    entry[0] -= 1
                    if entry[0] == 0 and not entry[2]:
                        self._release(entry[1])

    def log(self, message: str, level: str = "info") -> None:
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()
        if self.tracker is not None:
            self.tracker.log(level, message)

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False, root: int | None = None) -> None:
        """One record of a built-in source: a root tuple, or a failure at the spout position
        with the raw record kept when it cannot be decoded. `root`: a queued record's own root
        id (the one its queue entry is under), else derived from the message id."""
        root = self._record_root(message_id, replayed, root)
        if root is None:
            return
        try:
            values = decode()
        # a record's decoder (JSON, text, a shell spout's refused emit) raises many types
        except Exception as err:   # broad-except: whatever it raises, this record fails
            # The root stays pending: its "tuple" (the raw record) was created, never acked
            # (a replay that fails again was created already).
            if not replayed:
                self.contrib[root] = self.contrib.get(root, 0) ^ root
            self.source_failure(root, message_id, raw, stream, fmt, attempt, err)
            return
        if replayed and self.tracker is not None:
            # a replayed spout record: its pending "raw tuple" is acked now
            self.contrib[root] = self.contrib.get(root, 0) ^ root
            self.tracker.replay_done(self.component_id, self.task_id, root)
        base = ids.derive3(root, self.router.salts.get(stream, 0), 0)
        self._emit(values, stream, (root,), base, None, hold=None, root_xor=root)

    def _record_root(self, message_id: Any, replayed: bool, root: int | None) -> int | None:
        """A built-in source's record's root id (`root` when its queue entry gives it), counted;
        None when this round does not emit it (a root replay's unselected message)."""
        roots = self.roots
        if not roots.selected(message_id):
            return None
        roots.count(replayed)
        return roots.root_id(message_id) if root is None else root

    def message_gone(self, message_id: Any, reason: str, stream: str = "default", fmt: str = "",
                     attempt: int = 1, replayed: bool = False, root: int | None = None) -> None:
        """A message a replay needs can no longer be read (SourceRunner.message_gone): when it
        is one the round re-emits (a root replay's failed root, a queued record), its root is
        made pending and dead at once with `reason` as its error, never counted complete."""
        root = self._record_root(message_id, replayed, root)
        if root is None:
            return
        self.stats["failed"] += 1
        self.stats["dead"] += 1
        self.stats["gone"] = self.stats.get("gone", 0) + 1
        if not replayed:   # (a queued record's root is pending already)
            self.contrib[root] = self.contrib.get(root, 0) ^ root
        if self.tracker is not None:
            self.tracker.failure(FailedTuple(id=root, roots=[root], src_component=self.component_id,
                                             src_task=self.task_id, stream=stream, message_id=message_id,
                                             format=fmt, attempt=attempt, error=reason, gone=True))

    def source_failure(self, root: int, message_id: Any, raw: Any, stream: str, fmt: str, attempt: int,
                       err: Exception) -> None:
        """A source's record that could not be decoded: a failure at the spout's position that
        keeps the raw record."""
        self.stats["failed"] += 1
        msg, tb = format_error(err)
        if self.tracker is not None:
            rec = FailedTuple(id=root, roots=[root], src_component=self.component_id,
                              src_task=self.task_id, stream=stream, values=None,
                              raw=raw, message_id=message_id, format=fmt,
                              attempt=attempt, error=msg, traceback=tb)
            self.tracker.failure(rec)
            if rec.dead:
                self.stats["dead"] += 1

    # -- what the task runner and the sources call -----------------------------------------
    def replay_to(self, component: str, task: int, rec: FailedTuple, attempt: int) -> None:
        """Send a cached failed tuple, unchanged but for its attempt, to the task it failed at."""
        key = (component, self.task_map.index(component, task))
        group = (key, rec.src_component, rec.src_task)
        self.replays.setdefault(group, []).append([rec.id, rec.roots, rec.stream, rec.values, attempt])
        self.stats["emitted"] += 1

    def take_ready(self) -> Iterator[Output]:
        """The chunks sealed so far, handed on once."""
        ready, self.ready = self.ready, []
        return iter(ready)

    def seal_all(self) -> list[Output]:
        """At the task's end: every buffer and the replays sealed; what is ready, handed on."""
        for key in list(self.out):
            self.seal(key)
        for (key, src, src_task), recs in self.replays.items():
            self.add_ready(key, wire.pack_rows(src, src_task, recs))
        self.replays.clear()
        ready, self.ready = self.ready, []
        return ready

    def contributions(self) -> dict[int, int] | tuple[Any, Any]:
        """The task's XOR contributions per root, as its commit stores them."""
        return self.xors.result()

    def add_contributions(self, roots: Any, xors: Any) -> None:
        """XOR contributions of a chunk, as arrays (one entry per root of each row)."""
        self.xors.add(roots, xors)

    def add_records(self, key: tuple[str, int], records: list) -> None:
        """Records for consumer task `key`, in order, buffered and sealed CHUNK at a time,
        as `_release` does them one by one."""
        n = len(records)
        if not n:
            return
        self.stats["emitted"] += n
        out = self.out
        buf = out.get(key)
        if buf is None:
            buf = out[key] = []
        pos = 0
        while n - pos >= CHUNK - len(buf):
            take = CHUNK - len(buf)
            buf.extend(records[pos:pos + take])
            pos += take
            self.seal(key)
            if pos == n:
                return
            buf = out[key] = []
        buf.extend(records[pos:])

    def seal(self, key: tuple[str, int]) -> None:
        """The records buffered for consumer task `key`, as one row chunk (unencoded for a
        consumer in this task's chain: it stays in the worker, runtime.wire)."""
        records = self.out.pop(key)
        if key[0] in self.local:
            self.ready.append((key, (self.component_id, self.task_id, records)))
            return
        self.add_ready(key, wire.pack_rows(self.component_id, self.task_id, records))

    def add_ready(self, key: tuple[str, int], blob: bytes) -> None:
        """A chunk for consumer task `key`, handed on and, tracked, stored as in flight."""
        self.ready.append((key, blob))
        if self.spill is not None and key[0] not in self.local:
            self.spill.add_output(key, blob)

    # -- emits --------------------------------------------------------------------------------
    def _emit_root(self, values: list, stream: str, direct_task: int | None, message_id: Any) -> list[int]:
        """A spout's emit: a root tuple (or, without a message id, an unanchored one)."""
        # every emit counts, a root replay's unselected ones too: the task runner takes only
        # a next_tuple() that called emit not once for the end of the spout
        self.spout_emits += 1
        if message_id is None:
            self.unanchored_seq += 1
            # the round keeps a later round's unanchored tuples apart from this one's
            return self._emit(values, stream, (), ids.derive3(self.task_id, self.unanchored_seq,
                                                              self.round), direct_task, hold=None)
        roots = self.roots
        if not roots.selected(message_id):
            return []
        root = roots.root_id(message_id)
        if root in roots.made:
            # ids are derived from message ids: a second root under one id would cancel the
            # first one's XORs and share its queue fields, losing one of them silently
            raise ValueError(f"spout {self.component_id!r} emitted message id {message_id!r} twice in "
                             f"one task; message ids must be unique within a run")
        base = ids.derive3(root, self.router.salts.get(stream, 0), 0)
        targets = self._emit(values, stream, (root,), base, direct_task, hold=None, root_xor=root)
        # only an emit that routed makes a root: one that raised (an undeclared stream...)
        # would otherwise count as complete and be acked to its spout
        roots.count(False)
        roots.made.add(root)
        roots.messages.append([root, message_id])
        return targets

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
                self.seal(key)
        self.stats["emitted"] += len(recs)
