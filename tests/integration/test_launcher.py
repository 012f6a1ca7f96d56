"""`spark-submit [flags] $(recovery launcher) submit ...`, then `recover` the same way: the
command line inside spark-submit's own session (the submit and the recover on two different
masters), with failures and a recovery, exact. (The command line on a cluster's master, whose
executors are JVMs of their own, is in test_cluster*.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.tracking import runs
from tests.helpers import SHORT_LIVED_JVM
from tests.integration.conftest import copy_workflow, sink_records, submit, with_absolute_paths

pytestmark = pytest.mark.cluster

INJECT = {"recovery.inject.a.component": "aggregate", "recovery.inject.a.rate": "0.03",
          "recovery.retry.delay.period.ms": "10"}


def spark_submit(launcher: str, redis_url: str, *args: str, master: str = "local[1]") -> subprocess.CompletedProcess:
    import pyspark
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYSPARK_SUBMIT_ARGS", None)   # (the test session's own, for its pyspark-shell)
    cmd = [str(spark_submit), "--master", master, "--conf", "spark.ui.enabled=false",
           "--driver-java-options", SHORT_LIVED_JVM, "--conf", f"spark.executor.extraJavaOptions={SHORT_LIVED_JVM}",
           launcher, *args, "--redis", redis_url]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def test_spark_submit_runs_submit_then_recover_in_its_own_session_exact(spark, redis_url, redis_client, tmp_path):
    # the reference: a failure-free run in the test session
    submit(spark, redis_url, redis_client, with_absolute_paths(copy_workflow("cdn_logs", tmp_path / "clean")))
    reference = sink_records(tmp_path / "clean" / "out" / "cdn_logs")

    launcher = subprocess.run([sys.executable, "-m", "recovery", "launcher"], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert Path(launcher).is_file() and launcher.endswith(".py")
    xml = with_absolute_paths(copy_workflow("cdn_logs", tmp_path / "flaky"))
    done = spark_submit(launcher, redis_url, "submit", str(xml), "--json",
                        *[a for k, v in INJECT.items() for a in ("-p", f"{k}={v}")])
    assert done.returncode == 0, done.stderr[-3000:]
    s = json.loads(done.stdout)   # (its stdout: only the JSON object, though stderr is merged into it)
    assert s["status"] == "pending" and s["roots"] == 1000
    assert {p["component"] for p in s["failed_positions"]} == {"split", "normalize", "aggregate"}
    out = tmp_path / "flaky" / "out" / "cdn_logs"
    assert sink_records(out) != reference
    # the run was made by spark-submit's session: its master, not one of ours
    assert runs.get(redis_client, s["run_id"]).master == "local[1]"

    # recover in a session spark-submit makes on another master; the run's own master is only
    # what it was submitted on
    done = spark_submit(launcher, redis_url, "recover", s["run_id"], "--json", master="local[2]")
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert r["status"] == "dead" and r["pending"] == 0 and r["dead"] == 20 and r["complete"] == 980
    assert sink_records(out) == reference          # nothing lost, nothing twice
