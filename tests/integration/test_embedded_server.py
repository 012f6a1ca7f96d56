"""The embedded redis-server: lifecycle across processes, persistence, locking, CLI errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recovery import store

PYTHON = sys.executable


def _redis_pids_for(socket: Path) -> list[int]:
    """Live redis-server processes whose command line (proc title) names ``socket``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"redis-server" in cmdline and os.fsencode(str(socket)) in cmdline and state != b"Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def home(tmp_path):
    """A fresh RECOVERY_HOME; whatever server a test starts there is stopped afterwards."""
    h = tmp_path / "home"
    h.mkdir()
    yield h
    srv = store.EmbeddedServer(h)
    srv.stop()
    leftovers = _redis_pids_for(srv.socket)
    for pid in leftovers:  # pragma: no cover - only when stop() failed
        os.kill(pid, 9)
    assert not leftovers, f"redis-server still running after stop(): {leftovers}"


def cli(home: Path, *args: str, env_extra: dict | None = None, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, RECOVERY_HOME=str(home))
    env.pop("RECOVERY_REDIS_URL", None)
    env.update(env_extra or {})
    proc = subprocess.run([PYTHON, "-m", "recovery", *args], capture_output=True, text=True,
                          env=env, cwd=str(home.parent), timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def cli_json(home: Path, *args: str) -> dict:
    return json.loads(cli(home, *args, "--json").stdout)


def test_start_connect_status_stop(home):
    srv = store.EmbeddedServer(home)
    assert srv.start() is True
    assert srv.start() is False  # reused
    client = store.connect(home=home)
    client.set(b"k", b"v")
    st = srv.status()
    assert st["running"] and st["aof"] and st["keys"] == 1
    assert st["pid"] == int((home / "redis" / "redis.pid").read_text())
    assert st["url"] == f"unix://{home}/redis/redis.sock"
    assert (home / "redis" / "redis.sock").exists()
    assert _redis_pids_for(srv.socket) == [st["pid"]]
    client.close()
    assert srv.stop() is True
    assert not srv.status()["running"]
    assert _redis_pids_for(srv.socket) == []


def test_connect_starts_on_demand(home):
    client = store.connect(home=home)
    assert client.ping()
    client.close()
    assert store.EmbeddedServer(home).status()["running"]


def test_server_survives_between_cli_invocations(home):
    assert cli_json(home, "server", "status")["running"] is False
    started = cli_json(home, "server", "start")
    assert started["running"] and started["started"] is True
    # a second process sees the same server, and the data a third process wrote
    again = cli_json(home, "server", "start")
    assert again["started"] is False and again["pid"] == started["pid"]
    code = ("from recovery.store import connect; connect().set(b'shared', b'yes')")
    subprocess.run([PYTHON, "-c", code], check=True, env=dict(os.environ, RECOVERY_HOME=str(home)))
    st = cli_json(home, "server", "status")
    assert st["running"] and st["pid"] == started["pid"] and st["keys"] == 1
    assert store.connect(home=home, start=False).get(b"shared") == b"yes"
    text = cli(home, "server", "status").stdout
    assert "running" in text and str(started["pid"]) in text
    assert "PONG" in cli(home, "server", "ping").stdout
    # nothing was written next to home, only inside it
    assert sorted(p.name for p in home.parent.iterdir()) == ["home"]


def test_data_survives_stop_and_restart(home):
    client = store.connect(home=home)
    client.set(b"persist", b"1")
    client.hset(b"h", mapping={b"a": b"1", b"b": b"2"})
    client.xadd(b"s", {b"f": b"v"})
    client.close()
    pid = store.EmbeddedServer(home).status()["pid"]
    out = cli(home, "server", "stop").stdout
    assert "stopped" in out and str(pid) in out
    assert _redis_pids_for(store.EmbeddedServer(home).socket) == []
    assert cli_json(home, "server", "status")["running"] is False
    assert "not running" in cli(home, "server", "stop").stdout
    assert (home / "redis" / "appendonly.aof").stat().st_size > 0
    # next use starts it again with the same data
    client = store.connect(home=home)
    assert client.get(b"persist") == b"1"
    assert client.hgetall(b"h") == {b"a": b"1", b"b": b"2"}
    assert client.xlen(b"s") == 1
    client.close()
    assert store.EmbeddedServer(home).status()["pid"] != pid


@pytest.mark.parametrize("n", [2, 4])
def test_concurrent_starts_make_one_server(home, n):
    env = dict(os.environ, RECOVERY_HOME=str(home))
    procs = [subprocess.Popen([PYTHON, "-m", "recovery", "server", "start", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(n)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * n, results
    reports = [json.loads(out) for out, _ in results]
    assert sum(r["started"] for r in reports) == 1
    assert len({r["pid"] for r in reports}) == 1
    assert _redis_pids_for(store.EmbeddedServer(home).socket) == [reports[0]["pid"]]


def test_concurrent_connects_make_one_server(home):
    code = "from recovery.store import connect; c = connect(); c.incr(b'n'); print(c.info()['process_id'])"
    env = dict(os.environ, RECOVERY_HOME=str(home))
    procs = [subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    pids = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1
    assert store.connect(home=home).get(b"n") == b"3"


def test_long_home_uses_short_socket(tmp_path):
    home = tmp_path / ("h" * 70) / ("o" * 70)
    srv = store.EmbeddedServer(home)
    try:
        assert srv.start()
        assert str(srv.socket).startswith("/tmp/")
        client = store.connect(home=home)
        client.set(b"x", b"1")
        client.close()
        assert (home / "redis" / "appendonly.aof").exists()
    finally:
        srv.stop()
    assert _redis_pids_for(srv.socket) == []
    assert not srv.socket.exists()


def test_start_failure_quotes_the_log(home, monkeypatch):
    srv = store.EmbeddedServer(home)
    srv.dir.mkdir(parents=True)
    # an AOF redis-server cannot load makes it exit at startup, after daemonizing
    (srv.dir / "appendonly.aof").write_bytes(b"*garbage\r\nnot an aof\r\n")
    with pytest.raises(store.RecoveryError) as err:
        srv.start(timeout=10)
    msg = str(err.value)
    assert "\n" not in msg
    assert "redis.log" in msg or "failed" in msg
    assert _redis_pids_for(srv.socket) == []


@pytest.mark.parametrize("url, shown", [
    ("redis://127.0.0.1:1/", "redis://127.0.0.1:1/"),
    ("redis://:secret@127.0.0.1:1/", "redis://:***@127.0.0.1:1/"),
])
@pytest.mark.parametrize("via", ["option", "env"])
def test_unreachable_url_is_one_line_exit_2(home, url, shown, via):
    if via == "option":
        proc = cli(home, "server", "ping", "--redis", url, check=False)
    else:
        proc = cli(home, "server", "ping", check=False, env_extra={"RECOVERY_REDIS_URL": url})
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and shown in lines[0]
    assert "Traceback" not in proc.stderr and "secret" not in proc.stderr
    assert not (home / "redis").exists()  # an explicit URL never starts the embedded server


def test_invalid_url_is_one_line_exit_2(home):
    proc = cli(home, "server", "ping", "--redis", "localhost:6379", check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_ping_does_not_start_the_embedded_server(home):
    proc = cli(home, "server", "ping", check=False)
    assert proc.returncode == 2 and "not running" in proc.stderr
    assert store.EmbeddedServer(home).status()["running"] is False


def test_redis_fixtures(redis_url, redis_client):
    assert redis_url.startswith("unix://")
    assert redis_client.dbsize() == 0
    redis_client.set(b"a", b"1")
    assert redis_client.get(b"a") == b"1"


def test_redis_fixture_flushes_between_tests(redis_client):
    assert redis_client.dbsize() == 0


def test_integration_marker(request):
    assert request.node.get_closest_marker("integration") is not None


def test_default_home_is_the_session_tmp_home():
    """With no home and no URL, the suite's embedded server lives in the session's temporary
    RECOVERY_HOME (stopped by conftest at the end), never in the checkout."""
    client = store.connect()
    client.close()
    srv = store.EmbeddedServer()
    assert srv.home == Path(os.environ["RECOVERY_HOME"])
    assert srv.status()["running"]
    assert not (Path(__file__).resolve().parents[2] / ".recovery").exists() or \
        store.EmbeddedServer(Path(__file__).resolve().parents[2] / ".recovery").dir != srv.dir
