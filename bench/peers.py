"""Peers: cdn_logs on recovery, tracked, side by side in one run with the same workload on
bytewax (0.21.1, the bench extra) with its recovery on, and a check that both write the same
records.

  recovery tracked         jobs.submit(tracking_on=True) in this process's warm Spark session
                           (local[2]) and embedded Redis, the workflow's chains on
  bytewax, 2 workers       python -m bytewax.run -w 2 (two worker threads in one process,
                           sharing the GIL)
  bytewax, 2 processes     two python -m bytewax.run processes (-i 0/1 -a ...), one worker each

bytewax runs the same functions of workflows/cdn_logs/components.py (parse_line, normalize)
and the same per-key aggregate (requests and bytes per key in its keyed state, stateful_map;
per request its share [key, 1, bytes] as a JSON line): input from 2 byte ranges of the file
(a partitioned source that snapshots its offset), parse + normalize per batch of lines, the
aggregate keyed by host and minute, a JSON-lines file per worker. Its recovery is on: SQLite
recovery partitions made first (`python -m bytewax.recovery DIR 2`), a snapshot every 5 s
(`-s 5`), no extra backup (`-b 0`). Each bytewax run is a new process (its start, about
0.15 s, is in its figures).

CPU: recovery's is this process tree's (driver, JVM, Python workers) plus the Redis server's;
bytewax's, its processes' (RUSAGE_CHILDREN). The goal, printed met or how far off: recovery
tracked at least as fast as bytewax, the faster of its two ways, in wall and in CPU, at every
size. Then a cold start of each on 1,000 lines (a new process: recovery's `submit` with its
JVM and Spark session after `server start`; bytewax's run).

    .venv/bin/python bench/peers.py [--roots 200000,1000000] [--repeats 2] [--no-cold] [--keep]
        [--json PATH] [--note TEXT] [--busy-ok]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402

BATCH_LINES = 1000
SNAPSHOT_S = "5"
RECOVERY = "recovery tracked"
THREADS = "bytewax, 2 workers"
PROCESSES = "bytewax, 2 processes"
VARIANTS = (RECOVERY, THREADS, PROCESSES)


# --------------------------------------------------------------------------- the bytewax dataflow

def _splits(path: str, parts: int) -> list[tuple[int, int]]:
    size = os.path.getsize(path)
    return [(size * i // parts, size * (i + 1) // parts) for i in range(parts)]


def bytewax_flow(path: str, out: str, folder: str) -> Any:
    """cdn_logs as a bytewax dataflow (module doc), reading `path`, writing JSON lines into
    `out`, with cdn_logs' functions from the workflow copy in `folder`."""
    from bytewax import operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class Lines(StatefulSourcePartition):
        """The lines starting in one byte range of the file, BATCH_LINES at a time; its
        snapshot is the offset it has read to."""

        def __init__(self, start: int, end: int, resume: int | None):
            self.fh = open(path, "rb")   # noqa: SIM115 (closed by close(), as bytewax calls it)
            self.end = end
            if resume is not None:
                self.fh.seek(resume)
            elif start:
                self.fh.seek(start - 1)
                self.fh.readline()       # the line holding byte start-1 is the previous range's
            self.pos = self.fh.tell()

        def next_batch(self) -> list[str]:
            if self.pos >= self.end:
                raise StopIteration
            batch = []
            for _ in range(BATCH_LINES):
                raw = self.fh.readline()
                if not raw:
                    self.pos = self.end
                    break
                self.pos += len(raw)
                if raw.strip():
                    batch.append(raw.rstrip(b"\r\n").decode("utf-8"))
                if self.pos >= self.end:
                    break
            return batch

        def snapshot(self) -> int:
            return self.pos

        def close(self) -> None:
            self.fh.close()

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return ["0", "1"]

        def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> Lines:
            start, end = _splits(path, 2)[int(for_part)]
            return Lines(start, end, resume_state)

    class Part(StatelessSinkPartition):
        def __init__(self, worker: int):
            os.makedirs(out, exist_ok=True)
            self.fh = open(os.path.join(out, f"part-{worker}.jsonl"), "w", encoding="utf-8")  # noqa: SIM115

        def write_batch(self, items: list) -> None:
            self.fh.write("".join(json.dumps(rec) + "\n" for _, rec in items))

        def close(self) -> None:
            self.fh.close()

    class Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Part:
            return Part(worker_index)

    def parse_batch(lines: list[str]) -> list[tuple[str, int]]:
        return list(C.parse_normalize(folder, iter(lines)))   # what the hand-written job runs

    def aggregate(state: list[int] | None, size: int) -> tuple[list[int], dict]:
        if state is None:
            state = [0, 0]
        state[0] += 1
        state[1] += size
        return state, {"key": None, "requests": 1, "bytes": size}

    def with_key(item: tuple[str, dict]) -> tuple[str, dict]:
        key, rec = item
        rec["key"] = key
        return key, rec

    flow = Dataflow("cdn_logs")
    lines = op.input("logs", flow, Source())
    pairs = op.flat_map_batch("parse_normalize", lines, parse_batch)
    records = op.map("with_key", op.stateful_map("aggregate", pairs, aggregate), with_key)
    op.output("out", records, Sink())
    return flow


# --------------------------------------------------------------------------- running bytewax

def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_bytewax(data: Path, out: Path, folder: Path, work: Path, processes: bool) -> tuple[float, float]:
    """One bytewax run, recovery on (fresh SQLite partitions); (wall s, CPU s)."""
    recovery_dir = work / "bytewax-recovery"
    shutil.rmtree(recovery_dir, ignore_errors=True)
    recovery_dir.mkdir(parents=True)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(C.REPO), str(folder)]))
    subprocess.run([sys.executable, "-m", "bytewax.recovery", str(recovery_dir), "2"], env=env, check=True,
                   capture_output=True)
    flow = f"bench.peers:bytewax_flow({str(data)!r}, {str(out)!r}, {str(folder)!r})"
    common = ["-r", str(recovery_dir), "-s", SNAPSHOT_S, "-b", "0"]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    if processes:
        ports = _free_ports(2)
        addresses = ";".join(f"127.0.0.1:{p}" for p in ports)
        procs = [subprocess.Popen([sys.executable, "-m", "bytewax.run", flow, "-i", str(i), "-a", addresses,
                                   *common], env=env, cwd=str(C.REPO)) for i in range(2)]
        codes = [p.wait() for p in procs]
    else:
        codes = [subprocess.run([sys.executable, "-m", "bytewax.run", flow, "-w", "2", *common], env=env,
                                cwd=str(C.REPO)).returncode]
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(codes):
        raise SystemExit(f"bytewax exited {codes}")
    return wall, (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)


def cold_bytewax(keep: bool) -> dict[str, Any]:
    """bytewax's cold start: the same dataflow on 1,000 lines, a new process, recovery on."""
    from bench._env import generate_input
    with C.scratch("recovery-bench-cold-bytewax-", keep) as tmp:
        folder = tmp / "wf"
        C.copy_workflow("cdn_logs", folder)
        data = generate_input("cdn_logs", folder, C.COLD_LINES, 0.0)
        wall, cpu = run_bytewax(data, tmp / "out", folder, tmp, processes=False)
        return {"lines": C.COLD_LINES, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


# --------------------------------------------------------------------------- the bench

def roots_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roots", type=roots_list, default=[200_000, 1_000_000],
                    help="root tuples, comma-separated sizes (default 200000,1000000)")
    ap.add_argument("--repeats", type=int, default=2, help="repeats of each variant per size (default 2)")
    ap.add_argument("--no-cold", action="store_true", help="leave out the cold starts on 1,000 lines")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    C.add_result_args(ap, "peers")
    args = ap.parse_args(argv)
    from bench._env import fingerprint, generate_input, sink_folder
    results = C.Results("peers", args, {"workflow": "cdn_logs", "roots": args.roots, "repeats": args.repeats,
                                        "master": "local[2]", "bytewax": C.version("bytewax"),
                                        "bytewax_snapshot_s": int(SNAPSHOT_S)})
    cold = None
    if not args.no_cold:
        cold = {"recovery": C.cold_submit(keep=args.keep), "bytewax": cold_bytewax(args.keep)}
        print(C.print_cold_submit(cold["recovery"]), file=sys.stderr)
    figures: dict[str, Any] = {"sizes": {}}
    goal_rows, goals = [], []
    with C.bench_home(args.keep, "recovery-bench-peers-") as home:
        from recovery.jobs import clear
        with C.redis_for(home, None) as (client, url), C.spark_session(home) as spark:
            warm = home / "warm"
            C.copy_workflow("cdn_logs", warm)
            generate_input("cdn_logs", warm, 2000, 0.0)
            s, _ = C.submit(spark, client, url, warm / "cdn_logs.xml", tracking=True)
            clear.clear(client, s.run_id)
            for n in args.roots:
                folder = home / f"wf-{n}"
                xml = C.copy_workflow("cdn_logs", folder)
                data = generate_input("cdn_logs", folder, n, 0.0)
                out_dir = sink_folder(C.load_workflow(xml))
                bytewax_out = home / f"out-bytewax-{n}"
                walls: dict[str, list[float]] = collections.defaultdict(list)
                cpus: dict[str, list[float]] = collections.defaultdict(list)
                prints: dict[str, tuple[int, str]] = {}
                for rep in range(args.repeats):
                    order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
                    for variant in order:
                        if variant == RECOVERY:
                            shutil.rmtree(out_dir, ignore_errors=True)
                            with C.CpuMeter(client) as meter:
                                summary, wall = C.submit(spark, client, url, xml, tracking=True)
                            cpu = meter.seconds
                            if summary.status != "completed":
                                print(f"warning: recovery's run ended {summary.status}", file=sys.stderr)
                            clear.clear(client, summary.run_id)
                            where = out_dir
                        else:
                            wall, cpu = run_bytewax(data, bytewax_out, folder, home, variant == PROCESSES)
                            where = bytewax_out
                        walls[variant].append(wall)
                        cpus[variant].append(cpu)
                        prints[variant] = fingerprint("cdn_logs", where)
                        print(f"{n:,} roots, repeat {rep + 1}/{args.repeats}  {variant:<22} {wall:7.2f}s wall "
                              f"{cpu:7.2f}s cpu  (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
                same = len({p for p in prints.values()}) == 1
                med = {v: (C.median(walls[v]), C.median(cpus[v])) for v in VARIANTS}
                print(f"\ncdn_logs, {n:,} roots, {args.repeats} repeats, 2 cores")
                print(C.table(["variant", "median wall s", "median CPU s", "roots/s", "sink records", "digest"],
                              [[v, f"{med[v][0]:.2f}", f"{med[v][1]:.2f}", f"{n / med[v][0]:,.0f}",
                                f"{prints[v][0]:,}", prints[v][1]] for v in VARIANTS]))
                print(f"same records in every variant: {'yes' if same else 'NO'}")
                best_wall = min(med[THREADS][0], med[PROCESSES][0])
                best_cpu = min(med[THREADS][1], med[PROCESSES][1])
                rw, rc = med[RECOVERY][0] / best_wall, med[RECOVERY][1] / best_cpu
                goal_rows.append([f"{n:,} roots: recovery tracked / the faster bytewax",
                                  f"{rc:.2f}x, {C.verdict(rc, 1.0)}", f"{rw:.2f}x, {C.verdict(rw, 1.0)}"])
                goals.append({"goal": f"recovery tracked at least as fast as bytewax (recovery on), {n:,} roots, "
                                      "in wall and in CPU", "cpu": round(rc, 3), "wall": round(rw, 3),
                              "verdict": "met" if rc <= 1.0 and rw <= 1.0 else "not met"})
                figures["sizes"][str(n)] = {
                    "variants": {v: {"wall_s": [round(x, 3) for x in walls[v]], "cpu_s": [round(x, 3) for x in cpus[v]],
                                     "median_wall_s": round(med[v][0], 3), "median_cpu_s": round(med[v][1], 3),
                                     "roots_per_s": round(n / med[v][0]), "sink_records": prints[v][0],
                                     "digest": prints[v][1]} for v in VARIANTS},
                    "same_result": same}
                shutil.rmtree(folder / "data", ignore_errors=True)
    print()
    print(C.table(["goal: at least as fast as bytewax with recovery on (<= 1.0x)", "CPU", "wall"], goal_rows))
    if cold is not None:
        print(C.print_cold_submit(cold["recovery"]))
        print(f"cold start of bytewax on {C.COLD_LINES:,} lines: {cold['bytewax']['wall_s']:.2f} s wall, "
              f"{cold['bytewax']['cpu_s']:.2f} CPU s")
        figures["cold_start"] = cold
    figures["goals"] = goals
    results.write(figures)
    return 2 if results.refused else 0


if __name__ == "__main__":
    sys.exit(main())
