"""Dead letters: the tuples that failed `recovery.max.attempts` times, listed with their errors
(`recovery dead`, /api/v1/runs/ID/dead) and put back in their queues once the cause is fixed
(`recovery dead --requeue`, POST .../dead/requeue)."""
from __future__ import annotations

from typing import Any, cast

from redis import Redis

from recovery.controlplane.connection import is_cluster
from recovery.errors import RunError
from recovery.jobs.recover import check_not_running
from recovery.jobs.reports import tuple_row
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, ledger, runs


def dead_letters(client: Redis, run_id: str, component: str | None = None) -> list[FailedTuple]:
    """The run's dead tuples (of `component`), in the order of their keys."""
    runs.get(client, run_id)
    out = []
    for field, raw in sorted(client.hgetall(keys.dead(run_id)).items()):
        rec = FailedTuple.unpack(cast(bytes, raw))
        if component is None or rec.component == component:
            out.append(rec)
    return out


def requeue_dead(client: Redis, run_id: str, component: str | None = None,
                 tuple_keys: list[str] | None = None) -> int:
    """Put dead tuples back in their queues (attempts reset) after the cause was fixed: all of
    them, a component's, or those named by `tuple_keys` (`component:task:id`, the dead-letter
    hash's fields). Each tuple moves in one transaction that only commits if it is still dead
    (WATCH) and the run was not cleared (its generation), so an interrupted or concurrent
    requeue neither loses nor doubles a tuple."""
    rec = runs.get(client, run_id)
    check_not_running(rec)
    gen = rec.generation
    dead_key = keys.dead(run_id)
    dead_roots_key = keys.dead_roots(run_id)
    record = keys.run_record(run_id)
    counted = ledger.stored_counts(client, run_id)[1] is not None
    if tuple_keys is not None:
        unknown = [k for k in tuple_keys if not client.hexists(dead_key, k)]
        if unknown:
            raise RunError(f"run {run_id} has no dead tuple {unknown[0]!r} (see `recovery dead {run_id}`)")
        fields: list[bytes] = [k.encode() for k in tuple_keys]
    else:
        fields = cast(list[bytes], client.hkeys(dead_key))
    n = 0
    # On a Redis Cluster the queue is in another slot than the dead letters: the tuple goes into
    # its queue first (the same entry whoever writes it), then leaves the dead letters in a
    # transaction of the run's slot; an interrupted requeue does both again.
    cluster = is_cluster(client)
    for field in fields:
        seen: dict[str, Any] = {}
        if cluster:
            raw = client.hget(dead_key, field)
            early = FailedTuple.unpack(cast(bytes, raw)) if raw is not None else None
            if early is not None and component in (None, early.component):
                runs.check_generation(client, run_id, gen)
                back = early.requeued()
                client.hset(keys.queue(run_id, back.component, back.task), str(back.id), back.pack())

        def read(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            raw = pipe.hget(dead_key, field)
            tup = FailedTuple.unpack(raw) if raw is not None else None
            # gone: requeued meanwhile by someone else; another component's: not asked for
            seen["tuple"] = tup if tup is not None and component in (None, tup.component) else None
            # the dead roots the SREM below removes (WATCHed): they are queued (failed) again
            roots = sorted({str(r) for r in (tup.roots if tup is not None else ())})
            seen["undead"] = sum(pipe.smismember(dead_roots_key, roots)) if seen["tuple"] and roots else 0

        def requeue(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            dead: FailedTuple | None = seen["tuple"]
            if dead is None:
                return
            tup = dead.requeued()
            if not cluster:
                pipe.hset(keys.queue(run_id, tup.component, tup.task), str(tup.id), tup.pack())
            position = f"{tup.component}:{tup.task}"
            pipe.sadd(keys.failed_set(run_id), position)
            pipe.zadd(keys.queue_due(run_id), {position: 0}, lt=True)   # ready now
            pipe.hdel(dead_key, field)
            if dead.gone:   # (a replay finds its message gone again, and says so again)
                pipe.hdel(keys.gone(run_id), field)
            if tup.roots:
                pipe.srem(dead_roots_key, *[str(r) for r in tup.roots])
            if seen["undead"] and counted:   # the stored counts stay exact without a recount
                pipe.hincrby(record, ledger.COUNT_FIELDS["dead"], -seen["undead"])
                pipe.hincrby(record, ledger.COUNT_FIELDS["failed"], seen["undead"])

        if not ledger.fenced_transaction(client, run_id, gen, requeue, watch=(dead_key, dead_roots_key),
                                         read=read):
            runs.check_generation(client, run_id, gen)
        if seen.get("tuple") is not None:
            n += 1
    if n:
        runs.update(client, run_id, gen, status=runs.PENDING)
    return n


def dead_key(rec: FailedTuple) -> str:
    """A dead tuple's key in the run's dead-letter hash: `component:task:id` (for requeue)."""
    return f"{rec.component}:{rec.task}:{rec.id}"


def dead(client: Redis, run_id: str, component: str | None = None) -> dict[str, Any]:
    """Dead letters with their errors (`recovery dead --json`, /api/v1/runs/ID/dead)."""
    return {"run_id": run_id, "dead": [{**tuple_row(r), "key": dead_key(r)}
                                       for r in dead_letters(client, run_id, component)]}


def requeue(client: Redis, run_id: str, component: str | None = None,
            tuple_keys: list[str] | None = None) -> dict[str, Any]:
    """Dead tuples back in their queues (`recovery dead --requeue --json`, POST .../dead/requeue)."""
    return {"run_id": run_id, "requeued": requeue_dead(client, run_id, component, tuple_keys)}
