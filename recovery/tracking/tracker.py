"""Tracking in Redis: the XOR acker ledger, failure localization, in-flight tuples, commits.

The acker is Storm's: per root, the XOR of the ids of every tuple created and acked in its
tree; zero means the tree is complete. To keep the success path cheap (DESIGN section 8),
contributions are combined per root inside a task and written once, at the task's commit, as
one packed blob per ledger bucket (keyed by the producing task, so a retried task overwrites its
own blob instead of XORing twice). `resolve_bucket` folds a bucket's blobs into the roots still
pending; complete roots leave no key behind.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Iterator

import msgpack
import numpy as np
from redis.exceptions import WatchError

from recovery.model import config as config_decl
from recovery.tracking import keys

log = logging.getLogger(__name__)

LEDGER_BUCKETS = 8
LOG_CAP = 2000


def pack_xors(contrib: dict[int, int]) -> list[bytes]:
    """Split per-root contributions into LEDGER_BUCKETS packed blobs (roots then xors, uint64)."""
    if not contrib:
        return [b""] * LEDGER_BUCKETS
    roots = np.fromiter(contrib.keys(), dtype=np.uint64, count=len(contrib))
    xors = np.fromiter(contrib.values(), dtype=np.uint64, count=len(contrib))
    bucket = roots % np.uint64(LEDGER_BUCKETS)
    out = []
    for b in range(LEDGER_BUCKETS):
        sel = bucket == b
        out.append(roots[sel].tobytes() + xors[sel].tobytes())
    return out


def unpack_xors(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    arr = np.frombuffer(blob, dtype=np.uint64)
    n = len(arr) // 2
    return arr[:n], arr[n:]


def fold(blobs: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """XOR all contributions per root; returns (roots, xors) of the roots not yet complete."""
    parts = [unpack_xors(b) for b in blobs if b]
    if not parts:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty
    roots = np.concatenate([p[0] for p in parts])
    xors = np.concatenate([p[1] for p in parts])
    order = np.argsort(roots, kind="stable")
    roots, xors = roots[order], xors[order]
    starts = np.flatnonzero(np.r_[True, roots[1:] != roots[:-1]])
    folded = np.bitwise_xor.reduceat(xors, starts)
    roots = roots[starts]
    keep = folded != 0
    return roots[keep], folded[keep]


def fenced_transaction(client: Any, run_id: str, generation: str | None,
                       build: Callable[[Any], None], watch: tuple[str, ...] = (),
                       read: Callable[[Any], None] | None = None) -> bool:
    """Queue `build(pipe)`'s writes in one MULTI/EXEC that runs only while the run's record still
    holds `generation` (the record is WATCHed with `watch`, so a `clear` or a re-created run
    between the check and EXEC aborts it; `read(pipe)` reads the watched keys first). False when
    the run is gone: nothing was written. `generation` None: no check (a run without a record)."""
    record = keys.run_record(run_id)
    watched = ((record,) if generation is not None else ()) + watch
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                if watched:
                    pipe.watch(*watched)
                if generation is not None and pipe.hget(record, "generation") != generation.encode():
                    pipe.reset()
                    return False
                if read is not None:
                    read(pipe)
                pipe.multi()
                build(pipe)
                pipe.execute()
                return True
            except WatchError:   # the record or a watched key changed: read and check again
                continue


def resolve_bucket(client: Any, run_id: str, bucket: int, generation: str | None = None) -> int:
    """Fold one ledger bucket into a single compacted blob; returns its pending roots' count."""
    key = keys.ledger(run_id, bucket)
    folded: dict[str, Any] = {}

    def read(pipe: Any) -> None:   # WATCHed: a late writer makes it fold again
        folded["roots"], folded["xors"] = fold(list(pipe.hvals(key)))

    def build(pipe: Any) -> None:
        pipe.delete(key)
        if len(folded["roots"]):
            pipe.hset(key, "compacted", folded["roots"].tobytes() + folded["xors"].tobytes())

    if not fenced_transaction(client, run_id, generation, build, watch=(key,), read=read):
        log.info("run %s was cleared: ledger bucket %d not folded", run_id, bucket)
        return 0
    return int(len(folded["roots"]))


def pending_roots(client: Any, run_id: str) -> set[int]:
    """Every root whose ledger is not zero (after resolve_bucket, one blob per bucket)."""
    out: set[int] = set()
    for b in range(LEDGER_BUCKETS):
        roots, _ = fold(client.hvals(keys.ledger(run_id, b)))
        out.update(int(r) for r in roots)
    return out


def backoff_ms(attempt: int, conf: dict[str, str]) -> float:
    """Delay before attempt `attempt + 1` (KafkaSpoutRetryExponentialBackoff's shape)."""
    initial = config_decl.value(conf, "recovery.retry.initial.delay.ms")
    period = config_decl.value(conf, "recovery.retry.delay.period.ms")
    cap = config_decl.value(conf, "recovery.retry.max.delay.ms")
    return min(cap, initial + period * (2 ** max(0, attempt - 1)))


class TaskTracker:
    """One Spark task's view of tracking: it buffers what the task learns and commits it in one
    transaction with the task's done marker."""

    def __init__(self, client: Any, run_id: str, round_no: int, component: str, index: int,
                 task_id: int, conf: dict[str, str], generation: str | None = None):
        self.client = client
        self.generation = generation
        self.fenced = False          # the run was cleared or re-created: write nothing more
        self.run_id = run_id
        self.round = round_no
        self.component = component
        self.index = index
        self.task_id = task_id
        self.conf = conf
        self.max_attempts = config_decl.value(conf, "recovery.max.attempts")
        self.field = f"{component}:{index}"
        self.out_key = keys.task_output(run_id, round_no, component, index)
        self._out_pending: dict[int, bytes] = {}
        self._out_n = 0
        self.failures: list[dict] = []
        self.replays_done: list[tuple[str, int, int]] = []
        self.logs: list[bytes] = []

    # -- idempotence ------------------------------------------------------------------
    def committed(self) -> dict | None:
        raw = self.client.hget(keys.task_done(self.run_id, self.round), self.field)
        return msgpack.unpackb(raw) if raw is not None else None

    def stored_output(self) -> Iterator[tuple[Any, bytes]]:
        for _, raw in sorted(self.client.hgetall(self.out_key).items(), key=lambda kv: int(kv[0])):
            key, blob = msgpack.unpackb(raw)
            yield tuple(key), blob

    # -- in-flight tuples ---------------------------------------------------------------
    def add_output(self, key: tuple, blob: bytes) -> None:
        self._out_pending[self._out_n] = msgpack.packb([list(key), blob])
        self._out_n += 1
        if len(self._out_pending) >= 64:
            self.flush_output()

    def flush_output(self) -> None:
        if self._out_pending and not self.fenced:
            pending = self._out_pending
            if not fenced_transaction(self.client, self.run_id, self.generation,
                                      lambda pipe: pipe.hset(self.out_key, mapping=pending)):
                self._fence()
        self._out_pending = {}

    def _fence(self) -> None:
        if not self.fenced:
            log.info("run %s was cleared or created anew: task %s of round %d stops writing "
                        "(its round is gone)", self.run_id, self.field, self.round)
        self.fenced = True

    # -- failure localization -----------------------------------------------------------
    def failure(self, record: dict) -> None:
        """A tuple failed at this task: to the queue for recovery, or dead when out of attempts."""
        record.setdefault("component", self.component)
        record.setdefault("task", self.task_id)
        record["round"] = self.round
        record["time"] = time.time()
        attempt = int(record.get("attempt", 1))
        if attempt >= self.max_attempts:
            record["dead"] = True
        else:
            record["not_before"] = time.time() + backoff_ms(attempt, self.conf) / 1000.0
        self.failures.append(record)

    def replay_done(self, component: str, task: int, tuple_id: int) -> None:
        """A tuple replayed from a queue was acked here: its queue entry goes at commit."""
        self.replays_done.append((component, task, tuple_id))

    def log(self, level: str, message: str) -> None:
        if len(self.logs) < 200:
            self.logs.append(msgpack.packb([time.time(), self.component, self.task_id, level,
                                            message[:2000]]))

    # -- commit -------------------------------------------------------------------------
    def commit(self, contrib: dict[int, int], stats: dict, state: Any = None,
               extra: Any = None) -> bool:
        """Everything the task learned and its done marker, in one transaction, only into the
        run it started in (a cleared run: nothing written, False; the task ends quietly)."""
        self.flush_output()
        if self.fenced:
            return False
        rid = self.run_id

        def build(pipe: Any) -> None:
            for b, blob in enumerate(pack_xors(contrib)):
                if blob:
                    pipe.hset(keys.ledger(rid, b), f"{self.round}:{self.field}", blob)
            for comp, task, tid in self.replays_done:
                pipe.hdel(keys.queue(rid, comp, task), str(tid))
            for rec in self.failures:
                comp, task, tid = rec["component"], rec["task"], rec["id"]
                packed = msgpack.packb(rec, default=repr)
                if rec.get("dead"):
                    pipe.hdel(keys.queue(rid, comp, task), str(tid))
                    pipe.hset(keys.dead(rid), f"{comp}:{task}:{tid}", packed)
                    if rec.get("roots"):
                        pipe.sadd(keys.dead_roots(rid), *[str(r) for r in rec["roots"]])
                else:
                    pipe.hset(keys.queue(rid, comp, task), str(tid), packed)
                    pipe.sadd(keys.failed_set(rid), f"{comp}:{task}")
            if state is not None:
                state.write_to(pipe)
            if extra is not None:
                extra(pipe)
            if self.logs:
                pipe.rpush(keys.log(rid), *self.logs)
                pipe.ltrim(keys.log(rid), -LOG_CAP, -1)
            pipe.hset(keys.task_done(rid, self.round), self.field, msgpack.packb(stats))

        if not fenced_transaction(self.client, rid, self.generation, build):
            self._fence()
            return False
        return True
