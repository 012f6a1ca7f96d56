"""The message timeout's last resort on real Spark: a tuple stuck in a C-level wait (it never
calls the collector) is marked timed out in Redis, its Python worker ended, and the task's
retry (Spark's, or the round `recover` resumes) fails that tuple without running it again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recovery.jobs import submit
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys

REPO = Path(__file__).resolve().parents[2]

STUCK_XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="stuck">
  <config>
    <property name="topology.message.timeout.secs" value="0.5"/>
    <property name="recovery.max.attempts" value="{attempts}"/>
  </config>
  <spout id="src" parallelism="1" class="tests.unit.runner_components:Numbers">
    <stream fields="n"/>
  </spout>
  <bolt id="slow" parallelism="1" class="tests.unit.runner_components:StuckInC">
    <input from="src" grouping="shuffle"/>
    <stream fields="n"/>
  </bolt>
</workflow>
"""


def _stuck_xml(folder: Path, attempts: int) -> Path:
    path = folder / "stuck.xml"
    path.write_text(STUCK_XML.format(attempts=attempts))
    return path


def test_a_tuple_stuck_in_c_fails_at_the_spark_retry_and_the_round_ends(spark, redis_url, redis_client, tmp_path):
    # the session's Spark is local[2,3]: the task killed by the watchdog is tried again
    xml = _stuck_xml(tmp_path, attempts=3)
    wf = workflow_xml.load(xml).model_copy(update={"base_dir": str(REPO)})   # workers import tests.unit
    s = submit.submit(spark, redis_client, redis_url, wf, xml.read_text(), str(xml))
    assert s.status == "pending" and s.roots == 6 and s.complete == 5 and s.failed == 1
    [pos] = s.failed_positions
    assert pos.component == "slow" and pos.count == 1
    assert pos.sample_error == "TupleTimeout: tuple timed out after 0.5s in slow (stuck: its worker was ended)"
    slow = s.components["slow"]
    assert (slow.executed, slow.acked, slow.failed) == (6, 5, 1)
    # the retry committed the task, so its mark is gone
    assert not list(redis_client.scan_iter(match=keys.run_key(s.run_id, "timedout", "*")))


def test_where_spark_will_not_retry_the_round_fails_in_one_line_and_recover_ends_it(redis_url, tmp_path):
    """local[2] tries a task once: the killed task fails the round (exit 2, one line, resumable);
    `recover` resumes the round and the mark fails the stuck tuple instead of hanging again."""
    xml = _stuck_xml(tmp_path, attempts=1)
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url, RECOVERY_HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "recovery", *args], capture_output=True,
                              text=True, env=env, cwd=str(tmp_path), timeout=600)

    sub = cli("submit", str(xml), "--master", "local[2]", "--json")
    assert sub.returncode == 2, sub.stderr
    [error] = [line for line in sub.stderr.splitlines() if line.startswith("error:")]
    assert "round 0 failed in Spark" in error and "recovery recover" in error
    run_id = error.split("run ", 1)[1].split(" ", 1)[0]

    rec = cli("recover", run_id, "--master", "local[2]", "--json")
    assert rec.returncode == 0, rec.stderr
    r = json.loads(rec.stdout)
    assert r["resumed"] and r["status"] == "dead" and r["complete"] == 5 and r["dead"] == 1
    dead = json.loads(cli("dead", run_id, "--json").stdout)["dead"]
    assert [(d["component"], d["values"]) for d in dead] == [("slow", [3])]
    assert dead[0]["error"].startswith("TupleTimeout: tuple timed out after 0.5s in slow")
