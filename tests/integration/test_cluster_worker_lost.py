"""A standalone cluster (master and one worker from the pip-installed pyspark, on 127.0.0.1) whose
worker is killed with SIGKILL while a submit's first round runs: the driver says so on stderr and
in `status` within seconds, fails the round after `recovery.executors.wait.secs` in one line
naming the executor lost, exits non-zero and releases the run; with a new worker, `recover`
ends exact."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from recovery.jobs import reports
from recovery.tracking import keys, runs
from tests.helpers import wait_for
from tests.integration.conftest import copy_workflow, sink_records, with_absolute_paths
from tests.integration.test_engine import wordcount_reference

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

WAIT_SECS = 10   # recovery.executors.wait.secs of the submit: what the test waits out once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Standalone:
    """A master, and workers started (and killed) one at a time."""
    folder: Path
    url: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    spark_class: str = ""

    def start_worker(self, n: int) -> subprocess.Popen:
        log, work = self.folder / f"worker-{n}.log", self.folder / f"work-{n}"
        proc = subprocess.Popen(
            [self.spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
             str(_free_port()), "--cores", "2", "--memory", "1g", "--work-dir", str(work), self.url],
            env={**self.env, "SPARK_WORKER_DIR": str(work)}, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)

        def registered() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            return "Successfully registered with master" in log.read_text()
        wait_for(registered, 240, f"worker {n} to register with the master (logs in {self.folder})")
        return proc


@pytest.fixture
def standalone(tmp_path_factory) -> Iterator[Standalone]:
    import pyspark
    spark_home = Path(pyspark.__file__).parent
    tmp = tmp_path_factory.mktemp("standalone")
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(tmp))
    env.pop("SPARK_CONF_DIR", None)   # the daemons' console at Spark's level: the registration line
    cluster = Standalone(tmp, env=env, spark_class=str(spark_home / "bin" / "spark-class"))
    port, mlog = _free_port(), tmp / "master.log"
    try:
        master = subprocess.Popen(
            [cluster.spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(_free_port())],
            env={**env, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
            stdout=mlog.open("w"), stderr=subprocess.STDOUT)
        cluster.procs.append(master)
        cluster.url = f"spark://127.0.0.1:{port}"
        wait_for(lambda: master.poll() is None and "Starting Spark master" in mlog.read_text()
                 and "I have been elected leader" in mlog.read_text(), 240, "the master to start")
        yield cluster
    finally:
        for p in reversed(cluster.procs):
            if p.poll() is None:
                p.terminate()
        for p in cluster.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _cli(args: list[str], redis_url: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recovery", *args], env=dict(os.environ, RECOVERY_REDIS_URL=redis_url),
                          capture_output=True, text=True, timeout=600, **kw)


def _warnings(client, run_id: str) -> list[str]:
    """What `recovery status RUN --json` warns of (the same function builds it)."""
    return reports.run_status(client, run_id).get("warnings") or []


def test_a_worker_killed_mid_round_is_said_then_fails_the_round_in_one_line_and_recover_is_exact(
        standalone, redis_url, redis_client, tmp_path):
    worker = standalone.start_worker(0)
    xml = with_absolute_paths(copy_workflow("wordcount", tmp_path))
    run_id = "worker-lost"
    master = ["--master", standalone.url, "--conf", "spark.executor.memory=768m"]
    # split is slowed (200 ms a sentence): the round is still running when its worker is lost
    slow = {"recovery.inject.s.component": "split", "recovery.inject.s.mode": "slow",
            "recovery.inject.s.rate": "1", "recovery.inject.s.delay.ms": "200",
            "recovery.executors.wait.secs": str(WAIT_SECS)}
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, *master,
           "--spill-dir", str(tmp_path / "spill"),   # (a folder the executors reach: on this host)
           *[a for k, v in slow.items() for a in ("-p", f"{k}={v}")]]
    err_file = tmp_path / "submit.err"
    with err_file.open("w") as err:
        proc = subprocess.Popen(cmd, env=dict(os.environ, RECOVERY_REDIS_URL=redis_url),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        def spout_committed() -> bool:
            assert proc.poll() is None, err_file.read_text()[-3000:]
            return redis_client.hexists(keys.task_done(run_id, 0), "sentences:0")
        wait_for(spout_committed, 300, "round 0's spout task to commit")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        # said within seconds, on stderr and in `status`, while the driver waits
        waiting = wait_for(lambda: [w for w in _warnings(redis_client, run_id) if "waiting with no executor" in w],
                           300, "status to say the round waits with no executor")
        assert waiting == [f"run {run_id} round 0 is waiting with no executor to run its tasks (lost executor 0): "
                           f"start a worker, or it fails after {WAIT_SECS} s without one "
                           "(recovery.executors.wait.secs)"]
        assert proc.wait(timeout=300) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err_file.read_text()
    assert f"WARNING recovery.engine.executor_watch: {waiting[0]}\n" in stderr
    failed = (f"run {run_id} round 0 failed: no executor for {WAIT_SECS} s (lost executor 0); the round was stopped "
              "(recovery.executors.wait.secs); once a worker is back, "
              f"`recovery recover {run_id}` resumes it")
    assert stderr.endswith(f"{failed}\n"), stderr[-3000:]
    assert stderr.count(failed) == 1
    # the run is left in `error`, its lease released: recover needs no --force
    rec = runs.get(redis_client, run_id)
    assert runs.status_of(rec) == runs.ERROR and rec.lease_holder is None
    assert [w for w in _warnings(redis_client, run_id) if "waiting" in w] == []

    standalone.start_worker(1)
    done = _cli(["recover", run_id, *master, "--json", "-p", "recovery.inject.s.delay.ms=0"], redis_url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["status"] == "completed"
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
