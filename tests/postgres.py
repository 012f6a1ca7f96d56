"""A real PostgreSQL server for the tests: Debian's binaries, in a temporary folder, on a free
loopback port, as an unprivileged user (initdb and postgres refuse to run as root, and CI runs
as root). `.ci/run` installs Debian's `postgresql` when it is missing; without it the tests
that need a server are skipped, with the reason shown.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

# The unprivileged account the server runs as when the tests run as root (created if missing).
SERVER_USER = "recovery-pg"


def find_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl: $RECOVERY_PG_BIN, PATH, or Debian's versioned
    /usr/lib/postgresql/N/bin (the newest)."""
    configured = os.environ.get("RECOVERY_PG_BIN")
    candidates = [configured] if configured else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                         reverse=True)
    for folder in candidates:
        if folder and os.access(os.path.join(folder, "initdb"), os.X_OK) \
                and os.access(os.path.join(folder, "pg_ctl"), os.X_OK):
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_user(name: str) -> None:
    """The OS user `name` exists (a system account without home or shell, made if missing)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        added = subprocess.run(["useradd", "--system", "-M", "-s", "/usr/sbin/nologin", name],
                               capture_output=True, text=True)
        # (another test process may have created it meanwhile: useradd's exit 9, "already exists")
        if added.returncode not in (0, 9):
            raise RuntimeError(f"useradd {name} failed: {added.stderr.strip()}") from None


class PostgresServer:
    """initdb + pg_ctl start in a fresh folder; `url` reaches it as the superuser `postgres`
    (trust authentication on loopback only)."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="recovery-pg-", dir="/tmp"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = 0
        self._as: list[str] = []
        if os.geteuid() == 0:
            ensure_user(SERVER_USER)
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self._as = ["runuser", "-u", SERVER_USER, "--"]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as, *args], capture_output=True, text=True, cwd=self.folder)

    def start(self) -> None:
        init = self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                         "postgres", "-E", "UTF8", "--no-sync")
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
        for _ in range(5):   # a port taken between choosing and binding: choose again
            self.port = _free_port()
            opts = (f"-k {self.folder} -p {self.port} -h 127.0.0.1 -c fsync=off "
                    "-c full_page_writes=off -c max_connections=200")
            started = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", opts,
                                "-l", str(self.log), "-w", "-t", "60", "start")
            if started.returncode == 0:
                return
        tail = self.log.read_text(errors="replace").strip().splitlines()[-5:] if self.log.exists() else []
        raise RuntimeError(f"postgres did not start: {' | '.join(tail) or started.stderr.strip()}")

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
