"""What `status`, the follow summary and the metrics show of a kafka spout: per partition the
offset read to (Redis), the offset committed to the group (the acked prefix), the end and the
lag a lag tool sees (end minus the group's committed offset)."""
from __future__ import annotations

from redis import Redis

from recovery.connectors.kafka import client as kafka
from recovery.connectors.kafka.settings import source_of
from recovery.connectors.kafka.transport import group_key, store_topic_of
from recovery.connectors.log_offsets import TopicError, committed_offsets
from recovery.model.partition import PartitionRow
from recovery.model.workflow import Component, Workflow


def partition_rows(client: Redis, wf: Workflow, spout: Component) -> list[PartitionRow]:
    src = source_of(wf, spout)
    read_to = committed_offsets(client, src.group, store_topic_of(src.topic))
    group = {int(k): int(v) for k, v in client.hgetall(group_key(src.group, src.topic)).items()}
    try:
        c = kafka.consumer(src, **{"auto.offset.reset": "error"})
        try:
            n = kafka.partition_count(src, c)
            bounds = kafka.bounds(src, c, n)
        finally:
            kafka.close(c)
    except TopicError as err:
        return [PartitionRow(spout=spout.id, topic=src.topic, missing=True, error=str(err))]
    out = []
    for p, (first, end) in enumerate(bounds):
        committed = group.get(p, 0)
        out.append(PartitionRow(spout=spout.id, topic=src.topic, consumer=src.group, partition=p,
                                task_index=p % spout.parallelism, committed=committed, read=read_to.get(p, 0),
                                first=first, end=end, lag=max(0, end - committed),
                                trimmed=max(0, (end if first is None else first) - read_to.get(p, 0))))
    return out
