"""The machine while a bench runs: the CPU its own processes used and what everyone else's
used (MachineMonitor), from /proc, so that figures of a busy machine are marked busy."""
from __future__ import annotations

import os
import time
from typing import Any

_CLK = os.sysconf("SC_CLK_TCK")

# --------------------------------------------------------------------------- the machine while a bench runs

BUSY_SHARE = 0.10        # other processes' share of the machine above which figures are busy
MONITOR_SECONDS = 0.5


def stat_fields(pid: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state [0], ppid [1], utime [11],
    stime [12], cutime [13], cstime [14], starttime [19])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _machine_busy_seconds() -> float:
    """CPU seconds every process of the machine has used since boot (all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as fh:
        cpu = fh.readline().split()[1:]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    return sum(int(x) for i, x in enumerate(cpu[:8]) if i not in (3, 4)) / _CLK


def process_table() -> dict[int, list[str]]:
    """stat_fields of every process of the machine, by pid (one gone meanwhile is left out)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (f := stat_fields(entry)) is not None:
            table[int(entry)] = f
    return table


def sigchld_ignored(pid: int) -> bool:
    """Whether `pid` ignores SIGCHLD (its exited children are then reaped by the kernel, their
    CPU never added to its cutime)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << 16))     # SIGCHLD is 17
    except (OSError, ValueError):
        return False
    return False


class MachineMonitor:
    """The CPU used on the whole machine while a bench runs, split into this bench's (its
    process tree, plus any process given to `own`, such as a daemonized Redis) and everyone
    else's: the machine's busy time (/proc/stat) minus the bench's. Polls /proc every
    MONITOR_SECONDS on a thread.

    A process's own CPU (utime + stime) and its reaped children's (cutime + cstime) are read
    from /proc/PID/stat. A process of the tree that has exited counts with its last reading
    unless its parent reaped it into its own cutime (a parent that ignores SIGCHLD, such as
    pyspark.daemon, never does; nor does init, for an orphan): otherwise Spark's Python workers'
    CPU would be lost and counted as someone else's. What a process does after its last reading
    (at most MONITOR_SECONDS) is counted as others', so the estimate errs towards busy."""

    def __init__(self) -> None:
        import threading
        self.roots = {os.getpid()}
        # (pid, start time) -> (CPU s, ppid, whether that parent ignores SIGCHLD), at the last reading
        self.last: dict[tuple[int, str], tuple[float, int, bool]] = {}
        self.base: dict[tuple[int, str], float] = {}
        self.alive: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="machine-monitor", daemon=True)
        self.wall0 = time.monotonic()
        self.busy0 = _machine_busy_seconds()
        with open("/proc/uptime", encoding="ascii") as fh:
            self.born_before = float(fh.read().split()[0]) * _CLK   # start times are in ticks since boot
        self.result: dict[str, Any] | None = None
        self._poll()
        self._thread.start()

    def own(self, pid: int) -> None:
        """Count `pid` and its descendants as the bench's (a server it started as a daemon)."""
        with self._lock:
            self.roots.add(pid)
            self._poll(only=pid)

    def _poll(self, only: int | None = None) -> None:
        """One reading of every process of the tree (of `only`'s, when given)."""
        fields = process_table()
        parent = {pid: int(f[1]) for pid, f in fields.items()}
        alive = set()
        ignoring: dict[int, bool] = {}
        for pid, f in fields.items():
            p, hops = pid, 0
            while p and p not in self.roots and hops < 64:
                p, hops = parent.get(p, 0), hops + 1
            if p not in self.roots or (only is not None and p != only):
                continue
            key = (pid, f[19])
            cpu = sum(int(x) for x in f[11:15]) / _CLK
            ppid = parent[pid]
            if ppid not in ignoring:
                ignoring[ppid] = sigchld_ignored(ppid)
            self.last[key] = (cpu, ppid, ignoring[ppid])
            # what a process used before the monitor started is not the run's
            self.base.setdefault(key, cpu if int(f[19]) <= self.born_before else 0.0)
            alive.add(key)
        if only is None:
            self.alive = alive
        else:
            self.alive |= alive

    def _run(self) -> None:
        while not self._stop.wait(MONITOR_SECONDS):
            with self._lock:
                self._poll()

    def own_seconds(self) -> float:
        """The bench's CPU seconds since the monitor started."""
        tree = {pid for pid, _ in self.last} | self.roots
        total = 0.0
        for key, (cpu, ppid, parent_ignores) in self.last.items():
            # an exited process that a parent of the tree reaped is in that parent's cutime
            if key in self.alive or parent_ignores or ppid not in tree:
                total += cpu - self.base[key]
        return total

    def stop(self) -> dict[str, Any]:
        """What the bench's JSON keeps under "machine": CPU seconds used by the bench and by
        other processes while it ran, and other processes' share of the machine."""
        if self.result is not None:
            return self.result
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._poll()
        wall = time.monotonic() - self.wall0
        machine = _machine_busy_seconds() - self.busy0
        own = self.own_seconds()
        others = max(0.0, machine - own)
        share = others / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0
        self.result = {"bench_cpu_s": round(own, 1), "other_cpu_s": round(others, 1),
                       "other_cpu_share": round(share, 3), "busy": share > BUSY_SHARE}
        return self.result


_MONITOR: MachineMonitor | None = None


def start_monitor() -> MachineMonitor:
    """A MachineMonitor from now on: the one count_as_bench gives processes to."""
    global _MONITOR
    _MONITOR = MachineMonitor()
    return _MONITOR


def count_as_bench(pid: int) -> None:
    """A process this bench started outside its process tree (a daemonized Redis): its CPU
    is the bench's, not another process's."""
    if _MONITOR is not None and pid:
        _MONITOR.own(pid)
