"""Task memory: the peak RSS of Spark's Python workers while `recovery submit` runs cdn_logs,
tracked, at growing input sizes (1M, 3M and 10M lines by default).

cdn_logs writes its output through one jsonl sink task (parallelism 1): that task receives
every record of the run. A task's memory must depend on its chunk size and its keyed state,
never on how many tuples it receives, so the peak worker RSS must stay flat as the input grows.

Each size gets a fresh RECOVERY_HOME, a fresh embedded Redis and the workflow's own generated
input (no invalid lines), and is submitted through the CLI as a user runs it
(`python -m recovery submit cdn_logs.xml --json`). While it runs, every process below the
driver whose command line is Spark's Python daemon or worker (`pyspark.daemon`,
`pyspark.worker`) is polled every 0.2 s for its peak RSS (VmHWM in /proc/PID/status): the
figure is the highest of them. The output is then checked exact: per (host, minute) key the
sink's requests and bytes equal those the input's lines give.

Goals, each printed as met or not met with its figure:
  - peak worker RSS at 3M lines at most 1.3x that at 1M;
  - peak worker RSS at 10M lines under 1 GB;
  - the 10M run's wall time within 1.1x of ten times the 1M run's (no tail on one core).
A goal whose sizes were not run is not judged. Every figure also goes to JSON (--json PATH;
by default into bench/results/, as task_memory.json), marked busy when other processes used
the machine.
Linux only (/proc, prctl).

    .venv/bin/python bench/task_memory.py [--lines 1000000,3000000,10000000] [--master local[2]]
        [--keep] [--json PATH] [--note TEXT] [--busy-ok]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402
from bench import scale  # noqa: E402

REPO = C.REPO
DEFAULT_LINES = (1_000_000, 3_000_000, 10_000_000)
RATIO_GOAL = 1.3            # peak at 3M over peak at 1M
PEAK_GOAL_BYTES = 1 << 30   # peak at 10M
WALL_GOAL = 1.1             # 10M wall over ten times 1M wall
POLL_SECONDS = 0.2
WORKER_MARKERS = (b"pyspark.daemon", b"pyspark.worker", b"pyspark/daemon.py", b"pyspark/worker.py")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=scale.positive_ints, default=DEFAULT_LINES,
                    help="comma-separated input sizes in lines (default 1000000,3000000,10000000)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    C.add_result_args(ap, "task_memory")
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- Spark's Python workers

def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


class WorkerSampler(C.Poller):
    """Polls, every POLL_SECONDS while a driver runs, the peak RSS (VmHWM) of every Spark
    Python daemon and worker below it (or reparented to this bench, its subreaper)."""

    def __init__(self, driver: int):
        super().__init__(POLL_SECONDS, "worker-sampler")
        self.driver = driver
        self.peaks: dict[tuple[int, str], int] = {}   # (pid, start time) -> VmHWM bytes

    def sample(self) -> None:
        fields = C.process_table()
        parent = {pid: int(f[1]) for pid, f in fields.items()}
        roots = {self.driver, os.getpid()}
        for pid, f in fields.items():
            p, hops = parent.get(pid, 0), 0
            while p and p not in roots and hops < 64:
                p, hops = parent.get(p, 0), hops + 1
            if p not in roots or not any(m in _cmdline(pid) for m in WORKER_MARKERS):
                continue
            hwm = scale.vm_hwm_bytes(pid)
            if hwm is not None:
                key = (pid, f[19])
                self.peaks[key] = max(self.peaks.get(key, 0), hwm)

    @property
    def peak(self) -> int:
        return max(self.peaks.values(), default=0)


# --------------------------------------------------------------------------- a case

@dataclass
class Case:
    lines: int
    wall: float = 0.0
    worker_peak: int = 0
    workers: int = 0
    status: str = ""
    exact: bool = False
    records: int = 0
    problems: list[str] = field(default_factory=list)


def expected_sums(data: Path) -> dict[str, list[int]]:
    """key -> [requests, bytes] that the input's lines give (the functions of the workflow)."""
    sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    with open(data, encoding="utf-8") as fh:
        for key, size in C.parse_normalize(str(C.WORKFLOWS), fh):
            s = sums[key]
            s[0] += 1
            s[1] += size
    return dict(sums)


def written_sums(folder: Path) -> tuple[dict[str, list[int]], int]:
    """key -> [requests, bytes] the sink holds, read part by part, line by line; and its records."""
    sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    records = 0
    for part in sorted(folder.iterdir()) if folder.is_dir() else []:
        if part.suffix != ".jsonl" or part.name.startswith("."):
            continue
        with open(part, encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                s = sums[row["key"]]
                s[0] += int(row["requests"])
                s[1] += int(row["bytes"])
                records += 1
    return dict(sums), records


def run_case(args: argparse.Namespace, n: int, tmp: Path) -> Case:
    case = Case(n)
    folder = tmp / f"case-{n}"
    home = folder / "home"
    home.mkdir(parents=True)
    xml = C.copy_workflow("cdn_logs", folder / "wf")
    scale.generate_input("cdn_logs", xml, n, tmp)
    env = dict(os.environ, RECOVERY_HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    log = folder / "driver.log"
    try:
        with open(log, "ab") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(scale.cli("submit", str(xml), "--master", args.master, "--json",
                                              "--run-id", f"task-memory-{n}"),
                                    env=env, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO))
            with WorkerSampler(proc.pid) as sampler:
                out, _ = proc.communicate()
                case.wall = time.perf_counter() - t0
            sampler.sample()
        scale.reap_descendants()
        case.worker_peak, case.workers = sampler.peak, len(sampler.peaks)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise scale.DriverFailed(f"submit of {n:,} lines exited {proc.returncode}; the end of {log}:\n"
                                     + "\n".join(tail))
        case.status = str(json.loads(out).get("status", "?"))
        expected = expected_sums(xml.parent / "data" / "cdn.log")
        got, case.records = written_sums(xml.parent / "out" / "cdn_logs")
        case.exact = got == expected and case.records == n
        if not case.exact:
            case.problems.append(f"output differs: {case.records:,} records for {n:,} lines, "
                                 f"{len(got):,} keys for {len(expected):,}")
        print(f"{n:,} lines: submit {case.wall:.1f}s, {case.status}, peak worker RSS "
              f"{case.worker_peak / 2**20:,.0f} MB ({case.workers} Python workers), output "
              f"{'exact' if case.exact else 'NOT exact'}", file=sys.stderr)
    finally:
        subprocess.run(scale.cli("server", "stop", "--json"), env=env, cwd=str(REPO), capture_output=True,
                       check=False)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return case


# --------------------------------------------------------------------------- the report

def goals(cases: list[Case]) -> list[str]:
    by = {c.lines: c for c in cases}
    out = []
    one, three, ten = by.get(1_000_000), by.get(3_000_000), by.get(10_000_000)
    if one and three and one.worker_peak:
        ratio = three.worker_peak / one.worker_peak
        out.append(f"peak worker RSS at 3M lines / at 1M: {ratio:.2f}x (goal at most {RATIO_GOAL}x): "
                   f"{'met' if ratio <= RATIO_GOAL else 'not met'}")
    else:
        out.append("peak worker RSS at 3M / 1M: not judged (run --lines with 1000000 and 3000000)")
    if ten:
        out.append(f"peak worker RSS at 10M lines: {ten.worker_peak / 2**20:,.0f} MB (goal under "
                   f"{PEAK_GOAL_BYTES / 2**20:,.0f} MB): {'met' if ten.worker_peak < PEAK_GOAL_BYTES else 'not met'}")
    else:
        out.append("peak worker RSS at 10M lines: not judged (run --lines with 10000000)")
    if one and ten and one.wall:
        ratio = ten.wall / (10 * one.wall)
        out.append(f"wall at 10M / (10 x wall at 1M): {ratio:.2f} (goal at most {WALL_GOAL}): "
                   f"{'met' if ratio <= WALL_GOAL else 'not met'}")
    else:
        out.append("wall at 10M / 10 x 1M: not judged (run --lines with 1000000 and 10000000)")
    inexact = [c.lines for c in cases if not c.exact]
    out.append("output exact at every size" if not inexact else
               f"output NOT exact at {', '.join(f'{n:,}' for n in inexact)} lines")
    return out


def report(cases: list[Case]) -> str:
    rows = [[f"{c.lines:,}", c.status, f"{c.wall:.1f}", f"{c.worker_peak / 2**20:,.0f}", str(c.workers),
             f"{c.records:,}", "yes" if c.exact else "NO"] for c in cases]
    return "\n".join([C.table(["lines", "status", "wall s", "peak worker RSS MB", "workers", "records", "exact"],
                              rows), "", "goals:", *(f"  {g}" for g in goals(cases))])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("bench/task_memory.py: Linux only (/proc, prctl)", file=sys.stderr)
        return 2
    results = C.Results("task_memory", args, {"workflow": "cdn_logs", "lines": list(args.lines),
                                              "master": args.master, "tracking": True,
                                              "redis": "embedded, fresh per size"})
    scale.set_subreaper(True)
    cases: list[Case] = []
    try:
        with C.scratch("recovery-bench-task-memory-", args.keep) as tmp:
            for n in args.lines:
                cases.append(run_case(args, n, tmp))
    except scale.DriverFailed as exc:
        print(f"bench/task_memory.py: {exc}", file=sys.stderr)
        return 1
    print(report(cases))
    figures: dict[str, Any] = {"cases": [asdict(c) for c in cases], "goals": goals(cases)}
    results.write(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
