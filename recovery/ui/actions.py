"""Actions the web view starts: `recovery recover RUN` as a separate process (Spark never runs
inside the web server), one at a time per run, its output kept in a log file the run page
shows while it runs. The log folder is private (0700) and the logs too (0600), whatever the
umask: they hold tracebacks with tuple values."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis

from recovery.errors import RunBusy, RunError
from recovery.home import private_dir, private_file
from recovery.tracking import keys, runs

log = logging.getLogger(__name__)

LOG_LINES = 12


def _child_env() -> dict[str, str]:
    """The environment of a `recover` or `preview` the page starts: this one's, with what a
    driver of ours needs where it is unset (this interpreter for Spark's Python)."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


@dataclass(frozen=True)
class RecoverProcess:
    """A recover this server started: pid, running, exit code (None while it runs), the last
    lines of its output and its log file."""
    pid: int
    running: bool
    exit_code: int | None
    output: list[str]
    log: str


class RecoverProcesses:
    """The `recovery recover` processes this server started, by run id."""

    def __init__(self, redis_url: str, log_dir: Path):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self._procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self._lock = threading.Lock()

    def start(self, client: Redis, run_id: str) -> int:
        """Start recovering `run_id`; refuses (RunNotFound, RunBusy: the CLI's messages) an unknown run, a
        run whose driver is alive, and a run this server is recovering already."""
        log_path = self.log_path(run_id)
        with self._lock:
            rec = runs.get(client, run_id)
            runs.check_not_running(rec)
            known = self._procs.get(run_id)
            if known is not None and known[0].poll() is None:
                raise RunBusy(f"run {run_id} is being recovered already (recover pid {known[0].pid}, "
                              "started from this page)")
            private_dir(self.log_dir, "web view folder")
            private_file(log_path, "recover log")
            env = _child_env()
            with open(log_path, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "recovery", "recover", run_id, "--redis", self.redis_url],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True)   # a Ctrl-C of the server does not cut a round short
            log.info("started recovery of %s: pid %s, output in %s", run_id, proc.pid, log_path)
            self._procs[run_id] = (proc, log_path)
            return proc.pid

    def log_path(self, run_id: str) -> Path:
        """`run_id`'s recover log: a file directly in the log folder, whatever the run id."""
        path = self.log_dir / f"{keys.check_run_id(run_id)}.recover.log"
        if path.parent != self.log_dir:   # (a valid run id has no "/": never reached)
            raise RunError(f"run id {run_id!r} makes no file name in {self.log_dir}")
        return path

    def make_private(self) -> None:
        """Tighten the log folder and the logs already in it (an older version made them 0755
        and 0644)."""
        private_dir(self.log_dir, "web view folder")
        for log_path in self.log_dir.glob("*.recover.log"):
            private_file(log_path, "recover log")

    def state(self, run_id: str) -> RecoverProcess | None:
        """The last recover this server started for `run_id`: pid, running, exit code, the
        last lines of its output; None when it started none."""
        with self._lock:
            known = self._procs.get(run_id)
        if known is None:
            return None
        proc, log_path = known
        code = proc.poll()
        try:
            lines = log_path.read_text(errors="replace").splitlines()
        except OSError as err:
            lines = [f"(cannot read {log_path}: {err})"]
        # rich redraws its progress bar with carriage returns: keep what is on screen last
        lines = [line.rsplit("\r", 1)[-1] for line in lines if line.strip()]
        return RecoverProcess(pid=proc.pid, running=code is None, exit_code=code, output=lines[-LOG_LINES:],
                              log=str(log_path))

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._procs.pop(run_id, None)


@dataclass(frozen=True)
class PreviewProcess:
    """A preview this server started: pid, running, exit code (None while it runs), its result
    (`preview --json`'s object, once it ended well) and the last lines of its log."""
    pid: int
    running: bool
    exit_code: int | None
    result: dict[str, Any] | None
    output: list[str]


class PreviewProcesses:
    """The `recovery preview` processes this server started, by run id: each a separate process
    with its own Spark, as a recover is; its JSON and its log in the private log folder."""

    def __init__(self, redis_url: str, log_dir: Path):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self._procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
        self._lock = threading.Lock()

    def start(self, client: Redis, run_id: str, dead: bool = False) -> int:
        """Start previewing `run_id` (its dead letters, as if requeued, with `dead`); refuses an
        unknown run and a run this server is previewing already."""
        name = keys.check_run_id(run_id)
        out_path, log_path = self.log_dir / f"{name}.preview.json", self.log_dir / f"{name}.preview.log"
        with self._lock:
            runs.get(client, run_id)   # RunNotFound: the CLI's message
            known = self._procs.get(run_id)
            if known is not None and known[0].poll() is None:
                raise RunBusy(f"run {run_id} is being previewed already (preview pid {known[0].pid})")
            private_dir(self.log_dir, "web view folder")
            private_file(out_path, "preview result")
            private_file(log_path, "preview log")
            env = _child_env()
            cmd = [sys.executable, "-m", "recovery", "preview", run_id, "--json", "--redis", self.redis_url]
            with open(out_path, "wb") as out, open(log_path, "wb") as err:
                proc = subprocess.Popen([*cmd, *(["--dead"] if dead else [])], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, env=env, start_new_session=True)
            log.info("started a preview of %s: pid %s, output in %s", run_id, proc.pid, log_path)
            self._procs[run_id] = (proc, out_path, log_path)
            return proc.pid

    def state(self, run_id: str) -> PreviewProcess | None:
        """The last preview this server started for `run_id`; None when it started none."""
        with self._lock:
            known = self._procs.get(run_id)
        if known is None:
            return None
        proc, out_path, log_path = known
        code = proc.poll()
        result = None
        if code == 0:
            try:
                result = json.loads(out_path.read_text())
            except (OSError, ValueError) as err:
                log.warning("preview of %s: its result cannot be read: %s", run_id, err)
        try:
            lines = [line.rsplit("\r", 1)[-1] for line in log_path.read_text(errors="replace").splitlines()
                     if line.strip()]
        except OSError as err:
            lines = [f"(cannot read {log_path}: {err})"]
        return PreviewProcess(pid=proc.pid, running=code is None, exit_code=code, result=result,
                              output=lines[-LOG_LINES:])
