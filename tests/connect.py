"""A real Spark Connect server for the tests: pyspark's own sbin/start-connect-server.sh on a free
loopback port, its Python workers the given interpreter (the project's venv: they import
`recovery` as a cluster's would). Ready when its gRPC port answers a session's first call.

And an impostor for one refusal: a gRPC server that answers the Connect protocol's version
question with an older Spark (no Spark 3 server installs here).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from concurrent import futures
from pathlib import Path
from typing import Any

from tests.helpers import SHORT_LIVED_JVM, running, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pyspark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


class ConnectServer:
    """`start()` it, use `url`, `stop()` it. `python`: the interpreter its workers run."""

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.folder = Path(tempfile.mkdtemp(prefix="connect-", dir="/tmp"))
        self.pid: int | None = None

    def _env(self) -> dict[str, str]:
        return dict(os.environ, SPARK_HOME=_pyspark_home(), SPARK_LOG_DIR=str(self.folder / "logs"),
                    SPARK_PID_DIR=str(self.folder), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=self.python,
                    PYSPARK_DRIVER_PYTHON=self.python, SPARK_IDENT_STRING=f"recovery-tests-{self.port}")

    def _speedups(self) -> list[str]:
        """What the suite's own sessions have (tests/conftest.py, engine/session.py): a JVM
        for a short life, and, where the workers' Python has recovery, its daemon that forks
        them with the runtime loaded, over Unix sockets. A server whose Python lacks recovery
        keeps PySpark's own daemon (ours would not start there)."""
        options = ["--driver-java-options", SHORT_LIVED_JVM]
        if self.python == sys.executable:
            options += ["--conf", "spark.python.daemon.module=recovery.engine.worker_daemon",
                        "--conf", "spark.python.unix.domain.socket.enabled=true",
                        "--conf", f"spark.python.unix.domain.socket.dir={self.folder}"]
        return options

    def start(self, timeout: float = 180) -> None:
        script = Path(_pyspark_home()) / "sbin" / "start-connect-server.sh"
        subprocess.run(["bash", str(script), "--master", "local[2]",
                        "--conf", f"spark.connect.grpc.binding.port={self.port}",
                        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                        "--conf", "spark.ui.enabled=false",
                        "--conf", f"spark.local.dir={self.folder / 'tmp'}",
                        "--conf", "spark.executorEnv.PYTHONHASHSEED=0", *self._speedups()],
                       env=self._env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pids = list(self.folder.glob("*.pid"))
        self.pid = int(pids[0].read_text().strip()) if pids else None

        def ready() -> bool:
            if self.pid is not None and not running(self.pid):
                raise AssertionError(f"the Spark Connect server ended: {self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(ready, timeout, f"the Spark Connect server on port {self.port}")

    def log_tail(self) -> str:
        logs = sorted((self.folder / "logs").glob("*.out"))
        return logs[-1].read_text(errors="replace")[-2000:] if logs else "(no log)"

    def stop(self) -> None:
        if self.pid is not None and running(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            try:
                wait_for(lambda: not running(self.pid or 0), 30, "the Spark Connect server to stop")
            except AssertionError:
                os.kill(self.pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


class OldSparkServer:
    """A gRPC server on a free loopback port that speaks just enough of the Spark Connect
    protocol to say it runs `version` (every other question gets an empty answer)."""

    def __init__(self, version: str = "3.5.1"):
        self.version = version
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.server: Any = None

    def start(self) -> None:
        import grpc
        from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

        version = self.version

        class Service(base_pb2_grpc.SparkConnectServiceServicer):
            def AnalyzePlan(self, request: Any, context: Any) -> Any:
                return base_pb2.AnalyzePlanResponse(
                    session_id=request.session_id, server_side_session_id="old",
                    spark_version=base_pb2.AnalyzePlanResponse.SparkVersion(version=version))

            def Config(self, request: Any, context: Any) -> Any:
                return base_pb2.ConfigResponse(session_id=request.session_id, server_side_session_id="old")

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        base_pb2_grpc.add_SparkConnectServiceServicer_to_server(Service(), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(0)
