"""The run commands as a user types them (click's runner, in this process, sharing the
session's Spark): JSON shapes, progress-free --json, one-line errors with exit code 2."""
from __future__ import annotations

import json

from click.testing import CliRunner

from recovery.cli import main
from recovery.tracking import keys, runs
from tests.integration.conftest import copy_workflow


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_submit_status_plan_recover_dead_clear_as_json(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("cdn_logs", tmp_path)
    code, out, err = cli(redis_url, "submit", str(xml), "--json", "-p", "recovery.inject.a.component=aggregate",
                         "-p", "recovery.inject.a.rate=0.03", "-p", "recovery.retry.delay.period.ms=10")
    assert code == 0, err
    s = json.loads(out)
    for k in ("run_id", "status", "roots", "complete", "pending", "failed", "dead", "failed_positions"):
        assert k in s
    assert s["roots"] == 1000 and s["status"] == "pending"
    assert {p["component"] for p in s["failed_positions"]} == {"split", "normalize", "aggregate"}
    assert all({"component", "task", "count"} <= set(p) for p in s["failed_positions"])
    run = s["run_id"]

    code, out, _ = cli(redis_url, "status", run, "--json")
    assert code == 0 and json.loads(out)["failed"] == s["failed"]
    code, out, _ = cli(redis_url, "runs", "--json")
    assert run in [r["run_id"] for r in json.loads(out)["runs"]]

    code, out, _ = cli(redis_url, "plan", run)
    assert code == 0 and "urn:recovery:workflow:1" in out and 'type="queue"' in out
    plan_xml = tmp_path / "plan.xml"
    plan_xml.write_text(out)
    assert cli(redis_url, "validate", str(plan_xml))[0] == 0     # an ordinary workflow file
    code, out, _ = cli(redis_url, "plan", run, "--format", "mermaid")
    assert code == 0 and "aggregate" in out

    code, out, err = cli(redis_url, "recover", run, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["status"] == "dead" and r["pending"] == 0 and r["dead"] == 20 and r["rounds"] == 2
    code, out, _ = cli(redis_url, "dead", run, "--json")
    dead = json.loads(out)["dead"]
    assert len(dead) == 20 and {d["component"] for d in dead} == {"split", "normalize"}

    code, out, _ = cli(redis_url, "clear", run, "--json")
    assert code == 0 and runs.record_key(run) in json.loads(out)["removed"][run]
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run)))


def test_bad_input_gets_one_line_and_exit_2(spark, redis_url, redis_client, tmp_path):
    for args in (["status", "no-such-run"], ["recover", "no-such-run"], ["clear", "no-such-run"],
                 ["dead", "no-such-run"], ["plan", "no-such-run"]):
        code, out, err = cli(redis_url, *args)
        assert code == 2 and err.count("\n") == 1 and "no-such-run" in err, (args, err)
    # a class that does not import: an error at submit, nothing stored
    xml = copy_workflow("wordcount", tmp_path)
    xml.write_text(xml.read_text().replace("wordcount.components:SplitSentence", "wordcount.components:Nope"))
    before = set(redis_client.keys("*"))
    code, out, err = cli(redis_url, "submit", str(xml))
    assert code == 2 and "Nope" in err and err.count("\n") == 1
    assert set(redis_client.keys("*")) == before
    # an unreachable Redis names the URL, no traceback
    code, out, err = cli("redis://:hunter2@127.0.0.1:1/0", "runs")
    assert code == 2 and "127.0.0.1:1" in err and "hunter2" not in err and "Traceback" not in err
    # clear refuses both or neither
    assert cli(redis_url, "clear")[0] == 2
