"""The dead letters' ways back or out of Redis other than the dead-letter sink: requeued into
their queues (`requeue`), or dropped by the retention cap (`drop_dead`), and the run's totals of
those written and dropped. Stored as tracking/queue/store.py says."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from redis import Redis

from recovery.controlplane.connection import is_cluster
from recovery.errors import RunError
from recovery.model.failed import FailedTuple
from recovery.tracking import runs
from recovery.tracking.queue import history
from recovery.tracking.queue.store import (
    DEAD_DROPPED,
    DEAD_WRITTEN,
    dead_letters_key,
    dead_roots_key,
    due_key,
    failed_key,
    flush_key,
    gone_key,
    pending_flushes,
    position_name,
    queue_key,
)
from recovery.tracking.runs import fenced_transaction


def requeue(client: Redis, run_id: str, generation: str | None, component: str | None = None,
            tuple_keys: list[str] | None = None,
            adjust_counts: Callable[[Any, int], None] | None = None) -> int:
    """Dead tuples back in their queues (attempts reset): all of them, a component's, or those
    named by `tuple_keys` (`dead_key`). Each tuple moves in one transaction that only commits if
    it is still dead (WATCH) and the run holds `generation`, so an interrupted or concurrent
    requeue neither loses nor doubles a tuple; each requeue is an event of the tuple's history.
    `adjust_counts(pipe, n)` runs in that transaction with the dead roots it made pending again.
    Returns the tuples requeued.
    Only the dead letters Redis holds outside a flush can be requeued: those written to the
    dead-letter sink are the sink's."""
    dead = dead_letters_key(run_id)
    dead_roots = dead_roots_key(run_id)
    if tuple_keys is not None:
        unknown = [k for k in tuple_keys if not client.hexists(dead, k)]
        if unknown:
            flushing = any(client.hexists(flush_key(run_id, n), unknown[0])
                           for n in pending_flushes(client, run_id))
            raise RunError(f"run {run_id}: dead tuple {unknown[0]!r} is being written to the run's dead-letter "
                           "sink (its part is not confirmed yet; the run's next round writes it), so it cannot "
                           "be requeued" if flushing else
                           f"run {run_id} has no dead tuple {unknown[0]!r} (see `recovery dead {run_id}`)")
        fields: list[bytes] = [k.encode() for k in tuple_keys]
    else:
        fields = cast(list[bytes], client.hkeys(dead))
    n = 0
    # On a Redis Cluster the queue is in another slot than the dead letters: the tuple goes into
    # its queue first (the same entry whoever writes it), then leaves the dead letters in a
    # transaction of the run's slot; an interrupted requeue does both again.
    cluster = is_cluster(client)
    for field in fields:
        seen: dict[str, Any] = {}
        if cluster:
            raw = client.hget(dead, field)
            early = FailedTuple.unpack(cast(bytes, raw)) if raw is not None else None
            if early is not None and component in (None, early.component):
                runs.check_generation(client, run_id, generation)
                back = early.requeued()
                client.hset(queue_key(run_id, back.component, back.task), str(back.id), back.pack())
                history.write_requeue(client, run_id, early, time.time())

        def check(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            raw = pipe.hget(dead, field)
            tup = FailedTuple.unpack(raw) if raw is not None else None
            # gone: requeued meanwhile by someone else; another component's: not asked for
            seen["tuple"] = tup if tup is not None and component in (None, tup.component) else None
            # the dead roots the SREM below removes (WATCHed): they are queued (failed) again
            roots = sorted({str(r) for r in (tup.roots if tup is not None else ())})
            seen["undead"] = sum(pipe.smismember(dead_roots, roots)) if seen["tuple"] and roots else 0

        def move(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            was: FailedTuple | None = seen["tuple"]
            if was is None:
                return
            tup = was.requeued()
            if not cluster:
                pipe.hset(queue_key(run_id, tup.component, tup.task), str(tup.id), tup.pack())
                history.write_requeue(pipe, run_id, was, time.time())
            position = position_name(tup.component, tup.task)
            pipe.sadd(failed_key(run_id), position)
            pipe.zadd(due_key(run_id), {position: 0}, lt=True)   # ready now
            pipe.hdel(dead, field)
            if was.gone:   # (a replay finds its message gone again, and says so again)
                pipe.hdel(gone_key(run_id), field)
            if tup.roots:
                pipe.srem(dead_roots, *[str(r) for r in tup.roots])
            if seen["undead"] and adjust_counts is not None:
                adjust_counts(pipe, seen["undead"])

        if not fenced_transaction(client, run_id, generation, move, watch=(dead, dead_roots), read=check):
            runs.check_generation(client, run_id, generation)
        if seen.get("tuple") is not None:
            n += 1
    return n


def drop_dead(client: Redis, run_id: str, generation: str | None, keep: int | None = None,
              older_than: float | None = None) -> list[FailedTuple]:
    """The retention cap: dead letters Redis holds beyond the newest `keep`, or that died
    before `older_than` (a time), removed (their roots stay dead) and counted as dropped, in
    one fenced transaction. Returns what was dropped. A flush under way (at most one, while
    the sink refuses it) is not dropped: its part may be in the sink already."""
    dead = dead_letters_key(run_id)
    seen: dict[str, list[tuple[bytes, FailedTuple]]] = {}

    def check(pipe: Any) -> None:
        held = [(cast(bytes, f), FailedTuple.unpack(cast(bytes, raw))) for f, raw in pipe.hgetall(dead).items()]
        held.sort(key=lambda e: (e[1].time or 0.0, e[0]))   # oldest first
        drop = []
        if older_than is not None:
            drop = [e for e in held if (e[1].time or 0.0) < older_than]
        if keep is not None and len(held) - len(drop) > keep:
            dropped = {f for f, _ in drop}
            rest = [e for e in held if e[0] not in dropped]
            drop += rest[:len(rest) - keep]
        seen["drop"] = drop

    def remove(pipe: Any) -> None:
        if seen["drop"]:
            pipe.hdel(dead, *[f for f, _ in seen["drop"]])
            pipe.hincrby(runs.record_key(run_id), DEAD_DROPPED, len(seen["drop"]))
    if not fenced_transaction(client, run_id, generation, remove, watch=(dead,), read=check):
        return []
    return [rec for _, rec in seen["drop"]]


def dead_totals(client: Redis, run_id: str) -> tuple[int, int]:
    """(dead letters written to the dead-letter sink, dropped by the retention cap) so far."""
    written, dropped = client.hmget(runs.record_key(run_id), [DEAD_WRITTEN, DEAD_DROPPED])
    return int(written or 0), int(dropped or 0)
