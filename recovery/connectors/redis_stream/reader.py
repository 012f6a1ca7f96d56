"""The task side of a redis-stream spout: reading its partitions' planned ranges with XRANGE
in batches (connectors.log_reader runs the plan; root replay re-reads the ranges a run recorded)."""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any, cast

from redis import Redis

from recovery.connectors.files import decoder
from recovery.connectors.log_reader import Record, log_source
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


class StreamReader:
    """A redis-stream topic's partitions: offsets are dense (the producer numbers them), so an
    offset of the range that is not read was trimmed or deleted."""

    def __init__(self, plan: dict[str, Any], client: Redis, fields: tuple[str, ...]):
        self.client = client
        self.topic = plan["topic"]
        self.partitions = int(plan["partitions"])
        self.fmt = plan.get("format") or "text"
        self.decode = decoder(self.fmt, fields)
        self._firsts: dict[int, int | None] | None = None

    def gone_reason(self, partition: int, offset: int) -> str:
        """Why a message root replay needs is not in the stream: trimmed (below the first offset
        the partition still stores) or deleted."""
        if self._firsts is None:
            self._firsts = dict(enumerate(f for f, _ in partition_bounds(self.client, self.topic, self.partitions)))
        first = self._firsts.get(partition)
        how = ("was trimmed from the stream (its retention, or XTRIM)" if first is None or offset < first
               else "was deleted from the stream")
        return (f"message gone: topic {self.topic!r} partition {partition} offset {offset} (entry id "
                f"{entry_id(offset)}) {how} before root replay read it again; it cannot be replayed")

    def read(self, partition: int, start: int, end: int) -> Iterator[tuple[list[Record], int]]:
        have = 0
        for batch in read_range(self.client, self.topic, partition, start, end):
            have += len(batch)
            yield [(offset, raw, functools.partial(self.decode, raw), self.fmt) for offset, raw in batch], 0
        yield [], max(0, (end - start) - have)

    def close(self) -> None:
        return None


def stream_source(runner: SourceRunner) -> Iterator[None]:
    """The spout task's partitions' planned ranges, read in XRANGE batches; each message a root
    tuple with message id (partition, offset)."""
    stream = runner.comp.streams[0] if runner.comp.streams else None
    fields = stream.fields if stream else ()
    return log_source(runner, lambda plan, client: StreamReader(plan, client, fields))
