"""The task side of a redis-stream spout: reading its partitions' planned ranges with XRANGE
in batches (root replay re-reads the ranges a run recorded)."""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any, cast

from redis import Redis

from recovery.connectors.files import decoder
from recovery.connectors.redis_stream.offsets import assign_partitions, committed_offsets
from recovery.connectors.redis_stream.topics import (
    FIELD,
    MAX_SEQ,
    entry_id,
    entry_offset,
    next_entry_id,
    partition_bounds,
    text_of,
)
from recovery.connectors.runner import SourceRunner
from recovery.tracking import keys

READ_BATCH = 1000             # entries per XRANGE


# --- reading, inside a Spark task ---------------------------------------------------------------
def _replay_plan(client: Redis, run_id: str, spout_id: str) -> dict[str, Any] | None:
    """Root replay re-reads what the run read: the union of every plan's ranges."""
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


def _raw_record(fields: dict) -> bytes:
    raw = fields.get(FIELD)
    if raw is not None:
        return raw
    # written by someone else (XADD with its own fields): the fields as one JSON object
    return json.dumps({text_of(k): text_of(v) for k, v in fields.items()}, sort_keys=True).encode()


def read_range(client: Redis, topic: str, partition: int, start: int, end: int
               ) -> Iterator[list[tuple[int, bytes]]]:
    """Batches of (offset, raw record) for offsets in [start, end)."""
    if end <= start:
        return
    key = keys.topic_partition(topic, partition)
    lo, hi = f"{start}-0", f"{end - 1}-{MAX_SEQ}"
    while True:
        entries = cast(list[tuple[bytes, dict]], client.xrange(key, lo, hi, count=READ_BATCH))
        if not entries:
            return
        yield [(entry_offset(eid), _raw_record(fields)) for eid, fields in entries]
        if len(entries) < READ_BATCH:
            return
        lo = next_entry_id(entries[-1][0])


def gone_reason(topic: str, partition: int, offset: int, first: int | None) -> str:
    """The error of a root whose message root replay found gone: trimmed (below the first offset
    the partition still stores) or deleted."""
    how = ("was trimmed from the stream (its retention, or XTRIM)" if first is None or offset < first
           else "was deleted from the stream")
    return (f"message gone: topic {topic!r} partition {partition} offset {offset} (entry id "
            f"{entry_id(offset)}) {how} before root replay read it again; it cannot be replayed")


def _report_gone(runner: SourceRunner, topic: str, partition: int, start: int, end: int, first: int | None,
                 stream_id: str, fmt: str) -> None:
    """Offsets [start, end) of a range the run read are no longer in the stream: each one's
    root, when root replay re-emits it, is dead (SourceRunner.message_gone)."""
    for offset in range(start, end):
        runner.message_gone((partition, offset), gone_reason(topic, partition, offset, first), stream_id, fmt)


def stream_source(runner: SourceRunner) -> Iterator[None]:
    """The spout task's partitions' planned ranges, read in XRANGE batches; each message a root
    tuple with message id (partition, offset)."""
    comp = runner.comp
    spec = runner.spec
    client = runner.client
    assert client is not None   # the runner connects for a log source (TaskRunner._needs_redis)
    stream = comp.streams[0] if comp.streams else None
    stream_id = stream.id if stream else "default"
    replay = spec.root_replay
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
    # root replay: the first offset each partition still stores, to say why a message is gone
    firsts = dict(enumerate(f for f, _ in partition_bounds(client, topic, n))) if replay else {}
    for p in mine:
        for start, end in spans.get(p, ()):
            have = 0
            expected = start   # (root replay) the next offset the range should hold
            for batch in read_range(client, topic, p, start, end):
                for offset, raw in batch:
                    if replay and offset > expected:
                        _report_gone(runner, topic, p, expected, offset, firsts.get(p), stream_id, fmt)
                    expected = max(expected, offset + 1)
                    runner.spout_record((p, offset), functools.partial(decode, raw), raw, stream_id, fmt)
                have += len(batch)
                yield None
            if replay and end > expected:
                _report_gone(runner, topic, p, expected, end, firsts.get(p), stream_id, fmt)
            missing = (end - start) - have
            if missing > 0 and not replay:
                runner.stats["trimmed"] = runner.stats.get("trimmed", 0) + missing
                runner.log(f"topic {topic!r} partition {p}: {missing} planned messages in "
                           f"[{start}, {end}) were gone (trimmed or deleted) when read", "warning")
    yield None


