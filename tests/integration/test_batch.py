"""Batch components on a real local Spark (local[2,3]) and a real Redis: Spark task retries
and kill -9 of the driver change nothing in what workflows/cdn_logs_batch.xml writes, which is
what workflows/cdn_logs.xml (row bolts) writes for the same input."""
from __future__ import annotations

import fakeredis

from recovery import testing
from recovery.jobs import dead_letters, recover
from recovery.model.graph import TaskMap
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import ledger
from recovery.tracking.state import state_key
from tests.integration.conftest import copy_workflow, kill_when_round_0, sink_records, submit
from tests.integration.test_recovery import _spawn_submit

FAST_RETRY = {"recovery.retry.delay.period.ms": "10", "recovery.batch.size": "128"}
TRANSIENT = {"recovery.inject.t.component": "aggregate", "recovery.inject.t.rate": "0.05", **FAST_RETRY}


def batch_copy(dest):
    copy_workflow("cdn_logs", dest)   # cdn_logs_batch's components import cdn_logs's
    return copy_workflow("cdn_logs_batch", dest)


def test_spark_task_retries_of_a_batch_task_change_no_result_and_no_ledger(spark, redis_url, redis_client, tmp_path):
    """The Python worker running aggregate's task 2 dies on Spark's first attempt (after 50
    tuples); Spark re-runs the task: sink, keyed state, ledger and counts equal a run without."""
    base = submit(spark, redis_url, redis_client, batch_copy(tmp_path / "a"), TRANSIENT)
    xml = batch_copy(tmp_path / "b")
    task = TaskMap.of(workflow_xml.load(xml)).task_ids("aggregate")[1]
    crashed = submit(spark, redis_url, redis_client, xml, {
        **TRANSIENT, "recovery.inject.c.component": "aggregate", "recovery.inject.c.mode": "crash",
        "recovery.inject.c.task": str(task), "recovery.inject.c.after": "50",
        "recovery.inject.c.marker": str(tmp_path / "crashed")})
    assert (tmp_path / "crashed").exists()      # the first attempt really died
    out = lambda d: sink_records(tmp_path / d / "out" / "cdn_logs_batch")   # noqa: E731
    assert out("a") == out("b") and out("a")
    for k in ("roots", "complete", "pending", "failed"):
        assert getattr(base, k) == getattr(crashed, k)
    assert base.components["aggregate"].failed > 0
    assert ledger.pending_roots(redis_client, base.run_id) == ledger.pending_roots(redis_client, crashed.run_id)
    state = lambda rid: redis_client.hgetall(state_key(rid, "aggregate"))   # noqa: E731
    assert state(base.run_id) == state(crashed.run_id)
    for rid in (base.run_id, crashed.run_id):
        assert recover.recover(spark, redis_client, redis_url, rid).status == "dead"   # the data's bad lines
    assert out("a") == out("b")


def test_kill_9_of_a_batch_run_then_recover_gives_what_the_row_workflow_gives(spark, redis_url, redis_client, tmp_path):
    # the row workflow's output and dead letters, the reference: in this process (the test kit's
    # engine, no Spark job), the same failures injected
    row_client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    row = testing.run_local(workflow_xml.load(copy_workflow("cdn_logs", tmp_path / "row")), row_client,
                            config=TRANSIENT, recover=True, list_sinks=False)
    assert row.status == "dead"
    want = sink_records(tmp_path / "row" / "out" / "cdn_logs")

    run_id = "batch-crash"
    go = tmp_path / "let-aggregate-go"    # aggregate holds its rows until then: output never commits
    slow = {"recovery.inject.z.component": "aggregate", "recovery.inject.z.mode": "hold",
            "recovery.inject.z.marker": str(go), "recovery.inject.z.rate": "1",
            **TRANSIENT}
    proc = _spawn_submit(batch_copy(tmp_path / "batch"), redis_url, run_id, slow)

    done = kill_when_round_0(proc, redis_client, run_id, lambda done: {"split:0", "split:1"} <= done,
                             "split being done")
    assert "output:0" not in done
    go.touch()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "dead" and r.pending == 0       # only the data's bad lines are dead
    assert sink_records(tmp_path / "batch" / "out" / "cdn_logs_batch") == want
    dead = lambda client, rid: sorted((d.component, d.id) for d in dead_letters.dead_letters(client, rid))  # noqa: E731
    assert dead(redis_client, run_id) == dead(row_client, row.run_id) and len(dead(redis_client, run_id)) == 20
