"""The XOR acker ledger (Storm's acker): per root, the XOR of the ids of every tuple created and
acked in its tree; zero means the tree is complete. To keep the success path cheap (docs/protocol.md,
the ledger), contributions are combined per root inside a task and written once, at the task's
commit, as packed pieces per ledger bucket, ahead of the commit point and in bounded parts
(PIECE_ROOTS roots each): the field names the task and its attempt's token
(`<round>:<component>:<index>:<token>:<part>`), and a piece counts only once the task's commit
record (keys.task_commits, written with its done marker) names that token. So a retried task
never XORs twice, an attempt that died before its commit point counts for nothing, and no
transaction carries a task's whole ledger. `resolve_bucket` folds a bucket's committed pieces
into the roots still pending; complete roots leave no key behind."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import msgpack
import numpy as np
from redis import Redis

from recovery.model.record import RunRecord
from recovery.tracking import keys, runs
from recovery.tracking.queue import dead_among, forget_dead_roots, queued_roots  # noqa: F401 (importable from here, as they were)
from recovery.tracking.queue import positions as queue_positions
from recovery.tracking.queue import read as read_queue
from recovery.tracking.runs import fenced_transaction  # noqa: F401 (importable from here, as it was)
from recovery.tracking.xors import as_arrays  # noqa: F401 (importable from here, as it was)
from recovery.tracking.xors import combine as combine_contributions
from recovery.tracking.xors import fold as fold_parts

log = logging.getLogger(__name__)


LEDGER_BUCKETS = keys.LEDGER_BUCKETS
#: Roots per ledger piece (16 bytes each): the most one command of a commit carries.
PIECE_ROOTS = 4096


def bucket_key(run_id: str, bucket: int) -> str:
    """Hash: "compacted" (the folded XORs), "superseded:<round>", and the task attempts' pieces
    "<round>:<component>:<index>:<attempt token>:<part>" (folded only once the task's commit
    record names that token). In the bucket's own slot (keys.ledger_tags)."""
    return keys.spread_key(run_id, keys.ledger_tags(run_id)[bucket])


def pack_xors(contrib: dict[int, int] | tuple[np.ndarray, np.ndarray]) -> list[bytes]:
    """Split per-root contributions (a dict, or arrays of roots and xors with one entry per
    root) into LEDGER_BUCKETS packed blobs (roots then xors, uint64)."""
    roots, xors = as_arrays(contrib)
    if not len(roots):
        return [b""] * LEDGER_BUCKETS
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
    return fold_parts(unpack_xors(b) for b in blobs if b)


def combine(contribs: Iterable[dict[int, int] | tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several tasks' per-root contributions (pack_xors' forms) XORed into one (roots, xors),
    the roots whose trees they complete between them left out: what the ledger holds after
    folding their pieces, for tasks that commit at once (a chain's members)."""
    return combine_contributions(contribs)


def piece_fields(round_no: int, task_field: str, token: str, blob: bytes) -> dict[str, bytes]:
    """A task attempt's contribution to one bucket (`blob`: roots then xors, uint64) as pieces
    of at most PIECE_ROOTS roots, by field name."""
    roots, xors = unpack_xors(blob)
    out = {}
    for part, i in enumerate(range(0, len(roots), PIECE_ROOTS)):
        cut = slice(i, i + PIECE_ROOTS)
        out[f"{round_no}:{task_field}:{token}:{part}"] = roots[cut].tobytes() + xors[cut].tobytes()
    return out


def _is_piece(field: str) -> bool:
    return field != "compacted" and not field.startswith("superseded:")


def counted_blobs(attempts: CommittedAttempts, fields: dict[Any, Any]) -> list[bytes]:
    """Of a bucket's fields (HGETALL), the blobs that count: every one but the pieces of
    attempts that have not committed (or never will)."""
    out = []
    for raw_field, blob in fields.items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        if not _is_piece(field) or attempts.verdict(field) == "fold":
            out.append(blob)
    return out


class CommittedAttempts:
    """Which task attempts committed, from their commit records (keys.task_commits), read from
    the run's home slot once per round asked: what a fold counts of a bucket's pieces."""

    def __init__(self, client: Redis, run_id: str):
        self.client = client
        self.run_id = run_id
        raw = client.hget(runs.record_key(run_id), "round")
        self.current_round = int(cast(bytes, raw)) if raw is not None else None
        self._rounds: dict[int, dict[str, str]] = {}

    def tokens(self, round_no: int) -> dict[str, str]:
        """"component:index" -> the token of the attempt that committed, for `round_no`."""
        if round_no not in self._rounds:
            raw = self.client.hgetall(keys.task_commits(self.run_id, round_no))
            self._rounds[round_no] = {cast(bytes, k).decode(): msgpack.unpackb(cast(bytes, v))[0]
                                      for k, v in raw.items()}
        return self._rounds[round_no]

    def verdict(self, field: str) -> str:
        """"fold" (a committed attempt's piece), "drop" (an attempt that will never commit: another
        committed, or its round was settled without it) or "keep" (it may still commit)."""
        parts = field.split(":")
        if len(parts) != 5 or not parts[0].isdigit():
            # "<round>:<component>:<index>", written by a version that wrote a task's whole
            # ledger in its commit transaction: there only once committed
            return "fold"
        round_text, component, index, token, _ = parts
        round_no = int(round_text)
        committed = self.tokens(round_no).get(f"{component}:{index}")
        if committed is not None:
            return "fold" if committed == token else "drop"
        if self.current_round is not None and round_no < self.current_round:
            return "drop"   # its round's commit records went at settle, after its pieces were folded
        return "keep"


def resolve_bucket(client: Redis, run_id: str, bucket: int, generation: str | None = None) -> int:
    """Fold one ledger bucket into a single compacted blob; returns its pending roots' count."""
    return len(fold_bucket(client, run_id, bucket, generation))


def fold_bucket(client: Redis, run_id: str, bucket: int, generation: str | None = None) -> np.ndarray:
    """resolve_bucket, returning the bucket's pending roots (none when the run was cleared)."""
    key = bucket_key(run_id, bucket)
    folded: dict[str, Any] = {}
    attempts = CommittedAttempts(client, run_id)

    def read(pipe: Any) -> None:   # WATCHed: a late writer makes it fold again
        blobs, gone = [], []
        for raw_field, blob in pipe.hgetall(key).items():
            field = raw_field.decode()
            verdict = attempts.verdict(field) if _is_piece(field) else "fold"
            if verdict == "fold":
                blobs.append(blob)
            if verdict != "keep":
                gone.append(raw_field)
        folded["roots"], folded["xors"] = fold(blobs)
        folded["gone"] = gone

    def build(pipe: Any) -> None:
        for i in range(0, len(folded["gone"]), 1000):
            pipe.hdel(key, *folded["gone"][i:i + 1000])
        if len(folded["roots"]):
            pipe.hset(key, "compacted", folded["roots"].tobytes() + folded["xors"].tobytes())

    if not fenced_transaction(client, run_id, generation, build, watch=(key,), read=read):
        log.info("run %s was cleared: ledger bucket %d not folded", run_id, bucket)
        return np.zeros(0, dtype=np.uint64)
    return cast(np.ndarray, folded["roots"])


def pending_roots(client: Redis, run_id: str) -> set[int]:
    """Every root whose ledger is not zero (after resolve_bucket, one blob per bucket). For
    tests and diagnostics: O(pending roots), so the driver never calls it (count_bucket and
    pending_among run in tasks)."""
    out: set[int] = set()
    attempts = CommittedAttempts(client, run_id)
    for b in range(LEDGER_BUCKETS):
        roots, _ = fold(counted_blobs(attempts, client.hgetall(bucket_key(run_id, b))))
        out.update(int(r) for r in roots)
    return out


# --- the acker's counts, computed per bucket by tasks (never a set of roots in the driver) ---
# Run-record fields holding the counts of the last settled round (`counts_round`): stored by
# the driver at settle time from what the per-bucket tasks counted; requeue_dead adjusts them.
COUNTS_ROUND = "roots_counted_round"
COUNT_FIELDS = {"pending": "roots_pending", "failed": "roots_failed", "dead": "roots_dead"}
# (SMISMEMBER and msgpack reads in batches of this many)
READ_BATCH = 10_000


@dataclass(frozen=True)
class RootCounts:
    """Roots whose ledger is not zero (`pending`: in flight, queued or dead), of them the dead
    ones (in the dead-roots set) and the failed ones (not dead, a tuple of theirs queued)."""
    pending: int = 0
    failed: int = 0
    dead: int = 0

    def __add__(self, other: RootCounts) -> RootCounts:
        return RootCounts(self.pending + other.pending, self.failed + other.failed, self.dead + other.dead)

    def record_fields(self, round_no: int) -> dict[str, int]:
        """The run-record fields that store these counts as the acker's verdict of `round_no`."""
        return {COUNTS_ROUND: round_no, **{f: getattr(self, k) for k, f in COUNT_FIELDS.items()}}


def stored_counts(rec: RunRecord) -> tuple[int | None, RootCounts | None]:
    """(the round the record's counts are of, the counts), (None, None) when none are stored."""
    values = (rec.roots_counted_round, rec.roots_pending, rec.roots_failed, rec.roots_dead)
    if any(v is None for v in values):
        return None, None
    return rec.roots_counted_round, RootCounts(int(rec.roots_pending or 0), int(rec.roots_failed or 0),
                                               int(rec.roots_dead or 0))


def _batches(items: list[Any], n: int = READ_BATCH) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def pending_among(client: Redis, run_id: str, roots: Iterable[int]) -> set[int]:
    """Those of `roots` whose ledger is not zero: folds only the buckets they fall in."""
    by_bucket: dict[int, list[int]] = {}
    for r in roots:
        by_bucket.setdefault(r % LEDGER_BUCKETS, []).append(r)
    out: set[int] = set()
    attempts = CommittedAttempts(client, run_id)
    for b, wanted in by_bucket.items():
        pending, _ = fold(counted_blobs(attempts, client.hgetall(bucket_key(run_id, b))))
        keep = np.isin(np.asarray(wanted, dtype=np.uint64), pending)
        out.update(r for r, k in zip(wanted, keep.tolist()) if k)
    return out


def count_bucket(client: Redis, run_id: str, bucket: int, roots: np.ndarray,
                 queued: set[int] | None = None) -> RootCounts:
    """One bucket's share of the acker's counts, in the task that folded it (`roots`: its
    pending roots, as fold_bucket returned them): of them the dead and the failed. `queued`:
    every queued tuple's roots, when the caller read them already (else this bucket's are read)."""
    pending = [int(r) for r in roots.tolist()]
    if not pending:
        return RootCounts()
    dead = dead_among(client, run_id, pending)
    if queued is None:
        queued = queued_roots(client, run_id, bucket)
    failed = len((set(pending) - dead) & queued)
    return RootCounts(len(pending), failed, len(dead))


def count_round(client: Redis, run_id: str, round_no: int, generation: str | None) -> RootCounts | None:
    """The acker's counts of round `round_no`, whose tasks have all committed, in one process:
    every bucket folded and counted (what the per-bucket tasks of engine.rounds.resolve_ledger
    do, the queued roots read once), then stored (keys.round_counts) under `generation` for the
    driver's settle. The caller applied every committed attempt's staged queue writes first.
    None, storing nothing, when the run is no longer `generation`'s (a fold fenced out counts
    nothing: no verdict)."""
    queued = queued_roots(client, run_id)
    total = RootCounts()
    for b in range(LEDGER_BUCKETS):
        total += count_bucket(client, run_id, b, fold_bucket(client, run_id, b, generation), queued)
    blob = msgpack.packb([generation or "", total.pending, total.failed, total.dead])
    stored = fenced_transaction(client, run_id, generation,
                                lambda pipe: pipe.set(keys.round_counts(run_id, round_no), blob))
    return total if stored else None


def counted_round(client: Redis, run_id: str, round_no: int, generation: str | None) -> RootCounts | None:
    """The counts count_round stored for `round_no` under `generation`; None when there are none
    (its last task died before counting, or the round is being resumed by another driver than
    the one whose tasks counted it: that driver counts again)."""
    raw = client.get(keys.round_counts(run_id, round_no))
    if raw is None:
        return None
    held, pending, failed, dead = msgpack.unpackb(cast(bytes, raw))
    if held != (generation or ""):
        return None
    return RootCounts(pending, failed, dead)


def queued_root_attempts(client: Redis, run_id: str, bucket: int) -> dict[int, int]:
    """The roots of one bucket's queued tuples, each with the highest attempt among its queued
    tuples: the attempt a root replay counts it failed at."""
    out: dict[int, int] = {}
    for comp, task in queue_positions(client, run_id):
        for rec in read_queue(client, run_id, comp, task):
            for r in rec.roots:
                if r % LEDGER_BUCKETS == bucket:
                    out[r] = max(out.get(r, 0), rec.attempt)
    return out


def supersede_bucket(client: Redis, run_id: str, bucket: int, round_no: int,
                     generation: str | None = None) -> int:
    """Root replay, in the task of one bucket: the queued tuples' roots of this bucket go into
    round `round_no`'s replay set, and their pending XORs are cancelled by a
    `superseded:<round>` blob (the replay re-emits them under new ids), each with the attempt
    it failed at (keys.root_replay_attempts: its replay is its next attempt). Two steps, each in one
    slot: the replay set (and the dead roots' removal) in the run's home slot, then the blob in
    the bucket's, the mark that the bucket is done. Done once per bucket and round: a bucket
    holding that blob is skipped, so a retried task or a resumed driver never cancels twice
    (the first step, repeated, adds the same roots). Returns the roots added."""
    key = bucket_key(run_id, bucket)
    field = f"superseded:{round_no}"
    if client.hexists(key, field):
        return 0
    failed_at = queued_root_attempts(client, run_id, bucket)
    old = sorted(failed_at)
    if not old:
        return 0

    def select(pipe: Any) -> None:
        for batch in _batches(old):
            pipe.sadd(keys.root_replay_set(run_id, round_no), *batch)
            # the attempt each failed there: its replay is the next one (runtime.roots)
            pipe.hset(keys.root_replay_attempts(run_id, round_no), mapping={r: failed_at[r] for r in batch})
            # a superseded root is pending no more (its replay is a new root), so it is not
            # dead either: the dead-roots set stays within the pending roots, which is what
            # lets requeue_dead adjust the stored counts by what its SREM removes
            forget_dead_roots(pipe, run_id, batch)

    if not fenced_transaction(client, run_id, generation, select):
        log.info("run %s was cleared: ledger bucket %d not superseded", run_id, bucket)
        return 0
    found: dict[str, Any] = {}
    attempts = CommittedAttempts(client, run_id)

    def read(pipe: Any) -> None:   # WATCHed: nothing else writes the ledger between rounds
        found["done"] = bool(pipe.hexists(key, field))
        if not found["done"]:
            roots, xors = fold(counted_blobs(attempts, pipe.hgetall(key)))
            keep = np.isin(roots, np.asarray(old, dtype=np.uint64))
            found["blob"] = roots[keep].tobytes() + xors[keep].tobytes()

    def build(pipe: Any) -> None:
        if not found["done"] and found["blob"]:
            pipe.hset(key, field, found["blob"])

    if not fenced_transaction(client, run_id, generation, build, watch=(key,), read=read):
        log.info("run %s was cleared: ledger bucket %d not superseded", run_id, bucket)
        return 0
    return 0 if found["done"] else len(old)
