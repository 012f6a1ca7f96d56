"""Storm multilang components (pystorm 3.1.4 programs) inside real runs: results, failure
localization in a shell bolt, and its recovery into a fresh process of the same program."""
from __future__ import annotations

import shutil

from recovery import jobs
from tests.integration.conftest import WORKFLOWS, copy_workflow, sink_records, submit
from tests.integration.test_engine import wordcount_reference


def shell_workflow(tmp_path):
    xml = copy_workflow("wordcount_shell", tmp_path)
    shutil.copytree(WORKFLOWS / "wordcount", tmp_path / "wordcount", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return xml


def test_pystorm_spout_and_bolt_give_the_python_result(spark, redis_url, redis_client, tmp_path):
    xml = shell_workflow(tmp_path)
    s = submit(spark, redis_url, redis_client, xml)
    assert s["status"] == "completed" and s["roots"] == s["complete"] > 0
    assert sink_records(tmp_path / "out" / "wordcount_shell") == wordcount_reference(tmp_path / "data" / "sentences.txt")


def test_a_tuple_failed_in_a_shell_bolt_is_recovered_by_a_fresh_process(spark, redis_url, redis_client, tmp_path):
    xml = shell_workflow(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    fates = tmp_path / "fates.txt"
    s = submit(spark, redis_url, redis_client, xml, {
        "wordcount_shell.fail.word": "acker", "wordcount_shell.fail.markers": str(markers),
        "wordcount_shell.fates": str(fates), "recovery.retry.delay.period.ms": "10"})
    assert {p["component"] for p in s["failed_positions"]} == {"split"}
    n = sum(p["count"] for p in s["failed_positions"])
    assert n == len(list(markers.iterdir())) > 0
    assert all("transient failure" in p["sample_error"] for p in s["failed_positions"])
    # the spout heard "ack" for every complete root, and nothing yet for the pending ones
    lines = [l.split() for l in fates.read_text().splitlines()]
    assert all(what == "ack" for what, _ in lines) and len(lines) == s["complete"]
    r = jobs.recover(spark, redis_client, redis_url, s["run_id"])
    assert r["status"] == "completed" and r["rounds"] == 1 and r["recovered"] == n
    # once recovered, their roots complete and the spout hears of them too: every line once
    acked = [int(i) for what, i in (l.split() for l in fates.read_text().splitlines()) if what == "ack"]
    assert len(acked) == len(set(acked)) == s["roots"]
    assert sink_records(tmp_path / "out" / "wordcount_shell") == wordcount_reference(tmp_path / "data" / "sentences.txt")
