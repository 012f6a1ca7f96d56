"""KafkaSpout's offset model, for every partitioned-log source (one module, several transports:
redis_stream/ reads Redis Streams, kafka/ reads a Kafka cluster).

A *consumer* (Kafka's consumer group: by default the workflow's name and the spout's id) has a
committed offset per partition, kept in Redis (keys.offsets), which is authoritative: every
offset below it was read by a settled round, so its root is complete, queued for recovery or
dead. A failed root never holds its partition back (it is in the recovery queue).

A round's work is fixed before it starts: :func:`plan_ranges` decides each partition's
``[start, end)`` on the driver and returns it as JSON for ``RunSpec.source_json`` and the run
record, so a crashed round that is resumed reads exactly the same messages; Spark tasks read
their partitions' ranges (never through the driver); :func:`commit_ranges` commits the ends once
the round settled, and each transport is told (a Kafka group is committed, a Redis topic is
trimmed by its retention).

What differs between transports is behind :class:`LogTransport`: how many partitions a topic
has, where each partition starts and ends, what a committed offset below the log start means,
and what happens after a commit.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from redis import Redis

from recovery.errors import RecoveryError
from recovery.model.record import RunRecord
from recovery.model.workflow import Component, SourceImpl, Workflow
from recovery.tracking import ids, keys, ledger, runs

log = logging.getLogger(__name__)


class TopicError(RecoveryError):
    """A topic that does not exist, or is used inconsistently (exit code 2)."""


class SourceUnanswered(TopicError):
    """The log's server (a Kafka broker) did not answer within the source's timeout: it may
    be down or hung, and answer again later. `partition` None: its metadata did not come."""

    def __init__(self, message: str, server: str, topic: str, partition: int | None, timeout: float):
        super().__init__(message)
        self.server, self.topic, self.partition, self.timeout = server, topic, partition, timeout

    def place(self, partitions: int | None = None) -> str:
        """The server and what of the topic it did not answer for, as the lines say it; its
        metadata: every partition (`partitions`, the topic's count when known)."""
        if self.partition is not None:
            what = f"partition {self.partition}"
        elif partitions:
            what = f"partitions 0-{partitions - 1}" if partitions > 1 else "partition 0"
        else:
            what = "metadata"
        return f"broker {self.server} (topic {self.topic!r} {what})"

    @classmethod
    def raised_by(cls, err: BaseException) -> SourceUnanswered | None:
        """The SourceUnanswered that made `err` (a failed round): in its chain, or, from a
        Spark task, named in the worker's traceback that Spark's error carries (its text is all
        that crosses), rebuilt from its message. None: `err` is something else."""
        seen: BaseException | None = err
        while seen is not None:
            if isinstance(seen, SourceUnanswered):
                return seen
            seen = seen.__cause__ or seen.__context__
        m = _UNANSWERED_TEXT.search(str(err))
        if m is None:
            return None
        return cls(m["message"], m["server"], m["topic"], int(m["partition"]) if m["partition"] else None,
                   float(m["timeout"]) if m["timeout"] else 0.0)


# a kafka SourceUnanswered's message as a Spark task's traceback shows it (kafka/client.py words it)
_UNANSWERED_TEXT = re.compile(
    rf"{SourceUnanswered.__name__}: (?P<message>kafka topic '(?P<topic>[^']*)' at (?P<server>\S+) \(spout [^)]*\): "
    r"(?:partition (?P<partition>\d+) )?[^\n]*?(?:within (?P<timeout>[\d.]+) s)?[^\n]*)")


def text_of(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def source_param(spout: Component, name: str) -> str | None:
    """An attribute of a spout's <source> (None for a spout without one)."""
    return spout.impl.param(name) if isinstance(spout.impl, SourceImpl) else None


def assign_partitions(num_partitions: int, total_tasks: int, task_index: int) -> list[int]:
    """KafkaUtils.calculatePartitionsForTask: indexes task_index, task_index + total_tasks, ..."""
    if total_tasks < 1 or not 0 <= task_index < total_tasks:
        raise ValueError(f"task index {task_index} out of range for {total_tasks} tasks")
    return list(range(task_index, num_partitions, total_tasks))


def committed_offsets(client: Redis, consumer: str, topic: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in client.hgetall(keys.offsets(consumer, topic)).items()}


# --- what a transport provides ------------------------------------------------------------------
@dataclass
class TopicView:
    """One spout's topic as a round's planning sees it. `store` names the topic in Redis keys
    (offsets, owner); `topic` is its own name; `bounds[p]` is (first offset still stored or
    None when the partition is empty, end: one past the last offset)."""
    topic: str
    store: str
    consumer: str
    partitions: int
    format: str
    bounds: Callable[[dict[int, int]], list[tuple[int | None, int]]]
    # where a partition with nothing committed starts (None: offset 0)
    first_start: Callable[[int, int | None, int], int] | None = None
    # where a partition with a committed offset goes on: (partition, committed, first, end) ->
    # (start, messages gone before they were read); the transport may refuse (TopicError).
    # None: from the committed offset, or from the first offset stored when that is later
    resume: Callable[[int, int, int | None, int], tuple[int, int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # fields the transport's reader needs
    close: Callable[[], None] = lambda: None


class LogTransport(Protocol):
    source_type: str

    def consumer(self, wf: Workflow, spout: Component) -> str: ...

    def store_topic(self, spout: Component) -> str: ...

    def open(self, client: Redis, wf: Workflow, spout: Component, reset: str | None) -> TopicView:
        """The spout's topic, checked (one-line TopicError when it cannot be read)."""
        ...

    def claimed(self, client: Redis, view: TopicView) -> None:
        """The consumer was claimed by a run (a Redis topic's retention waits for it from now on)."""
        ...

    def committed(self, client: Redis, wf: Workflow, plans: list[dict[str, Any]]) -> None:
        """The plans' ends were committed in Redis (a Kafka group is told, a Redis topic trimmed)."""
        ...

    def settled(self, client: Redis, wf: Workflow, run_id: str) -> None:
        """A round of `run_id` settled (after a batch as after recover): what the transport
        publishes of it (a Kafka group's committed offsets)."""
        ...


# The log sources, by source type: the module that registers each one's transport.
LOG_SOURCES = {"redis-stream": "recovery.connectors.redis_stream.offsets",
               "kafka": "recovery.connectors.kafka.transport"}
_TRANSPORTS: dict[str, LogTransport] = {}


def register(transport: LogTransport) -> None:
    _TRANSPORTS[transport.source_type] = transport


def transport_for(source_type: str) -> LogTransport:
    if source_type not in _TRANSPORTS:
        # (imported on first use: each transport's module imports this one)
        importlib.import_module(LOG_SOURCES[source_type])
    return _TRANSPORTS[source_type]


def transport_of(spout: Component) -> LogTransport:
    assert isinstance(spout.impl, SourceImpl)
    return transport_for(spout.impl.type)


def log_spouts(wf: Workflow) -> list[Component]:
    """The spouts that read a partitioned log (a redis-stream or kafka source)."""
    return [c for c in wf.spouts if isinstance(c.impl, SourceImpl) and c.impl.type in LOG_SOURCES]


def consumer_of(wf: Workflow, spout: Component) -> tuple[str, str]:
    """(consumer, the topic's name in Redis keys) of a log spout."""
    t = transport_of(spout)
    return t.consumer(wf, spout), t.store_topic(spout)


# --- one reader per consumer --------------------------------------------------------------------
def _refuse_if_owned(client: Redis, consumer: str, topic: str, owner: str, claimer: str | None) -> None:
    """Raise when `owner` may still read the consumer: running, crashed mid-round, or not yet
    recorded by a driver that is alive. A run that was cleared (no record, driver gone) or
    finished owns nothing."""
    try:
        rec: RunRecord | None = runs.get(client, owner)
    except RecoveryError:
        rec = None
    if rec is None:
        host, _, pid = (claimer or "").partition(" ")
        # (liveness is only knowable on this host; another host's claim counts as cleared)
        if host == socket.gethostname() and runs.local_pid_alive(int(pid) if pid.isdigit() else None):
            raise TopicError(f"consumer {consumer!r} of topic {topic!r} is being claimed by run "
                             f"{owner} (driver pid {pid} on {host}); stop it first")
        return        # cleared: nobody owns it any more
    status = runs.status_of(rec)
    if status == runs.RUNNING:
        raise TopicError(f"consumer {consumer!r} of topic {topic!r} is being read by run "
                         f"{owner} (driver pid {rec.driver_pid} on "
                         f"{rec.driver_host}); stop it first")
    if status == runs.CRASHED:
        raise TopicError(f"run {owner} of consumer {consumer!r} crashed mid-round; resume "
                         f"it first (`recovery recover {owner}` or `recovery submit "
                         f"--follow` again)")


def _claim(client: Redis, consumer: str, topic: str, run_id: str) -> None:
    """One reader per consumer: refuse when another run of it is alive or crashed mid-round
    (its uncommitted messages would be read twice). Atomic: the owner is checked and taken in
    one WATCH/MULTI transaction, so of two claims racing exactly one wins (the other retries,
    sees the winner and is refused)."""
    key, driver = keys.consumer_owner(consumer, topic), keys.consumer_claimer(consumer, topic)

    def check_and_take(pipe: Any) -> None:
        # (two GETs: a cluster's transaction refuses MGET, though both keys share one slot)
        owner, claimer = (text_of(v) if v is not None else None for v in (pipe.get(key), pipe.get(driver)))
        if owner and owner != run_id:
            _refuse_if_owned(client, consumer, topic, owner, claimer)
        pipe.multi()
        pipe.set(key, run_id)
        pipe.set(driver, f"{socket.gethostname()} {os.getpid()}")

    client.transaction(check_and_take, key, driver)


def share_budget(budget: int, lags: list[int]) -> list[int]:
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


# --- planning and committing ----------------------------------------------------------------
def plan_spout(client: Redis, wf: Workflow, spout: Component, run_id: str | None = None,
               follow: bool = False, reset: str | None = None) -> dict[str, Any]:
    """One spout's plan: per partition [start, end, trimmed]. `trimmed` counts messages below
    the committed offset's successor that were gone before they were read (a transport that
    refuses that raises instead)."""
    transport = transport_of(spout)
    view = transport.open(client, wf, spout, reset)    # refused before the claim: no claim left behind
    try:
        if run_id is not None:
            _claim(client, view.consumer, view.store, run_id)
            transport.claimed(client, view)
        committed = committed_offsets(client, view.consumer, view.store)
        ranges: dict[int, list[int]] = {}
        for p, (first, end) in enumerate(view.bounds(committed)):
            if p in committed and view.resume is not None:
                start, trimmed = view.resume(p, committed[p], first, end)
            else:
                start = committed[p] if p in committed else view.first_start(p, first, end) if view.first_start else 0
                lowest = end if first is None else first
                trimmed = 0
                if lowest > start:        # gone (trimmed, retention) below where this consumer is
                    trimmed, start = lowest - start, lowest
            ranges[p] = [start, max(start, end), trimmed]
    finally:
        view.close()
    if follow:
        budget = wf.settings(spout.id).max_spout_pending
        if budget > 0:
            for index in range(spout.parallelism):
                mine = assign_partitions(view.partitions, spout.parallelism, index)
                takes = share_budget(budget, [ranges[p][1] - ranges[p][0] for p in mine])
                for p, t in zip(mine, takes):
                    ranges[p][1] = ranges[p][0] + t
    plan = {"topic": view.topic, "consumer": view.consumer, "partitions": view.partitions,
            "tasks": spout.parallelism, "format": view.format,
            "ranges": {str(p): r for p, r in ranges.items()}, **view.extra}
    if view.store != view.topic:
        plan["store"] = view.store
    return plan


def check_plans(client: Redis, wf: Workflow, reset: str | None = None) -> None:
    """Every log spout's next round can be planned (raises the first refusal: a topic that does
    not exist, a cluster out of reach, a committed offset the log no longer holds...), without
    claiming a consumer or writing anything: the checks a submit makes before Spark starts."""
    for spout in log_spouts(wf):
        plan_spout(client, wf, spout, None, False, reset)


def store_topic(plan: dict[str, Any]) -> str:
    """The name a plan's topic has in Redis keys."""
    return str(plan.get("store") or plan["topic"])


def plan_ranges(client: Redis, wf: Workflow, run_id: str, follow: bool = False, reset: str | None = None) -> str:
    """Each log spout's per-partition [committed, end) for the next round, as JSON for
    RunSpec.source_json. Bounded: end is where the partition ends now. `follow`: each spout task
    reads at most topology.max.spout.pending messages, shared fairly by its partitions.
    `reset` (earliest | latest): where a consumer whose committed offset is below the log's
    start goes on (a transport that refuses that without it says so)."""
    plans = {s.id: plan_spout(client, wf, s, run_id, follow, reset) for s in log_spouts(wf)}
    source_json = json.dumps(plans, sort_keys=True)
    if any(r[1] > r[0] for plan in plans.values() for r in plan["ranges"].values()):
        key = keys.replay_ranges(run_id)
        last = client.lindex(key, -1)
        joined = _joined(json.loads(last), plans) if last is not None else None
        if joined is not None:    # a follow run's next batch: the list stays one entry long
            client.lset(key, -1, json.dumps(joined, sort_keys=True))
        else:
            client.rpush(key, source_json)
    return source_json


def _joined(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """`before` and `after` as one plan when `after` reads on where `before` ended in every
    partition (what root replay re-reads is the same); None otherwise."""
    if before.keys() != after.keys():
        return None
    out = {}
    for spout, plan in after.items():
        old = before[spout]
        if {k: v for k, v in old.items() if k != "ranges"} != {k: v for k, v in plan.items() if k != "ranges"} \
                or old["ranges"].keys() != plan["ranges"].keys():
            return None
        ranges = {}
        for p, (start, end, trimmed) in plan["ranges"].items():
            o_start, o_end, o_trimmed = old["ranges"][p]
            if end == start:                  # nothing read now: the range before
                ranges[p] = [o_start, o_end, o_trimmed + trimmed]
            elif o_end == o_start:            # nothing read before: this range
                ranges[p] = [start, end, o_trimmed + trimmed]
            elif start == o_end:
                ranges[p] = [o_start, end, o_trimmed + trimmed]
            else:
                return None
        out[spout] = {**plan, "ranges": ranges}
    return out


def replay_plan(client: Redis, run_id: str, spout_id: str) -> dict[str, Any] | None:
    """Root replay re-reads what the run read: the union of every plan's ranges ("spans")."""
    merged: dict[str, Any] | None = None
    spans: dict[str, list[list[int]]] = {}
    for raw in client.lrange(keys.replay_ranges(run_id), 0, -1):
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


def planned_messages(source_json: str) -> tuple[int, int]:
    """(messages, trimmed) a plan reads / reports."""
    plans = json.loads(source_json or "{}")
    rs = [r for plan in plans.values() for r in plan.get("ranges", {}).values()]
    return sum(r[1] - r[0] for r in rs), sum(r[2] for r in rs)


def trimmed_lines(source_json: str) -> list[str]:
    """One line per partition whose consumer's committed offset was trimmed away before it was
    read (the plan reads from the first message left)."""
    out = []
    for plan in json.loads(source_json or "{}").values():
        for p, (start, _end, trimmed) in sorted(plan.get("ranges", {}).items(), key=lambda kv: int(kv[0])):
            if trimmed:
                out.append(f"topic {plan['topic']!r} partition {p}: consumer {plan['consumer']!r} committed "
                           f"offset {start - trimmed}, but the stream now starts at {start}: {trimmed} "
                           f"messages were trimmed before they were read")
    return out


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


def commit_offsets(client: Redis, key: str, offsets: dict[int, int]) -> None:
    """Move each partition's offset in the hash `key` forward to `offsets[p]`, never backwards."""
    args: list[Any] = []
    for p, o in sorted(offsets.items()):
        args += [int(p), int(o)]
    if args:
        client.register_script(_COMMIT)(keys=[key], args=args)


def commit_ranges(client: Redis, wf: Workflow, source_json: str) -> None:
    """After the round settled: every root it read is complete, queued or dead, so each
    partition's committed offset moves to its range's end (never backwards); then each
    transport is told (a Redis topic is trimmed by its retention, a Kafka group committed)."""
    plans = json.loads(source_json or "{}")
    by_transport: dict[str, list[dict[str, Any]]] = {}
    for spout_id, plan in plans.items():
        commit_offsets(client, keys.offsets(plan["consumer"], store_topic(plan)),
                       {int(p): int(r[1]) for p, r in plan.get("ranges", {}).items()})
        spout = wf.component(spout_id) if spout_id in {c.id for c in wf.spouts} else None
        if spout is not None and isinstance(spout.impl, SourceImpl) and spout.impl.type in LOG_SOURCES:
            by_transport.setdefault(spout.impl.type, []).append({**plan, "spout": spout_id})
    for typ, tplans in sorted(by_transport.items()):
        transport_for(typ).committed(client, wf, tplans)


def settled(client: Redis, wf: Workflow, run_id: str) -> None:
    """A round of `run_id` settled: every transport the workflow reads is told."""
    for typ in sorted({transport_of(s).source_type for s in log_spouts(wf)}):
        transport_for(typ).settled(client, wf, run_id)


# --- the contiguous prefix: what a consumer group is told ------------------------------------
def root_ids(spout_id: str, epoch: int, partition: int, offsets: np.ndarray) -> np.ndarray:
    """The root ids of messages (partition, offset) of a spout for `offsets` (uint64), as its
    tasks derive them (runtime.roots: ids.root_id(salt, (partition, offset)))."""
    salt = ids.name_salt(spout_id, str(epoch)) if epoch else ids.name_salt(spout_id)
    return np.asarray(ids.derive_many(salt, ids.pair_hashes(partition, offsets)), dtype=np.uint64)


SCAN_BATCH = 1 << 16     # offsets hashed at a time while looking for the first pending root


def acked_prefix(client: Redis, run_id: str, spout_id: str, epochs: list[int], read_to: dict[int, int],
                 since: dict[int, int]) -> dict[int, int]:
    """KafkaSpout's OffsetManager: per partition, the offset below which every root is complete
    or dead. A root queued for recovery holds its partition there; otherwise it is where the
    consumer has read to (`read_to`). `since` is a lower bound known to hold already (the last
    prefix found). O(queued roots + offsets scanned), and the queued roots grow with failures only."""
    queued = np.fromiter(ledger.queued_roots(client, run_id), dtype=np.uint64)
    out: dict[int, int] = {}
    for p, end in read_to.items():
        lo = min(since.get(p, 0), end)
        if queued.size == 0:
            out[p] = end
            continue
        found = end
        for a in _chunks(lo, end):
            offs = np.arange(a[0], a[1], dtype=np.uint64)
            hit = np.zeros(offs.size, dtype=bool)
            for epoch in epochs:
                hit |= np.isin(root_ids(spout_id, epoch, p, offs), queued)
            if hit.any():
                found = int(offs[int(np.argmax(hit))])
                break
        out[p] = found
    return out


def _chunks(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    for a in range(lo, hi, SCAN_BATCH):
        yield a, min(hi, a + SCAN_BATCH)
