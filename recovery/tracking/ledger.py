"""The XOR acker ledger (Storm's acker): per root, the XOR of the ids of every tuple created and
acked in its tree; zero means the tree is complete. To keep the success path cheap (DESIGN
section 8), contributions are combined per root inside a task and written once, at the task's
commit, as one packed blob per ledger bucket (keyed by the producing task, so a retried task
overwrites its own blob instead of XORing twice). `resolve_bucket` folds a bucket's blobs into
the roots still pending; complete roots leave no key behind."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np
from redis import Redis
from redis.exceptions import WatchError

from recovery.tracking import keys

log = logging.getLogger(__name__)


LEDGER_BUCKETS = 8


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


def fenced_transaction(client: Redis, run_id: str, generation: str | None,
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


def resolve_bucket(client: Redis, run_id: str, bucket: int, generation: str | None = None) -> int:
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


def pending_roots(client: Redis, run_id: str) -> set[int]:
    """Every root whose ledger is not zero (after resolve_bucket, one blob per bucket)."""
    out: set[int] = set()
    for b in range(LEDGER_BUCKETS):
        roots, _ = fold(cast(list[bytes], client.hvals(keys.ledger(run_id, b))))
        out.update(int(r) for r in roots)
    return out
