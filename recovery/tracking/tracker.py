"""A task's tracking (TaskTracker): its ledger contributions (ledger.py), failure localization,
retries with backoff, and its commit into Redis; its in-flight output goes to the spill store
(spill.py), which the commit references."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.errors import RunFenced, SpillError
from recovery.model import config as config_decl
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, runs
from recovery.tracking.ledger import LEDGER_BUCKETS, fenced_transaction, pack_xors, resolve_bucket
from recovery.tracking.spill import SpillRef, SpillStore, SpillWriter, location, task_label

log = logging.getLogger(__name__)

LOG_CAP = 2000


def backoff_ms(attempt: int, conf: dict[str, str]) -> float:
    """Delay before attempt `attempt + 1` (KafkaSpoutRetryExponentialBackoff's shape)."""
    s = config_decl.settings(conf)
    return min(s.retry_max_delay_ms, s.retry_initial_delay_ms + s.retry_delay_period_ms * (2 ** max(0, attempt - 1)))


class TaskTracker:
    """One Spark task's view of tracking: it buffers what the task learns and commits it in one
    transaction with the task's done marker."""

    def __init__(self, client: Redis, run_id: str, round_no: int, component: str, index: int,
                 task_id: int, conf: dict[str, str], generation: str | None = None,
                 spill_dir: str | None = None, parallelism: int = 0):
        self.client = client
        self.parallelism = parallelism   # the component's tasks (0: unknown, no early fold)
        self.generation = generation
        self.fenced = False          # the run was cleared or re-created: write nothing more
        self.run_id = run_id
        self.round = round_no
        self.component = component
        self.index = index
        self.task_id = task_id
        self.conf = conf
        settings = config_decl.settings(conf)
        self.max_attempts = settings.max_attempts
        self.field = f"{component}:{index}"
        # the run's spill location; None (a run record from before it was kept): the property's
        self.spill_dir = spill_dir or location(None, settings.spill_dir)
        self._writer: SpillWriter | None = None
        self.failures: list[FailedTuple] = []
        self.replays_done: list[tuple[str, int, int]] = []
        self.logs: list[bytes] = []

    # -- idempotence ------------------------------------------------------------------
    def committed(self) -> dict | None:
        """The task's done marker (its counters) if it committed in this round, else None.
        Read when the task starts, with the run's generation: a task of a driver that was taken
        over (or of a run cleared) since its round began does not start (RunTakenOver or
        RunCleared), so nothing downstream of it runs in that driver either."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hget(keys.task_done(self.run_id, self.round), self.field)
            pipe.hget(keys.run_record(self.run_id), "generation")
            raw, generation = pipe.execute()
        if self.generation is not None and generation != self.generation.encode():
            self._fence()
            raise self.fenced_error()
        return msgpack.unpackb(cast(bytes, raw)) if raw is not None else None

    def fenced_error(self) -> RunFenced:
        """Why this task may write nothing more (its run was taken over, cleared or re-created)."""
        return runs.fenced_out(self.client, self.run_id, self.generation)

    def check_fence(self) -> None:
        """Raise fenced_error() unless the run still holds this task's generation (a sink checks
        it right before it publishes a part, see connectors.sinks)."""
        if self._run_gone():
            self._fence()
            raise self.fenced_error()

    @property
    def store(self) -> SpillStore:
        return SpillStore.at(self.spill_dir)

    def _spill_ref(self) -> SpillRef | None:
        raw = self.client.hget(keys.task_spill(self.run_id, self.round), self.field)
        return SpillRef.unpack(cast(bytes, raw)) if raw is not None else None

    def stored_output(self) -> Iterator[tuple[Any, bytes]]:
        """A committed task's output, read back from its spill file. No reference: the task
        emitted nothing, or every consumer committed and the file was dropped (nothing reads it)."""
        ref = self._spill_ref()
        if ref is not None:
            yield from self.store.read(self.run_id, ref, task_label(self.component, self.index, self.round))

    # -- in-flight tuples ---------------------------------------------------------------
    def add_output(self, key: tuple, blob: bytes) -> None:
        """An output chunk, into this attempt's spill file as it comes (referenced at commit)."""
        if self.fenced:
            return
        if self._writer is None:
            self._writer = self.store.writer(self.run_id, self.round, self.component, self.index)
        self._writer.add(key, blob)   # a failed write is raised by commit, not here (an emit)

    def drop_outputs(self, component: str, parallelism: int) -> None:
        """Every task reading `component` committed: its tasks' spill files go (references
        first, so no reference ever names a removed file; fenced, so a task of a driver taken
        over meanwhile removes no file its successor may be reading)."""
        key = keys.task_spill(self.run_id, self.round)
        fields = [f"{component}:{i}" for i in range(parallelism)]
        refs = [SpillRef.unpack(cast(bytes, r)) for r in self.client.hmget(key, fields) if r is not None]
        if refs and fenced_transaction(self.client, self.run_id, self.generation,
                                       lambda pipe: pipe.hdel(key, *fields)):
            self.store.remove(self.run_id, refs)

    def _run_gone(self) -> bool:
        """The run was cleared (or created anew): a spill write that failed is why, not a fault."""
        if self.generation is None:
            return False
        return self.client.hget(keys.run_record(self.run_id), "generation") != self.generation.encode()

    def _fence(self) -> None:
        if not self.fenced:
            log.info("run %s was cleared, created anew or taken over: task %s of round %d stops "
                     "writing", self.run_id, self.field, self.round)
        self.fenced = True
        if self._writer is not None:   # nothing will reference its file
            self._writer.discard()
            self._writer = None

    # -- failure localization -----------------------------------------------------------
    def failure(self, record: FailedTuple) -> None:
        """A tuple failed at this task: to the queue for recovery, or dead when out of attempts."""
        if "component" not in record.model_fields_set:
            record.component = self.component
        if "task" not in record.model_fields_set:
            record.task = self.task_id
        record.round = self.round
        record.time = time.time()
        if record.attempt >= self.max_attempts:
            record.dead = True
        else:
            record.not_before = time.time() + backoff_ms(record.attempt, self.conf) / 1000.0
        self.failures.append(record)

    def replay_done(self, component: str, task: int, tuple_id: int) -> None:
        """A tuple replayed from a queue was acked here: its queue entry goes at commit."""
        self.replays_done.append((component, task, tuple_id))

    def log(self, level: str, message: str) -> None:
        if len(self.logs) < 200:
            self.logs.append(msgpack.packb([time.time(), self.component, self.task_id, level,
                                            message[:2000]]))

    # -- commit -------------------------------------------------------------------------
    def commit(self, contrib: dict[int, int] | tuple[Any, Any], stats: dict, state: Any = None,
               extra: Any = None) -> bool:
        """Everything the task learned and its done marker, in one transaction, only into the
        run it started in (a cleared run: nothing written, False; the task ends quietly). Its
        spill file is finished and renamed first; the transaction stores its reference."""
        build = self.staged_commit(contrib, stats, state, extra)
        if build is None:
            return False
        if not fenced_transaction(self.client, self.run_id, self.generation, build):
            self._fence()
            return False
        self.committed_now()
        return True

    def committed_now(self) -> None:
        """After the commit's transaction: the last task of the component folds the ledger."""
        if self.parallelism:
            self._fold_when_component_done()

    def staged_commit(self, contrib: dict[int, int] | tuple[Any, Any], stats: dict, state: Any = None,
                      extra: Any = None) -> Any:
        """commit()'s first half: the spill file finished, and the transaction's body
        (a function of the pipeline) returned unrun; None when the run is gone (fenced).
        commit_together runs several tasks' bodies in one transaction (a chain task's members)."""
        if self.fenced:
            return None
        rid = self.run_id
        ref = None
        if self._writer is not None:
            try:
                ref = self._writer.close()
            except SpillError:
                if not self._run_gone():
                    raise
                self._fence()
                return None
        if ref is not None:
            stats = {**stats, "spill_bytes": ref.size}

        def build(pipe: Any) -> None:
            for b, blob in enumerate(pack_xors(contrib)):
                if blob:
                    pipe.hset(keys.ledger(rid, b), f"{self.round}:{self.field}", blob)
            for comp, task, tid in self.replays_done:
                pipe.hdel(keys.queue(rid, comp, task), str(tid))
            due: dict[str, float] = {}   # position -> its earliest not_before among these
            for rec in self.failures:
                comp, task, tid = rec.component, rec.task, rec.id
                packed = rec.pack()
                if rec.dead:
                    pipe.hdel(keys.queue(rid, comp, task), str(tid))
                    pipe.hset(keys.dead(rid), f"{comp}:{task}:{tid}", packed)
                    if rec.roots:
                        pipe.sadd(keys.dead_roots(rid), *[str(r) for r in rec.roots])
                else:
                    pipe.hset(keys.queue(rid, comp, task), str(tid), packed)
                    pos = f"{comp}:{task}"
                    pipe.sadd(keys.failed_set(rid), pos)
                    due[pos] = min(due.get(pos, float("inf")), rec.not_before or 0.0)
            if due:   # LT: a position's earliest time only moves earlier here (see keys.queue_due)
                pipe.zadd(keys.queue_due(rid), due, lt=True)
            if state is not None:
                state.write_to(pipe)
            if extra is not None:
                extra(pipe)
            if self.logs:
                pipe.rpush(keys.log(rid), *self.logs)
                pipe.ltrim(keys.log(rid), -LOG_CAP, -1)
            if ref is not None:
                pipe.hset(keys.task_spill(rid, self.round), self.field, ref.pack())
            pipe.hset(keys.task_done(rid, self.round), self.field, msgpack.packb(stats))

        return build

    def _fold_when_component_done(self) -> None:
        """The last task of a component to commit folds the ledger: every committed task's
        blob into one compacted blob per bucket (resolve_bucket, WATCHed against concurrent
        commits). A committed task never writes its blob again (a retry replays its stored
        output), so folding it now is as safe as at settle time, and the ledger holds about
        one entry per root in flight plus those of the components still running, instead of
        one per component that touched the root (docs/protocol.md: a few dozen bytes per root)."""
        tasks = [f"{self.component}:{i}" for i in range(self.parallelism)]
        if not all(v is not None for v in self.client.hmget(keys.task_done(self.run_id, self.round), tasks)):
            return
        with self.client.pipeline(transaction=False) as pipe:
            for b in range(LEDGER_BUCKETS):
                pipe.hlen(keys.ledger(self.run_id, b))
            fields = pipe.execute()
        for b, n in enumerate(fields):
            if n > 1:   # (one field: compacted already)
                resolve_bucket(self.client, self.run_id, b, self.generation)


def commit_together(trackers: list[TaskTracker], bodies: list[Any]) -> bool:
    """Several tasks' commits (TaskTracker.staged_commit's bodies) in ONE fenced transaction:
    a chain task commits all its members at once, so they are done together or not at all
    (a retried or resumed chain task then replays its spill, never re-executes a member).
    False (nothing written, every tracker fenced) when the run is no longer theirs."""
    first = trackers[0]
    if any(b is None for b in bodies):
        for t in trackers:
            t._fence()
        return False

    def build(pipe: Any) -> None:
        for body in bodies:
            body(pipe)
    if not fenced_transaction(first.client, first.run_id, first.generation, build):
        for t in trackers:
            t._fence()
        return False
    for t in trackers:
        t.committed_now()
    return True
