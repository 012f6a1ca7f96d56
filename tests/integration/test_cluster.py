"""A real Spark standalone cluster of two workers (master and workers from the pip-installed
pyspark, on 127.0.0.1, free ports), its spill store on the S3-protocol endpoint (tests/s3.py), a
workflow submitted to it with --master, the daemons stopped by PID."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from recovery.controlplane.connection import connect, scan_keys
from recovery.tracking import keys, runs, spill
from tests.helpers import wait_for
from tests.integration.conftest import copy_workflow, sink_records, with_absolute_paths

# five JVMs (master, two workers, two executors) besides the driver's: on a loaded 2-core
# machine the module's one test can take many minutes (it waits for states, never for time)
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

WORKERS = 2
# the driver waits for both executors before its first job, and a task waits for no locality
# (a reduce task would otherwise wait for the executor holding its map output): tasks run on
# both workers
SPREAD = {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
          "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
          "spark.locality.wait": "0", "spark.executor.memory": "768m"}


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


@dataclass
class Cluster:
    """The master's URL and each worker's work folder (an executor's folder appears there,
    `<app id>/<executor id>/`, when the worker launches it)."""
    url: str
    work_dirs: list[Path]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    import pyspark
    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    tmp = tmp_path_factory.mktemp("cluster")
    # the executors inherit the workers' environment: AWS credentials (tests/conftest.py) too
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(tmp))
    # the daemons log to their console at Spark's default level (the session fixture's quiet
    # log4j file config would hide the worker's registration line)
    env.pop("SPARK_CONF_DIR", None)
    port, ui, rest = _free_port(), _free_port(), _free_port()
    mlog = tmp / "master.log"
    procs: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)],
            env={**env, "SPARK_MASTER_OPTS": f"-Dspark.master.rest.port={rest}"},
            stdout=mlog.open("w"), stderr=subprocess.STDOUT)
        procs.append(master)
        _wait_port(port, master, mlog)
        url = f"spark://127.0.0.1:{port}"
        workers: list[tuple[subprocess.Popen, Path]] = []
        for i in range(WORKERS):
            wlog, work = tmp / f"worker-{i}.log", tmp / f"work-{i}"
            # one core each: an application's two tasks at a time run one per worker
            worker = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g",
                 "--work-dir", str(work), url],
                env={**env, "SPARK_WORKER_DIR": str(work)}, stdout=wlog.open("w"), stderr=subprocess.STDOUT)
            procs.append(worker)
            workers.append((worker, wlog))

        def registered() -> bool:
            for worker, wlog in workers:
                assert worker.poll() is None, wlog.read_text()[-2000:]
            return all("Successfully registered with master" in wlog.read_text() for _, wlog in workers)

        # a loaded 2-core machine is slow to start JVMs
        wait_for(registered, 240, f"{WORKERS} workers to register with the master (logs in {tmp})")
        yield Cluster(url, [tmp / f"work-{i}" for i in range(WORKERS)])
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def cluster_redis_url(redis_cluster) -> str:
    """The control plane the cluster's driver and executors share: a Redis Cluster of three
    masters (tests/clusters.py), given as one node's URL."""
    return redis_cluster.url


@pytest.fixture
def cluster_redis(cluster_redis_url: str) -> Iterator[redis.Redis]:
    """A client of that Redis, to look at what the run left."""
    client = connect(cluster_redis_url)
    try:
        yield client
    finally:
        client.close()


def _executors(work_dirs: list[Path], app_id: str) -> list[list[Path]]:
    """Per worker, the folders of the executors it launched for application `app_id`."""
    return [sorted(p for p in (w / app_id).glob("*") if p.is_dir()) for w in work_dirs]


def _apps(work_dirs: list[Path]) -> set[str]:
    return {p.name for w in work_dirs for p in w.glob("app-*")}


def _cli(args: list[str], url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recovery", *args], env=dict(os.environ, RECOVERY_REDIS_URL=url),
                          capture_output=True, text=True, timeout=900)


def _spread(master: str) -> list[str]:
    return ["--master", master] + [a for k, v in SPREAD.items() for a in ("--conf", f"{k}={v}")]


@pytest.mark.parametrize("redis_cluster", [3], indirect=True)
def test_a_diamond_with_failures_on_two_workers_spilling_to_s3_recovers_exactly(
        cluster, redis_cluster, cluster_redis_url, cluster_redis, s3_bucket, tmp_path):
    """fanout (numbers → fork → square | cube → join: a diamond) with failures on both of its
    branches, on two workers whose tasks spill to S3: the URI reaches every executor through
    the run record (nothing spills under RECOVERY_HOME), `recover` on the cluster reads the
    committed objects back and ends exact (every number's square and cube joined once, every
    line archived once), `clear` deletes the run's objects and keys."""
    client = cluster_redis
    xml = with_absolute_paths(copy_workflow("fanout", tmp_path))   # a cluster's master: no relative path
    numbers = [int(line) for line in (tmp_path / "data" / "numbers.txt").read_text().split()]
    uri = s3_bucket.uri()
    inject = {"recovery.inject.sq.component": "square", "recovery.inject.sq.rate": "0.05",
              "recovery.inject.cu.component": "cube", "recovery.inject.cu.rate": "0.05",
              "recovery.retry.delay.period.ms": "10"}
    apps_before = _apps(cluster.work_dirs)
    done = _cli(["submit", str(xml), *_spread(cluster.url), "--json", "--spill-dir", uri,
                 *[a for k, v in inject.items() for a in ("-p", f"{k}={v}")]], cluster_redis_url)
    assert done.returncode == 0, done.stderr[-3000:]
    submitted = done.stderr
    summary = json.loads(done.stdout)
    run_id = summary["run_id"]
    assert summary["status"] == "pending" and summary["spill_bytes"] > 0
    assert {p["component"] for p in summary["failed_positions"]} == {"square", "cube"}
    assert runs.get(client, run_id).spill_dir == uri
    # the driver made the run's folder on S3 (a marker object), the executors spilled there
    assert s3_bucket.keys(f"spill/{run_id}/") and not (Path(spill.location()) / run_id).exists()
    # both workers launched an executor for the submit, and on both an executor ran tasks (on
    # a loaded machine Spark may replace an executor that was slow to register: a worker then
    # has two folders)
    (app_id,) = _apps(cluster.work_dirs) - apps_before
    executors = _executors(cluster.work_dirs, app_id)
    assert len(executors) == WORKERS and all(executors), executors
    for folders in executors:
        assert any("Running task" in (f / "stderr").read_text(errors="replace") for f in folders), folders
    joined = tmp_path / "out" / "fanout" / "joined"
    assert len(sink_records(joined)) < len(numbers)

    done = _cli(["recover", run_id, *_spread(cluster.url), "--json"], cluster_redis_url)
    assert done.returncode == 0, done.stderr[-3000:]
    recovered = json.loads(done.stdout)
    assert recovered["status"] == "completed" and recovered["spill_bytes"] > 0, (summary, recovered, submitted[-3000:], done.stderr[-3000:])
    assert sink_records(joined) == sorted(json.dumps({"n": n, "square": n * n, "cube": n ** 3}, sort_keys=True)
                                          for n in numbers)
    archived = sink_records(tmp_path / "out" / "fanout" / "archive")
    assert sorted(int(json.loads(r)["line"]) for r in archived) == sorted(numbers)

    done = _cli(["clear", run_id], cluster_redis_url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert s3_bucket.keys(f"spill/{run_id}") == []
    assert list(scan_keys(client, keys.run_pattern(run_id))) == []
    assert redis_cluster.keys_per_master() == [[]] * 3
