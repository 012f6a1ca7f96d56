"""The run API in the test session's own Spark session, as a notebook uses it: a topology
written in Python submitted with `spark=`, its status, plan, dead letters, recovery and
clear, exact; the session is the caller's and nothing stops it."""
from __future__ import annotations

import json
import runpy
from pathlib import Path

from lxml import etree

import recovery
from recovery.jobs.summary import RunSummary
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, runs
from tests.integration.conftest import WORKFLOWS, copy_workflow, sink_records

INJECT = {"recovery.inject.a.component": "aggregate", "recovery.inject.a.rate": "0.03",
          "recovery.retry.delay.period.ms": "10"}
SVG = "{http://www.w3.org/2000/svg}"


def cdn_logs_topology() -> recovery.Topology:
    return runpy.run_path(str(WORKFLOWS / "cdn_logs.py"))["t"]


def test_submit_recover_status_in_the_callers_session_exact(spark, redis_url, redis_client, tmp_path, monkeypatch):
    # the reference: the same topology without injected failures
    copy_workflow("cdn_logs", tmp_path / "clean")
    monkeypatch.chdir(tmp_path / "clean")   # the builder's relative paths: the cwd at submit
    clean = recovery.submit(cdn_logs_topology(), spark=spark, redis=redis_url)
    assert isinstance(clean.summary, RunSummary)
    assert clean.summary.roots == 1000 and clean.summary.failed == 20   # the data's bad lines
    reference = sink_records(tmp_path / "clean" / "out" / "cdn_logs")
    assert len(reference) == 980

    copy_workflow("cdn_logs", tmp_path / "flaky")
    monkeypatch.chdir(tmp_path / "flaky")
    run = recovery.submit(cdn_logs_topology(), spark=spark, redis=redis_url, config=INJECT)
    out = tmp_path / "flaky" / "out" / "cdn_logs"
    status = run.status()
    assert isinstance(status, RunSummary) and status.run_id == run.id
    assert status.status == "pending" and status.roots == 1000
    assert {p.component for p in status.failed_positions} == {"split", "normalize", "aggregate"}
    as_json = json.loads(json.dumps(status.to_json()))   # what `status --json` prints
    # each key is a field of the same name (models, such as the failed positions, as their JSON)
    assert {k: json.loads(json.dumps(getattr(status, k), default=lambda m: m.to_json() if hasattr(m, "to_json") else m.model_dump()))
            for k in as_json} == as_json
    assert sink_records(out) != reference
    plan = run.plan()
    assert set(plan.failed) == {"split", "normalize", "aggregate"} and plan.xml and 'type="queue"' in plan.xml
    # the run records the folder its relative paths resolved against, and the XML written says so
    record = runs.get(redis_client, run.id)
    assert f"relative paths resolve against {tmp_path / 'flaky'}" in record.xml
    assert record.file is None

    # a notebook shows the run: its table and the topology, failed positions marked
    page = etree.fromstring(run._repr_html_())
    cells = [td.text for td in page.find("table")[1]]
    assert cells[:2] == [run.id, "pending"]
    marked = {g.get("data-component") for g in page.iter(SVG + "g") if g.get("data-failed")}
    assert marked == {"split", "normalize", "aggregate"}

    # recover from elsewhere: the run resolves its paths as at submit
    monkeypatch.chdir(tmp_path)
    final = recovery.Run.get(run.id, redis=redis_url, spark=spark).recover()
    assert isinstance(final, RunSummary)
    assert final.status == "dead" and final.pending == 0 and final.dead == 20 and final.complete == 980
    assert sink_records(out) == reference          # nothing lost, nothing twice
    again = run.status()
    assert (again.status, again.roots, again.complete, again.pending, again.dead) == ("dead", 1000, 980, 0, 20)
    dead = run.dead_letters()
    assert len(dead) == 20 and all(isinstance(d, FailedTuple) and d.error for d in dead)
    assert {d.component for d in dead} == {"split", "normalize"}
    assert [r.round for r in run.rounds()][:1] == [0] and run.rounds()[-1].replayed > 0

    # nothing stopped the caller's session
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6

    assert run.requeue("split") == sum(d.component == "split" for d in dead)
    cleared = run.clear()
    assert runs.record_key(run.id) in cleared.keys
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run.id)))
    clean.clear()


def test_submit_takes_a_workflow_file_too(spark, redis_url, redis_client, tmp_path: Path):
    xml = copy_workflow("wordcount", tmp_path)
    run = recovery.submit(str(xml), spark=spark, redis=redis_url)
    assert run.summary is not None and run.summary.status == "completed"
    assert runs.get(redis_client, run.id).file == str(xml)
    assert run.status().complete == run.summary.roots
    assert spark.sparkContext.parallelize([1, 2]).sum() == 3
    run.clear()
