"""A task's tracking (TaskTracker): its ledger contributions (ledger.py), failure localization,
retries with backoff, and its commit into Redis; its in-flight output goes to the spill store
(spill.py), which the commit references.

The commit is three steps, each touching the keys of one hash slot (tracking/keys.py), each
idempotent, so that it works the same on a single server and on a Redis Cluster:

1. *pieces*, ahead of the commit point, under the attempt's own token: its ledger
   contributions (ledger.piece_fields, bounded parts, in the buckets' slots) and its writes
   into failed positions' queues (tracking/queue stage, in each queue's slot). Nothing reads them
   as long as no commit record names the token.
2. *the commit point*, one transaction in the run's home slot, fenced by the run's generation:
   the done marker, the commit record (token and staged positions), the spill reference, the
   failed set and due times, dead letters, keyed state, the spouts' message ids, the logs. At
   most one attempt of a task gets there (the done marker is checked in the same transaction).
3. *apply*: each staged queue write moves into its queue (queue.apply_staged, a script in the queue's
   slot; a staging key gone means done). The task does it right after its commit point; the
   driver does it again for the whole round before it settles (apply_round), so a task killed
   between 2 and 3 loses nothing.
"""
from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.errors import RunFenced, SpillError
from recovery.model import config as config_decl
from recovery.model.failed import FailedTuple
from recovery.model.run import TaskIdentity
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import (
    LEDGER_BUCKETS,
    bucket_key,
    count_round,
    fenced_transaction,
    pack_xors,
    piece_fields,
    resolve_bucket,
)
from recovery.tracking.queue import apply_staged
from recovery.tracking.spill import SpillRef, SpillStore, SpillWriter, check_file, location, task_label

log = logging.getLogger(__name__)

LOG_CAP = 2000
#: Fields per command when a commit stages queue writes (bounded commands, as ledger pieces are).
STAGE_BATCH = 1000


def apply_round(client: Redis, run_id: str, round_no: int, generation: str | None = None) -> int:
    """Every committed attempt's staged queue writes of a round, applied (apply_staged), by the
    driver before it settles the round: a task killed after its commit point left them staged.
    Nothing when the run was taken over or cleared (RunFenced: its new driver applies them)."""
    runs.check_generation(client, run_id, generation)
    n = 0
    for raw in client.hvals(keys.task_commits(run_id, round_no)):
        token, positions = msgpack.unpackb(cast(bytes, raw))
        if positions:
            n += apply_staged(client, run_id, round_no, token, [(c, int(t)) for c, t in positions])
    return n


def check_spill_files(client: Redis, store: SpillStore, run_id: str, round_no: int) -> None:
    """Every spill file the committed tasks of a round reference (`keys.task_spill`): resumed,
    the round replays them instead of running those tasks again, so one gone is refused (by
    the driver, before Spark starts) rather than by a Spark task."""
    for field, raw in cast(dict[bytes, bytes], client.hgetall(keys.task_spill(run_id, round_no))).items():
        component, _, index = field.decode().rpartition(":")
        check_file(store, run_id, SpillRef.unpack(raw), task_label(component, int(index), round_no))


def backoff_ms(attempt: int, conf: dict[str, str]) -> float:
    """Delay before attempt `attempt + 1` (KafkaSpoutRetryExponentialBackoff's shape)."""
    s = config_decl.settings(conf)
    return min(s.retry_max_delay_ms, s.retry_initial_delay_ms + s.retry_delay_period_ms * (2 ** max(0, attempt - 1)))


class TaskTracker:
    """One Spark task's view of tracking: it buffers what the task learns and commits it in one
    transaction with the task's done marker."""

    def __init__(self, client: Redis, task: TaskIdentity, conf: dict[str, str], generation: str | None = None,
                 spill_dir: str | None = None, parallelism: int = 0, round_tasks: int = 0,
                 root_replay: bool = False):
        self.client = client
        self.root_replay = root_replay   # a root-replay round: a root's attempt is its message's
        self.parallelism = parallelism   # the component's tasks (0: unknown, no early fold)
        self.round_tasks = round_tasks   # every component's tasks in the round (0: unknown, not counted)
        self.generation = generation
        self.fenced = False          # the run was cleared or re-created: write nothing more
        self.task = task
        # (read at every commit and failure: kept as plain attributes)
        self.run_id, self.round, self.component, self.index = task.run_id, task.round, task.component_id, task.index
        self.task_id = task.task_id
        self.conf = conf
        settings = config_decl.settings(conf)
        self.max_attempts = settings.max_attempts
        self.history_cap = settings.history_max_events   # (tracking/queue/history.py)
        self.field = f"{task.component_id}:{task.index}"
        self.token = secrets.token_hex(6)   # this attempt's: names its pieces (module doc)
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
            pipe.hget(runs.record_key(self.run_id), "generation")
            raw, generation = pipe.execute()
        if self.generation is not None and generation != self.generation.encode():
            self._fence()
            raise self.fenced_error()
        return msgpack.unpackb(cast(bytes, raw)) if raw is not None else None

    def fenced_error(self) -> RunFenced:
        """Why this task may write nothing more (its run was taken over, cleared or re-created)."""
        return runs.fenced_out(self.client, self.run_id, self.generation)

    def check_fence(self) -> int:
        """Raise fenced_error() unless the run still holds this task's generation (a sink checks
        it right before it publishes a part, see connectors.sink_folders.atomic_write). Returns
        how many drivers held the run before this task's (the generations it retired): a number
        that grows at each take-over, so that a part published where nothing can lock
        (connectors.sink_objects) is ordered after any a driver taken over may still publish."""
        if self.generation is None:
            return 0
        current, retired = self.client.hmget(runs.record_key(self.run_id), ["generation", "retired_generations"])
        if current != self.generation.encode():
            self._fence()
            raise self.fenced_error()
        return len((retired or b"").split())

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
        return self.client.hget(runs.record_key(self.run_id), "generation") != self.generation.encode()

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
        if self.root_replay and record.roots:
            record.attempt = max(record.attempt, self.root_attempt(record.roots))
        if record.gone or record.attempt >= self.max_attempts:   # (a gone message never comes back)
            record.dead = True
        else:
            record.not_before = time.time() + backoff_ms(record.attempt, self.conf) / 1000.0
        self.failures.append(record)

    def root_attempt(self, roots: list[int]) -> int:
        """The attempt a root-replay round is at for these roots (their messages' replays so
        far, the first run included: runtime.roots.SpoutRoots.count_attempts), 1 when unknown."""
        found = self.client.hmget(keys.root_replay_attempts(self.run_id, self.round), [str(r) for r in roots])
        return max((int(a) for a in found if a is not None), default=1)

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
        """Everything the task learned and its done marker, only into the run it started in (a
        cleared run: nothing written, False; the task ends quietly), in the three steps of the
        module doc. Its spill file is finished first (nothing renamed); the commit point stores its
        reference."""
        return commit_together([self], [self.staged_commit(contrib, stats, state, extra)])

    def staged_commit(self, contrib: dict[int, int] | tuple[Any, Any], stats: dict, state: Any = None,
                      extra: Any = None) -> StagedCommit | None:
        """commit()'s first part: the spill file finished and step 1 done (the pieces written);
        returns what the commit point (step 2) and step 3 still do, unrun. None when the run is
        gone (fenced). commit_together runs several tasks' commit points in one transaction (a
        chain task's members)."""
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
        if self._run_gone():   # (before writing pieces a run cleared meanwhile would keep)
            self._fence()
            return None
        positions = self._write_pieces(contrib)

        done_key = keys.task_done(rid, self.round)
        found: dict[str, bool] = {}

        def read(pipe: Any) -> None:   # (WATCHed) another attempt of this task committed first
            found["done"] = bool(pipe.hexists(done_key, self.field))

        def build(pipe: Any) -> None:
            if found["done"]:
                return
            failed_queue.record_failures(pipe, rid, self.failures, history=self.history_cap > 0)
            if state is not None:
                state.write_to(pipe)
            if extra is not None:
                extra(pipe)
            if self.logs:
                pipe.rpush(keys.log(rid), *self.logs)
                pipe.ltrim(keys.log(rid), -LOG_CAP, -1)
            if ref is not None:
                pipe.hset(keys.task_spill(rid, self.round), self.field, ref.pack())
            pipe.hset(keys.task_commits(rid, self.round), self.field,
                      msgpack.packb([self.token, [[c, t] for c, t in positions]]))
            pipe.hset(done_key, self.field, msgpack.packb(stats))

        return StagedCommit(self, done_key, ref, positions, found, read, build)

    def _write_pieces(self, contrib: dict[int, int] | tuple[Any, Any]) -> list[tuple[str, int]]:
        """Step 1 of the commit (module doc): the ledger pieces and the staged queue writes of
        this attempt; returns the queue positions it staged writes for."""
        rid = self.run_id
        staged = failed_queue.staged_writes(self.replays_done, self.failures, self.round, self.history_cap)
        with self.client.pipeline(transaction=False) as pipe:
            queued = 0
            for b, blob in enumerate(pack_xors(contrib)):
                if blob:
                    for field, piece in piece_fields(self.round, self.field, self.token, blob).items():
                        pipe.hset(bucket_key(rid, b), field, piece)
                        queued += 1
                        if queued >= 64:   # (a bounded client buffer too)
                            pipe.execute()
                            queued = 0
            failed_queue.stage(pipe, rid, self.round, self.token, staged, STAGE_BATCH)
            pipe.execute()
        return list(staged)

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
                pipe.hlen(bucket_key(self.run_id, b))
            fields = pipe.execute()
        for b, n in enumerate(fields):
            if n > 1:   # (one field: compacted already, or one piece: folded when another comes)
                resolve_bucket(self.client, self.run_id, b, self.generation)


class StagedCommit:
    """A task attempt's commit after step 1 (TaskTracker.staged_commit): its commit point's
    reads (`read`: did another attempt commit first, from the WATCHed done marker) and writes
    (`build`), then `finish`, step 3."""

    def __init__(self, tracker: TaskTracker, done_key: str, ref: SpillRef | None,
                 positions: list[tuple[str, int]], found: dict[str, bool],
                 read: Callable[[Any], None], build: Callable[[Any], None]):
        self.tracker, self.done_key, self.ref, self.positions = tracker, done_key, ref, positions
        self.found, self.read, self.build = found, read, build

    def finish(self, fold: bool = True) -> bool:
        """After the commit point: its staged queue writes applied and, for the last task of a
        component, the ledger folded (unless `fold` is False: the round's count folds it all);
        an attempt that found another's commit drops its file. True when this attempt committed."""
        t = self.tracker
        if self.found["done"]:
            log.info("task %s of round %d committed already (another attempt): this attempt's "
                     "commit is dropped", t.field, t.round)
            if self.ref is not None:
                t.store.remove(t.run_id, [self.ref])
            return False
        if self.positions:
            apply_staged(t.client, t.run_id, t.round, t.token, self.positions)
        if fold and t.parallelism:
            t._fold_when_component_done()
        return True


def commit_together(trackers: list[TaskTracker], staged: list[StagedCommit | None]) -> bool:
    """Several tasks' commits (TaskTracker.staged_commit's, step 1 done) with ONE commit point:
    every member's done marker, commit record and the rest in one fenced transaction (their
    keys all live in the run's home slot, so it is one slot on a Redis Cluster too), then each
    one's step 3. A chain task commits all its members at once, so they are done together or
    not at all (a retried or resumed chain task then replays its spill, never re-executes a
    member). False (no commit point written, every tracker fenced) when the run is no longer
    theirs."""
    first = trackers[0]
    ready = [s for s in staged if s is not None]
    if len(ready) < len(staged):
        for t in trackers:
            t._fence()
        return False

    def read(pipe: Any) -> None:
        for s in ready:
            s.read(pipe)

    def build(pipe: Any) -> None:
        for s in ready:
            s.build(pipe)
    watch = tuple(dict.fromkeys(s.done_key for s in ready))
    if not fenced_transaction(first.client, first.run_id, first.generation, build, watch=watch, read=read):
        for t in trackers:
            t._fence()
        return False
    round_done = bool(first.round_tasks) and \
        first.client.hlen(keys.task_done(first.run_id, first.round)) >= first.round_tasks
    committed = [s.finish(fold=not round_done) for s in ready]
    if round_done and any(committed):
        count_round_when_done(first)
    return True


def count_round_when_done(tracker: TaskTracker) -> None:
    """The last task of a round to commit (every task's done marker is in) counts the acker's
    verdict for the driver, so that settling the round starts no Spark job of its own: every
    committed attempt's staged queue writes applied (a task killed after its commit point left
    them staged), then every ledger bucket folded and counted (ledger.count_round), fenced by
    the task's generation. Two tasks committing last at once both count, the same counts; a
    task that dies before counting leaves none, and the driver counts in its per-bucket job."""
    try:
        apply_round(tracker.client, tracker.run_id, tracker.round, tracker.generation)
    except RunFenced:   # the task committed; the run's new driver (or nobody) counts the round
        tracker._fence()
        return
    if count_round(tracker.client, tracker.run_id, tracker.round, tracker.generation) is None:
        tracker._fence()
