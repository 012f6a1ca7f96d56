"""workflows/cdn_logs_tables.xml on Spark: the CDN logs read from the committed Parquet dataset
by a spark source, each request's record written to a Delta table (and, in the README's
variant, to a PostgreSQL table as well). After failures at a bolt, or the driver killed -9
mid-submit, and `recover`, each table holds exactly the records of a failure-free run, read
back with deltalake and psycopg: nothing lost, nothing twice (the comparison `make demo`
makes, recovery/demo.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import fakeredis
import pyarrow.dataset as pads

from recovery import demo, testing
from recovery.connectors import spark_source
from recovery.engine import frames
from recovery.jobs import recover
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import runs
from tests.integration.conftest import WORKFLOWS, copy_workflow, kill_when_round_0, start_submit, submit
from tests.tables import postgres_rows

NAME = "cdn_logs_tables"
TABLE = Path("out") / NAME
FAST = {"recovery.retry.delay.period.ms": "10"}
POISON = 20   # the data's unparsable and status-0 lines: they fail in every run and end dead


def copy_example(dest: Path, extra_bolts: str = "") -> Path:
    """The example with the cdn_logs components and the data under dest; `extra_bolts` are
    added to the workflow."""
    xml = copy_workflow(NAME, dest)
    shutil.copytree(WORKFLOWS / "cdn_logs", dest / "cdn_logs", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if extra_bolts:
        xml.write_text(xml.read_text().replace("</workflow>", extra_bolts + "\n</workflow>"))
    return xml


def failure_free(dest: Path) -> tuple[dict, dict]:
    """A failure-free run of the example, on the engine in this process (the dataset's rows fed
    to its spout: the test kit has no Spark), writing its own Delta table under dest: that
    table's records (as demo.table_records) and aggregate's final keyed state."""
    xml = copy_example(dest)
    lines = pads.dataset(str(dest / "data" / "cdn_logs.parquet"), format="parquet").to_table().column("line")
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    run = testing.run_local(workflow_xml.load(xml), client, inputs={"logs": lines.to_pylist()}, list_sinks=False)
    assert run.summary.failed == POISON and run.summary.components["aggregate"].failed == 0
    return demo.table_records(dest / TABLE), demo.keyed_state(client, run.run_id, "aggregate")


def test_failures_at_a_bolt_then_recover_leave_exactly_a_failure_free_runs_records_in_the_delta_table(
        spark, redis_url, redis_client, tmp_path):
    want, want_state = failure_free(tmp_path / "clean")
    assert sum(want.values()) == 1000 - POISON
    xml = copy_example(tmp_path / "failing")
    wf = workflow_xml.load(xml)     # the four part files are four partitions, two per spout task
    logs = wf.component("logs")
    # (each chunk keyed by its owning spout task's index here: the reader's partition i goes to i mod 2)
    partitions = spark_source.read_partitions(spark, wf, logs, tuple(range(logs.parallelism)), frames.partition_id)
    with spark_source.session_settings(spark, spark_source.planning_settings_of(wf)):
        owners = partitions.selectExpr("spark_partition_id() AS part", "k").distinct().collect()
    assert sorted((r["part"], r["k"]) for r in owners) == [(0, 0), (1, 1), (2, 0), (3, 1)]
    inject = {"recovery.inject.a.component": "aggregate", "recovery.inject.a.rate": "0.05", **FAST}
    s = submit(spark, redis_url, redis_client, xml, inject)
    assert s.status == "pending"
    assert {p.component for p in s.failed_positions} == {"split", "normalize", "aggregate"}
    assert s.components["logs"].emitted == 1000      # every row of the four part files
    assert sum(demo.table_records(tmp_path / "failing" / TABLE).values()) < sum(want.values())   # not all there yet
    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "dead" and r.dead_tuples == POISON and r.recovered > 0
    result = demo.compare(demo.table_records(tmp_path / "failing" / TABLE), want,
                          demo.keyed_state(redis_client, s.run_id, "aggregate"), want_state)
    assert result.missing == result.extra == 0 and result.records == sum(want.values())
    assert result.same_state and result.same


def test_driver_killed_mid_submit_then_recover_leave_exactly_the_records_in_delta_and_postgresql(
        spark, redis_url, redis_client, postgres_url, tmp_path):
    """The Parquet dataset read through Spark, failures at a bolt, the
    driver killed -9 mid-submit, then `recover`: both tables hold every expected record exactly
    once. Both sinks are slowed down (seconds per task) and the driver is killed once the first
    sink task committed, so that the round stops with some sink parts written and others not."""
    want, _ = failure_free(tmp_path / "clean")
    pg = ('<bolt id="pg" parallelism="2">'
          f'<sink type="postgres" url="{postgres_url}" table="cdn_requests"/>'
          '<input from="aggregate" grouping="shuffle"/></bolt>')
    xml = copy_example(tmp_path / "run", pg)
    props = {"recovery.inject.a.component": "aggregate", "recovery.inject.a.rate": "0.05", **FAST}
    for name, sink in (("z", "output"), ("y", "pg")):
        props.update({f"recovery.inject.{name}.component": sink, f"recovery.inject.{name}.mode": "slow",
                      f"recovery.inject.{name}.delay.ms": "15"})
    run_id = "cdn-tables-crash"
    proc = start_submit(redis_url, xml, run_id, props)
    sinks = {"output:0", "output:1", "pg:0", "pg:1"}
    done = kill_when_round_0(proc, redis_client, run_id, lambda d: bool(d & sinks), "a sink task's commit")
    assert not sinks <= done, done      # the round was cut short: a sink task had not written its part
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "dead" and r.dead_tuples == POISON, r
    assert demo.table_records(tmp_path / "run" / TABLE) == want
    assert postgres_rows(postgres_url, "cdn_requests") == want
