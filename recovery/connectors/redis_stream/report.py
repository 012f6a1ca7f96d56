"""What the CLI shows about a run's log source (per-partition lag and warnings) and about topics
(`recovery topics`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis import Redis

from recovery.connectors import log_offsets
from recovery.connectors.kafka import report as kafka_report
from recovery.connectors.redis_stream import retention
from recovery.connectors.redis_stream.topics import (
    committed_offsets,
    consumer_name,
    log_spouts,
    partition_bounds,
    source_param,
    text_of,
    topic_info,
    topic_partitions,
)
from recovery.controlplane.connection import scan_keys
from recovery.model.partition import PartitionRow
from recovery.model.workflow import Workflow
from recovery.tracking import keys


# --- reporting ---------------------------------------------------------------------------------
def partition_report(client: Redis, wf: Workflow) -> list[PartitionRow]:
    """Per log spout and partition: committed offset, first offset still stored, end, lag (a
    kafka spout's rows: connectors.kafka.report)."""
    out = []
    for spout in log_offsets.log_spouts(wf):
        if spout.impl.kind == "source" and spout.impl.type == "kafka":
            out += kafka_report.partition_rows(client, wf, spout)
            continue
        topic = source_param(spout, "topic") or ""
        n = topic_partitions(client, topic)
        if n is None:
            out.append(PartitionRow(spout=spout.id, topic=topic, missing=True))
            continue
        consumer = consumer_name(wf, spout.id)
        committed = committed_offsets(client, consumer, topic)
        for p, (first, end) in enumerate(partition_bounds(client, topic, n)):
            c = committed.get(p, 0)
            out.append(PartitionRow(spout=spout.id, topic=topic, consumer=consumer, partition=p,
                                    task_index=p % spout.parallelism, committed=c, first=first,
                                    end=end, lag=max(0, end - c),
                                    trimmed=max(0, (end if first is None else first) - c)))
    return out


def warnings_for(wf: Workflow, client: Redis | None = None, trimmed_by_spout: Mapping[str, int] | None = None
                 ) -> list[str]:
    """One line per condition a user should know about: idle spout tasks, trimmed messages
    (`trimmed_by_spout`: the messages each spout found trimmed, over the run's rounds)."""
    out = []
    for spout in log_spouts(wf):
        topic = source_param(spout, "topic") or ""
        n = topic_partitions(client, topic) if client is not None else None
        if n is not None and spout.parallelism > n:
            out.append(f"spout {spout.id!r} has more tasks than topic {topic!r} has partitions "
                       f"(tasks: {spout.parallelism}; partitions: {n}): "
                       f"{spout.parallelism - n} tasks are idle")
        trimmed = (trimmed_by_spout or {}).get(spout.id, 0)
        if trimmed:
            out.append(f"spout {spout.id!r}: {trimmed} messages of topic {topic!r} were trimmed "
                       "from the stream before they were read (not waited for)")
    return out


def format_report(rows: list[PartitionRow]) -> list[str]:
    lines = []
    for r in rows:
        if r.missing:
            lines.append(f"{r.spout} <- topic {r.topic}: {r.error or 'does not exist'}")
            continue
        extra = f"  (trimmed {r.trimmed})" if r.trimmed else ""
        lines.append(f"{r.spout} <- {r.topic}[{r.partition}]  task {r.task_index}  "
                     f"committed {r.committed}  end {r.end}  lag {r.lag}{extra}")
    return lines


# --- topics ------------------------------------------------------------------------------------
def topic_names(client: Redis) -> list[str]:
    """Every topic in this Redis (a SCAN for their metadata keys, on every master of a cluster)."""
    head = keys.topic_meta("T")[:-2]          # "<prefix>topic:{"
    names = set()
    for raw in scan_keys(client, head + "*}"):
        name = text_of(raw)[len(head):-1]
        if "{" not in name and "}" not in name:
            names.add(name)
    return sorted(names)


def topic_report(client: Redis, topic: str) -> dict[str, Any] | None:
    """A topic's partitions (first offset stored, end, length), retention and consumers (each
    one's committed offsets and lag); None when it does not exist."""
    info = topic_info(client, topic)
    if info is None:
        return None
    n = info["partitions"]
    policy = retention.topic_retention(client, topic)
    bounds = partition_bounds(client, topic, n)
    with client.pipeline(transaction=False) as pipe:
        for p in range(n):
            pipe.xlen(keys.topic_partition(topic, p))
        lengths = pipe.execute()
    consumers = []
    for name in retention.known_consumers(client, topic):
        committed = committed_offsets(client, name, topic)
        consumers.append({"consumer": name, "committed": {str(p): committed.get(p, 0) for p in range(n)},
                          "lag": sum(max(0, end - committed.get(p, 0)) for p, (_, end) in enumerate(bounds))})
    return {**info, "retention": policy.text if policy else None,
            "messages": sum(int(x) for x in lengths),
            "partition_offsets": [{"partition": p, "first": first, "end": end, "length": int(lengths[p])}
                                  for p, (first, end) in enumerate(bounds)],
            "consumers": consumers}


def format_topic(t: dict[str, Any]) -> list[str]:
    kept = t["retention"] or "every message (no retention)"
    lines = [f"{t['topic']}  {t['partitions']} partition{'s' if t['partitions'] != 1 else ''}  "
             f"{t['messages']} messages stored  retention: {kept}"]
    for p in t["partition_offsets"]:
        first = "-" if p["first"] is None else p["first"]
        lines.append(f"  [{p['partition']}] first {first}  end {p['end']}  stored {p['length']}")
    for c in t["consumers"]:
        offs = ", ".join(f"{p}: {o}" for p, o in c["committed"].items())
        lines.append(f"  consumer {c['consumer']}: committed {{{offs}}}  lag {c['lag']}")
    return lines
