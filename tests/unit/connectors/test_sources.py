"""recovery.connectors.sources: every source type a workflow may name runs, by one registry."""
from __future__ import annotations

import functools

import pytest

from recovery.connectors import files, sources, spark_source
from recovery.connectors.file_blocks import file_source_blocks
from recovery.connectors.kafka.reader import kafka_source
from recovery.connectors.queue import queue_source
from recovery.connectors.redis_stream.reader import stream_source
from recovery.model.xml.build import SINK_REQUIRED, SOURCE_REQUIRED


def test_every_source_type_the_parser_accepts_has_a_source_function():
    assert set(sources.SOURCES) == set(SOURCE_REQUIRED)
    assert sources.source_for("file", []) is files.file_source
    assert sources.source_for("queue", []) is queue_source
    assert sources.source_for("redis-stream", []) is stream_source
    assert sources.source_for("kafka", []) is kafka_source


def test_a_spark_source_reads_the_chunks_of_its_task():
    chunks = [(0, b"chunk")]
    made = sources.source_for("spark", chunks)
    assert isinstance(made, functools.partial)
    assert made.func is spark_source.spark_source and made.args == (chunks,)


def test_a_file_source_reads_blocks_for_batch_consumers():
    assert sources.batch_source_for("file") is file_source_blocks
    with pytest.raises(ValueError, match="source type 'queue' has no batch reader"):
        sources.batch_source_for("queue")


def test_an_unknown_type_is_named():
    assert "jsonl" in SINK_REQUIRED   # a sink type is not a source type
    with pytest.raises(ValueError, match=r"unknown source type 'jsonl' \(known: file, queue, redis-stream, kafka, spark\)"):
        sources.source_for("jsonl", [])
