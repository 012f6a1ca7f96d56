"""A cold `recovery submit` in a fresh process (JVM, Spark session, embedded Redis), timed,
with every process it started reaped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench._env import REPO, copy_workflow, scratch
from bench._machine import MachineMonitor, count_as_bench, stat_fields
from bench._meters import redis_cpu_seconds
from bench._printing import verdict

# --------------------------------------------------------------------------- a cold submit

COLD_LINES = 1_000
COLD_GOAL_S = 5.0
PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> None:
    """Orphaned descendants (the JVM a driver does not wait for, Spark's Python daemon) are
    reparented to this process instead of init, so that their CPU stays countable."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap_descendants(timeout: float = 120.0) -> tuple[set[int], list[int]]:
    """Wait until every child (the reparented orphans of a driver's tree) has exited and is
    reaped. Returns (the pids reaped, the pids still running after `timeout`: normally none)."""
    deadline = time.monotonic() + timeout
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, []
        if pid:
            reaped.add(pid)
            continue
        if time.monotonic() > deadline:
            me = str(os.getpid())
            return reaped, [int(e) for e in os.listdir("/proc")
                            if e.isdigit() and ((f := stat_fields(e)) is not None and f[1] == me)]
        time.sleep(0.05)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "recovery", *args]


def cold_submit(lines: int = COLD_LINES, keep: bool = False) -> dict[str, Any]:
    """What a user waits for the first time: `python -m recovery submit workflows/cdn_logs.xml`
    of `lines` log lines in a fresh RECOVERY_HOME, a new driver process (imports, the JVM and
    its Spark session, the run, its end), after `python -m recovery server start` (the embedded
    Redis, its own step). Wall seconds of each step; CPU seconds of the submit's whole process
    tree (this process is a child subreaper meanwhile, so the JVM the driver leaves behind stays
    countable) and of the Redis server over the submit."""
    import redis as redis_py  # the client library
    with scratch("recovery-bench-cold-", keep) as tmp:
        xml = copy_workflow("cdn_logs", tmp / "wf")
        sys.path.insert(0, str(tmp / "wf"))
        try:
            from cdn_logs.generate import generate
            generate(str(tmp / "wf" / "data" / "cdn.log"), lines, seed=4, invalid=0.0)
        finally:
            sys.path.remove(str(tmp / "wf"))
        env = dict(os.environ, RECOVERY_HOME=str(tmp / "home"),
                   PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
        t0 = time.perf_counter()
        started = subprocess.run(cli("server", "start", "--json"), env=env, cwd=str(REPO),
                                 capture_output=True, text=True, check=True)
        server_s = time.perf_counter() - t0
        client = redis_py.Redis.from_url(json.loads(started.stdout)["url"])
        count_as_bench(int(client.info("server")["process_id"]))
        redis0 = redis_cpu_seconds(client)
        set_subreaper(True)
        try:
            meter = MachineMonitor()
            t0 = time.perf_counter()
            out = subprocess.run(cli("submit", str(xml), "--json"), env=env, cwd=str(REPO),
                                 capture_output=True, text=True)
            submit_s = time.perf_counter() - t0
            reap_descendants()
            cpu = meter.stop()["bench_cpu_s"] + redis_cpu_seconds(client) - redis0
        finally:
            set_subreaper(False)
        status = json.loads(out.stdout).get("status") if out.returncode == 0 else f"exit {out.returncode}"
        client.close()
        subprocess.run(cli("server", "stop", "--json"), env=env, cwd=str(REPO), capture_output=True, check=False)
        return {"lines": lines, "server_start_wall_s": round(server_s, 2), "submit_wall_s": round(submit_s, 2),
                "wall_s": round(server_s + submit_s, 2), "submit_cpu_s": round(cpu, 2), "status": status}


def print_cold_submit(cold: dict[str, Any]) -> str:
    """The cold submit's line, with its goal met or how far off."""
    wall = cold["wall_s"]
    return (f"cold submit of {cold['lines']:,} lines (server start {cold['server_start_wall_s']:.1f} s + submit "
            f"{cold['submit_wall_s']:.1f} s, {cold['submit_cpu_s']:.1f} CPU s, {cold['status']}): {wall:.1f} s wall, "
            f"goal <= {COLD_GOAL_S:g} s: {verdict(wall, COLD_GOAL_S)}")
