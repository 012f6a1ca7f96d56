"""Redis Streams as a partitioned log: KafkaSpout's model (shared/seeds/002) on Redis.

A *topic* is N partitions, each one Redis stream (keys.topic_partition); N is the topic's own,
fixed when it is created (the keys.topic_meta hash). A message's *offset* is an integer: the
entry id is ``<offset>-1`` (``recovery produce`` writes them that way, atomically per batch),
so offsets compare like Kafka's and ``XRANGE key a b`` reads offsets a..b.

Reading, as KafkaSpout does:

* partitions are assigned to the spout's tasks as ``calculatePartitionsForTask`` does:
  partition i goes to task index ``i mod tasks``; a task without a partition is idle (warned);
* every message becomes a root tuple whose message id is ``(partition, offset)``;
* a *consumer* (workflow name + spout id) has a committed offset per partition
  (keys.offsets): every offset below it is complete, queued for recovery or dead. A failed
  root never holds its partition back: it is in the recovery queue, and the offset moves on
  (the stall of seeds/004 cannot happen).

A round's work is fixed before it starts: :func:`plan_ranges` decides each partition's
``[start, end)`` and returns it as JSON that goes into ``RunSpec.source_json`` and the run
record, so a crashed round that is resumed reads exactly the same messages; Spark tasks read
their partitions' ranges with XRANGE in batches (:func:`stream_source`, never through the
driver); :func:`commit_ranges` commits the ends once the round settled.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Iterable, Iterator

from recovery.tracking import keys
from recovery.errors import RecoveryError
from recovery.model.workflow import Component, Workflow

SOURCE_TYPE = "redis-stream"
FIELD = b"v"                  # the stream entry field holding the record
READ_BATCH = 1000             # entries per XRANGE
PRODUCE_BATCH = 500           # records per producer script call
MAX_SEQ = (1 << 64) - 1
FORMATS = ("text", "jsonl")


class TopicError(RecoveryError):
    """A topic that does not exist, or is used inconsistently (exit code 2)."""


# --- names, assignment, entry ids ----------------------------------------------------------
def log_spouts(wf: Workflow) -> list[Component]:
    return [c for c in wf.spouts if c.impl.kind == "source" and c.impl.type == SOURCE_TYPE]


def consumer_name(wf: Workflow, spout_id: str) -> str:
    """A consumer is one spout of one workflow (Kafka's consumer group)."""
    return f"{wf.name}:{spout_id}"


def owner_key(consumer: str, topic: str) -> str:
    """String: the run that last planned ranges for this consumer (one reader at a time)."""
    return keys.offsets(consumer, topic) + ":run"


def replay_ranges_key(run_id: str) -> str:
    """List: every plan a run read, for root replay (cleared with the run)."""
    return keys.run_key(run_id, "logsource", "plans")


def assign_partitions(num_partitions: int, total_tasks: int, task_index: int) -> list[int]:
    """KafkaUtils.calculatePartitionsForTask: indexes task_index, task_index + total_tasks, ..."""
    if total_tasks < 1 or not 0 <= task_index < total_tasks:
        raise ValueError(f"task index {task_index} out of range for {total_tasks} tasks")
    return list(range(task_index, num_partitions, total_tasks))


def entry_id(offset: int) -> str:
    return f"{offset}-1"


def entry_offset(eid: bytes | str) -> int:
    if isinstance(eid, bytes):
        eid = eid.decode()
    return int(eid.split("-", 1)[0])


def _next_id(eid: bytes | str) -> str:
    """The smallest stream id after `eid` (for XRANGE paging without '(' ranges)."""
    if isinstance(eid, bytes):
        eid = eid.decode()
    ms, seq = (int(x) for x in eid.split("-", 1))
    return f"{ms + 1}-0" if seq == MAX_SEQ else f"{ms}-{seq + 1}"


# --- topics ----------------------------------------------------------------------------------
def _dec(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def topic_info(client: Any, topic: str) -> dict[str, Any] | None:
    raw = client.hgetall(keys.topic_meta(topic))
    if not raw or b"partitions" not in raw:
        return None
    info = {_dec(k): _dec(v) for k, v in raw.items()}
    return {"topic": topic, "partitions": int(info["partitions"]), "format": info.get("format", ""),
            "created": float(info.get("created") or 0)}


def topic_partitions(client: Any, topic: str) -> int | None:
    raw = client.hget(keys.topic_meta(topic), "partitions")
    return int(raw) if raw is not None else None


def require_topic(client: Any, topic: str, who: str | None = None) -> int:
    """The topic's partition count; a one-line TopicError naming it when it does not exist."""
    n = topic_partitions(client, topic)
    if n is None:
        by = f" (read by spout {who!r})" if who else ""
        raise TopicError(f"topic {topic!r}{by} does not exist in this Redis; create it with "
                         f"`recovery produce {topic} FILE --partitions N`")
    return n


def spout_format(client: Any, spout: Component) -> str:
    """The record format: the source's format= attribute, else the one the topic was produced
    with, else text."""
    fmt = spout.impl.param("format")
    if fmt is None:
        fmt = (topic_info(client, spout.impl.param("topic") or "") or {}).get("format") or "text"
    if fmt not in FORMATS:
        raise TopicError(f'spout {spout.id!r}: <source type="{SOURCE_TYPE}"> format must be one of '
                         f"{', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def check_topics(client: Any, wf: Workflow) -> None:
    """Every topic the workflow reads exists (raises TopicError naming the first that does not)
    and every format is known."""
    for spout in log_spouts(wf):
        require_topic(client, spout.impl.param("topic") or "", spout.id)
        spout_format(client, spout)


def create_topic(client: Any, topic: str, partitions: int | None, fmt: str | None = None) -> int:
    """Create the topic with `partitions` partitions, or check an existing one; returns its
    partition count. The count is fixed at creation: asking for another is an error."""
    if not topic or any(ch.isspace() for ch in topic):
        raise TopicError(f"bad topic name {topic!r}: it must be non-empty, without spaces")
    meta = keys.topic_meta(topic)
    if partitions is not None:
        if partitions < 1:
            raise TopicError(f"--partitions must be at least 1, got {partitions}")
        if client.hsetnx(meta, "partitions", partitions):
            client.hset(meta, mapping={"created": time.time(), "format": fmt or ""})
            return partitions
    existing = topic_partitions(client, topic)
    if existing is None:
        raise TopicError(f"topic {topic!r} does not exist: give --partitions N to create it")
    if partitions is not None and partitions != existing:
        raise TopicError(f"topic {topic!r} has {existing} partitions (fixed when it was created), "
                         f"not {partitions}")
    return existing


def partition_bounds(client: Any, topic: str, partitions: int) -> list[tuple[int | None, int]]:
    """Per partition (first offset still in the stream or None when empty, end): end is one past
    the last offset ever written (the producer's counter covers a stream trimmed to nothing)."""
    meta = keys.topic_meta(topic)
    with client.pipeline(transaction=False) as pipe:
        for p in range(partitions):
            key = keys.topic_partition(topic, p)
            pipe.xrange(key, "-", "+", count=1)
            pipe.xrevrange(key, "+", "-", count=1)
            pipe.hget(meta, f"next:{p}")
        got = pipe.execute()
    out = []
    for p in range(partitions):
        first, last, nxt = got[3 * p], got[3 * p + 1], got[3 * p + 2]
        end = int(nxt) if nxt is not None else 0
        if last:
            end = max(end, entry_offset(last[0][0]) + 1)
        out.append((entry_offset(first[0][0]) if first else None, end))
    return out


def committed_offsets(client: Any, consumer: str, topic: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in client.hgetall(keys.offsets(consumer, topic)).items()}


# --- producing -------------------------------------------------------------------------------
# Appends a batch to one partition atomically with consecutive offsets after the last one
# (the meta counter survives a stream trimmed to nothing).
_APPEND = """
local field = 'next:' .. ARGV[1]
local nxt = tonumber(redis.call('HGET', KEYS[1], field) or '0')
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #top > 0 then
  local ms = tonumber(string.match(top[1][1], '^(%d+)'))
  if ms + 1 > nxt then nxt = ms + 1 end
end
for i = 2, #ARGV do
  redis.call('XADD', KEYS[2], string.format('%d-1', nxt), 'v', ARGV[i])
  nxt = nxt + 1
end
redis.call('HSET', KEYS[1], field, string.format('%d', nxt))
return nxt
"""


def partition_of(key: Any, partitions: int) -> int:
    """A record key's partition: a stable hash (the same in every process), mod N."""
    from recovery.tracking.ids import stable_hash
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if not isinstance(key, str):
        key = json.dumps(key, sort_keys=True) if isinstance(key, (dict, list)) else str(key)
    return stable_hash(key) % partitions


def produce(client: Any, topic: str, records: Iterable[tuple[Any, bytes]], partitions: int | None = None,
            fmt: str | None = None) -> dict[int, int]:
    """Append (key, payload) records, key-hashed to partitions, in pipelined batches; creates
    the topic when `partitions` is given. Returns how many records went to each partition."""
    n = create_topic(client, topic, partitions, fmt)
    script = client.register_script(_APPEND)
    meta = keys.topic_meta(topic)
    counts = {p: 0 for p in range(n)}
    buffers: dict[int, list[bytes]] = {p: [] for p in range(n)}
    pipe = client.pipeline(transaction=False)
    queued = 0

    def flush(p: int) -> None:
        nonlocal queued
        if buffers[p]:
            script(keys=[meta, keys.topic_partition(topic, p)], args=[p, *buffers[p]], client=pipe)
            counts[p] += len(buffers[p])
            queued += 1
            buffers[p] = []

    for key, payload in records:
        p = partition_of(key, n)
        buffers[p].append(payload)
        if len(buffers[p]) >= PRODUCE_BATCH:
            flush(p)
            if queued >= 16:
                pipe.execute()
                queued = 0
    for p in range(n):
        flush(p)
    pipe.execute()
    return counts


# --- planning and committing ------------------------------------------------------------------
def claimer_key(consumer: str, topic: str) -> str:
    """String: "host pid" of the driver that took the owner key (its run record may not
    exist yet: a submit plans its ranges before it creates the record)."""
    return owner_key(consumer, topic) + ":driver"


def _refuse_if_owned(client: Any, consumer: str, topic: str, owner: str, claimer: str | None) -> None:
    """Raise when `owner` may still read the consumer: running, crashed mid-round, or not yet
    recorded by a driver that is alive. A run that was cleared (no record, driver gone) or
    finished owns nothing."""
    from recovery.tracking import runs
    try:
        rec = runs.get(client, owner)
    except RecoveryError:
        rec = None
    if rec is None:
        host, _, pid = (claimer or "").partition(" ")
        # (liveness is only knowable on this host; another host's claim counts as cleared)
        if host == socket.gethostname() and runs.driver_alive({"driver_host": host, "driver_pid": pid}):
            raise TopicError(f"consumer {consumer!r} of topic {topic!r} is being claimed by run "
                             f"{owner} (driver pid {pid} on {host}); stop it first")
        return        # cleared: nobody owns it any more
    status = runs.status_of(rec)
    if status == runs.RUNNING:
        raise TopicError(f"consumer {consumer!r} of topic {topic!r} is being read by run "
                         f"{owner} (driver pid {rec.get('driver_pid')} on "
                         f"{rec.get('driver_host')}); stop it first")
    if status == runs.CRASHED:
        raise TopicError(f"run {owner} of consumer {consumer!r} crashed mid-round; resume "
                         f"it first (`recovery recover {owner}` or `recovery submit "
                         f"--follow` again)")


def _claim(client: Any, consumer: str, topic: str, run_id: str) -> None:
    """One reader per consumer: refuse when another run of it is alive or crashed mid-round
    (its uncommitted messages would be read twice). Atomic: the owner is checked and taken in
    one WATCH/MULTI transaction, so of two claims racing exactly one wins (the other retries,
    sees the winner and is refused)."""
    key, driver = owner_key(consumer, topic), claimer_key(consumer, topic)

    def check_and_take(pipe: Any) -> None:
        owner, claimer = (_dec(v) if v is not None else None for v in pipe.mget(key, driver))
        if owner and owner != run_id:
            _refuse_if_owned(client, consumer, topic, owner, claimer)
        pipe.multi()
        pipe.set(key, run_id)
        pipe.set(driver, f"{socket.gethostname()} {os.getpid()}")

    client.transaction(check_and_take, key, driver)


def _share(budget: int, lags: list[int]) -> list[int]:
    """Split a task's budget over its partitions' lags fairly (water-filling)."""
    take = [0] * len(lags)
    left = budget
    active = [i for i, lag in enumerate(lags) if lag > 0]
    while left > 0 and active:
        each = max(1, left // len(active))
        nxt = []
        for i in active:
            if left <= 0:
                break
            t = min(each, lags[i] - take[i], left)
            take[i] += t
            left -= t
            if take[i] < lags[i]:
                nxt.append(i)
        active = nxt
    return take


def plan_spout(client: Any, wf: Workflow, spout: Component, run_id: str | None = None,
               follow: bool = False) -> dict[str, Any]:
    topic = spout.impl.param("topic") or ""
    n = require_topic(client, topic, spout.id)
    consumer = consumer_name(wf, spout.id)
    fmt = spout_format(client, spout)      # refused before the claim: no claim left behind
    if run_id is not None:
        _claim(client, consumer, topic, run_id)
    committed = committed_offsets(client, consumer, topic)
    ranges: dict[int, list[int]] = {}
    for p, (first, end) in enumerate(partition_bounds(client, topic, n)):
        start = committed.get(p, 0)
        trimmed = 0
        lowest = end if first is None else first
        if lowest > start:        # trimmed (MAXLEN/XTRIM) below where this consumer is
            trimmed, start = lowest - start, lowest
        ranges[p] = [start, max(start, end), trimmed]
    if follow:
        budget = wf.conf_int("topology.max.spout.pending", spout.id)
        if budget > 0:
            for index in range(spout.parallelism):
                mine = assign_partitions(n, spout.parallelism, index)
                takes = _share(budget, [ranges[p][1] - ranges[p][0] for p in mine])
                for p, t in zip(mine, takes):
                    ranges[p][1] = ranges[p][0] + t
    return {"topic": topic, "consumer": consumer, "partitions": n, "tasks": spout.parallelism,
            "format": fmt, "ranges": {str(p): r for p, r in ranges.items()}}


def plan_ranges(client: Any, wf: Workflow, run_id: str, follow: bool = False) -> str:
    """Each log spout's per-partition [committed, end) for the next round, as JSON for
    RunSpec.source_json. Bounded: end is where the stream ends now. `follow`: each spout task
    reads at most topology.max.spout.pending messages, shared fairly by its partitions."""
    plans = {s.id: plan_spout(client, wf, s, run_id, follow) for s in log_spouts(wf)}
    source_json = json.dumps(plans, sort_keys=True)
    if any(r[1] > r[0] for plan in plans.values() for r in plan["ranges"].values()):
        client.rpush(replay_ranges_key(run_id), source_json)
    return source_json


def planned_messages(source_json: str) -> tuple[int, int]:
    """(messages, trimmed) a plan reads / reports."""
    plans = json.loads(source_json or "{}")
    rs = [r for plan in plans.values() for r in plan.get("ranges", {}).values()]
    return sum(r[1] - r[0] for r in rs), sum(r[2] for r in rs)


_COMMIT = """
local n = 0
for i = 1, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    n = n + 1
  end
end
return n
"""


def commit_ranges(client: Any, wf: Workflow, source_json: str) -> None:
    """After the round settled: every root it read is complete, queued or dead, so each
    partition's committed offset moves to its range's end (never backwards)."""
    plans = json.loads(source_json or "{}")
    script = client.register_script(_COMMIT)
    for plan in plans.values():
        args: list[Any] = []
        for p, r in sorted(plan.get("ranges", {}).items(), key=lambda kv: int(kv[0])):
            args += [int(p), int(r[1])]
        if args:
            script(keys=[keys.offsets(plan["consumer"], plan["topic"])], args=args)


# --- reading, inside a Spark task ---------------------------------------------------------------
def _replay_plan(client: Any, run_id: str, spout_id: str) -> dict[str, Any] | None:
    """Root replay re-reads what the run read: the union of every plan's ranges."""
    merged: dict[str, Any] | None = None
    spans: dict[str, list[list[int]]] = {}
    for raw in client.lrange(replay_ranges_key(run_id), 0, -1):
        plan = json.loads(raw).get(spout_id)
        if plan is None:
            continue
        merged = merged or {k: v for k, v in plan.items() if k != "ranges"}
        for p, r in plan["ranges"].items():
            if r[1] > r[0]:
                spans.setdefault(p, []).append([r[0], r[1]])
    if merged is None:
        return None
    merged["spans"] = {}
    for p, ss in spans.items():
        ss.sort()
        out = [ss[0]]
        for a, b in ss[1:]:
            if a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        merged["spans"][p] = out
    return merged


def _raw_record(fields: dict) -> bytes:
    raw = fields.get(FIELD)
    if raw is not None:
        return raw
    # written by someone else (XADD with its own fields): the fields as one JSON object
    return json.dumps({_dec(k): _dec(v) for k, v in fields.items()}, sort_keys=True).encode()


def read_range(client: Any, topic: str, partition: int, start: int, end: int
               ) -> Iterator[list[tuple[int, bytes]]]:
    """Batches of (offset, raw record) for offsets in [start, end)."""
    if end <= start:
        return
    key = keys.topic_partition(topic, partition)
    lo, hi = f"{start}-0", f"{end - 1}-{MAX_SEQ}"
    while True:
        entries = client.xrange(key, lo, hi, count=READ_BATCH)
        if not entries:
            return
        yield [(entry_offset(eid), _raw_record(fields)) for eid, fields in entries]
        if len(entries) < READ_BATCH:
            return
        lo = _next_id(entries[-1][0])


def stream_source(runner: Any) -> Iterator[None]:
    """The spout task's partitions' planned ranges, read in XRANGE batches; each message a root
    tuple with message id (partition, offset)."""
    from recovery.connectors.files import decoder
    comp = runner.comp
    spec = runner.spec
    client = runner.client
    stream = comp.streams[0] if comp.streams else None
    stream_id = stream.id if stream else "default"
    replay = spec.replay_roots is not None
    plan = json.loads(spec.source_json or "{}").get(runner.component_id)
    if plan is None and replay:
        plan = _replay_plan(client, spec.run_id, runner.component_id)
    if plan is None:
        runner.log(f"no offset ranges were planned for spout {runner.component_id!r} in round "
                   f"{spec.round}: nothing read", "warning")
        yield None
        return
    fmt = plan.get("format") or "text"
    decode = decoder(fmt, stream.fields if stream else ())
    topic, n, tasks = plan["topic"], int(plan["partitions"]), comp.parallelism
    mine = assign_partitions(n, tasks, runner.index)
    if not mine:
        runner.log(f"there are more tasks than partitions (tasks: {tasks}; partitions: {n} in "
                   f"topic {topic!r}): task {runner.index} of {runner.component_id!r} is idle",
                   "warning")
        runner.stats["idle_tasks"] = runner.stats.get("idle_tasks", 0) + 1
        yield None
        return
    if replay:
        spans = {int(p): ss for p, ss in plan.get("spans", {}).items()}
    else:
        # A round resumed after it committed (the driver died between the commit and the
        # run record's update) must not read its messages again.
        committed = committed_offsets(client, plan["consumer"], topic)
        spans = {}
        for p in mine:
            start, end, trimmed = plan["ranges"][str(p)]
            if trimmed:
                runner.stats["trimmed"] = runner.stats.get("trimmed", 0) + trimmed
                runner.log(f"topic {topic!r} partition {p}: {trimmed} messages below offset "
                           f"{start} were trimmed from the stream before they were read",
                           "warning")
            spans[p] = [[max(start, min(committed.get(p, 0), end)), end]]
    for p in mine:
        for start, end in spans.get(p, ()):
            have = 0
            for batch in read_range(client, topic, p, start, end):
                for offset, raw in batch:
                    runner.spout_record((p, offset), lambda raw=raw: decode(raw), raw, stream_id, fmt)
                have += len(batch)
                yield None
            missing = (end - start) - have
            if missing > 0 and not replay:
                runner.stats["trimmed"] = runner.stats.get("trimmed", 0) + missing
                runner.log(f"topic {topic!r} partition {p}: {missing} planned messages in "
                           f"[{start}, {end}) were gone (trimmed or deleted) when read", "warning")
    yield None


# --- reporting ---------------------------------------------------------------------------------
def partition_report(client: Any, wf: Workflow) -> list[dict[str, Any]]:
    """Per log spout and partition: committed offset, first offset still stored, end, lag."""
    out = []
    for spout in log_spouts(wf):
        topic = spout.impl.param("topic") or ""
        n = topic_partitions(client, topic)
        if n is None:
            out.append({"spout": spout.id, "topic": topic, "missing": True})
            continue
        consumer = consumer_name(wf, spout.id)
        committed = committed_offsets(client, consumer, topic)
        for p, (first, end) in enumerate(partition_bounds(client, topic, n)):
            c = committed.get(p, 0)
            out.append({"spout": spout.id, "topic": topic, "consumer": consumer, "partition": p,
                        "task_index": p % spout.parallelism, "committed": c, "first": first,
                        "end": end, "lag": max(0, end - c),
                        "trimmed": max(0, (end if first is None else first) - c)})
    return out


def warnings_for(wf: Workflow, client: Any | None = None, stats: dict | None = None) -> list[str]:
    """One line per condition a user should know about: idle spout tasks, trimmed messages."""
    out = []
    for spout in log_spouts(wf):
        topic = spout.impl.param("topic") or ""
        n = topic_partitions(client, topic) if client is not None else None
        if n is not None and spout.parallelism > n:
            out.append(f"spout {spout.id!r} has more tasks than topic {topic!r} has partitions "
                       f"(tasks: {spout.parallelism}; partitions: {n}): "
                       f"{spout.parallelism - n} tasks are idle")
        trimmed = ((stats or {}).get(spout.id) or {}).get("trimmed", 0)
        if trimmed:
            out.append(f"spout {spout.id!r}: {trimmed} messages of topic {topic!r} were trimmed "
                       "from the stream before they were read (not waited for)")
    return out


def format_report(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        if r.get("missing"):
            lines.append(f"{r['spout']} <- topic {r['topic']}: does not exist")
            continue
        extra = f"  (trimmed {r['trimmed']})" if r.get("trimmed") else ""
        lines.append(f"{r['spout']} <- {r['topic']}[{r['partition']}]  task {r['task_index']}  "
                     f"committed {r['committed']}  end {r['end']}  lag {r['lag']}{extra}")
    return lines
