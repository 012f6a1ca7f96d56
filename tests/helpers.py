"""Helpers shared by the test modules.

``wait_for`` is the one place where a test polls: it waits for a *state* (a key in Redis, a
file, a process's exit), never for a time to pass, and fails with a message naming what it
waited for. The deadline only bounds a hang; a test never asserts how long something took.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.02


# Every JVM of the suite (the session's, a CLI's, a standalone cluster's, a Connect server's)
# lives seconds to minutes: the C1 compiler alone and the serial collector cost it about 40%
# less CPU to start and run than the default tiered C2 and G1, and the suite is CPU-bound on
# two cores.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Call ``predicate`` until it returns something truthy, and return that. An exception
    from ``predicate`` propagates (use it to fail early, e.g. when a process died). After
    ``timeout`` seconds without success, fail with ``what`` in the message."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def pretend_running(client: Any, run_id: str) -> None:
    """Make a run look driven by this process: status running and a valid lease it holds (what a
    live `submit` or `recover` has), so that commands refuse it as they refuse a live run."""
    import os
    import socket

    from recovery.tracking import runs
    client.hset(runs.record_key(run_id), mapping={"status": "running", "driver_pid": os.getpid(),
                                                  "driver_host": socket.gethostname()})
    client.set(runs.lease_key(run_id), f"{socket.gethostname()}:{os.getpid()}:test", px=600_000)


NOBODY = 65534   # the uid of `nobody`: a state folder or file owned by another user


def file_mode(path: Path) -> int:
    """The permission bits of ``path`` itself (not of what a symlink points at)."""
    return os.lstat(path).st_mode & 0o7777


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc); a process gone meanwhile is left out."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    out[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def descendants(pid: int) -> set[int]:
    """Every process under `pid` now: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pid: int) -> bool:
    """`pid` exists and has not exited (a zombie, exited but not yet reaped, has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
