"""<source type="spark"> end to end on the shared local Spark session and a real Redis: Parquet,
CSV and JSON datasets of several files (more reader partitions than spout tasks), message ids
from an id-field and from file positions, values' types, a missing column, failures, a Spark
task retry, kill -9 of the driver, root replay, and a jdbc read from the test PostgreSQL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors import spark_source
from recovery.engine import frames
from recovery.jobs import recover
from recovery.model.graph import TaskMap
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs
from tests.integration.conftest import POSTGRES_JDBC_JAR, kill_when_round_0, sink_records, submit

FILES, PER_FILE = 5, 40
# small splits, so that the few small files make more reader partitions than spout tasks
SPLITS = '<option name="spark.sql.files.maxPartitionBytes" value="1200"/>'
FAST_RETRY = {"recovery.retry.delay.period.ms": "10"}
PASS_MODULE = '''
from recovery import BasicBolt, BatchBolt


class Pass(BasicBolt):
    def process(self, tup):
        self.emit(list(tup.values))


class PassBatch(BatchBolt):
    def process_batch(self, batch):
        self.emit_batch(batch)
'''


def row(i: int) -> dict[str, Any]:
    return {"id": i, "host": f"h{i % 7}", "bytes": i * 1.5, "ok": i % 2 == 0,
            "tags": [f"t{i % 3}", "x"], "maybe": None if i % 5 == 0 else i}


ROWS = [row(i) for i in range(FILES * PER_FILE)]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small dataset per format, FILES files each (shared by the module's tests)."""
    root = tmp_path_factory.mktemp("spark-source-data")
    for fmt in ("parquet", "csv", "json"):
        (root / fmt).mkdir()
    for f in range(FILES):
        part = ROWS[f * PER_FILE:(f + 1) * PER_FILE]
        pq.write_table(pa.Table.from_pylist(part), root / "parquet" / f"part-{f}.parquet", row_group_size=8)
        with open(root / "csv" / f"part-{f}.csv", "w") as fh:
            fh.write("id,host,bytes,ok\n")
            fh.writelines(f"{r['id']},{r['host']},{r['bytes']},{str(r['ok']).lower()}\n" for r in part)
        with open(root / "json" / f"part-{f}.json", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in part)
    return root


def expected(fields: str, rows: list[dict] = ROWS) -> list[str]:
    return sorted(json.dumps({f: r[f] for f in fields.split()}, sort_keys=True) for r in rows)


def workflow(folder: Path, source: str, fields: str, pass_bolt: str | None = None, parallelism: int = 2) -> Path:
    """events (the spark source) -> [pass (class pass_bolt) ->] out (a jsonl sink in folder/out/events)."""
    folder.mkdir(parents=True, exist_ok=True)
    upstream = "events"
    middle = ""
    if pass_bolt:
        (folder / "spark_source_pass.py").write_text(PASS_MODULE)
        middle = f'''
  <bolt id="pass" parallelism="2" class="spark_source_pass:{pass_bolt}">
    <input from="events" grouping="shuffle"/>
    <stream fields="{fields}"/>
  </bolt>'''
        upstream = "pass"
    xml = folder / "w.xml"
    xml.write_text(f'''<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="spark_source">
  <spout id="events" parallelism="{parallelism}">
    {source}
    <stream fields="{fields}"/>
  </spout>{middle}
  <bolt id="out" parallelism="2">
    <sink type="jsonl" path="out/events"/>
    <input from="{upstream}" grouping="shuffle"/>
  </bolt>
</workflow>
''')
    return xml


def rel(data: Path, folder: Path) -> str:
    """The dataset's path relative to the workflow's folder (resolved against it)."""
    folder.mkdir(parents=True, exist_ok=True)
    return os.path.relpath(data, folder)


def parquet_source(datasets: Path, folder: Path, extra: str = "") -> str:
    return f'<source type="spark" format="parquet" path="{rel(datasets / "parquet", folder)}"{extra}>{SPLITS}</source>'


def chunks(spark: Any, xml: Path) -> list[tuple[int, int, Any, list]]:
    """What the reading tasks send the spout tasks: (reader partition, owning task, message id,
    values) per row (the routing key of task t is t here), read as a round reads them."""
    wf = workflow_xml.load(xml)
    comp = wf.component("events")
    frame = spark_source.read_partitions(spark, wf, comp, tuple(range(comp.parallelism)), frames.partition_id)

    def tag(batches: Any) -> Any:
        import pickle

        import msgpack
        import pyarrow as pa
        i = frames.partition_id()
        rows = [(i, task, tuple(m) if isinstance(m, list) else m, v) for b in batches
                for task, blob in zip(b.column(1).to_pylist(), b.column(2).to_pylist())
                for m, v in msgpack.unpackb(blob)]
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(rows)], pa.binary())], names=["rows"])
    import pickle
    with spark_source.session_settings(spark, spark_source.planning_settings_of(wf)):
        return [r for row in frame.mapInArrow(tag, "rows binary").collect() for r in pickle.loads(row[0])]


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


# --- formats, types, ids -------------------------------------------------------------------
@pytest.mark.parametrize("fmt,fields,options", [
    ("parquet", "id host bytes ok tags maybe", ""),
    ("csv", "id host bytes ok", '<option name="header" value="true"/><option name="inferSchema" value="true"/>'),
    ("json", "id host bytes ok tags maybe", ""),
])
def test_a_dataset_reaches_the_sink_whole_with_its_types(spark, redis_url, redis_client, tmp_path, datasets,
                                                         fmt, fields, options):
    source = f'<source type="spark" format="{fmt}" path="{rel(datasets / fmt, tmp_path)}">{options}{SPLITS}</source>'
    xml = workflow(tmp_path, source, fields)
    got = chunks(spark, xml)
    partitions = {p for p, *_ in got}
    assert len(partitions) > 2, partitions            # more reader partitions than the 2 spout tasks
    assert all(task == p % 2 for p, task, _, _ in got)   # partition i -> task i mod parallelism
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.roots == len(ROWS)
    # ints, floats, strings, booleans, nulls and lists, as they were written
    assert sink_records(tmp_path / "out" / "events") == expected(fields)


def test_batch_components_take_a_spark_sources_rows(spark, redis_url, redis_client, tmp_path, datasets):
    source = f'<source type="spark" format="json" path="{rel(datasets / "json", tmp_path)}">{SPLITS}</source>'
    xml = workflow(tmp_path, source, "id host bytes ok tags maybe", pass_bolt="PassBatch")
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.components["pass"].executed == len(ROWS)
    assert sink_records(tmp_path / "out" / "events") == expected("id host bytes ok tags maybe")


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_default_message_ids_are_file_positions_and_stable(spark, tmp_path, datasets, fmt):
    # the CSV files are small: smaller splits, so that each is read in several
    options = ('<option name="header" value="true"/>' + SPLITS.replace("1200", "400")) if fmt == "csv" else SPLITS
    xml = workflow(tmp_path, f'<source type="spark" format="{fmt}" path="{rel(datasets / fmt, tmp_path)}">'
                             f'{options}</source>', "id host")
    first, second = chunks(spark, xml), chunks(spark, xml)
    assert sorted(first, key=repr) == sorted(second, key=repr)     # the same ids on a second read
    mids = [m for _, _, m, _ in first]
    assert len(set(mids)) == len(mids) == len(ROWS)
    by_row = {int(v[0]): m for _, _, m, v in first}
    if fmt == "parquet":      # (file, row index in the file)
        for i, m in by_row.items():
            assert m[0].endswith(f"part-{i // PER_FILE}.parquet") and m[1] == i % PER_FILE
    else:                     # (file#split start, row index in the split), several splits a file
        assert all(m[0].split("#")[0].endswith(f"part-{i // PER_FILE}.csv") for i, m in by_row.items())
        assert any(not m[0].endswith("#0") for m in by_row.values())


def test_id_field_values_are_the_message_ids(spark, tmp_path, datasets):
    xml = workflow(tmp_path, parquet_source(datasets, tmp_path, ' id-field="id"'), "host bytes")
    got = chunks(spark, xml)
    assert sorted(m for _, _, m, _ in got) == [r["id"] for r in ROWS]    # id need not be a field
    assert {m: v for _, _, m, v in got} == {r["id"]: [r["host"], r["bytes"]] for r in ROWS}
    # a catalog table (here a temporary view of the same files) names its id-field too
    spark.read.parquet(str(datasets / "parquet")).createOrReplaceTempView("spark_source_events")
    xml = workflow(tmp_path / "table", '<source type="spark" table="spark_source_events" id-field="id"/>', "host")
    assert sorted((m, v) for _, _, m, v in chunks(spark, xml)) == [(r["id"], [r["host"]]) for r in ROWS]


def test_duplicate_id_field_values_are_refused_before_anything_runs(spark, redis_url, redis_client, tmp_path):
    data = tmp_path / "dup"
    data.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), data / "a.parquet")
    pq.write_table(pa.table({"id": [4, 2], "v": ["d", "e"]}), data / "b.parquet")   # 2 again, another file
    xml = workflow(tmp_path, '<source type="spark" format="parquet" path="dup" id-field="id"/>', "v")
    code, _, err = cli(redis_url, "submit", str(xml))
    assert code == 2
    line = err.strip()
    assert "\n" not in line and f"{xml}:4:" in line and "'events'" in line, line
    assert "value 2 is in 2 rows" in line and "unique" in line, line
    assert runs.list_ids(redis_client) == []


def test_a_field_that_is_not_a_column_is_one_line_with_exit_2(spark, redis_url, redis_client, tmp_path, datasets):
    xml = workflow(tmp_path, parquet_source(datasets, tmp_path), "id hostname bytes")
    code, out, err = cli(redis_url, "submit", str(xml))
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line, line
    assert line.startswith(f"error: {xml}:4: spout 'events'"), line      # the file:line of its <source>
    assert "'hostname'" in line and "its columns: id, host, bytes, ok, tags, maybe" in line, line
    assert runs.list_ids(redis_client) == []                              # nothing stored, nothing ran
    # its id-field too
    xml = workflow(tmp_path / "id", parquet_source(datasets, tmp_path / "id", ' id-field="key"'), "id")
    code, _, err = cli(redis_url, "submit", str(xml))
    assert code == 2 and "id-field 'key' is not a column" in err and "its columns: id, host" in err


# --- any format: a Python data source, with no file positions -------------------------------
def _register_numbers_source(spark: Any) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class NumbersReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(3)]

        def read(self, partition):
            for n in range(partition.value * 10, partition.value * 10 + 10):
                yield (n, n * n)

    class Numbers(DataSource):
        @classmethod
        def name(cls):
            return "recovery_test_numbers"

        def schema(self):
            return "n bigint, square bigint"

        def reader(self, schema):
            return NumbersReader()

    spark.dataSource.register(Numbers)


def test_a_format_without_file_positions_needs_an_id_field(spark, redis_url, redis_client, tmp_path):
    _register_numbers_source(spark)
    xml = workflow(tmp_path / "a", '<source type="spark" format="recovery_test_numbers"/>', "n square")
    code, _, err = cli(redis_url, "submit", str(xml))
    assert code == 2 and "no file position" in err and "id-field=" in err and "\n" not in err.strip(), err
    assert runs.list_ids(redis_client) == []
    xml = workflow(tmp_path / "b", '<source type="spark" format="recovery_test_numbers" id-field="n"/>', "n square")
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.roots == 30
    assert sink_records(tmp_path / "b" / "out" / "events") == sorted(
        json.dumps({"n": n, "square": n * n}, sort_keys=True) for n in range(30))


# --- failures, retries, crashes, root replay -----------------------------------------------
FIELDS = "id host bytes tags maybe"
# (a root replay gives the roots new ids, and the rate chooses among them again: enough attempts
# that no root is chosen every time)
FAIL_PASS = {"recovery.inject.f.component": "pass", "recovery.inject.f.rate": "0.1", "recovery.max.attempts": "8",
             **FAST_RETRY}


@pytest.mark.parametrize("strategy", ["localized", "root-replay"])
def test_failures_at_a_bolt_then_recover_is_exact(spark, redis_url, redis_client, tmp_path, datasets, strategy):
    xml = workflow(tmp_path, parquet_source(datasets, tmp_path), FIELDS, pass_bolt="Pass")
    s = submit(spark, redis_url, redis_client, xml, FAIL_PASS)
    assert s.status == "pending" and {p.component for p in s.failed_positions} == {"pass"}
    out = tmp_path / "out" / "events"
    assert len(sink_records(out)) == len(ROWS) - s.failed > 0
    r = recover.recover(spark, redis_client, redis_url, s.run_id, strategy=strategy)
    assert r.status == "completed" and r.pending == 0 and r.dead == 0
    assert sink_records(out) == expected(FIELDS)      # nothing lost, nothing twice


def test_a_spark_retry_of_a_spout_task_changes_nothing(spark, redis_url, redis_client, tmp_path, datasets):
    xml = workflow(tmp_path, parquet_source(datasets, tmp_path, ' id-field="id"'), FIELDS)
    task = TaskMap.of(workflow_xml.load(xml)).task_ids("events")[0]
    marker = tmp_path / "crashed"
    s = submit(spark, redis_url, redis_client, xml, {
        "recovery.inject.c.component": "events", "recovery.inject.c.mode": "crash",
        "recovery.inject.c.task": str(task), "recovery.inject.c.after": "30",
        "recovery.inject.c.marker": str(marker)})
    assert marker.exists()                         # the first attempt died after 30 rows
    assert s.status == "completed" and s.roots == len(ROWS) and s.complete == len(ROWS)
    assert sink_records(tmp_path / "out" / "events") == expected(FIELDS)


def test_kill_9_of_the_driver_mid_submit_then_recover_is_exact(spark, redis_url, redis_client, tmp_path, datasets):
    xml = workflow(tmp_path, parquet_source(datasets, tmp_path), FIELDS, pass_bolt="Pass")
    run_id = "spark-source-crash"
    go = tmp_path / "let-pass-go"     # pass holds every tuple until then: no task of it commits
    props = {"recovery.inject.z.component": "pass", "recovery.inject.z.mode": "hold",
             "recovery.inject.z.rate": "1", "recovery.inject.z.marker": str(go), **FAIL_PASS}
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json"]
    for k, v in props.items():
        cmd += ["-p", f"{k}={v}"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, RECOVERY_REDIS_URL=redis_url),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = kill_when_round_0(proc, redis_client, run_id,
                             lambda d: any(f.startswith("events:") for f in d), "a spout task committed")
    assert not any(f.startswith(("pass:", "out:")) for f in done), done
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    go.touch()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed" and r.pending == 0, r
    assert sink_records(tmp_path / "out" / "events") == expected(FIELDS)
    assert not redis_client.exists(failed_queue.failed_key(run_id))


# --- jdbc ----------------------------------------------------------------------------------
def test_a_jdbc_read_from_postgresql(spark, redis_url, redis_client, tmp_path, postgres_url):
    if not POSTGRES_JDBC_JAR.exists():
        pytest.skip(f"no JDBC driver at {POSTGRES_JDBC_JAR} (apt-get install libpostgresql-jdbc-java; .ci/run does it)")
    import psycopg
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, host text, bytes double precision, "
                     "ok boolean, tags text[], maybe bigint)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s)",
                            [(r["id"], r["host"], r["bytes"], r["ok"], r["tags"], r["maybe"]) for r in ROWS])
    rest = postgres_url.removeprefix("postgresql://")
    user, _, host_db = rest.partition("@")
    options = {"url": f"jdbc:postgresql://{host_db}", "user": user, "dbtable": "events",
               "driver": "org.postgresql.Driver", "partitionColumn": "id", "lowerBound": "0",
               "upperBound": str(len(ROWS)), "numPartitions": "4"}
    opts = "".join(f'<option name="{k}" value="{v}"/>' for k, v in options.items())
    xml = workflow(tmp_path, f'<source type="spark" format="jdbc" id-field="id">{opts}</source>',
                   "id host bytes ok tags maybe", parallelism=3)
    got = chunks(spark, xml)
    assert {p for p, *_ in got} == {0, 1, 2, 3} and all(task == p % 3 for p, task, _, _ in got)
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.roots == len(ROWS)
    assert sink_records(tmp_path / "out" / "events") == expected("id host bytes ok tags maybe")

