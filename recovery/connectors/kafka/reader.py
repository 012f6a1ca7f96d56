"""The task side of a kafka spout: its partitions' planned ranges read by offset (assigned,
never subscribed); a record that cannot be decoded, or is larger than max-bytes, is a failed
tuple at the spout, queued with its raw bytes for recovery, never a crash."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from redis import Redis

from recovery.connectors.files import decoder
from recovery.connectors.kafka import client as kafka
from recovery.connectors.kafka.settings import FORMAT_OF, KafkaSource, source_of
from recovery.connectors.log_reader import Record, log_source
from recovery.connectors.runner import SourceRunner

OVERSIZED = "oversized"       # the format an oversized record is queued with (its first bytes kept)
KEPT_BYTES = 256


def _oversized(size: int, limit: int) -> Callable[[], list | None]:
    def refuse() -> list | None:
        raise ValueError(f"the message has {size} bytes, more than the source's max-bytes={limit}")
    return refuse


class KafkaReader:
    def __init__(self, src: KafkaSource, fields: tuple[str, ...]):
        self.src = src
        self.fmt = FORMAT_OF[src.decode]
        self.decode = decoder(self.fmt, fields)
        self.consumer = kafka.consumer(src, **{"auto.offset.reset": "error"})

    def gone_reason(self, partition: int, offset: int) -> str:
        return (f"message gone: kafka topic {self.src.topic!r} partition {partition} offset {offset} was removed "
                "from the log (its retention or compaction) before root replay read it again; it cannot be replayed")

    def read(self, partition: int, start: int, end: int) -> Iterator[tuple[list[Record], int]]:
        for batch, gone in kafka.read(self.src, self.consumer, partition, start, end):
            out: list[Record] = []
            for m in batch:
                raw: Any = m.value() or b""
                if len(raw) > self.src.max_bytes:
                    refuse = _oversized(len(raw), self.src.max_bytes)
                    out.append((kafka.offset_of(m), raw[:KEPT_BYTES], refuse, OVERSIZED))
                else:
                    out.append((kafka.offset_of(m), raw, functools.partial(self.decode, raw), self.fmt))
            yield out, gone

    def close(self) -> None:
        kafka.close(self.consumer)


def kafka_source(runner: SourceRunner) -> Iterator[None]:
    stream = runner.comp.streams[0] if runner.comp.streams else None
    fields = stream.fields if stream else ()
    src = source_of(runner.wf, runner.comp)

    def open_reader(_plan: dict[str, Any], _client: Redis) -> KafkaReader:
        return KafkaReader(src, fields)
    return log_source(runner, open_reader)
