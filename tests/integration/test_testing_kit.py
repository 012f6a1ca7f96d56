"""recovery.testing.run_local agrees with the Spark engine: the same workflow and input give
the same sink records, summary counts and failed positions, on the same real Redis."""
from __future__ import annotations

from pathlib import Path

from recovery import testing
from recovery.jobs import recover, submit
from recovery.jobs.summary import RunSummary
from recovery.model.xml import parse as workflow_xml
from recovery.model.xml import write as xml_write
from tests.integration.conftest import copy_workflow

COUNTS = ("status", "roots", "complete", "pending", "failed", "in_flight", "dead", "dead_tuples")


def _counters(summary: RunSummary) -> dict:
    """Per-component counters without the wall-clock ones."""
    return {c: {k: v for k, v in st.to_json().items() if k != "seconds"} for c, st in summary.components.items()}


def test_run_local_agrees_with_a_spark_submit(spark, redis_url, redis_client, tmp_path: Path):
    # cdn_logs: bad records fail at split and at normalize, the rest is aggregated
    wf = testing.with_list_sinks(workflow_xml.load(copy_workflow("cdn_logs", tmp_path)))
    on_spark = submit.submit(spark, redis_client, redis_url, wf, xml_write.to_xml(wf), None,
                           run_id="on-spark")
    local = testing.run_local(wf, redis_client, run_id="in-process")
    assert local.interrupted is None
    assert on_spark.failed == 20 and on_spark.status == "pending"
    assert {k: getattr(local.summary, k) for k in COUNTS} == {k: getattr(on_spark, k) for k in COUNTS}
    assert _counters(local.summary) == _counters(on_spark)
    assert local.summary.failed_positions == on_spark.failed_positions
    spark_sinks = {"output": testing.read_list_sink(redis_client, "on-spark", "output")}
    assert len(spark_sinks["output"]) == 980
    testing.assert_same_output(local, spark_sinks)

    # and one recovery round: the bad records fail again, at the same positions
    again = recover.recover(spark, redis_client, redis_url, "on-spark", max_rounds=1)
    testing.recover_local(local, max_rounds=1)
    assert again.rounds == local.summary.rounds == 1
    assert {k: getattr(local.summary, k) for k in COUNTS} == {k: getattr(again, k) for k in COUNTS}
    assert _counters(local.summary) == _counters(again)
    assert local.summary.failed_positions == again.failed_positions
    testing.assert_same_output(local, {"output": testing.read_list_sink(redis_client, "on-spark", "output")})
