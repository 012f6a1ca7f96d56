"""The failed-tuple queue and the dead letters of a run: the one module that knows how they are
stored. Every other module reads and writes them through the functions below, with typed
`FailedTuple` values (model/failed.py); tests/test_structure.py fails when another module names
their keys.

A *position* is a task where tuples failed, `(component, task id)`. Stored in Redis
(tracking/keys.py says in which hash slot):

- the failed set (`keys.failed_set`): the positions that may hold queued tuples;
- each position's queue (`keys.queue`): tuple id -> the packed FailedTuple, and the writes a
  task attempt's commit stages into it ahead of its commit point (`keys.queue_staged`);
- the positions' earliest replay times (`keys.queue_due`), so a round reads no tuple to know
  whether one is due;
- the dead letters (`keys.dead`): "component:task:id" -> the packed FailedTuple that ran out
  of attempts, and the dead roots (`keys.dead_roots`), the roots of those tuples;
- the dead letters being written to the run's dead-letter sink (`keys.dead_flush`, one hash
  per flush), and what the retention cap dropped (run-record counters).

The interface, by who calls it:

- reading (reports, status, metrics, the web view): `positions`, `counts`, `read`, `sample`,
  `earliest_due`, `queued_roots`, `dead_count`, `dead_letters`, `dead_among`, `storage_keys`,
  `fingerprint`;
- a task's commit (tracking/tracker.py): `staged_writes` and `stage` (step 1), `record_failures`
  (at the commit point: a tuple into the failed set, or *moved to dead*), `apply_staged` (step 3);
- the queue source of a recovery round: `read`, then `reset_due`;
- recovery: `prune_empty`, `clear` (root replay drops every queue), `forget_dead_roots`;
- the dead letters: `requeue`, and for the dead-letter sink and the retention cap
  `take_for_flush`, `pending_flushes`, `flush_done`, `drop_dead`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.controlplane.connection import is_cluster
from recovery.errors import RunError
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, runs
from recovery.tracking.runs import fenced_transaction

Position = tuple[str, int]
#: The key builders of tracking/keys.py for what this module owns: no other module names them.
OWNED_KEYS = ("failed_set", "queue", "queue_staged", "queue_due", "dead", "dead_roots", "dead_flush",
              "dead_flushes", "gone")
#: (SMISMEMBER in batches of this many)
READ_BATCH = 10_000


def position_name(component: str, task: int) -> str:
    """A position as the failed set and the due times name it: "component:task"."""
    return f"{component}:{task}"


def parse_position(name: str | bytes) -> Position:
    text = name.decode() if isinstance(name, bytes) else name
    comp, task = text.rsplit(":", 1)
    return comp, int(task)


def dead_key(rec: FailedTuple) -> str:
    """A dead tuple's key among the dead letters: `component:task:id` (what requeue names)."""
    return f"{rec.component}:{rec.task}:{rec.id}"


def _batches(items: list[Any], n: int = READ_BATCH) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


# --- reading -------------------------------------------------------------------------------------
def positions(client: Redis, run_id: str) -> list[Position]:
    """The failed positions, sorted (their queues may be empty: `prune_empty` drops those)."""
    return sorted(parse_position(cast(bytes, p)) for p in client.smembers(keys.failed_set(run_id)))


def counts(client: Redis, run_id: str) -> list[tuple[str, int, int]]:
    """(component, task, queued tuples) of every failed position, sorted: one SMEMBERS of the
    failed set and one HLEN per position, never a queued tuple (O(failed positions))."""
    parsed = positions(client, run_id)
    with client.pipeline(transaction=False) as pipe:
        for comp, task in parsed:
            pipe.hlen(keys.queue(run_id, comp, task))
        lengths = pipe.execute() if parsed else []
    return [(comp, task, int(n)) for (comp, task), n in zip(parsed, lengths)]


def read(client: Redis, run_id: str, component: str, task: int) -> list[FailedTuple]:
    """A position's whole queue (the chunk one replay task reads), in the order of its ids'
    keys."""
    entries = client.hgetall(keys.queue(run_id, component, task))
    return [FailedTuple.unpack(cast(bytes, raw)) for _, raw in sorted(entries.items())]


def sample(client: Redis, run_id: str, component: str, task: int, limit: int | None = None) -> list[FailedTuple]:
    """At most `limit` tuples of a position's queue (None: all of them), read by HSCAN."""
    out: list[FailedTuple] = []
    if limit is not None and limit <= 0:
        return out
    for _, raw in client.hscan_iter(keys.queue(run_id, component, task), count=limit or 1000):
        out.append(FailedTuple.unpack(raw))
        if limit is not None and len(out) >= limit:
            break
    return out


def earliest_due(client: Redis, run_id: str) -> float:
    """When the next queued tuple may be replayed (0: now, or nothing recorded), from the
    positions' earliest times, not from the tuples."""
    first = client.zrange(keys.queue_due(run_id), 0, 0, withscores=True)
    return float(first[0][1]) if first else 0.0


def queued_roots(client: Redis, run_id: str, bucket: int | None = None) -> set[int]:
    """The roots of every queued failed tuple (of one ledger bucket): read by Spark tasks, one
    per bucket; O(queued tuples), which grows with failures only."""
    out: set[int] = set()
    for comp, task in positions(client, run_id):
        for _, raw in client.hscan_iter(keys.queue(run_id, comp, task), count=1000):
            for r in msgpack.unpackb(raw, strict_map_key=False).get("roots") or ():
                if bucket is None or r % keys.LEDGER_BUCKETS == bucket:
                    out.add(int(r))
    return out


def dead_count(client: Redis, run_id: str) -> int:
    """The dead letters Redis holds (those being written to the dead-letter sink included)."""
    n = int(client.hlen(keys.dead(run_id)))
    for flush_key in _flush_keys(client, run_id):
        n += int(client.hlen(flush_key))
    return n


def dead_letters(client: Redis, run_id: str, component: str | None = None) -> list[FailedTuple]:
    """The dead letters Redis holds (of `component`), in the order of their keys."""
    entries = dict(client.hgetall(keys.dead(run_id)))
    for flush_key in _flush_keys(client, run_id):
        entries.update(client.hgetall(flush_key))
    out = []
    for _, raw in sorted(entries.items()):
        rec = FailedTuple.unpack(cast(bytes, raw))
        if component is None or rec.component == component:
            out.append(rec)
    return out


def dead_among(client: Redis, run_id: str, roots: list[int]) -> set[int]:
    """Those of `roots` that are dead (SMISMEMBER, in batches)."""
    out: set[int] = set()
    for batch in _batches(roots):
        flags = client.smismember(keys.dead_roots(run_id), batch)
        out.update(r for r, f in zip(batch, flags) if f)
    return out


def storage_keys(run_id: str, where: Iterable[Position]) -> list[str]:
    """The keys that hold the bulk of the queue and the dead letters (for MEMORY USAGE):
    the dead letters, the failed set and the queues of `where`."""
    return [keys.dead(run_id), keys.failed_set(run_id), *(keys.queue(run_id, c, t) for c, t in where)]


def fingerprint(client: Redis, run_id: str) -> list[bytes]:
    """What changes whenever the dead letters or the failed positions change (cheap to read)."""
    return [str(dead_count(client, run_id)).encode(),
            b",".join(sorted(cast(set[bytes], client.smembers(keys.failed_set(run_id)))))]


# --- a task's commit (tracking/tracker.py's three steps) ---------------------------------------
def staged_writes(replays_done: Iterable[tuple[str, int, int]], failures: Iterable[FailedTuple]
                  ) -> dict[Position, dict[str, bytes]]:
    """What one task attempt writes into queues: a tuple replayed and acked here leaves its
    queue ("d:<id>"), a failed one goes in ("s:<id>", the tuple) or, dead, leaves it."""
    staged: dict[Position, dict[str, bytes]] = {}
    for comp, task, tid in replays_done:
        staged.setdefault((comp, task), {})[f"d:{tid}"] = b""
    for rec in failures:
        pos = (rec.component, rec.task)
        staged.setdefault(pos, {})[f"d:{rec.id}" if rec.dead else f"s:{rec.id}"] = b"" if rec.dead else rec.pack()
        if not rec.dead:
            staged[pos].pop(f"d:{rec.id}", None)
    return staged


def stage(pipe: Any, run_id: str, round_no: int, token: str, staged: dict[Position, dict[str, bytes]],
          batch: int = 1000) -> None:
    """Step 1: an attempt's queue writes under its token, ahead of its commit point, in each
    queue's slot (nothing reads them until a commit record names the token)."""
    for (comp, task), writes in staged.items():
        key = keys.queue_staged(run_id, comp, task, round_no, token)
        items = list(writes.items())
        for i in range(0, len(items), batch):
            pipe.hset(key, mapping=dict(items[i:i + batch]))


def record_failures(pipe: Any, run_id: str, failures: Iterable[FailedTuple]) -> None:
    """Step 2, inside the commit point's transaction (the run's home slot): each failed
    tuple's position into the failed set with its earliest replay time, or the tuple, out of
    attempts, moved to the dead letters with its roots."""
    due: dict[str, float] = {}   # position -> its earliest not_before among these
    for rec in failures:
        if rec.dead:
            pipe.hset(keys.dead(run_id), dead_key(rec), rec.pack())
            if rec.gone:   # its message was gone from its source when a replay re-read it
                pipe.hset(keys.gone(run_id), dead_key(rec), rec.error)
            if rec.roots:
                pipe.sadd(keys.dead_roots(run_id), *[str(r) for r in rec.roots])
        else:
            pos = position_name(rec.component, rec.task)
            pipe.sadd(keys.failed_set(run_id), pos)
            due[pos] = min(due.get(pos, float("inf")), rec.not_before or 0.0)
    if due:   # LT: a position's earliest time only moves earlier here (reset_due sets it exactly)
        pipe.zadd(keys.queue_due(run_id), due, lt=True)


# KEYS: a staging hash, its queue. Moves what one committed attempt staged into the queue
# ("s:<id>" set, "d:<id>" removed) and drops the staging hash; nothing to do when it is gone
# (applied already). Returns the entries applied.
_APPLY = """
local kv = redis.call('HGETALL', KEYS[1])
for i = 1, #kv, 2 do
  local id = string.sub(kv[i], 3)
  if string.sub(kv[i], 1, 2) == 's:' then
    redis.call('HSET', KEYS[2], id, kv[i + 1])
  else
    redis.call('HDEL', KEYS[2], id)
  end
end
redis.call('DEL', KEYS[1])
return #kv / 2
"""


def apply_staged(client: Redis, run_id: str, round_no: int, token: str, where: list[Position]) -> int:
    """Step 3: a committed attempt's staged queue writes into their queues, one script per
    position (in its slot). Idempotent."""
    script = client.register_script(_APPLY)
    n = 0
    for comp, task in where:
        n += int(cast(int, script(keys=[keys.queue_staged(run_id, comp, task, round_no, token),
                                        keys.queue(run_id, comp, task)])))
    return n


# --- the queue source ------------------------------------------------------------------------------
def reset_due(client: Redis, run_id: str, generation: str | None, component: str, task: int,
              earliest: float | None) -> None:
    """The position's earliest replay time is now exactly `earliest`, that of the tuples left
    waiting (None: none left), fenced by the run's generation."""
    due, position = keys.queue_due(run_id), position_name(component, task)

    def write(pipe: Any) -> None:
        if earliest is None:
            pipe.zrem(due, position)
        else:
            pipe.zadd(due, {position: earliest})
    fenced_transaction(client, run_id, generation, write)


# --- recovery --------------------------------------------------------------------------------------
def prune_empty(client: Redis, run_id: str, generation: str | None = None) -> None:
    """A position leaves the failed set (and its earliest time goes) once its queue is empty:
    in a transaction fenced by the run's `generation` that WATCHes those queues, so neither a
    driver taken over meanwhile nor a commit queueing a tuple there at the same moment can
    leave a queued tuple out of the failed set (where no round would ever look for it)."""
    empty = [(comp, task) for comp, task, n in counts(client, run_id) if n == 0]
    if not empty:
        return
    queues = tuple(keys.queue(run_id, comp, task) for comp, task in empty)
    still_empty: list[str] = []

    # On a Redis Cluster the queues are in other slots than the failed set: they are read
    # (not WATCHed) from their masters. No round runs now, and a commit under an older
    # generation is refused at its commit point, before it stages anything into the failed set.
    cluster = is_cluster(client)

    def check(pipe: Any) -> None:
        reader = client if cluster else pipe
        still_empty[:] = [position_name(comp, task) for (comp, task), q in zip(empty, queues) if not reader.hlen(q)]

    def drop(pipe: Any) -> None:
        if still_empty:
            pipe.srem(keys.failed_set(run_id), *still_empty)
            pipe.zrem(keys.queue_due(run_id), *still_empty)
    if not fenced_transaction(client, run_id, generation, drop, watch=() if cluster else queues, read=check):
        raise runs.fenced_out(client, run_id, generation)


def clear(client: Redis, run_id: str, generation: str | None, also: Callable[[Any], None] | None = None) -> int:
    """Every queue dropped (root replay re-emits the roots instead): the queues first, each in
    its own slot, then, in one fenced transaction of the run's slot, the failed set, the due
    times and what `also(pipe)` writes (the caller's mark that this is done). Returns the
    positions dropped."""
    runs.check_generation(client, run_id, generation)
    where = positions(client, run_id)
    queues = [keys.queue(run_id, c, t) for c, t in where]
    for batch in _batches(queues, 500):
        client.delete(*batch)

    def drop(pipe: Any) -> None:
        pipe.delete(keys.failed_set(run_id), keys.queue_due(run_id))
        if also is not None:
            also(pipe)
    if not fenced_transaction(client, run_id, generation, drop):
        raise runs.fenced_out(client, run_id, generation)
    return len(where)


def forget_dead_roots(pipe: Any, run_id: str, roots: list[int]) -> None:
    """These roots are not dead (any more): a superseded root's replay is a new root."""
    if roots:
        pipe.srem(keys.dead_roots(run_id), *roots)


# --- the dead letters --------------------------------------------------------------------------------
def requeue(client: Redis, run_id: str, generation: str | None, component: str | None = None,
            tuple_keys: list[str] | None = None,
            adjust_counts: Callable[[Any, int], None] | None = None) -> int:
    """Dead tuples back in their queues (attempts reset): all of them, a component's, or those
    named by `tuple_keys` (`dead_key`). Each tuple moves in one transaction that only commits if
    it is still dead (WATCH) and the run holds `generation`, so an interrupted or concurrent
    requeue neither loses nor doubles a tuple. `adjust_counts(pipe, n)` runs in that
    transaction with the dead roots it made pending again. Returns the tuples requeued.
    Only the dead letters Redis holds outside a flush can be requeued: those written to the
    dead-letter sink are the sink's."""
    dead = keys.dead(run_id)
    dead_roots = keys.dead_roots(run_id)
    if tuple_keys is not None:
        unknown = [k for k in tuple_keys if not client.hexists(dead, k)]
        if unknown:
            flushing = any(client.hexists(keys.dead_flush(run_id, n), unknown[0])
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
                client.hset(keys.queue(run_id, back.component, back.task), str(back.id), back.pack())

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
                pipe.hset(keys.queue(run_id, tup.component, tup.task), str(tup.id), tup.pack())
            position = position_name(tup.component, tup.task)
            pipe.sadd(keys.failed_set(run_id), position)
            pipe.zadd(keys.queue_due(run_id), {position: 0}, lt=True)   # ready now
            pipe.hdel(dead, field)
            if was.gone:   # (a replay finds its message gone again, and says so again)
                pipe.hdel(keys.gone(run_id), field)
            if tup.roots:
                pipe.srem(dead_roots, *[str(r) for r in tup.roots])
            if seen["undead"] and adjust_counts is not None:
                adjust_counts(pipe, seen["undead"])

        if not fenced_transaction(client, run_id, generation, move, watch=(dead, dead_roots), read=check):
            runs.check_generation(client, run_id, generation)
        if seen.get("tuple") is not None:
            n += 1
    return n


def gone_roots(client: Redis, run_id: str) -> tuple[int, str]:
    """(how many dead letters are roots whose message was gone from its source when a replay
    re-read it, the error of one of them)."""
    n = int(client.hlen(keys.gone(run_id)))
    sample = next((cast(bytes, v) for _, v in client.hscan_iter(keys.gone(run_id), count=1)), b"") if n else b""
    return n, sample.decode("utf-8", "replace")


# --- the dead-letter sink and the retention cap --------------------------------------------------------
#: Run-record counters: dead letters written to the dead-letter sink, dropped by the retention
#: cap, and the number of the last flush begun (each flush is one part of the sink).
DEAD_WRITTEN = "dead_written"
DEAD_DROPPED = "dead_dropped"
DEAD_FLUSHES = "dead_flushes"


def _flush_keys(client: Redis, run_id: str) -> list[str]:
    return [keys.dead_flush(run_id, n) for n in pending_flushes(client, run_id)]


def pending_flushes(client: Redis, run_id: str) -> list[int]:
    """The flushes begun (`take_for_flush`) whose part the sink has not confirmed (`flush_done`)."""
    raw = client.smembers(keys.dead_flushes(run_id))
    return sorted(int(cast(bytes, n)) for n in raw)


def flush_of(client: Redis, run_id: str, flush: int) -> list[FailedTuple]:
    """The dead letters of one flush, in the order of their keys."""
    entries = client.hgetall(keys.dead_flush(run_id, flush))
    return [FailedTuple.unpack(cast(bytes, raw)) for _, raw in sorted(entries.items())]


def take_for_flush(client: Redis, run_id: str, generation: str | None) -> int | None:
    """The dead letters Redis holds, moved (one fenced transaction) into a new flush: a fixed
    set that becomes one part of the dead-letter sink, whatever dies meanwhile. Returns its
    number, None when there was nothing to move (or the run is no longer this generation's)."""
    dead = keys.dead(run_id)
    record = runs.record_key(run_id)
    seen: dict[str, Any] = {}

    def check(pipe: Any) -> None:
        seen["entries"] = pipe.hgetall(dead)
        seen["flush"] = int(pipe.hget(record, DEAD_FLUSHES) or 0) + 1

    def move(pipe: Any) -> None:
        if not seen["entries"]:
            return
        n = seen["flush"]
        pipe.hset(keys.dead_flush(run_id, n), mapping=seen["entries"])
        pipe.hdel(dead, *seen["entries"])
        pipe.sadd(keys.dead_flushes(run_id), n)
        pipe.hset(record, DEAD_FLUSHES, n)
    if not fenced_transaction(client, run_id, generation, move, watch=(dead,), read=check):
        return None
    return seen["flush"] if seen["entries"] else None


def flush_done(client: Redis, run_id: str, generation: str | None, flush: int) -> bool:
    """The sink committed the flush's part: its dead letters leave Redis (their roots stay
    dead), counted as written. Idempotent: a flush already done counts nothing again."""
    flush_key = keys.dead_flush(run_id, flush)
    seen: dict[str, int] = {}

    def check(pipe: Any) -> None:
        seen["n"] = int(pipe.hlen(flush_key)) if pipe.sismember(keys.dead_flushes(run_id), flush) else 0

    def drop(pipe: Any) -> None:
        pipe.delete(flush_key)
        pipe.srem(keys.dead_flushes(run_id), flush)
        if seen["n"]:
            pipe.hincrby(runs.record_key(run_id), DEAD_WRITTEN, seen["n"])
    return fenced_transaction(client, run_id, generation, drop, watch=(flush_key, keys.dead_flushes(run_id)),
                              read=check)


def drop_dead(client: Redis, run_id: str, generation: str | None, keep: int | None = None,
              older_than: float | None = None) -> list[FailedTuple]:
    """The retention cap: dead letters Redis holds beyond the newest `keep`, or that died
    before `older_than` (a time), removed (their roots stay dead) and counted as dropped, in
    one fenced transaction. Returns what was dropped. A flush under way (at most one, while
    the sink refuses it) is not dropped: its part may be in the sink already."""
    dead = keys.dead(run_id)
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
