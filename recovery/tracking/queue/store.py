"""How the failed-tuple queue and the dead letters of a run are stored: their keys (named here
and nowhere else), and every step on them but the dead letters' requeue and retention cap
(tracking/queue/dead.py). The package's face (tracking/queue/__init__.py) says what is stored
where and who calls what."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.controlplane.connection import is_cluster
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, runs
from recovery.tracking.queue import events
from recovery.tracking.runs import fenced_transaction

Position = tuple[str, int]
#: The key builders below: no module outside this package names them (tests/test_structure.py).
OWNED_KEYS = ("failed_key", "queue_key", "staged_key", "due_key", "dead_letters_key", "dead_roots_key",
              "flush_key", "flushes_key", "gone_key", "history_key", "history_positions_key")


# --- the keys (tracking/keys.py: the layout and the hash slots) -------------------------------------
def failed_key(run_id: str) -> str:
    """Set of failed positions "component:task". In the run's home slot."""
    return keys.run_key(run_id, "failed")


def queue_key(run_id: str, component: str, task: int) -> str:
    """Hash: tuple id -> the failed tuple (values, roots, error, attempt, ...). In the
    position's own slot."""
    return keys.spread_key(run_id, f"queue:{component}:{task}")


def staged_key(run_id: str, component: str, task: int, round_no: int, token: str) -> str:
    """Hash: what one task attempt's commit writes into a queue, staged ahead of its commit
    point ("s:<tuple id>" -> the tuple to set, "d:<tuple id>" -> a tuple to remove), moved into
    the queue once the attempt committed (`apply_staged`). In the queue's slot."""
    return keys.spread_key(run_id, f"queue:{component}:{task}", "staged", round_no, token)


def due_key(run_id: str) -> str:
    """Sorted set: failed position "component:task" -> the earliest `not_before` of its queued
    tuples (when the next of them may be replayed), kept with the queues: ZADD LT by the commit
    that queues a tuple, reset to the exact minimum by the queue source that reads the queue.
    A recovery round reads it instead of the tuples."""
    return keys.run_key(run_id, "due")


def dead_letters_key(run_id: str) -> str:
    """Hash: "component:task:tuple id" -> a tuple that exhausted its attempts."""
    return keys.run_key(run_id, "dead")


def dead_roots_key(run_id: str) -> str:
    """Set: the roots of the dead letters (dead roots stay pending in the ledger)."""
    return keys.run_key(run_id, "deadroots")


def flush_key(run_id: str, flush: int) -> str:
    """Hash: the dead letters of one flush to the run's dead-letter sink, as the dead letters
    hold them, until the sink committed their part."""
    return keys.run_key(run_id, "deadflush", flush)


def flushes_key(run_id: str) -> str:
    """Set: the flushes to the dead-letter sink begun and not yet confirmed."""
    return keys.run_key(run_id, "deadflushes")


def gone_key(run_id: str) -> str:
    """Hash: "component:task:tuple id" (its dead letter's field) -> the error, for every dead
    root whose message its source reported gone when a replay re-read it (`status` warns of
    them). Written with the dead letter, removed with it by a requeue."""
    return keys.run_key(run_id, "gone")


def history_key(run_id: str, component: str, task: int) -> str:
    """Hash: what happened to the tuples that failed at a position, kept after they left its
    queue (tracking/queue/history.py: one field per failure, successful replay and requeue,
    and "dropped", the events the cap turned away). In the position's queue's slot, written by
    the same script that applies a commit's staged queue writes."""
    return keys.spread_key(run_id, f"queue:{component}:{task}", "history")


def history_positions_key(run_id: str) -> str:
    """Set: the positions "component:task" that have a history (`history_key`), written at the
    commit point with the failures; unlike the failed set, never pruned. In the run's home slot."""
    return keys.run_key(run_id, "history")


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
    return sorted(parse_position(cast(bytes, p)) for p in client.smembers(failed_key(run_id)))


def counts(client: Redis, run_id: str) -> list[tuple[str, int, int]]:
    """(component, task, queued tuples) of every failed position, sorted: one SMEMBERS of the
    failed set and one HLEN per position, never a queued tuple (O(failed positions))."""
    parsed = positions(client, run_id)
    with client.pipeline(transaction=False) as pipe:
        for comp, task in parsed:
            pipe.hlen(queue_key(run_id, comp, task))
        lengths = pipe.execute() if parsed else []
    return [(comp, task, int(n)) for (comp, task), n in zip(parsed, lengths)]


def read(client: Redis, run_id: str, component: str, task: int) -> list[FailedTuple]:
    """A position's whole queue (the chunk one replay task reads), in the order of its ids'
    keys."""
    entries = client.hgetall(queue_key(run_id, component, task))
    return [FailedTuple.unpack(cast(bytes, raw)) for _, raw in sorted(entries.items())]


def sample(client: Redis, run_id: str, component: str, task: int, limit: int | None = None) -> list[FailedTuple]:
    """At most `limit` tuples of a position's queue (None: all of them), read by HSCAN."""
    out: list[FailedTuple] = []
    if limit is not None and limit <= 0:
        return out
    for _, raw in client.hscan_iter(queue_key(run_id, component, task), count=limit or 1000):
        out.append(FailedTuple.unpack(raw))
        if limit is not None and len(out) >= limit:
            break
    return out


def earliest_due(client: Redis, run_id: str) -> float:
    """When the next queued tuple may be replayed (0: now, or nothing recorded), from the
    positions' earliest times, not from the tuples."""
    first = client.zrange(due_key(run_id), 0, 0, withscores=True)
    return float(first[0][1]) if first else 0.0


def queued_roots(client: Redis, run_id: str, bucket: int | None = None) -> set[int]:
    """The roots of every queued failed tuple (of one ledger bucket): read by Spark tasks, one
    per bucket; O(queued tuples), which grows with failures only."""
    out: set[int] = set()
    for comp, task in positions(client, run_id):
        for _, raw in client.hscan_iter(queue_key(run_id, comp, task), count=1000):
            for r in msgpack.unpackb(raw, strict_map_key=False).get("roots") or ():
                if bucket is None or r % keys.LEDGER_BUCKETS == bucket:
                    out.add(int(r))
    return out


def dead_count(client: Redis, run_id: str) -> int:
    """The dead letters Redis holds (those being written to the dead-letter sink included)."""
    n = int(client.hlen(dead_letters_key(run_id)))
    for key in _flush_keys(client, run_id):
        n += int(client.hlen(key))
    return n


def dead_letters(client: Redis, run_id: str, component: str | None = None) -> list[FailedTuple]:
    """The dead letters Redis holds (of `component`), in the order of their keys."""
    entries = dict(client.hgetall(dead_letters_key(run_id)))
    for key in _flush_keys(client, run_id):
        entries.update(client.hgetall(key))
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
        flags = client.smismember(dead_roots_key(run_id), batch)
        out.update(r for r, f in zip(batch, flags) if f)
    return out


def storage_keys(run_id: str, where: Iterable[Position]) -> list[str]:
    """The keys that hold the bulk of the queue and the dead letters (for MEMORY USAGE):
    the dead letters, the failed set and the queues of `where`."""
    return [dead_letters_key(run_id), failed_key(run_id), *(queue_key(run_id, c, t) for c, t in where)]


def fingerprint(client: Redis, run_id: str) -> list[bytes]:
    """What changes whenever the dead letters or the failed positions change (cheap to read)."""
    return [str(dead_count(client, run_id)).encode(),
            b",".join(sorted(cast(set[bytes], client.smembers(failed_key(run_id)))))]


# --- a task's commit (tracking/tracker.py's three steps) ---------------------------------------
def staged_writes(replays_done: Iterable[tuple[str, int, int]], failures: Iterable[FailedTuple],
                  round_no: int | None = None, history_cap: int = 0) -> dict[Position, dict[str, bytes]]:
    """What one task attempt writes into queues: a tuple replayed and acked here leaves its
    queue ("d:<id>"), a failed one goes in ("s:<id>", the tuple) or, dead, leaves it. With a
    `history_cap` (the events a position's history keeps), each failure and each successful
    replay of round `round_no` is also an event of its position's history ("h:<field>", applied
    with the rest: tracking/queue/history.py), and "c:" carries the cap."""
    staged: dict[Position, dict[str, bytes]] = {}
    failures = list(failures)
    for comp, task, tid in replays_done:
        staged.setdefault((comp, task), {})[f"d:{tid}"] = b""
    for rec in failures:
        pos = (rec.component, rec.task)
        staged.setdefault(pos, {})[f"d:{rec.id}" if rec.dead else f"s:{rec.id}"] = b"" if rec.dead else rec.pack()
        if not rec.dead:
            staged[pos].pop(f"d:{rec.id}", None)
    if history_cap > 0:
        for pos, writes in staged.items():
            for field in list(writes):
                if field.startswith("d:") and round_no is not None:   # acked here, unless it died here
                    writes["h:" + events.replay_field(int(field[2:]), round_no)] = events.replay_event(round_no)
        for rec in failures:
            staged[(rec.component, rec.task)]["h:" + events.failure_field(rec)] = events.failure_event(rec)
            staged[(rec.component, rec.task)].pop("h:" + events.replay_field(rec.id, rec.round or 0), None)
        for writes in staged.values():
            writes["c:"] = str(history_cap).encode()
    return staged


def stage(pipe: Any, run_id: str, round_no: int, token: str, staged: dict[Position, dict[str, bytes]],
          batch: int = 1000) -> None:
    """Step 1: an attempt's queue writes under its token, ahead of its commit point, in each
    queue's slot (nothing reads them until a commit record names the token)."""
    for (comp, task), writes in staged.items():
        key = staged_key(run_id, comp, task, round_no, token)
        items = list(writes.items())
        for i in range(0, len(items), batch):
            pipe.hset(key, mapping=dict(items[i:i + batch]))


def record_failures(pipe: Any, run_id: str, failures: Iterable[FailedTuple], history: bool = False) -> None:
    """Step 2, inside the commit point's transaction (the run's home slot): each failed
    tuple's position into the failed set with its earliest replay time, or the tuple, out of
    attempts, moved to the dead letters with its roots; with `history`, the positions among
    those that have a history (`history_positions_key`)."""
    due: dict[str, float] = {}   # position -> its earliest not_before among these
    failures = list(failures)
    if history and failures:
        pipe.sadd(history_positions_key(run_id), *{position_name(r.component, r.task) for r in failures})
    for rec in failures:
        if rec.dead:
            pipe.hset(dead_letters_key(run_id), dead_key(rec), rec.pack())
            if rec.gone:   # its message was gone from its source when a replay re-read it
                pipe.hset(gone_key(run_id), dead_key(rec), rec.error)
            if rec.roots:
                pipe.sadd(dead_roots_key(run_id), *[str(r) for r in rec.roots])
        else:
            pos = position_name(rec.component, rec.task)
            pipe.sadd(failed_key(run_id), pos)
            due[pos] = min(due.get(pos, float("inf")), rec.not_before or 0.0)
    if due:   # LT: a position's earliest time only moves earlier here (reset_due sets it exactly)
        pipe.zadd(due_key(run_id), due, lt=True)


# KEYS: a staging hash, its queue, its history. Moves what one committed attempt staged into
# the queue ("s:<id>" set, "d:<id>" removed) and its history ("h:<field>", while the history
# holds fewer than the cap "c:" gives; beyond it counted in its "dropped" field), and drops the
# staging hash; nothing to do when it is gone (applied already). Returns the queue entries applied.
_APPLY = """
local kv = redis.call('HGETALL', KEYS[1])
local cap = 0
for i = 1, #kv, 2 do
  if kv[i] == 'c:' then cap = tonumber(kv[i + 1]) end
end
local n = 0
for i = 1, #kv, 2 do
  local kind = string.sub(kv[i], 1, 2)
  local id = string.sub(kv[i], 3)
  if kind == 's:' then
    redis.call('HSET', KEYS[2], id, kv[i + 1])
    n = n + 1
  elseif kind == 'd:' then
    redis.call('HDEL', KEYS[2], id)
    n = n + 1
  elseif kind == 'h:' then
    if redis.call('HEXISTS', KEYS[3], id) == 1 or redis.call('HLEN', KEYS[3]) < cap then
      redis.call('HSET', KEYS[3], id, kv[i + 1])
    else
      redis.call('HINCRBY', KEYS[3], 'dropped', 1)
    end
  end
end
redis.call('DEL', KEYS[1])
return n
"""


def apply_staged(client: Redis, run_id: str, round_no: int, token: str, where: list[Position]) -> int:
    """Step 3: a committed attempt's staged queue writes into their queues (and their history),
    one script per position (in its slot). Idempotent."""
    script = client.register_script(_APPLY)
    n = 0
    for comp, task in where:
        n += int(cast(int, script(keys=[staged_key(run_id, comp, task, round_no, token),
                                        queue_key(run_id, comp, task), history_key(run_id, comp, task)])))
    return n


# --- a sandbox (recovery preview) -------------------------------------------------------------------
def holds_failures(run_id: str, key: str) -> bool:
    """Whether `key` (a key of the run) is one of the keys above: a queue, its staged writes,
    the failed set, the due times, the dead letters and what belongs to them, the history of the
    failures (each position's is in its queue's slot, under its tag). A sandbox copies
    a run without these, then queues the tuples it previews itself (`enqueue`)."""
    own = (failed_key(run_id), due_key(run_id), dead_letters_key(run_id), dead_roots_key(run_id),
           flushes_key(run_id), gone_key(run_id), history_positions_key(run_id))
    queues = keys.spread_key(run_id, "queue:")[:-1]   # every queue's tag starts so (and its staged keys')
    return key in own or key.startswith(keys.run_key(run_id, "deadflush", "")) or key.startswith(queues)


def enqueue(client: Redis, run_id: str, tuples: Iterable[FailedTuple]) -> int:
    """Put `tuples` into their positions' queues, ready now (each as it is given), their positions
    into the failed set: what a sandbox replays. Returns the tuples queued."""
    n = 0
    with client.pipeline(transaction=False) as pipe:
        for rec in tuples:
            pos = position_name(rec.component, rec.task)
            pipe.hset(queue_key(run_id, rec.component, rec.task), str(rec.id), rec.pack())
            pipe.sadd(failed_key(run_id), pos)
            pipe.zadd(due_key(run_id), {pos: 0.0})
            n += 1
        pipe.execute()
    return n


# --- the queue source ------------------------------------------------------------------------------
def reset_due(client: Redis, run_id: str, generation: str | None, component: str, task: int,
              earliest: float | None) -> None:
    """The position's earliest replay time is now exactly `earliest`, that of the tuples left
    waiting (None: none left), fenced by the run's generation."""
    due, position = due_key(run_id), position_name(component, task)

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
    queues = tuple(queue_key(run_id, comp, task) for comp, task in empty)
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
            pipe.srem(failed_key(run_id), *still_empty)
            pipe.zrem(due_key(run_id), *still_empty)
    if not fenced_transaction(client, run_id, generation, drop, watch=() if cluster else queues, read=check):
        raise runs.fenced_out(client, run_id, generation)


def clear(client: Redis, run_id: str, generation: str | None, also: Callable[[Any], None] | None = None) -> int:
    """Every queue dropped (root replay re-emits the roots instead): the queues first, each in
    its own slot, then, in one fenced transaction of the run's slot, the failed set, the due
    times and what `also(pipe)` writes (the caller's mark that this is done). Returns the
    positions dropped."""
    runs.check_generation(client, run_id, generation)
    where = positions(client, run_id)
    queues = [queue_key(run_id, c, t) for c, t in where]
    for batch in _batches(queues, 500):
        client.delete(*batch)

    def drop(pipe: Any) -> None:
        pipe.delete(failed_key(run_id), due_key(run_id))
        if also is not None:
            also(pipe)
    if not fenced_transaction(client, run_id, generation, drop):
        raise runs.fenced_out(client, run_id, generation)
    return len(where)


def forget_dead_roots(pipe: Any, run_id: str, roots: list[int]) -> None:
    """These roots are not dead (any more): a superseded root's replay is a new root."""
    if roots:
        pipe.srem(dead_roots_key(run_id), *roots)


# --- the dead letters --------------------------------------------------------------------------------
def gone_roots(client: Redis, run_id: str) -> tuple[int, str]:
    """(how many dead letters are roots whose message was gone from its source when a replay
    re-read it, the error of one of them)."""
    n = int(client.hlen(gone_key(run_id)))
    sample = next((cast(bytes, v) for _, v in client.hscan_iter(gone_key(run_id), count=1)), b"") if n else b""
    return n, sample.decode("utf-8", "replace")


# --- the dead-letter sink and the retention cap --------------------------------------------------------
#: Run-record counters: dead letters written to the dead-letter sink, dropped by the retention
#: cap, and the number of the last flush begun (each flush is one part of the sink).
DEAD_WRITTEN = "dead_written"
DEAD_DROPPED = "dead_dropped"
DEAD_FLUSHES = "dead_flushes"


def _flush_keys(client: Redis, run_id: str) -> list[str]:
    return [flush_key(run_id, n) for n in pending_flushes(client, run_id)]


def pending_flushes(client: Redis, run_id: str) -> list[int]:
    """The flushes begun (`take_for_flush`) whose part the sink has not confirmed (`flush_done`)."""
    raw = client.smembers(flushes_key(run_id))
    return sorted(int(cast(bytes, n)) for n in raw)


def flush_of(client: Redis, run_id: str, flush: int) -> list[FailedTuple]:
    """The dead letters of one flush, in the order of their keys."""
    entries = client.hgetall(flush_key(run_id, flush))
    return [FailedTuple.unpack(cast(bytes, raw)) for _, raw in sorted(entries.items())]


def take_for_flush(client: Redis, run_id: str, generation: str | None) -> int | None:
    """The dead letters Redis holds, moved (one fenced transaction) into a new flush: a fixed
    set that becomes one part of the dead-letter sink, whatever dies meanwhile. Returns its
    number, None when there was nothing to move (or the run is no longer this generation's)."""
    dead = dead_letters_key(run_id)
    record = runs.record_key(run_id)
    seen: dict[str, Any] = {}

    def check(pipe: Any) -> None:
        seen["entries"] = pipe.hgetall(dead)
        seen["flush"] = int(pipe.hget(record, DEAD_FLUSHES) or 0) + 1

    def move(pipe: Any) -> None:
        if not seen["entries"]:
            return
        n = seen["flush"]
        pipe.hset(flush_key(run_id, n), mapping=seen["entries"])
        pipe.hdel(dead, *seen["entries"])
        pipe.sadd(flushes_key(run_id), n)
        pipe.hset(record, DEAD_FLUSHES, n)
    if not fenced_transaction(client, run_id, generation, move, watch=(dead,), read=check):
        return None
    return seen["flush"] if seen["entries"] else None


def flush_done(client: Redis, run_id: str, generation: str | None, flush: int) -> bool:
    """The sink committed the flush's part: its dead letters leave Redis (their roots stay
    dead), counted as written. Idempotent: a flush already done counts nothing again."""
    this = flush_key(run_id, flush)
    seen: dict[str, int] = {}

    def check(pipe: Any) -> None:
        seen["n"] = int(pipe.hlen(this)) if pipe.sismember(flushes_key(run_id), flush) else 0

    def drop(pipe: Any) -> None:
        pipe.delete(this)
        pipe.srem(flushes_key(run_id), flush)
        if seen["n"]:
            pipe.hincrby(runs.record_key(run_id), DEAD_WRITTEN, seen["n"])
    return fenced_transaction(client, run_id, generation, drop, watch=(this, flushes_key(run_id)),
                              read=check)
