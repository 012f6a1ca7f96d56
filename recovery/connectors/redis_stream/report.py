"""What the CLI shows about a run's log source: per-partition lag and warnings."""
from __future__ import annotations

from typing import Any

from redis import Redis

from recovery.connectors.redis_stream.offsets import committed_offsets
from recovery.connectors.redis_stream.topics import (
    consumer_name,
    log_spouts,
    partition_bounds,
    source_param,
    topic_partitions,
)
from recovery.model.workflow import Workflow


# --- reporting ---------------------------------------------------------------------------------
def partition_report(client: Redis, wf: Workflow) -> list[dict[str, Any]]:
    """Per log spout and partition: committed offset, first offset still stored, end, lag."""
    out = []
    for spout in log_spouts(wf):
        topic = source_param(spout, "topic") or ""
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


def warnings_for(wf: Workflow, client: Redis | None = None, stats: dict | None = None) -> list[str]:
    """One line per condition a user should know about: idle spout tasks, trimmed messages."""
    out = []
    for spout in log_spouts(wf):
        topic = source_param(spout, "topic") or ""
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
