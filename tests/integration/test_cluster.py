"""A real Spark standalone cluster (master + worker from the pip-installed pyspark, on
127.0.0.1, free ports), a workflow submitted to it with --master, stopped by PID."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.tracking import keys, runs, spill
from tests.helpers import wait_for
from tests.integration.conftest import copy_workflow, sink_records
from tests.integration.test_engine import wordcount_reference

pytestmark = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    def port_open() -> bool:
        assert proc.poll() is None, f"exited early: {log.read_text()[-2000:]}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    try:
        wait_for(port_open, timeout, f"port {port} to open")
    except AssertionError as err:
        raise AssertionError(f"{err}: {log.read_text()[-2000:]}") from None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import pyspark
    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    tmp = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(tmp), SPARK_WORKER_DIR=str(tmp / "work"))
    # the daemons log to their console at Spark's default level (the session fixture's quiet
    # log4j file config would hide the worker's registration line)
    env.pop("SPARK_CONF_DIR", None)
    port, ui, rest, wui = _free_port(), _free_port(), _free_port(), _free_port()
    mlog, wlog = tmp / "master.log", tmp / "worker.log"
    procs = []
    try:
        master = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            env={**env, "SPARK_MASTER_OPTS": f"-Dspark.master.rest.port={rest}"},
            stdout=mlog.open("w"), stderr=subprocess.STDOUT)
        procs.append(master)
        _wait_port(port, master, mlog)
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--webui-port", str(wui), "--cores", "2", "--memory", "2g",
             "--work-dir", str(tmp / "work"), url],
            env=env, stdout=wlog.open("w"), stderr=subprocess.STDOUT)
        procs.append(worker)
        def registered() -> bool:
            assert worker.poll() is None, wlog.read_text()[-2000:]
            return "Successfully registered with master" in wlog.read_text()

        # a loaded 2-core machine is slow to start JVMs
        wait_for(registered, 180, f"the worker to register with the master (log {wlog})")
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_submit_to_a_standalone_cluster(cluster, redis_url, redis_client, tmp_path):
    """With --spill-dir on a folder the driver and the executors share: the tasks spill there
    (not under RECOVERY_HOME), recover finds it from the run record, clear empties it."""
    xml = copy_workflow("wordcount", tmp_path)
    shared = tmp_path / "shared-spill"
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    done = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), "--master", cluster,
                           "--conf", "spark.executor.memory=1g", "--json", "--spill-dir", str(shared),
                           "-p", "recovery.inject.t.component=count", "-p", "recovery.inject.t.rate=0.05"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    run_id = summary["run_id"]
    assert summary["status"] == "pending" and summary["failed_positions"]
    assert {p["component"] for p in summary["failed_positions"]} == {"count"}
    assert summary["spill_bytes"] > 0
    assert runs.get(redis_client, run_id).spill_dir == str(shared)
    assert (shared / run_id).is_dir() and not (Path(spill.location()) / run_id).exists()
    done = subprocess.run([sys.executable, "-m", "recovery", "recover", run_id,
                           "--master", cluster, "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    recovered = json.loads(done.stdout)
    assert recovered["status"] == "completed" and recovered["spill_bytes"] > 0
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    done = subprocess.run([sys.executable, "-m", "recovery", "clear", run_id], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (shared / run_id).exists() and list(redis_client.scan_iter(match=keys.run_pattern(run_id))) == []
