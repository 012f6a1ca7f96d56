"""Redis-stream topics: their partitions (one Redis stream each), formats, entry ids and offsets, and the
producer (recovery produce)."""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from redis import Redis

from recovery.connectors.log_offsets import (  # noqa: F401  (names this module always had)
    TopicError,
    committed_offsets,
    source_param,
    text_of,
)
from recovery.controlplane.connection import is_cluster
from recovery.model.workflow import Component, Workflow
from recovery.tracking import keys
from recovery.tracking.ids import stable_hash

SOURCE_TYPE = "redis-stream"
FIELD = b"v"                  # the stream entry field holding the record
PRODUCE_BATCH = 500           # records per producer script call
MAX_SEQ = (1 << 64) - 1
FORMATS = ("text", "jsonl")


# --- names, assignment, entry ids ----------------------------------------------------------
def log_spouts(wf: Workflow) -> list[Component]:
    """The spouts reading Redis-stream topics (log_offsets.log_spouts: every log source)."""
    return [c for c in wf.spouts if c.impl.kind == "source" and c.impl.type == SOURCE_TYPE]


def consumer_name(wf: Workflow, spout_id: str) -> str:
    """A consumer is one spout of one workflow (Kafka's consumer group)."""
    return f"{wf.name}:{spout_id}"


def entry_id(offset: int) -> str:
    return f"{offset}-1"


def entry_offset(eid: bytes | str) -> int:
    if isinstance(eid, bytes):
        eid = eid.decode()
    return int(eid.split("-", 1)[0])


def next_entry_id(eid: bytes | str) -> str:
    """The smallest stream id after `eid` (for XRANGE paging without '(' ranges)."""
    if isinstance(eid, bytes):
        eid = eid.decode()
    ms, seq = (int(x) for x in eid.split("-", 1))
    return f"{ms + 1}-0" if seq == MAX_SEQ else f"{ms}-{seq + 1}"


# --- topics ----------------------------------------------------------------------------------
def topic_info(client: Redis, topic: str) -> dict[str, Any] | None:
    raw = client.hgetall(keys.topic_meta(topic))
    if not raw or b"partitions" not in raw:
        return None
    info = {text_of(k): text_of(v) for k, v in raw.items()}
    return {"topic": topic, "partitions": int(info["partitions"]), "format": info.get("format", ""),
            "created": float(info.get("created") or 0)}


def topic_partitions(client: Redis, topic: str) -> int | None:
    raw = client.hget(keys.topic_meta(topic), "partitions")
    return int(raw) if raw is not None else None


def require_topic(client: Redis, topic: str, who: str | None = None) -> int:
    """The topic's partition count; a one-line TopicError naming it when it does not exist."""
    n = topic_partitions(client, topic)
    if n is None:
        by = f" (read by spout {who!r})" if who else ""
        raise TopicError(f"topic {topic!r}{by} does not exist in this Redis; create it with "
                         f"`recovery produce {topic} FILE --partitions N`")
    return n


def spout_format(client: Redis, spout: Component) -> str:
    """The record format: the source's format= attribute, else the one the topic was produced
    with, else text."""
    fmt = source_param(spout, "format")
    if fmt is None:
        fmt = (topic_info(client, source_param(spout, "topic") or "") or {}).get("format") or "text"
    if fmt not in FORMATS:
        raise TopicError(f'spout {spout.id!r}: <source type="{SOURCE_TYPE}"> format must be one of '
                         f"{', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def check_topics(client: Redis, wf: Workflow) -> None:
    """Every topic the workflow reads exists (raises TopicError naming the first that does not)
    and every format is known."""
    for spout in log_spouts(wf):
        require_topic(client, source_param(spout, "topic") or "", spout.id)
        spout_format(client, spout)


def create_topic(client: Redis, topic: str, partitions: int | None, fmt: str | None = None) -> int:
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


def partition_bounds(client: Redis, topic: str, partitions: int) -> list[tuple[int | None, int]]:
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


# --- producing -------------------------------------------------------------------------------
# Appends a batch to one partition atomically with consecutive offsets after the last one
# (the meta counter survives a stream trimmed to nothing), and notes when the batch was written
# (its first offset in the partition's times: what an age retention trims by).
_APPEND = """
local field = 'next:' .. ARGV[1]
local nxt = tonumber(redis.call('HGET', KEYS[1], field) or '0')
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #top > 0 then
  local ms = tonumber(string.match(top[1][1], '^(%d+)'))
  if ms + 1 > nxt then nxt = ms + 1 end
end
if #ARGV > 2 then
  redis.call('ZADD', KEYS[3], ARGV[2], string.format('%d', nxt))
end
for i = 3, #ARGV do
  redis.call('XADD', KEYS[2], string.format('%d-1', nxt), 'v', ARGV[i])
  nxt = nxt + 1
end
redis.call('HSET', KEYS[1], field, string.format('%d', nxt))
return nxt
"""


def partition_of(key: Any, partitions: int) -> int:
    """A record key's partition: a stable hash (the same in every process), mod N."""
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if not isinstance(key, str):
        key = json.dumps(key, sort_keys=True) if isinstance(key, (dict, list)) else str(key)
    return stable_hash(key) % partitions


def produce(client: Redis, topic: str, records: Iterable[tuple[Any, bytes]], partitions: int | None = None,
            fmt: str | None = None) -> dict[int, int]:
    """Append (key, payload) records, key-hashed to partitions, in pipelined batches; creates
    the topic when `partitions` is given. Returns how many records went to each partition."""
    n = create_topic(client, topic, partitions, fmt)
    script = client.register_script(_APPEND)
    meta = keys.topic_meta(topic)
    counts = {p: 0 for p in range(n)}
    buffers: dict[int, list[bytes]] = {p: [] for p in range(n)}
    pipe = client.pipeline(transaction=False)
    # a Redis Cluster's pipeline refuses scripts: there each batch is one call (a whole batch
    # of records still goes in one round trip)
    target = client if is_cluster(client) else pipe
    queued = 0

    def flush(p: int) -> None:
        nonlocal queued
        if buffers[p]:
            script(keys=[meta, keys.topic_partition(topic, p), keys.topic_times(topic, p)],
                   args=[p, repr(time.time()), *buffers[p]], client=target)
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
