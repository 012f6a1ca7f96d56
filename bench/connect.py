"""The engine on a Spark Connect session against a classic one, side by side in one run: cdn_logs
submitted tracked through the run API with a warm session of each kind, in rotated order.

  classic            a classic SparkSession (local[2]) in a worker process of its own
  connect            a Spark Connect session to a local Connect server (local[2]), its client
                     in a worker process of its own (a process is either a Connect client or a
                     classic driver: pyspark marks it)
  classic (BEFORE)   with --before PATH: a classic session running the recovery of another
                     checkout at PATH (the previous version of the engine), for before/after

Each worker runs one submit per turn and reports its wall time; CPU is the worker's process
tree, plus the Connect server's for the connect variant (its executors do the work there).
Every run's keys are removed after it. Prints the medians, the goals (a Connect session at
most 1.15x the classic one in wall; the classic session after this change at most 1.0x the one
before it), each met or how far off, and writes them as JSON into bench/results/ (or --json PATH).

    .venv/bin/python bench/connect.py [--tuples 1000000] [--repeats 3] [--before PATH]
        [--json PATH] [--note TEXT] [--busy-ok]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _env  # noqa: E402
from bench._machine import count_as_bench  # noqa: E402
from bench._meters import tree_cpu_seconds  # noqa: E402
from bench._printing import median, table, verdict  # noqa: E402
from bench._results import Results, add_result_args  # noqa: E402

CONNECT_GOAL = 1.15   # connect / classic, wall
BEFORE_GOAL = 1.0     # classic after / classic before, wall

# A worker: reads one workflow path a line, submits it (its sink folder emptied first), clears
# the run, answers its wall time.
WORKER = r'''
import json, shutil, sys, time
from pathlib import Path
import recovery
from recovery import run as api
kind, target, redis = sys.argv[1:4]
if kind == "connect":
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(target).getOrCreate()
else:
    from recovery.engine.session import session
    spark = session(target, {"spark.default.parallelism": "2"})
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    xml = line.strip()
    shutil.rmtree(Path(xml).parent / "out", ignore_errors=True)
    t0 = time.perf_counter()
    run = recovery.submit(xml, spark=spark, redis=redis)
    wall = time.perf_counter() - t0
    status = run.summary.status if run.summary is not None else "?"
    roots = run.summary.roots if run.summary is not None else 0
    run.clear()
    print(json.dumps({"wall": wall, "status": status, "roots": roots}), flush=True)
'''


class Worker:
    def __init__(self, name: str, kind: str, target: str, redis_url: str, env: dict[str, str],
                 extra_cpu_pid: int | None = None):
        self.name, self.extra_cpu_pid = name, extra_cpu_pid
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, kind, target, redis_url], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        count_as_bench(self.proc.pid)
        self._answer()

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid) + (tree_cpu_seconds(self.extra_cpu_pid) if self.extra_cpu_pid else 0)

    def run(self, xml: Path) -> tuple[float, float, dict]:
        assert self.proc.stdin is not None
        c0 = self.cpu()
        self.proc.stdin.write(f"{xml}\n")
        self.proc.stdin.flush()
        got = self._answer()
        return got["wall"], self.cpu() - c0, got

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=None, metavar="PATH",
                    help="a checkout of another version: its classic session runs beside this one's")
    add_result_args(ap, "connect")
    args = ap.parse_args()
    results = Results("connect", args, {"workflow": "cdn_logs", "tuples": args.tuples, "repeats": args.repeats,
                                        "before": args.before})
    from tests.connect import ConnectServer
    with _env.bench_home() as home, _env.redis_for(home) as (client, url):
        xml = _env.copy_workflow("cdn_logs", home / "wf")
        _env.generate_input("cdn_logs", home / "wf", args.tuples, 0.0)
        copies = {}   # each variant's own copy of the workflow (its sink folder its own)
        for name in ("classic", "connect", "classic (before)"):
            folder = home / name.replace(" ", "-").strip("()").replace("(", "").replace(")", "")
            shutil.copytree(home / "wf", folder)
            copies[name] = folder / xml.name
        env = dict(os.environ, RECOVERY_HOME=str(home / "state"), PYTHONHASHSEED="0", SPARK_LOCAL_IP="127.0.0.1")
        env.pop("SPARK_REMOTE", None)
        server = ConnectServer(sys.executable)
        server.start()
        workers: list[Worker] = []
        try:
            if server.pid:
                count_as_bench(server.pid)
            workers.append(Worker("classic", "classic", "local[2]", url, env))
            workers.append(Worker("connect", "connect", server.url, url, env, server.pid))
            if args.before:
                before_env = dict(env, PYTHONPATH=os.path.abspath(args.before))
                workers.append(Worker("classic (before)", "classic", "local[2]", url, before_env))
            walls: dict[str, list[float]] = {w.name: [] for w in workers}
            cpus: dict[str, list[float]] = {w.name: [] for w in workers}
            for repeat in range(args.repeats):
                order = workers[repeat % len(workers):] + workers[:repeat % len(workers)]
                for w in order:
                    wall, cpu, got = w.run(copies[w.name])
                    if got["status"] != "completed" or got["roots"] != args.tuples:
                        raise SystemExit(f"{w.name}: the run ended {got['status']} with {got['roots']} roots")
                    walls[w.name].append(wall)
                    cpus[w.name].append(cpu)
                    print(f"  {w.name}: {wall:.2f} s, {cpu:.2f} CPU s", flush=True)
        finally:
            for w in workers:
                w.close()
            server.stop()
    med = {name: (median(walls[name]), median(cpus[name])) for name in walls}
    print(table(["variant", "wall s (median)", "CPU s (median)"],
                [[name, f"{w:.2f}", f"{c:.2f}"] for name, (w, c) in med.items()]))
    figures: dict = {"walls": walls, "cpus": cpus, "medians": {k: {"wall": w, "cpu": c} for k, (w, c) in med.items()}}
    connect_ratio = med["connect"][0] / med["classic"][0]
    figures["connect_over_classic_wall"] = round(connect_ratio, 3)
    print(f"Spark Connect / classic, wall: {connect_ratio:.2f}x (goal {CONNECT_GOAL}x): "
          f"{verdict(connect_ratio, CONNECT_GOAL)}")
    if args.before:
        ratio = med["classic"][0] / med["classic (before)"][0]
        figures["classic_after_over_before_wall"] = round(ratio, 3)
        print(f"classic after / before, wall: {ratio:.2f}x (goal {BEFORE_GOAL}x): {verdict(ratio, BEFORE_GOAL)}")
    results.write(figures)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
