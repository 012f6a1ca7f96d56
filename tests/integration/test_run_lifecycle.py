"""A run's lifecycle against a real Redis and Spark: racing submits, a driver killed or Redis
dying mid-round, `clear --force` under a running `recover`, a driver on another host (leases),
the summaries' tables. Each round that must be caught mid-way runs a `gate` bolt that blocks
until the test releases it (a file lock), so the test waits for states, never for time."""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.errors import RunCleared, RunError
from recovery.jobs import clear
from recovery.jobs import recover as jobs_recover
from recovery.model.graph import topological_order
from recovery.tracking import keys, runs
from tests.helpers import wait_for
from tests.integration.conftest import copy_workflow, submit

LINES = [f"line {i}" for i in range(200)]
WAIT = 240.0   # seconds a state may take to come on a loaded machine (bounds a hang only)


class Gate:
    """A workflow spout -> gate -> out whose `gate` bolt, once armed, blocks in its first tuple
    until released (each test gets its own package name: Python workers cache modules)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ctl = folder / "ctl"
        self.ctl.mkdir(parents=True)
        self._lock: BinaryIO | None = None   # held while armed (see arm)
        pkg = f"gate_{secrets.token_hex(4)}"
        (folder / pkg).mkdir()
        (folder / pkg / "__init__.py").write_text("")
        (folder / pkg / "components.py").write_text(f'''
import fcntl, os
from recovery import BasicBolt
CTL = {str(self.ctl)!r}

class Gate(BasicBolt):
    def process(self, tup):
        if os.path.exists(os.path.join(CTL, "armed")) and not os.path.exists(os.path.join(CTL, "release")):
            open(os.path.join(CTL, "entered-%d" % os.getpid()), "a").close()
            # blocks until the test lets go of its exclusive lock (release, or the test's end)
            with open(os.path.join(CTL, "lock"), "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)
        self.emit([tup.values[0]])
''')
        (folder / "in.txt").write_text("\n".join(LINES) + "\n")
        self.xml = folder / "gated.xml"
        self.xml.write_text(f'''<workflow xmlns="urn:recovery:workflow:1" name="gated">
  <config><property name="recovery.retry.delay.period.ms" value="10"/></config>
  <spout id="lines" parallelism="1"><source type="file" path="in.txt" format="text"/><stream fields="line"/></spout>
  <bolt id="gate" parallelism="2" class="{pkg}.components:Gate">
    <input from="lines" grouping="shuffle"/><stream fields="line"/></bolt>
  <bolt id="out" parallelism="1"><sink type="jsonl" path="out"/><input from="gate" grouping="global"/></bolt>
</workflow>''')

    def arm(self) -> None:
        """Gate bolts block from now on: the lock is held before they can see `armed`."""
        self._lock = (self.ctl / "lock").open("wb")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        (self.ctl / "armed").touch()

    def entered(self) -> bool:
        return any(p.name.startswith("entered-") for p in self.ctl.iterdir())

    def release(self) -> None:
        (self.ctl / "release").touch()   # later tuples pass straight through
        if self._lock is not None:
            self._lock.close()           # closing drops the lock: blocked bolts go on
            self._lock = None

    def output(self) -> list[str]:
        return sorted(r["line"] for r in read_jsonl_dir(str(self.folder / "out")))


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def spawn(redis_url: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    return subprocess.Popen([sys.executable, "-m", "recovery", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# --- run creation is atomic -------------------------------------------------------------------
def test_racing_creates_of_one_run_id_on_a_real_redis(redis_client):
    barrier = threading.Barrier(4)
    outcomes: list[object] = []

    def create() -> None:
        barrier.wait()
        try:
            outcomes.append(runs.create(redis_client, "same", "<x/>", "{}", None, "local", True))
        except RunError as err:
            outcomes.append(err)
    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(o, runs.Lease) for o in outcomes) == 1
    assert sum(isinstance(o, RunError) and "exists already" in str(o) for o in outcomes) == 3


# --- Redis lost under a driver ------------------------------------------------------------------
def _own_redis(folder: Path) -> tuple[subprocess.Popen, str]:
    import redis as redis_py

    from recovery.controlplane.embedded import redis_binary
    sock = folder / "r.sock"
    proc = subprocess.Popen([redis_binary(), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                             "--dir", str(folder), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"unix://{sock}"

    def up() -> bool:
        try:
            return bool(redis_py.Redis.from_url(url).ping())
        except redis_py.RedisError:
            return False
    wait_for(up, WAIT, "the test's redis-server")
    return proc, url


def test_redis_dying_mid_submit_is_one_line_exit_2_and_the_run_resumes(spark, tmp_path):
    from recovery.controlplane.connection import connect
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"rl-{secrets.token_hex(3)}"   # short socket path
    folder.mkdir()
    gate = Gate(tmp_path / "wf")
    gate.arm()
    server, url = _own_redis(folder)
    try:
        proc = spawn(url, "submit", str(gate.xml), "--run-id", "lost", "--json")
        wait_for(gate.entered, WAIT, "the gate to block in round 0")
        server.send_signal(signal.SIGTERM)          # Redis dies (its AOF has what was committed)
        server.wait()
        gate.release()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, err
        last = err.strip().splitlines()[-1]
        assert "Traceback" not in err and last.startswith("error: lost Redis")
        assert "resumable" in last and "`recovery recover lost`" in last
        server, url = _own_redis(folder)            # Redis is back: recover resumes the round
        client = connect(url)
        assert runs.status_of(runs.get(client, "lost")) == runs.CRASHED
        r = jobs_recover.recover(spark, client, url, "lost")
        assert r.status == "completed" and r.resumed
        assert gate.output() == sorted(LINES)
    finally:
        server.kill()
        server.wait()


# --- items 6 and 11 ------------------------------------------------------------------------------
def test_driver_killed_mid_round_counts_unknown_lease_and_force(spark, redis_url, redis_client, tmp_path):
    gate = Gate(tmp_path)
    gate.arm()
    proc = spawn(redis_url, "submit", str(gate.xml), "--run-id", "killed", "--json")
    try:
        wait_for(gate.entered, WAIT, "the gate to block in round 0")
        wait_for(lambda: redis_client.hlen(keys.task_done("killed", 0)) > 0, WAIT, "the spout's commit")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        gate.release()   # a Python worker left behind finishes and exits
    code, out, _ = cli(redis_url, "status", "killed", "--json")
    s = json.loads(out)
    assert code == 0 and s["status"] == "crashed" and s["counts_known"] is False
    assert s["unsettled_round"] == 0 and s["roots"] is None and s["complete"] is None
    code, out, _ = cli(redis_url, "status", "killed")
    flat = " ".join(out.split())   # (rich wraps long lines)
    assert "roots: unknown (round 0 not settled; run `recovery recover killed`)" in flat and "complete -" not in flat
    code, out, _ = cli(redis_url, "runs")
    assert "None" not in out and "roots unknown" in out
    # the same run as if its driver were alive on another host: refused, then taken over
    redis_client.set(runs.lease_key("killed"), "otherhost:77:beef", px=600_000)
    code, _, err = cli(redis_url, "recover", "killed")
    assert code == 2 and "still running (driver pid 77 on otherhost" in err and "--force" in err
    code, out, err = cli(redis_url, "recover", "killed", "--force", "--json")
    assert code == 0, err
    assert "warning: taking over run killed" in err
    assert json.loads(out)["status"] == "completed"
    assert gate.output() == sorted(LINES)
    assert not redis_client.exists(runs.lease_key("killed"))


# --- item 10 -------------------------------------------------------------------------------------
def test_clear_force_under_a_running_recover_leaves_no_key(spark, redis_url, redis_client, tmp_path):
    gate = Gate(tmp_path)
    s = submit(spark, redis_url, redis_client, gate.xml, {
        "recovery.inject.g.component": "gate", "recovery.inject.g.rate": "0.2"})
    run_id = s.run_id
    assert s.status == "pending"
    gate.arm()
    outcome: list[BaseException] = []

    def recover() -> None:
        try:
            jobs_recover.recover(spark, redis_client, redis_url, run_id)
        except BaseException as err:   # the test looks at it below
            outcome.append(err)
    t = threading.Thread(target=recover)
    t.start()
    try:
        wait_for(gate.entered, WAIT, "the gate to block in recovery round 1")
        with pytest.raises(RunError, match="still running"):
            clear.clear(redis_client, run_id)
        clear.clear(redis_client, run_id, force=True)
    finally:
        gate.release()
        t.join()
    assert len(outcome) == 1 and isinstance(outcome[0], RunCleared), outcome
    assert "was cleared" in str(outcome[0])
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run_id)))
    assert not redis_client.exists(runs.record_key(run_id))


# --- item 16 -------------------------------------------------------------------------------------
def test_tables_in_stage_order_and_recover_shows_its_own_rounds(spark, redis_url, redis_client, tmp_path):
    from recovery.model.xml import parse as workflow_xml
    xml = copy_workflow("cdn_logs", tmp_path)
    code, out, err = cli(redis_url, "submit", str(xml), "--json", "-p", "recovery.inject.a.component=aggregate",
                         "-p", "recovery.inject.a.rate=0.03", "-p", "recovery.retry.delay.period.ms=10")
    assert code == 0, err
    s = json.loads(out)
    order = topological_order(workflow_xml.load(xml))
    assert s["components_rounds"] == [0]
    code, out, _ = cli(redis_url, "status", s["run_id"])
    table = out.split("components (round 0)")[1].split("failed positions")[0]
    rows = [line.split()[0] for line in table.splitlines() if line.split() and line.split()[0] in order]
    assert rows == order
    code, out, err = cli(redis_url, "recover", s["run_id"])
    assert code == 0, err
    assert "components (rounds 1-2, added up)" in out and "first round" not in out
    rec = runs.get(redis_client, s["run_id"])
    recovery_rounds = [r for r in rec.rounds if r.round > 0]
    executed = sum(c.executed for r in recovery_rounds for c in r.components.values())
    round0 = sum(c.executed for c in rec.rounds[0].components.values())
    assert 0 < executed < round0
