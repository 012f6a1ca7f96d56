"""The task side of a partitioned-log spout (redis-stream or kafka): reading the planned ranges
of the partitions the task owns (log_offsets.assign_partitions), each message a root tuple whose
message id is (partition, offset); root replay re-reads the ranges the run recorded."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from redis import Redis

from recovery.connectors.log_offsets import assign_partitions, committed_offsets, replay_plan, store_topic
from recovery.connectors.runner import SourceRunner

# One message read: (offset, the raw record kept if it fails, its decoder, the format it is
# queued with so that a replay decodes it the same way).
Record = tuple[int, Any, Callable[[], list | None], str]


class PartitionReader(Protocol):
    """What a transport reads a partition with, inside the spout's task."""

    fmt: str   # the format its records are queued with

    def gone_reason(self, partition: int, offset: int) -> str:
        """The error of a root whose message root replay did not find at `offset` (removed by
        the topic's retention or trimming): names the topic, the partition and the offset."""
        ...

    def read(self, partition: int, start: int, end: int) -> Iterator[tuple[list[Record], int]]:
        """Batches of records with offsets in [start, end), in offset order; with each batch,
        how many offsets of the range were found gone (removed by the topic's retention or
        trimming) since the last batch."""
        ...

    def close(self) -> None: ...


def log_source(runner: SourceRunner, open_reader: Callable[[dict[str, Any], Redis], PartitionReader]) -> Iterator[None]:
    """The spout task's partitions' planned ranges, read in batches; each message a root tuple
    with message id (partition, offset)."""
    comp = runner.comp
    spec = runner.spec
    client = runner.client
    assert client is not None   # the runner connects for a log source (TaskRunner._needs_redis)
    stream = comp.streams[0] if comp.streams else None
    stream_id = stream.id if stream else "default"
    replay = spec.root_replay
    plan = json.loads(spec.source_json or "{}").get(runner.component_id)
    if plan is None and replay:
        plan = replay_plan(client, spec.run_id, runner.component_id)
    if plan is None:
        runner.log(f"no offset ranges were planned for spout {runner.component_id!r} in round "
                   f"{spec.round}: nothing read", "warning")
        yield None
        return
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
        committed = committed_offsets(client, plan["consumer"], store_topic(plan))
        spans = {}
        for p in mine:
            start, end, trimmed = plan["ranges"][str(p)]
            if trimmed:
                runner.stats["trimmed"] = runner.stats.get("trimmed", 0) + trimmed
                runner.log(f"topic {topic!r} partition {p}: {trimmed} messages below offset "
                           f"{start} were trimmed from the stream before they were read",
                           "warning")
            spans[p] = [[max(start, min(committed.get(p, 0), end)), end]]
    reader = open_reader(plan, client)
    try:
        for p in mine:
            for start, end in spans.get(p, ()):
                missing = 0
                expected = start   # (root replay) the next offset the range was read with
                for batch, gone in reader.read(p, start, end):
                    missing += gone
                    for offset, raw, decode, fmt in batch:
                        if replay and offset > expected:
                            _report_gone(runner, reader, p, expected, offset, stream_id)
                        expected = max(expected, offset + 1)
                        runner.spout_record((p, offset), decode, raw, stream_id, fmt)
                    yield None
                if replay and end > expected:
                    _report_gone(runner, reader, p, expected, end, stream_id)
                if missing > 0 and not replay:
                    runner.stats["trimmed"] = runner.stats.get("trimmed", 0) + missing
                    runner.log(f"topic {topic!r} partition {p}: {missing} planned messages in "
                               f"[{start}, {end}) were gone (trimmed or deleted) when read", "warning")
    finally:
        reader.close()
    yield None


def _report_gone(runner: SourceRunner, reader: PartitionReader, partition: int, start: int, end: int,
                 stream_id: str) -> None:
    """Offsets [start, end) of a range the run read were not read again by root replay: a
    failed root among them is dead, with the reason (SourceRunner.message_gone ignores the
    others: offsets that held no message of a failed root)."""
    for offset in range(start, end):
        runner.message_gone((partition, offset), reader.gone_reason(partition, offset), stream_id, reader.fmt)
