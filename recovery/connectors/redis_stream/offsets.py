"""Offsets: which messages a round reads (planned on the driver before it starts, one reader per
consumer) and the commit of the ends once the round settled."""
from __future__ import annotations

import json
import logging
import os
import socket
from typing import Any

import redis
from redis import Redis

from recovery.connectors.redis_stream import retention
from recovery.connectors.redis_stream.topics import (
    TopicError,
    committed_offsets,
    consumer_name,
    log_spouts,
    partition_bounds,
    require_topic,
    source_param,
    spout_format,
    text_of,
)
from recovery.errors import RecoveryError
from recovery.model.record import RunRecord
from recovery.model.workflow import Component, Workflow
from recovery.tracking import keys, runs

log = logging.getLogger(__name__)


def assign_partitions(num_partitions: int, total_tasks: int, task_index: int) -> list[int]:
    """KafkaUtils.calculatePartitionsForTask: indexes task_index, task_index + total_tasks, ..."""
    if total_tasks < 1 or not 0 <= task_index < total_tasks:
        raise ValueError(f"task index {task_index} out of range for {total_tasks} tasks")
    return list(range(task_index, num_partitions, total_tasks))


# --- planning and committing ------------------------------------------------------------------
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


def plan_spout(client: Redis, wf: Workflow, spout: Component, run_id: str | None = None,
               follow: bool = False) -> dict[str, Any]:
    topic = source_param(spout, "topic") or ""
    n = require_topic(client, topic, spout.id)
    consumer = consumer_name(wf, spout.id)
    fmt = spout_format(client, spout)      # refused before the claim: no claim left behind
    if run_id is not None:
        _claim(client, consumer, topic, run_id)
        retention.register_consumer(client, topic, consumer)   # trimming waits for it from now on
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
        budget = wf.settings(spout.id).max_spout_pending
        if budget > 0:
            for index in range(spout.parallelism):
                mine = assign_partitions(n, spout.parallelism, index)
                takes = _share(budget, [ranges[p][1] - ranges[p][0] for p in mine])
                for p, t in zip(mine, takes):
                    ranges[p][1] = ranges[p][0] + t
    return {"topic": topic, "consumer": consumer, "partitions": n, "tasks": spout.parallelism,
            "format": fmt, "ranges": {str(p): r for p, r in ranges.items()}}


def plan_ranges(client: Redis, wf: Workflow, run_id: str, follow: bool = False) -> str:
    """Each log spout's per-partition [committed, end) for the next round, as JSON for
    RunSpec.source_json. Bounded: end is where the stream ends now. `follow`: each spout task
    reads at most topology.max.spout.pending messages, shared fairly by its partitions."""
    plans = {s.id: plan_spout(client, wf, s, run_id, follow) for s in log_spouts(wf)}
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


def commit_ranges(client: Redis, wf: Workflow, source_json: str) -> None:
    """After the round settled: every root it read is complete, queued or dead, so each
    partition's committed offset moves to its range's end (never backwards); then each topic
    is trimmed by its retention (retention.py)."""
    plans = json.loads(source_json or "{}")
    script = client.register_script(_COMMIT)
    for plan in plans.values():
        args: list[Any] = []
        for p, r in sorted(plan.get("ranges", {}).items(), key=lambda kv: int(kv[0])):
            args += [int(p), int(r[1])]
        if args:
            script(keys=[keys.offsets(plan["consumer"], plan["topic"])], args=args)
    for topic in sorted({plan["topic"] for plan in plans.values()}):
        try:
            retention.apply_retention(client, topic)   # what every consumer has committed may go
        except (redis.ResponseError, RecoveryError) as err:
            # trimming is housekeeping: a server that refuses it (XTRIM MINID needs Redis 6.2),
            # or a policy stored by hand that does not parse, never fails a settled round
            log.warning("topic %r was not trimmed by its retention: %s", topic, err)
