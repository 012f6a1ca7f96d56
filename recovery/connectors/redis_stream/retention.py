"""Topic retention: how long a topic keeps its messages, and the trimming that applies it.

A topic's policy is stored with it (the `retention` field of its metadata), set by
`recovery produce TOPIC FILE --retention POLICY`:

* ``committed``: keep what some known consumer has not committed yet;
* ``COUNT`` (``1000000``): keep the last COUNT messages of each partition;
* ``AGE`` (``30m``, ``12h``, ``7d``, ``2w``, ``90s``): keep the messages produced in the last AGE.

A topic without a policy keeps every message. The policy is applied with XTRIM MINID when a
run commits its offsets (offsets.commit_ranges) and after `recovery produce`.

Kafka trims by retention whatever its consumers do: a consumer that falls behind loses messages
(offset out of range). Here trimming never removes a message a known consumer has not
committed: every policy's point is lowered to the slowest known consumer's committed offset, so
a COUNT or AGE topic can hold more than its policy while a consumer lags, and a consumer that
is never run again holds the topic (`recovery topics TOPIC --drop-consumer NAME` lets it go).
A consumer is known from the first round that reads the topic (offsets.plan_spout), and
consumers that committed before a policy was set are found when it is set.

What recovery needs is not in the topic: a failed tuple's queue entry holds its values (a spout
record that did not decode, its raw bytes), so recovering it reads no message. A crashed round
is resumed on ranges at or after its consumer's committed offset, which trimming keeps.
Root replay (`recover --strategy root-replay`, kept for comparison) re-reads the ranges a run
read: a failed root whose message was trimmed since is reported gone (reader.py, through
SourceRunner.message_gone) and is dead with that error, never counted complete.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import cast

from redis import Redis

from recovery.connectors.redis_stream.topics import (
    TopicError,
    committed_offsets,
    partition_bounds,
    require_topic,
    text_of,
)
from recovery.controlplane.connection import scan_keys
from recovery.tracking import keys

COMMITTED, COUNT, AGE = "committed", "count", "age"
FIELD = "retention"           # in the topic's metadata hash
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+)([smhdw])")


@dataclass(frozen=True)
class Retention:
    kind: str                 # COMMITTED, COUNT or AGE
    amount: int = 0           # COUNT: messages per partition; AGE: seconds
    text: str = COMMITTED     # as given (and stored)


def parse_retention(text: str, where: str = "--retention") -> Retention:
    """`committed`, a message count or an age (a number and s, m, h, d or w); a one-line
    TopicError naming `where` otherwise."""
    value = text.strip().lower()
    if value == COMMITTED:
        return Retention(COMMITTED, 0, COMMITTED)
    if value.isdigit() and int(value) >= 1:
        return Retention(COUNT, int(value), value)
    age = _AGE.fullmatch(value)
    if age and int(age.group(1)) >= 1:
        return Retention(AGE, int(age.group(1)) * _UNITS[age.group(2)], value)
    raise TopicError(f"{where}: expected 'committed', a message count (1000000) or an age (30m, "
                     f"12h, 7d), got {text!r}")


def topic_retention(client: Redis, topic: str) -> Retention | None:
    raw = client.hget(keys.topic_meta(topic), FIELD)
    if raw is None:
        return None
    return parse_retention(text_of(raw), f"topic {topic!r} (key {keys.topic_meta(topic)}, field {FIELD})")


def set_retention(client: Redis, topic: str, retention: Retention) -> None:
    """Store the topic's policy; consumers that committed before it are made known first, so
    that the first trim already waits for them."""
    require_topic(client, topic)
    found = list(_consumers_with_offsets(client, topic))
    if found:
        client.sadd(keys.topic_consumers(topic), *found)
    client.hset(keys.topic_meta(topic), FIELD, retention.text)


def _consumers_with_offsets(client: Redis, topic: str) -> list[str]:
    head, tail = keys.offsets("\0", topic).split("\0")
    pattern = keys.offsets("*", topic)
    out = []
    for raw in scan_keys(client, pattern):
        key = text_of(raw)
        if key.startswith(head) and key.endswith(tail):
            out.append(key[len(head):len(key) - len(tail)])
    return out


def register_consumer(client: Redis, topic: str, consumer: str) -> None:
    client.sadd(keys.topic_consumers(topic), consumer)


def known_consumers(client: Redis, topic: str) -> list[str]:
    return sorted(text_of(c) for c in client.smembers(keys.topic_consumers(topic)))


def drop_consumer(client: Redis, topic: str, consumer: str) -> bool:
    """Forget a consumer: trimming no longer waits for it (its committed offsets stay)."""
    return bool(client.srem(keys.topic_consumers(topic), consumer))


# --- trim points -----------------------------------------------------------------------------
def keep_from(retention: Retention, end: int, slowest: int | None, age_point: int) -> int:
    """The lowest offset a partition keeps: the policy's point, lowered to the slowest known
    consumer's committed offset (`slowest`; None: no consumer known). `committed` without a
    consumer keeps everything; `age_point` is the first offset produced after the age cutoff."""
    if retention.kind == COMMITTED:
        point = 0 if slowest is None else slowest
    elif retention.kind == COUNT:
        point = end - retention.amount
    else:
        point = age_point
    if slowest is not None:
        point = min(point, slowest)
    return max(0, min(point, end))


def _age_point(client: Redis, topic: str, partition: int, cutoff: float, first: int, end: int) -> int:
    """The first offset of the oldest batch produced after `cutoff`; every message below it was
    produced before it. A partition without batch times (written by another producer) keeps
    everything."""
    key = keys.topic_times(topic, partition)
    after = cast(list[bytes], client.zrangebyscore(key, f"({cutoff!r}", "+inf", start=0, num=1))
    if after:
        return int(after[0])
    return first if client.zcard(key) == 0 else end


def trim_points(client: Redis, topic: str, retention: Retention | None = None,
                now: float | None = None) -> dict[int, tuple[int | None, int]]:
    """Per partition (first offset stored, offset kept from) under the topic's policy (or
    `retention`); {} when the topic has none."""
    retention = retention or topic_retention(client, topic)
    if retention is None:
        return {}
    n = require_topic(client, topic)
    consumers = [committed_offsets(client, c, topic) for c in known_consumers(client, topic)]
    cutoff = (time.time() if now is None else now) - retention.amount
    out: dict[int, tuple[int | None, int]] = {}
    for p, (first, end) in enumerate(partition_bounds(client, topic, n)):
        slowest = min((c.get(p, 0) for c in consumers), default=None)
        age = _age_point(client, topic, p, cutoff, first or 0, end) if retention.kind == AGE else 0
        out[p] = (first, keep_from(retention, end, slowest, age))
    return out


def _drop_times(client: Redis, topic: str, partition: int, keep: int) -> None:
    """Forget the batch times of batches wholly below `keep` (the oldest first, a page at a
    time: each trim drops the few batches trimmed since the last)."""
    key = keys.topic_times(topic, partition)
    while True:
        low = [int(m) for m in cast(list[bytes], client.zrange(key, 0, 99))]
        gone = [str(a) for a, b in zip(low, low[1:]) if b <= keep]
        if gone:
            client.zrem(key, *gone)
        if len(gone) < 99:
            return


def apply_retention(client: Redis, topic: str, now: float | None = None) -> int:
    """Trim the topic's partitions by its policy (XTRIM MINID, exact); returns how many
    messages went. Safe to run at any time, from any process: the points only move forward."""
    trimmed = 0
    for p, (first, keep) in trim_points(client, topic, now=now).items():
        if first is not None and keep > first:
            trimmed += int(client.xtrim(keys.topic_partition(topic, p), minid=f"{keep}-0", approximate=False))
        _drop_times(client, topic, p, keep)
    return trimmed
