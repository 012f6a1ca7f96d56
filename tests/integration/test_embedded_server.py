"""The embedded redis-server: lifecycle across processes, persistence, locking, CLI errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from recovery.controlplane import connection, embedded
from tests.helpers import NOBODY, file_mode

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
    srv = embedded.EmbeddedServer(h)
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
    srv = embedded.EmbeddedServer(home)
    assert srv.start() is True
    assert srv.start() is False  # reused
    client = connection.connect(home=home)
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
    client = connection.connect(home=home)
    assert client.ping()
    client.close()
    assert embedded.EmbeddedServer(home).status()["running"]


def test_server_survives_between_cli_invocations(home):
    assert cli_json(home, "server", "status")["running"] is False
    started = cli_json(home, "server", "start")
    assert started["running"] and started["started"] is True
    # a second process sees the same server, and the data a third process wrote
    again = cli_json(home, "server", "start")
    assert again["started"] is False and again["pid"] == started["pid"]
    code = ("from recovery.controlplane.connection import connect; connect().set(b'shared', b'yes')")
    subprocess.run([PYTHON, "-c", code], check=True, env=dict(os.environ, RECOVERY_HOME=str(home)))
    st = cli_json(home, "server", "status")
    assert st["running"] and st["pid"] == started["pid"] and st["keys"] == 1
    assert connection.connect(home=home, start=False).get(b"shared") == b"yes"
    text = cli(home, "server", "status").stdout
    assert "running" in text and str(started["pid"]) in text
    assert "PONG" in cli(home, "server", "ping").stdout
    # nothing was written next to home, only inside it
    assert sorted(p.name for p in home.parent.iterdir()) == ["home"]


def test_data_survives_stop_and_restart(home):
    client = connection.connect(home=home)
    client.set(b"persist", b"1")
    client.hset(b"h", mapping={b"a": b"1", b"b": b"2"})
    client.xadd(b"s", {b"f": b"v"})
    client.close()
    pid = embedded.EmbeddedServer(home).status()["pid"]
    out = cli(home, "server", "stop").stdout
    assert "stopped" in out and str(pid) in out
    assert _redis_pids_for(embedded.EmbeddedServer(home).socket) == []
    assert cli_json(home, "server", "status")["running"] is False
    assert "not running" in cli(home, "server", "stop").stdout
    assert (home / "redis" / "appendonly.aof").stat().st_size > 0
    # next use starts it again with the same data
    client = connection.connect(home=home)
    assert client.get(b"persist") == b"1"
    assert client.hgetall(b"h") == {b"a": b"1", b"b": b"2"}
    assert client.xlen(b"s") == 1
    client.close()
    assert embedded.EmbeddedServer(home).status()["pid"] != pid


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
    assert _redis_pids_for(embedded.EmbeddedServer(home).socket) == [reports[0]["pid"]]


def test_concurrent_connects_make_one_server(home):
    code = "from recovery.controlplane.connection import connect; c = connect(); c.incr(b'n'); print(c.info()['process_id'])"
    env = dict(os.environ, RECOVERY_HOME=str(home))
    procs = [subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    pids = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1
    assert connection.connect(home=home).get(b"n") == b"3"


def test_long_home_uses_short_socket(tmp_path):
    home = tmp_path / ("h" * 70) / ("o" * 70)
    srv = embedded.EmbeddedServer(home)
    try:
        assert srv.start()
        assert str(srv.socket).startswith("/tmp/")
        client = connection.connect(home=home)
        client.set(b"x", b"1")
        client.close()
        assert (home / "redis" / "appendonly.aof").exists()
    finally:
        srv.stop()
    assert _redis_pids_for(srv.socket) == []
    assert not srv.socket.exists()


def test_start_failure_quotes_the_log(home, monkeypatch):
    srv = embedded.EmbeddedServer(home)
    srv.dir.mkdir(parents=True)
    # an AOF redis-server cannot load makes it exit at startup, after daemonizing
    (srv.dir / "appendonly.aof").write_bytes(b"*garbage\r\nnot an aof\r\n")
    with pytest.raises(embedded.RecoveryError) as err:
        srv.start(timeout=10)
    msg = str(err.value)
    assert "\n" not in msg
    assert "redis.log" in msg or "failed" in msg
    assert _redis_pids_for(srv.socket) == []


# ---------------------------------------------------------------- private state

def _assert_private(home: Path) -> None:
    """home, its Redis folder and everything in it: 0700 folders, 0600 files and socket."""
    assert file_mode(home) == 0o700
    assert file_mode(home / "redis") == 0o700
    for entry in (home / "redis").iterdir():
        assert file_mode(entry) == (0o700 if entry.is_dir() else 0o600), (entry, oct(file_mode(entry)))


def test_state_is_private_whatever_the_umask(home, umask_022):
    assert file_mode(home) == 0o755  # made by the fixture under umask 022, as a user would
    srv = embedded.EmbeddedServer(home)
    assert srv.start()
    client = connection.connect(home=home)
    client.set(b"secret", b"tuple value")
    client.execute_command("SAVE")  # redis-server writes dump.rdb now, with its own umask
    client.close()
    names = {p.name for p in (home / "redis").iterdir()}
    assert {"appendonly.aof", "dump.rdb", "redis.log", "redis.pid", "redis.sock",
            "redis.conf", "start.lock"} <= names
    _assert_private(home)


def test_loose_state_of_an_earlier_version_is_tightened_at_start(home, umask_022):
    client = connection.connect(home=home)
    client.set(b"kept", b"1")
    client.close()
    srv = embedded.EmbeddedServer(home)
    assert srv.stop()
    for path in [home, home / "redis"]:
        os.chmod(path, 0o755)
    for path in (home / "redis").iterdir():
        os.chmod(path, 0o644)
    assert srv.start()
    _assert_private(home)
    client = connection.connect(home=home)
    assert client.get(b"kept") == b"1"
    client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root)")
def test_home_of_another_user_is_refused_exit_2(home):
    os.chown(home, NOBODY, NOBODY)
    try:
        proc = cli(home, "server", "start", check=False)
    finally:
        os.chown(home, 0, 0)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(home) in lines[0], proc.stderr
    assert "owned by uid 65534" in lines[0]
    assert not (home / "redis").exists()


@pytest.fixture
def long_home(tmp_path, monkeypatch):
    """A home too long for a unix socket, its fallback socket folder in a fresh stand-in for
    /tmp (the real /tmp/recovery-<uid> is shared with other runs on this machine). Any server a
    test started there is stopped, or killed when its folder is one the fix refuses."""
    root = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    os.chmod(root, 0o1777)
    monkeypatch.setattr(embedded, "_SHORT_SOCKET_ROOT", root)
    srv = embedded.EmbeddedServer(tmp_path / ("h" * 70) / ("o" * 70))
    assert srv.socket.parent.parent == root
    try:
        yield srv
    finally:
        try:
            srv.stop()
        except embedded.RecoveryError:
            pass  # a refused folder: nothing of ours can run there, or it is killed below
        leftovers = _redis_pids_for(srv.socket)
        for pid in leftovers:  # pragma: no cover - only before the fix
            os.kill(pid, 9)
        shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"a redis-server started on an unsafe socket folder: {leftovers}"


def test_long_home_fallback_socket_folder_is_private(long_home, umask_022):
    assert long_home.start()
    client = connection.connect(home=long_home.home)
    client.set(b"x", b"1")
    client.close()
    folder = long_home.socket.parent
    st = os.lstat(folder)
    assert st.st_uid == os.geteuid() and file_mode(folder) == 0o700
    assert file_mode(long_home.socket) == 0o600
    _assert_private(long_home.home)
    # a later command checks the folder it made and uses it
    assert long_home.stop() and long_home.start()


@pytest.mark.parametrize("kind", ["mode 0777", "other owner", "symlink"])
def test_unsafe_fallback_socket_folder_is_refused_at_start(long_home, kind):
    folder = long_home.socket.parent
    if kind == "symlink":
        target = folder.parent / "elsewhere"
        target.mkdir(mode=0o700)
        folder.symlink_to(target)
    else:
        folder.mkdir()
        os.chmod(folder, 0o777 if kind == "mode 0777" else 0o700)
        if kind == "other owner":
            if os.geteuid() != 0:
                pytest.skip("chown to another user needs root (CI runs as root)")
            os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(embedded.RecoveryError) as err:
        long_home.start()
    msg = str(err.value)
    assert "\n" not in msg and f"unsafe socket folder {folder}" in msg, msg
    assert err.value.exit_code == 2
    assert _redis_pids_for(long_home.socket) == []
    assert not long_home.socket.exists()


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
    assert embedded.EmbeddedServer(home).status()["running"] is False


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
    client = connection.connect()
    client.close()
    srv = embedded.EmbeddedServer()
    assert srv.home == Path(os.environ["RECOVERY_HOME"])
    assert srv.status()["running"]
    assert not (Path(__file__).resolve().parents[2] / ".recovery").exists() or \
        embedded.EmbeddedServer(Path(__file__).resolve().parents[2] / ".recovery").dir != srv.dir
