"""What a bench measures beside wall time: the CPU seconds of a process tree and of Redis's
server, and Redis's memory, sampled while a run goes on."""
from __future__ import annotations

import os
from typing import Any

_CLK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by this process and every descendant (Spark's JVM, its Python
    daemon and workers), reaped children included (their parents' cutime/cstime)."""
    root = root or os.getpid()
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry)
        parent[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / _CLK   # utime stime cutime cstime
    total = 0.0
    for pid, t in times.items():
        p, seen = pid, 0
        while p and p != root and seen < 64:
            p, seen = parent.get(p, 0), seen + 1
        if p == root:
            total += t
    return total


def redis_cpu_seconds(client: Any) -> float:
    """The Redis server's CPU seconds so far, its forks (AOF rewrites) included."""
    try:
        i = client.info("cpu")
    except Exception:
        return 0.0
    return sum(float(i.get(k, 0)) for k in ("used_cpu_sys", "used_cpu_user",
                                             "used_cpu_sys_children", "used_cpu_user_children"))


class CpuMeter:
    """CPU seconds of the driver's process tree plus the Redis server over a block."""

    def __init__(self, client: Any = None):
        self.client = client
        self.seconds = 0.0

    def __enter__(self) -> CpuMeter:
        self._t0 = tree_cpu_seconds()
        self._r0 = redis_cpu_seconds(self.client) if self.client is not None else 0.0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = tree_cpu_seconds() - self._t0
        if self.client is not None:
            self.seconds += redis_cpu_seconds(self.client) - self._r0


def redis_used_memory(client: Any) -> int:
    try:
        return int(client.info("memory").get("used_memory", 0))
    except Exception:
        return 0


class Poller:
    """A thread that calls `sample()` every `every` seconds while inside `with`, until exit."""

    def __init__(self, every: float, name: str):
        import threading
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


class MemorySampler:
    """Peak of Redis's used_memory above its level at start, sampled every `every` seconds
    on a thread with its own connection (INFO's own peak cannot be reset on 6.2)."""

    def __init__(self, url: str, every: float = 0.2):
        import threading

        from recovery.controlplane import connection
        self.client = connection.connect(url, start=False)
        self.every = every
        self.base = redis_used_memory(self.client)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, redis_used_memory(self.client) - self.base)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()
