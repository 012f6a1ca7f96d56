"""recovery.connectors.spark_source without Spark: values converted for msgpack, a reader
partition's chunks (owning task, message ids), the spout task's source, the planning settings.
(With Spark: tests/integration/test_spark_source.py.)"""
from __future__ import annotations

import datetime
import decimal
import os
import time
from typing import Any

import msgpack
import pytest

from recovery.connectors import spark_source
from recovery.connectors.spark_source import ReadPlan, chunks_of_partition, converter
from recovery.errors import RecoveryError
from recovery.model.xml.parse import parse_string

NS = 'xmlns="urn:recovery:workflow:1"'


def workflow(source: str, fields: str = "id host", parallelism: int = 3, config: str = "") -> Any:
    return parse_string(f"""<workflow {NS} name="w">{config}
  <spout id="events" parallelism="{parallelism}">
    {source}
    <stream fields="{fields}"/>
  </spout>
  <bolt id="out"><sink type="jsonl" path="out"/><input from="events"/></bolt>
</workflow>""", base_dir="/data")


# --- values ------------------------------------------------------------------------------
def test_values_msgpack_carries_stay_as_they_are():
    assert converter(None) is None                   # ints, floats, strings, booleans: no work per value
    assert converter(("array", None))([1, None]) == [1, None]
    assert converter(("array", ("array", None)))([[1], None, []]) == [[1], None, []]


def test_dates_decimals_binary_maps_and_structs_become_what_msgpack_carries():
    assert converter("date")(datetime.date(2024, 1, 31)) == "2024-01-31"
    assert converter("decimal")(decimal.Decimal("12.50")) == "12.50"
    assert converter("decimal")(decimal.Decimal("1E-8")) == "0.00000001"
    assert converter("binary")(bytearray(b"\x00\xff")) == b"\x00\xff"
    assert converter("timestamp_ntz")(datetime.datetime(2024, 1, 31, 12, 0, 1)) == "2024-01-31T12:00:01"
    assert converter(("map", None, None))({1: "a", "b": None}) == {"1": "a", "b": None}   # keys as JSON's
    nested = ("struct", ("d", "xs"), ("date", ("array", "decimal")))
    assert converter(nested)((datetime.date(2024, 2, 1), [decimal.Decimal("1.5"), None])) == \
        {"d": "2024-02-01", "xs": ["1.5", None]}
    assert converter("str")(datetime.timedelta(seconds=90)) == "0:01:30"
    packed = msgpack.unpackb(msgpack.packb([converter(nested)((None, []))]))
    assert packed == [{"d": None, "xs": []}]


@pytest.fixture
def new_york():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_a_timestamp_is_its_instant_in_utc_whatever_the_workers_time_zone(new_york):
    # PySpark hands a worker a naive datetime in the worker's local time: 07:00 in New York
    local = datetime.datetime.fromtimestamp(datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC).timestamp())
    assert local.hour == 7
    assert converter("timestamp")(local) == "2024-01-01T12:00:00+00:00"


def test_kinds_follow_the_spark_schema():
    pytest.importorskip("pyspark")
    from pyspark.sql import types as T
    schema = T.StructType([T.StructField("i", T.LongType()), T.StructField("s", T.StringType()),
                           T.StructField("d", T.DateType()), T.StructField("ts", T.TimestampType()),
                           T.StructField("m", T.MapType(T.StringType(), T.DecimalType(10, 2))),
                           T.StructField("a", T.ArrayType(T.BinaryType())),
                           T.StructField("st", T.StructType([T.StructField("x", T.IntegerType())]))])
    assert [spark_source.kind_of(f.dataType) for f in schema.fields] == [
        None, None, "date", "timestamp", ("map", None, "decimal"), ("array", "binary"),
        ("struct", ("x",), (None,))]


# --- a reader partition's chunks ------------------------------------------------------------
def unpack(out: list[tuple[int, bytes]]) -> list[tuple[int, Any, list]]:
    return [(task, tuple(m) if isinstance(m, list) else m, v) for task, blob in out for m, v in msgpack.unpackb(blob)]


def test_partition_i_goes_to_task_i_mod_parallelism_with_its_row_index_ids():
    rp = ReadPlan("events", 3, (None, None), (), "row_index")
    rows = [(n, f"h{n}", "file:/d/a.parquet", n) for n in range(5)]
    for index in range(7):
        got = unpack(list(chunks_of_partition(rp, index, iter(rows))))
        assert {t for t, _, _ in got} == {index % 3}
        assert [(m, v) for _, m, v in got] == [(("file:/d/a.parquet", n), [n, f"h{n}"]) for n in range(5)]


def test_split_positions_count_rows_per_split_and_chunks_are_bounded():
    rp = ReadPlan("events", 2, (None,), (), "split")
    rows = [(n, "file:/d/a.csv", 0 if n < 1500 else 4096) for n in range(2500)]
    out = list(chunks_of_partition(rp, 1, iter(rows)))
    assert len(out) == 3 and all(len(msgpack.unpackb(b)) <= spark_source.CHUNK_ROWS for _, b in out)
    mids = [m for _, m, _ in unpack(out)]
    assert mids[:2] == [("file:/d/a.csv#0", 0), ("file:/d/a.csv#0", 1)]
    assert mids[1500] == ("file:/d/a.csv#4096", 0) and mids[-1] == ("file:/d/a.csv#4096", 999)
    assert len(set(mids)) == 2500


def test_id_field_values_are_message_ids_converted_like_values():
    one = ReadPlan("events", 2, (None,), ("date",), None)
    got = unpack(list(chunks_of_partition(one, 0, iter([("a", datetime.date(2024, 1, 2))]))))
    assert got == [(0, "2024-01-02", ["a"])]
    two = ReadPlan("events", 2, (None,), (None, None), None)
    assert unpack(list(chunks_of_partition(two, 3, iter([("a", "eu", 7)])))) == [(1, ("eu", 7), ["a"])]


def test_an_empty_partition_sends_nothing():
    assert list(chunks_of_partition(ReadPlan("events", 2, (None,), (), "split"), 0, iter(()))) == []


# --- the spout task's source ----------------------------------------------------------------
class Runner:
    """What spark_source uses of a TaskRunner: its component and spout_record."""

    def __init__(self, wf: Any, index: int = 0):
        self.wf = wf
        self.component_id = "events"
        self.comp = wf.component("events")
        self.index = index
        self.task_id = 1 + index
        self.records: list[tuple[Any, list, str]] = []

    def spout_record(self, message_id, decode, raw, stream="default", fmt="", attempt=1, replayed=False):
        self.records.append((message_id, decode(), stream))


def chunk(*records: tuple[Any, list]) -> tuple[int, bytes]:
    return 0, msgpack.packb(list(records))


def test_the_spout_task_emits_each_row_with_its_message_id():
    runner = Runner(workflow('<source type="spark" format="parquet" path="x"/>'))
    chunks = [chunk((("file:/x/a", 0), [1, "a"]), (("file:/x/a", 1), [2, None])), chunk((("file:/x/b", 0), [3, "c"]))]
    list(spark_source.spark_source(chunks, runner))
    assert runner.records == [(("file:/x/a", 0), [1, "a"], "default"), (("file:/x/a", 1), [2, None], "default"),
                              (("file:/x/b", 0), [3, "c"], "default")]


def test_an_id_field_value_twice_in_one_task_fails_it_with_one_line():
    runner = Runner(workflow('<source type="spark" format="parquet" path="x" id-field="id"/>'))
    chunks = [chunk((7, [7, "a"]), (8, [8, "b"])), chunk((7, [7, "c"]))]
    with pytest.raises(ValueError) as info:
        list(spark_source.spark_source(chunks, runner))
    assert str(info.value) == ("spout 'events': id-field 'id' value 7 is in two rows; message ids must be "
                               "unique within a run")
    assert [m for m, _, _ in runner.records] == [7, 8]   # nothing after it


def test_a_crash_injection_ends_the_spout_task_after_its_rows(monkeypatch):
    config = ('<config><property name="recovery.inject.c.component" value="events"/>'
              '<property name="recovery.inject.c.mode" value="crash"/>'
              '<property name="recovery.inject.c.task" value="1"/>'
              '<property name="recovery.inject.c.after" value="2"/></config>')
    runner = Runner(workflow('<source type="spark" format="parquet" path="x" id-field="id"/>', config=config))

    class Died(BaseException):
        pass

    def exit_(code: int) -> None:
        raise Died(code)
    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(Died):
        list(spark_source.spark_source([chunk(*[(n, [n, "x"]) for n in range(5)])], runner))
    assert [m for m, _, _ in runner.records] == [0, 1]


# --- the driver side without Spark ----------------------------------------------------------
def test_split_sizes_are_the_workflows():
    wf = workflow('<source type="spark" format="parquet" path="x">'
                  '<option name="spark.sql.files.maxPartitionBytes" value="1m"/>'
                  '<option name="mergeSchema" value="true"/></source>', parallelism=4)
    assert spark_source.planning_settings(wf.component("events")) == {
        "spark.sql.files.minPartitionNum": "4", "spark.sql.files.maxPartitionBytes": "1m"}


def test_the_test_kits_engine_says_it_cannot_read_with_spark():
    from recovery.testing.local_spark import LocalSession
    wf = workflow('<source type="spark" format="parquet" path="x"/>')
    with pytest.raises(RecoveryError, match=r"spout 'events' reads with Spark .* inputs=\{'events': \[\.\.\.\]\}"):
        spark_source.read_partitions(LocalSession(), wf, wf.component("events"), (0,), lambda: 0)  # type: ignore[arg-type]


def test_spark_error_line_is_the_java_exceptions_or_the_first_line():
    class Java:
        def toString(self) -> str:
            return "org.postgresql.util.PSQLException: Connection to 127.0.0.1:1 refused.\n\tat x"

    err = Exception("An error occurred while calling o1.load.\n: trace")
    err.java_exception = Java()  # type: ignore[attr-defined]
    assert spark_source.spark_error_line(err) == "org.postgresql.util.PSQLException: Connection to 127.0.0.1:1 refused."
    assert spark_source.spark_error_line(ValueError("[PATH_NOT_FOUND] Path does not exist: x.\nmore")) == \
        "[PATH_NOT_FOUND] Path does not exist: x."
