"""The built-in sinks: which class each sink type is (`SINKS`, `make_sink`), and the check at
submit that every sink's place can take a new run's output (`check_folders`).

All are idempotent bolts that make their input durable, then ack it (commit, then ack;
recovery/connectors/sink_base.py): a file sink (file_sinks.py) writes one part per
(round, task) under a deterministic name, so a re-executed task overwrites its own part
(sink_folders.py: the parts and their folders); a Redis hash sink (redis_sink.py) sets fields;
a table sink (postgres.py, delta.py; table_sinks.py on the driver) commits each part once.

The sink types are one registry: model/workflow.py's SINK_TYPES says what the model knows of
each (the attributes it requires, its kind, whether it takes dead letters) and SINKS here its
class; the schema lists the same names, and tests/unit/connectors/test_sink_registry.py fails
when the three disagree. Adding a sink type is an entry in each, its class and its section of
docs/xml.md.

The names these modules define that callers use stay importable from here.
"""
from __future__ import annotations

from collections.abc import Callable

from recovery.api.components import Bolt
from recovery.connectors.arrow_encoding import json_lines
from recovery.connectors.capture_sink import CaptureSink
from recovery.connectors.delta import DeltaSink
from recovery.connectors.file_sinks import JsonlSink, ParquetSink
from recovery.connectors.postgres import PostgresSink
from recovery.connectors.redis_sink import RedisHashSink
from recovery.connectors.sink_base import BufferedSink, SinkFolderError, SinkTableError
from recovery.connectors.sink_folders import (
    PART,
    FileSink,
    check_file_folders,
    committed_parts,
    file_sinks,
    part_files,
    part_name,
    read_jsonl_dir,
    replace_other_runs,
)
from recovery.connectors.table_sinks import TableClear, TableSink, check_tables, clear_tables, table_sinks
from recovery.model.workflow import SinkImpl, Workflow

__all__ = ["PART", "SINKS", "BufferedSink", "CaptureSink", "DeltaSink", "FileSink", "JsonlSink", "ParquetSink",
           "PostgresSink", "RedisHashSink", "SinkFolderError", "SinkTableError", "TableClear", "TableSink",
           "check_file_folders", "check_folders", "check_tables", "clear_tables", "committed_parts", "file_sinks",
           "json_lines", "make_sink", "part_files", "part_name", "read_jsonl_dir", "replace_other_runs",
           "table_sinks"]

# Sink type (a key of model.workflow.SINK_TYPES) -> its class (psycopg and deltalake are
# imported by the table sinks' tasks only).
SINKS: dict[str, Callable[[SinkImpl, str], BufferedSink]] = {
    "jsonl": JsonlSink, "parquet": ParquetSink, "redis": RedisHashSink, "postgres": PostgresSink, "delta": DeltaSink,
    "capture": CaptureSink}


def make_sink(impl: SinkImpl, base_dir: str) -> Bolt:
    try:
        return SINKS[impl.type](impl, base_dir)
    except KeyError:
        raise ValueError(f"unknown sink type {impl.type!r} (known: {', '.join(SINKS)})") from None


def check_folders(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: each table sink's table can take the
    run's rows (table_sinks.check_tables), then each file sink's folder its parts
    (sink_folders.check_file_folders), the dead-letter sink's too. `run_id` None: a run id not
    chosen yet."""
    wf = wf.with_dead_letter_sink()
    check_tables(wf, run_id)
    check_file_folders(wf, run_id)
