"""The postgres and delta sinks on Spark (the shared local[2,3] session), against a real
PostgreSQL and Delta tables in temporary folders: transient failures then `recover`, kill -9 of
the driver mid-submit then `recover`, a Spark task that dies after its part is written, and the
bad input `submit` refuses before anything is stored. Each table must hold exactly the rows of
a failure-free run: nothing lost, nothing twice."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fakeredis
import psycopg
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from recovery import testing
from recovery.cli import main
from recovery.jobs import recover
from recovery.model.graph import TaskMap
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import runs
from tests.integration.conftest import kill_when_round_0, submit
from tests.tables import commit_rows, delta_bolt, delta_rows, expected, postgres_bolt, postgres_rows
from tests.tables import workflow_xml as write_xml

N = 100
FAST = {"recovery.retry.delay.period.ms": "10"}
TRANSIENT = {"recovery.inject.e.component": "enrich", "recovery.inject.e.rate": "0.05",
             "recovery.inject.p.component": "pg", "recovery.inject.p.rate": "0.05",
             "recovery.inject.l.component": "lake", "recovery.inject.l.rate": "0.05"}


def both_sinks(url: str, table: str = "events", path: str = "out/events") -> str:
    return postgres_bolt(url, table) + delta_bolt(path)


def test_transient_failures_then_recover_fill_both_tables_with_exactly_a_failure_free_runs_rows(
        spark, redis_url, redis_client, postgres_url, tmp_path):
    # the failure-free run: the same workflow into other tables, on the engine in this process
    clean_wf = workflow_xml.load(write_xml(tmp_path / "clean", both_sinks(postgres_url, "clean"), n=N))
    clean = testing.run_local(clean_wf, fakeredis.FakeRedis(server=fakeredis.FakeServer()), list_sinks=False)
    assert clean.summary.status == "completed"
    failing = submit(spark, redis_url, redis_client, write_xml(tmp_path / "failing", both_sinks(postgres_url), n=N),
                     {**FAST, **TRANSIENT})
    assert failing.status == "pending"
    assert {p.component for p in failing.failed_positions} == {"enrich", "pg", "lake"}
    assert sum(postgres_rows(postgres_url).values()) < N   # not all there yet
    r = recover.recover(spark, redis_client, redis_url, failing.run_id)
    assert r.status == "completed" and r.pending == 0 and r.dead == 0
    want = postgres_rows(postgres_url, "clean")
    assert want == expected(N) == delta_rows(tmp_path / "clean" / "out" / "events")
    assert postgres_rows(postgres_url) == want
    assert delta_rows(tmp_path / "failing" / "out" / "events") == want
    assert {c[3] for c in commit_rows(postgres_url) if c[0] == failing.run_id} == {0, 1}   # submit, then round 1


def _spawn_submit(xml: Path, redis_url: str, run_id: str, props: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json"]
    for k, v in props.items():
        cmd += ["-p", f"{k}={v}"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_kill_9_of_the_driver_mid_submit_then_recover_writes_every_row_once(spark, redis_url, redis_client,
                                                                           postgres_url, tmp_path):
    """The driver is killed once a postgres sink task committed, while the slowed-down Delta
    sink is still writing; `recover` resumes the round (committed tasks replay their output),
    then recovers the failures."""
    xml = write_xml(tmp_path, both_sinks(postgres_url), n=N)
    run_id = "tables-crash"
    go = tmp_path / "let-lake-go"     # the Delta sink holds its rows until then: it never commits
    slow = {"recovery.inject.z.component": "lake", "recovery.inject.z.mode": "hold", "recovery.inject.z.marker": str(go),
            "recovery.inject.z.rate": "1",
            "recovery.inject.e.component": "enrich", "recovery.inject.e.rate": "0.05", **FAST}
    proc = _spawn_submit(xml, redis_url, run_id, slow)
    done = kill_when_round_0(proc, redis_client, run_id, lambda d: any(f.startswith("pg:") for f in d),
                             "a postgres sink task's commit")
    assert not {"lake:0", "lake:1"} <= done, done
    rec = runs.get(redis_client, run_id)
    assert rec.status == runs.RUNNING and runs.status_of(rec) == runs.CRASHED, rec
    go.touch()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert postgres_rows(postgres_url) == expected(N)
    assert delta_rows(tmp_path / "out" / "events") == expected(N)


def test_a_sink_task_that_dies_after_writing_is_retried_by_spark_and_writes_nothing_twice(
        spark, redis_url, redis_client, postgres_url, tmp_path):
    """Spark's first attempt of one postgres and one delta sink task writes its part, then its
    Python worker dies before the task's commit in Redis; Spark's retry finds the part's commit
    (row or app transaction) and writes nothing."""
    def dying(sink_id: str, cls: str, params: dict[str, str]) -> str:
        props = "".join(f'<property name="test.sink.{k}" value="{v}"/>' for k, v in params.items())
        return (f'<bolt id="{sink_id}" parallelism="2" class="tablecomps:{cls}"><config>{props}'
                f'<property name="test.die.task" value="TASK_{sink_id}"/>'
                f'<property name="test.die.marker" value="{tmp_path}/died-{sink_id}"/></config>'
                '<input from="enrich"/></bolt>')
    xml = write_xml(tmp_path, dying("pg", "PostgresThenDie", {"url": postgres_url, "table": "events"})
                    + dying("lake", "DeltaThenDie", {"path": str(tmp_path / "out" / "events")}), n=N)
    tasks = TaskMap.of(workflow_xml.load(xml))
    text = xml.read_text()
    for sink_id in ("pg", "lake"):
        text = text.replace(f"TASK_{sink_id}", str(tasks.task_ids(sink_id)[1]))
    xml.write_text(text)
    s = submit(spark, redis_url, redis_client, xml, FAST)
    assert s.status == "completed"
    assert (tmp_path / "died-pg").exists() and (tmp_path / "died-lake").exists()   # the first attempts died
    assert postgres_rows(postgres_url) == expected(N)
    commits = commit_rows(postgres_url)
    assert [c[1:4] for c in commits] == [("pg", t, 0) for t in tasks.task_ids("pg")] and sum(c[4] for c in commits) == N
    assert delta_rows(tmp_path / "out" / "events") == expected(N)
    dt = DeltaTable(str(tmp_path / "out" / "events"))
    parts = [(h["recovery_task"], h["recovery_round"]) for h in dt.history() if "recovery_task" in h]
    assert sorted(parts) == sorted((str(t), "0") for t in tasks.task_ids("lake"))   # one commit per part


# --- bad input: one line, exit 2, nothing stored -------------------------------------------------
def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", ["unreachable", "columns", "delta-under-a-file", "delta-run-id"])
def test_submit_refuses_a_table_that_cannot_take_the_run_before_anything_is_stored(
        case, redis_url, redis_client, postgres_url, tmp_path):
    run_id = []
    if case == "unreachable":
        url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
        xml = write_xml(tmp_path, postgres_bolt(url))
        want = f"error: sink 'pg' (postgres): cannot connect to {url}: connection failed"
    elif case == "columns":
        with psycopg.connect(postgres_url) as conn:
            conn.execute("CREATE TABLE events (n bigint, word text, extra int)")
        xml = write_xml(tmp_path, postgres_bolt(postgres_url))
        want = ("error: sink 'pg' (postgres): table public.events has no columns score, even, tags, info for the "
                "input's fields (its columns: n, word, extra)")
    elif case == "delta-under-a-file":
        (tmp_path / "out").write_text("a file where the table's folder goes")
        xml = write_xml(tmp_path, delta_bolt("out/events"))
        want = f"error: sink 'lake' (delta): cannot create the Delta table's folder {tmp_path}/out/events: {tmp_path}/out is a file"
    else:
        import pyarrow as pa
        from deltalake import CommitProperties, Transaction, write_deltalake
        xml = write_xml(tmp_path, delta_bolt("out/events"))
        lake = TaskMap.of(workflow_xml.load(xml)).task_ids("lake")
        write_deltalake(str(tmp_path / "out" / "events"), pa.table({f: pa.array([], t) for f, t in (
            ("n", pa.int64()), ("word", pa.string()), ("score", pa.float64()), ("even", pa.bool_()),
            ("tags", pa.list_(pa.string())), ("info", pa.struct([("len", pa.int64())])))}), mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(f"old:lake:{lake[1]}", 0)]))
        run_id = ["--run-id", "old"]
        want = f"error: sink 'lake' (delta): Delta table {tmp_path}/out/events already holds commits of run 'old'"
    code, out, err = cli(redis_url, "submit", str(xml), *run_id)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (out, err)
    assert err.startswith(want), err
    assert redis_client.keys("*") == []   # nothing stored


def test_validate_refuses_a_password_in_the_url_naming_file_and_line(redis_url, tmp_path):
    xml = write_xml(tmp_path, postgres_bolt("postgresql://me:hunter2@127.0.0.1:5432/db"))
    line = next(i for i, l in enumerate(xml.read_text().splitlines(), 1) if 'type="postgres"' in l)
    code, out, err = cli(redis_url, "validate", str(xml))
    assert code == 2 and err.startswith(f"error: {xml}:{line}: bolt 'pg': <sink type=\"postgres\"> url holds a password")
    assert "hunter2" not in err
