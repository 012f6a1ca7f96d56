"""The built-in sources: which function runs each source type in its spout task (`SOURCES`,
`source_for`), and which one a block at a time for batch consumers (`BATCH_SOURCES`).

A source function takes the spout task's runner (connectors.runner.SourceRunner) and emits
its records through it. Each entry of `SOURCES` makes that function from the task's Spark
input: only a Spark source has one (the chunks of the reader partitions the task owns,
spark_source.read_partitions), the others read what their task's range or queue names.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from recovery.connectors import files, spark_source
from recovery.connectors.file_blocks import file_source_blocks
from recovery.connectors.kafka.reader import kafka_source
from recovery.connectors.queue import queue_source
from recovery.connectors.redis_stream.reader import stream_source
from recovery.connectors.runner import BatchSourceRunner, SourceRunner

SourceFunction = Callable[[SourceRunner], Iterator[None]]

# Source type -> the source function of a spout task, made from the task's Spark input.
SOURCES: dict[str, Callable[[Iterable[Any]], SourceFunction]] = {
    "file": lambda _: files.file_source,
    "queue": lambda _: queue_source,
    "redis-stream": lambda _: stream_source,
    "kafka": lambda _: kafka_source,
    spark_source.SOURCE_TYPE: lambda chunks: functools.partial(spark_source.spark_source, chunks),
}

# Source type -> its source function a block of records at a time (runtime.batch.reads_in_batches).
BATCH_SOURCES: dict[str, Callable[[BatchSourceRunner], Iterator[None]]] = {"file": file_source_blocks}

# Planning a round on the driver: a Spark source's partitions are read by Spark.
reads_with_spark = spark_source.reads_with_spark
read_partitions = spark_source.read_partitions
planning_settings_of = spark_source.planning_settings_of


def source_for(source_type: str, spark_input: Iterable[Any]) -> SourceFunction:
    """The function that runs a `<source type=...>` in its spout task."""
    try:
        make = SOURCES[source_type]
    except KeyError:
        raise ValueError(f"unknown source type {source_type!r} (known: {', '.join(SOURCES)})") from None
    return make(spark_input)


def batch_source_for(source_type: str) -> Callable[[BatchSourceRunner], Iterator[None]]:
    """The function that runs a `<source type=...>` a block at a time (batch consumers)."""
    try:
        return BATCH_SOURCES[source_type]
    except KeyError:
        raise ValueError(f"source type {source_type!r} has no batch reader (those that do: "
                         f"{', '.join(BATCH_SOURCES)})") from None
