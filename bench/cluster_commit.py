"""Redis Cluster, run by `bench/scale.py --redis-cluster N`: the ledger's
update throughput and the task commit rate against one master and against N masters, side by
side in one run, with the bytes per root each master holds.

No Spark: worker processes drive the tracker's own commit (recovery.tracking.tracker.TaskTracker,
so unlike the rest of scale.py this imports the package) as the tasks of a two-stage round
do: stage 0's T tasks each commit the ledger contributions of its share of the R roots (a
spout creating them), stage 1's T tasks cancel them (the roots complete); the last task of a
stage folds the ledger, as in a run. Each cluster is started from the project's own
redis-server (tests/clusters.py; AOF off, so the figures are the servers' work, not the disk's).

Per cluster it prints: wall seconds of the commits, commits per second and ledger updates
(roots) per second; each master's CPU seconds (INFO cpu) and its time in the commits' commands
(INFO commandstats, without what clients send when they connect: CLUSTER, COMMAND, HELLO, ...),
and the same rates per CPU second of the busiest master (what the cluster sustains
once the clients are not the limit: on a machine with few cores the clients and the servers
share them, so the wall clock cannot show it); each master's bytes per root
after stage 0 (every root pending: used_memory above its level before, divided by R) and its
exact used_memory_peak above that level per root. Goals, as ratios: N masters' commit
throughput over one master's >= 2.5 (by the busiest master's CPU: the bench machine's cores
are shared by the clients; the clients connect before the measure, as executors keep theirs),
and no master holding more than 1.5x the average of the bytes.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

THROUGHPUT_GOAL = 2.5
BALANCE_GOAL = 1.5
RUN_ID = "bench-cluster"


def _roots(n: int) -> np.ndarray:
    """n distinct non-zero 64-bit root ids, spread as derived ids are (splitmix64)."""
    x = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    x[x == 0] = 1
    return x


_worker: dict[str, Any] = {}


def _connect_worker(url: str) -> None:
    """A worker process's client, made once (as an executor keeps its own): its discovery of
    the cluster happens before the measured commits."""
    from recovery.controlplane import connection
    _worker["client"] = connection.connect(url)


def _ready(_: int) -> bool:
    return bool(_worker["client"].ping())


def _commit_tasks(generation: str, stage: int, indexes: list[int], roots: int, tasks: int) -> int:
    """One worker process: commit the tasks `indexes` of stage `stage`; returns the roots written."""
    from recovery.model.run import TaskIdentity
    from recovery.tracking.tracker import TaskTracker
    client = _worker["client"]
    all_roots = _roots(roots)
    written = 0
    for i in indexes:
        mine = all_roots[i::tasks]
        xors = mine ^ np.uint64(0x5DEECE66D)   # any non-zero id per root; stage 1 cancels it
        t = TaskTracker(client, TaskIdentity(RUN_ID, 0, f"s{stage}", i, stage * tasks + i), {},
                        generation=generation, parallelism=tasks)
        if not t.commit((mine, xors), {"executed": int(len(mine))}):
            raise RuntimeError(f"task s{stage}:{i} was fenced out")
        written += len(mine)
    return written


# What a client sends when it connects (RedisCluster's discovery of the slots and commands):
# not the commits' work, and paid once per process in a run (executors keep their client).
SETUP_COMMANDS = {"cluster", "command", "hello", "client", "info", "ping", "config", "readonly"}


def _master_info(urls: list[str]) -> list[dict[str, Any]]:
    import redis
    out = []
    for url in urls:
        c = redis.Redis.from_url(url)
        try:
            mem, cpu, stats = c.info("memory"), c.info("cpu"), c.info("commandstats")
            work = sum(v["usec"] for k, v in stats.items() if k.removeprefix("cmdstat_") not in SETUP_COMMANDS)
            out.append({"used_memory": int(mem["used_memory"]), "peak": int(mem["used_memory_peak"]),
                        "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
                        "command_s": work / 1e6})
        finally:
            c.close()
    return out


def measure(masters: int, roots: int, tasks: int, workers: int, folder: Path) -> dict[str, Any]:
    """Start a cluster of `masters`, run both stages, return the figures."""
    from recovery.controlplane import connection
    from recovery.tracking import ledger, runs
    from recovery.tracking.ledger import bucket_key
    from tests.clusters import RedisCluster
    cluster = RedisCluster(folder / f"m{masters}", masters).start()
    try:
        url = cluster.url
        client = connection.connect(url)
        lease = runs.create(client, RUN_ID, "<workflow/>", "{}", None, "bench", True)
        ctx = multiprocessing.get_context("fork")
        stages = []
        after_stage0: list[dict[str, Any]] = []
        with ctx.Pool(workers, initializer=_connect_worker, initargs=(url,)) as pool:
            assert all(pool.map(_ready, range(workers * 4), chunksize=1))
            before = _master_info(cluster.master_urls)
            for stage in (0, 1):
                shares = [list(range(w, tasks, workers)) for w in range(workers)]
                started = time.perf_counter()
                written = sum(pool.starmap(_commit_tasks, [(lease.generation, stage, s, roots, tasks)
                                                           for s in shares if s], chunksize=1))
                stages.append({"stage": stage, "seconds": time.perf_counter() - started, "roots": written})
                if stage == 0:
                    after_stage0 = _master_info(cluster.master_urls)
                    pending = sum(ledger.resolve_bucket(client, RUN_ID, b) for b in range(ledger.LEDGER_BUCKETS))
                    assert pending == roots, (pending, roots)
        after = _master_info(cluster.master_urls)
        pending = sum(ledger.resolve_bucket(client, RUN_ID, b) for b in range(ledger.LEDGER_BUCKETS))
        assert pending == 0, pending   # stage 1 cancelled every root: the ledger is exact
        bucket_masters = [client.get_node_from_key(bucket_key(RUN_ID, b)).port for b in range(ledger.LEDGER_BUCKETS)]
        client.close()
        seconds = sum(s["seconds"] for s in stages)
        commits = 2 * tasks
        updates = sum(s["roots"] for s in stages)
        cpu = [a["cpu"] - b["cpu"] for a, b in zip(after, before)]
        work = [a["command_s"] - b["command_s"] for a, b in zip(after, before)]
        held = [max(0, a["used_memory"] - b["used_memory"]) for a, b in zip(after_stage0, before)]
        peak = [max(0, a["peak"] - b["used_memory"]) for a, b in zip(after, before)]
        busiest = max(cpu) or 1e-9
        return {
            "masters": masters, "roots": roots, "tasks_per_stage": tasks, "workers": workers,
            "seconds": round(seconds, 3), "commits": commits, "ledger_updates": updates,
            "commits_per_s": round(commits / seconds, 1), "updates_per_s": round(updates / seconds),
            "master_cpu_s": [round(c, 3) for c in cpu],
            "master_command_s": [round(w, 4) for w in work],
            "commits_per_busiest_master_cpu_s": round(commits / busiest, 1),
            "updates_per_busiest_master_cpu_s": round(updates / busiest),
            "bytes_per_root_per_master": [round(h / roots, 2) for h in held],
            "peak_bytes_per_root_per_master": [round(p / roots, 2) for p in peak],
            "ledger_buckets_per_master": [bucket_masters.count(p) for p in cluster.ports[:masters]],
        }
    finally:
        cluster.stop()


def goals(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    n = many["masters"]
    wall = many["commits_per_s"] / one["commits_per_s"]
    cpu = many["commits_per_busiest_master_cpu_s"] / one["commits_per_busiest_master_cpu_s"]
    held = many["bytes_per_root_per_master"]
    balance = max(held) / (sum(held) / len(held)) if sum(held) else float("nan")
    return [
        f"commit throughput, {n} masters / 1 master, by the busiest master's CPU: {cpu:.2f}x, goal >= "
        f"{THROUGHPUT_GOAL}x: {'met' if cpu >= THROUGHPUT_GOAL else 'not met'} (wall clock: {wall:.2f}x, "
        f"clients and servers sharing {os.cpu_count()} CPUs)",
        f"busiest master / average of the bytes per root ({n} masters): {balance:.2f}, goal <= "
        f"{BALANCE_GOAL}: {'met' if balance <= BALANCE_GOAL else 'not met'}",
    ]


def run(args: argparse.Namespace) -> int:
    """`bench/scale.py --redis-cluster N`."""
    from bench import _common as C
    n = args.redis_cluster
    roots = args.roots[0] if args.roots else (100_000 if args.quick else 400_000)
    tasks, workers = args.cluster_tasks, args.cluster_workers
    results = C.Results("scale_cluster", args, {"masters": [1, n], "roots": roots, "tasks_per_stage": tasks,
                                                "workers": workers, "aof": "off"})
    folder = Path(tempfile.mkdtemp(prefix="recovery-bench-cluster-", dir="/tmp"))
    load0 = os.getloadavg()[0]
    try:
        one = measure(1, roots, tasks, workers, folder)
        many = measure(n, roots, tasks, workers, folder)
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for f in (one, many):
        rows.append([f["masters"], f"{roots:,}", f"{f['seconds']:.2f}", f"{f['commits_per_s']:.0f}",
                     f"{f['updates_per_s']:,}", " ".join(f"{c:.2f}" for c in f["master_cpu_s"]),
                     " ".join(f"{c * 1000:.0f}" for c in f["master_command_s"]),
                     f"{f['commits_per_busiest_master_cpu_s']:.0f}", f"{f['updates_per_busiest_master_cpu_s']:,}",
                     " ".join(f"{b:.1f}" for b in f["bytes_per_root_per_master"]),
                     " ".join(f"{b:.1f}" for b in f["peak_bytes_per_root_per_master"]),
                     " ".join(map(str, f["ledger_buckets_per_master"]))])
    print(f"Redis Cluster: {2 * tasks} task commits (2 stages of {tasks}) over {roots:,} roots by {workers} "
          f"worker processes; {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load average "
          f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end\n")
    print(C.table(["masters", "roots", "commit s", "commits/s", "ledger updates/s", "CPU s per master",
                   "command ms per master", "commits per busiest-master CPU s", "updates per busiest-master CPU s",
                   "B/root per master (all pending)", "peak B/root per master", "ledger buckets per master"],
                  rows))
    lines = goals(one, many)
    print("")
    for line in lines:
        print(f"goal: {line}")
    results.write({"clusters": [one, many], "goals": lines})
    return 0
