"""recovery.engine.worker_daemon: PySpark's Python worker daemon, run as Spark runs it, with
the JVM's side played here. When Spark hangs up on a worker (a task it
cancelled because another task of the job failed, e.g. on a truncated spill file), PySpark's
own daemon printed the worker's last flush as a traceback on the terminal
(`BrokenPipeError: [Errno 32] Broken pipe`); ours ends that worker without a word."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.serializers import UTF8Deserializer, read_int

from recovery.engine import worker_daemon
from tests.helpers import wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder for the daemon's unix socket (a pytest tmp_path can be too long for one)."""
    import shutil
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="rwd-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _hang_up_on_a_worker(module: str, folder: Path) -> str:
    """Start `module` as Spark starts its daemon (unix socket, a worker killed when its flush
    fails, as spark.python.daemon.killWorkerOnFlushFailure sets), have it fork a worker, close
    the worker's socket as Spark does on a cancelled task, let the worker end, stop the daemon
    (Spark closes its stdin) and return what the daemon printed on stderr."""
    env = dict(os.environ, PYTHON_UNIX_DOMAIN_ENABLED="true", PYTHON_WORKER_FACTORY_SOCK_DIR=str(folder),
               PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE="true", PYTHON_WORKER_FACTORY_SECRET="s",
               SPARK_REUSE_WORKER="1")
    daemon = subprocess.Popen([sys.executable, "-m", module], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert daemon.stdout is not None and daemon.stdin is not None and daemon.stderr is not None
        path = UTF8Deserializer().loads(daemon.stdout)       # where the daemon listens
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            with sock.makefile("rb") as reply:
                pid = read_int(reply)                          # the forked worker's pid
        # closed: the worker, waiting for its task, reads the end of its input, writes its error
        # into its buffer and flushes it into a socket nobody reads any more
        wait_for(lambda: not _alive(pid), 60, f"the worker {pid} to end")
        daemon.stdin.close()
        daemon.wait(timeout=60)
        return daemon.stderr.read().decode(errors="replace")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_pyspark_s_own_daemon_prints_the_hang_up_as_a_traceback(short_dir):
    """What the trial saw: the reason this module exists (if PySpark stops printing it, this
    test says so, and the module can go)."""
    err = _hang_up_on_a_worker("pyspark.daemon", short_dir)
    assert "Traceback" in err and ("BrokenPipeError" in err or "ConnectionResetError" in err), err


def test_ours_ends_a_worker_spark_hung_up_on_without_a_word(short_dir):
    err = _hang_up_on_a_worker("recovery.engine.worker_daemon", short_dir)
    assert err == ""


def test_the_session_runs_its_workers_under_our_daemon():
    """engine/session.py gives Spark this module; Spark imports it by name in every worker."""
    text = (Path(__file__).resolve().parents[3] / "recovery" / "engine" / "session.py").read_text()
    assert '"spark.python.daemon.module", "recovery.engine.worker_daemon")' in text
    from pyspark import daemon

    import recovery.engine.worker_daemon as ours
    assert daemon.worker is ours.worker


def _spark_lib(root, with_package: bool):
    """root/pyspark/python/lib/{pyspark.zip, py4j-src.zip}, root/pyspark/__init__.py when
    `with_package` (a pip-installed PySpark)."""
    lib = root / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    for z in zips:
        open(z, "wb").close()
    if with_package:
        (root / "pyspark" / "__init__.py").write_text("")
    return zips


def test_the_installed_pysparks_own_zips_go_last_and_a_clusters_spark_keeps_its_zips_first(tmp_path):
    site = tmp_path / "site-packages"
    installed = _spark_lib(site, with_package=True)
    path = [*installed, "/work/app", str(site)]
    assert worker_daemon.prefer_installed_pyspark(path) == ["/work/app", str(site), *installed]
    # the same zips when that site-packages is not on the path: kept where they are
    assert worker_daemon.prefer_installed_pyspark([*installed, "/work/app"]) == [*installed, "/work/app"]
    cluster = _spark_lib(tmp_path / "opt-spark", with_package=False)   # a Spark distribution's python/lib
    path = [*cluster, "/work/app", str(site)]
    assert worker_daemon.prefer_installed_pyspark(path) == path
