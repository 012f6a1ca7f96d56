"""Scale: what today's engine costs as roots and failures grow, driven
through the CLI exactly as a user runs it: `python -m recovery submit ... --json`, then
`python -m recovery recover RUN --json`, each a separate driver process.

One case per (roots N, failure rate): N generated root tuples of the workflow, a fraction
`rate` of the tuples failing once at `aggregate` (recovery.inject.scale.*, transient, one
attempt: the `recover` that follows must end with the run completed). Each case gets a fresh
RECOVERY_HOME and a fresh embedded Redis (a clean baseline), unless --redis URL is given.
For each phase (submit, recover) it prints:

  Redis       peak used_memory above the level before the submit (INFO polled every 0.2 s),
              divided by roots; per case also the server's own used_memory_peak (exact, fresh
              server only: CONFIG RESETSTAT does not reset it on 6.2)
  AOF         bytes the server wrote to its append-only file: appends (growth of
              aof_current_size between polls) plus each rewrite's new file (aof_base_size when
              it changes); rewrites = forks (INFO stats total_forks; RDB saves are off in the
              embedded server)
  spill       bytes the tasks wrote to the spill store (compressed task outputs, the data
              plane), from the run's JSON (`spill_bytes`) of each phase
  driver RSS  the Python driver process's peak RSS: the kernel's high-water mark (VmHWM in
              /proc/PID/status), polled every 0.2 s until the process exits
  wall, CPU   the driver's lifetime; CPU seconds of the driver and every descendant (Spark's
              JVM, its Python daemon and workers) plus the Redis server's (INFO cpu, its
              rewrite forks included). The bench makes itself a child subreaper
              (PR_SET_CHILD_SUBREAPER), so the JVM and the daemon the driver leaves behind are
              reparented to it and reaped: their CPU lands in RUSAGE_CHILDREN. Spark's Python
              workers never reach it (pyspark.daemon ignores SIGCHLD, so the kernel reaps
              them): their CPU is polled per process from /proc/PID/stat and added.

Then the scale goals: Redis at most 32 bytes per root on the success path (the cases
at the lowest rate), and driver peak RSS at (largest N, highest rate) over (smallest N,
lowest rate) at most 1.2, each printed as met or not met with the figure. Times are printed,
never asserted; every figure is written as JSON too (--json PATH; default
bench/results/scale.json) for bench/plot.py. Linux only (/proc, prctl).

    .venv/bin/python bench/scale.py [--roots 100000,1000000] [--rates 0.001,0.1]
        [--workflow bench_pipeline|cdn_logs] [--redis URL] [--keep] [--quick] [--json PATH] [--note TEXT]
    .venv/bin/python bench/scale.py --redis-cluster N [--roots R] [--cluster-tasks T] [--cluster-workers W]

`--redis-cluster N` runs bench/cluster_commit.py instead (task commits against 1 and N Redis
Cluster masters side by side; results in bench/results/scale_cluster.json).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C

REPO = C.REPO
FULL_ROOTS = (100_000, 1_000_000)
FULL_RATES = (0.001, 0.1)
QUICK_ROOTS = (20_000, 100_000)
FAILING = "aggregate"              # both workflows have it: stage 4 of bench_pipeline, 4 of cdn_logs
REDIS_GOAL_BYTES = 32
RSS_GOAL_RATIO = 1.2
POLL_SECONDS = 0.2
REAP_TIMEOUT = 120.0


# --------------------------------------------------------------------------- arguments

def number_list(text: str, kind: type) -> tuple:
    try:
        values = tuple(kind(float(x)) if kind is int else kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("an empty list")
    return values


def positive_ints(text: str) -> tuple[int, ...]:
    values = number_list(text, int)
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"roots must be positive: {text!r}")
    return values


def rates(text: str) -> tuple[float, ...]:
    values = number_list(text, float)
    if any(not 0 <= v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"rates must be between 0 and 1: {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", type=positive_ints, default=None,
                    help="comma-separated root counts (default 100000,1000000)")
    ap.add_argument("--rates", type=rates, default=None,
                    help="comma-separated failure rates at aggregate (default 0.001,0.1)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a quick try: roots {','.join(map(str, QUICK_ROOTS))} (unless --roots)")
    ap.add_argument("--workflow", default="bench_pipeline", choices=("bench_pipeline", "cdn_logs"))
    ap.add_argument("--redis", default=None,
                    help="a Redis URL (default: a fresh embedded server per case)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--redis-cluster", type=int, default=None, metavar="N",
                    help="instead of the cases: task commits against 1 and N Redis Cluster masters "
                         "side by side (bench/cluster_commit.py; --roots: its first value)")
    ap.add_argument("--cluster-tasks", type=int, default=16, help="--redis-cluster: tasks per stage (16)")
    ap.add_argument("--cluster-workers", type=int, default=4, help="--redis-cluster: worker processes (4)")
    C.add_result_args(ap, "scale")
    args = ap.parse_args(argv)
    if args.redis_cluster is not None:
        if args.redis_cluster < 2:
            ap.error("--redis-cluster N needs N >= 2 (it compares with one master)")
        return args
    if args.roots is None:
        args.roots = QUICK_ROOTS if args.quick else FULL_ROOTS
    if args.rates is None:
        args.rates = FULL_RATES
    return args


# --------------------------------------------------------------------------- measuring

class AofMeter:
    """Bytes written to the append-only file, from successive (aof_current_size, aof_base_size)
    readings: growth of the current size is appended bytes; a change of the base size means a
    rewrite finished, which wrote a new file of that base size (appends made during the rewrite
    are in it too). Appends between the last reading before a rewrite finishes and its end are
    not seen (at most one poll interval's worth per rewrite)."""

    def __init__(self, current: int, base: int):
        self.current, self.base = current, base
        self.appended = 0
        self.rewritten = 0

    def update(self, current: int, base: int) -> None:
        if base != self.base:
            self.rewritten += base
            self.appended += max(0, current - base)
        else:
            self.appended += max(0, current - self.current)
        self.current, self.base = current, base

    @property
    def written(self) -> int:
        return self.appended + self.rewritten


def vm_hwm_bytes(pid: int) -> int | None:
    """The process's peak resident set size so far (VmHWM), or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None                       # a zombie has no Vm* lines


_CLK = os.sysconf("SC_CLK_TCK")


def unaccounted_cpu(seen: dict[tuple[int, str], float]) -> None:
    """Record the CPU seconds so far of each descendant of this process whose parent ignores
    SIGCHLD: such a child is reaped by the kernel and its CPU never reaches anyone's
    RUSAGE_CHILDREN. That is Spark's Python workers (pyspark.daemon sets SIGCHLD to SIG_IGN).
    `seen` maps (pid, start time) to the last reading; CPU after the last reading is lost."""
    fields = C.process_table()
    parent = {pid: int(f[1]) for pid, f in fields.items()}
    me = os.getpid()
    ignoring: dict[int, bool] = {}
    for pid, f in fields.items():
        p, hops = parent.get(pid, 0), 0
        while p and p != me and hops < 64:
            p, hops = parent.get(p, 0), hops + 1
        if p != me:
            continue
        ppid = parent[pid]
        if ppid not in ignoring:
            ignoring[ppid] = C.sigchld_ignored(ppid)
        if ignoring[ppid]:
            seen[(pid, f[19])] = (int(f[11]) + int(f[12])) / _CLK     # utime + stime; [19] starttime


def redis_cpu_seconds(info: dict[str, Any]) -> float:
    return sum(float(info.get(k, 0)) for k in ("used_cpu_sys", "used_cpu_user",
                                                "used_cpu_sys_children", "used_cpu_user_children"))


class Sampler(C.Poller):
    """Polls, every POLL_SECONDS while a driver runs: the driver's VmHWM, Redis's used_memory
    (peak above `baseline`) and its append-only file sizes."""

    def __init__(self, pid: int, client: Any, baseline: int):
        super().__init__(POLL_SECONDS, "scale-sampler")
        self.pid, self.client, self.baseline = pid, client, baseline
        self.driver_peak = 0
        self.redis_peak = 0
        self.aof: AofMeter | None = None
        self.aof_enabled = False
        self.forks0 = self.forks = 0
        self.auto_reaped: dict[tuple[int, str], float] = {}
        self._first: dict[str, Any] = client.info() if client is not None else {}
        if self._first:
            self.aof_enabled = bool(int(self._first.get("aof_enabled", 0)))
            self.aof = AofMeter(int(self._first.get("aof_current_size", 0)),
                                int(self._first.get("aof_base_size", 0)))
            self.forks0 = self.forks = int(self._first.get("total_forks", 0))

    def sample(self) -> None:
        unaccounted_cpu(self.auto_reaped)
        hwm = vm_hwm_bytes(self.pid)
        if hwm is not None:
            self.driver_peak = max(self.driver_peak, hwm)
        if self.client is None:
            return
        info = self.client.info()
        self.redis_peak = max(self.redis_peak, int(info["used_memory"]) - self.baseline)
        if self.aof_enabled and self.aof is not None:
            self.aof.update(int(info.get("aof_current_size", 0)), int(info.get("aof_base_size", 0)))
        self.forks = int(info.get("total_forks", self.forks))

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.sample()                   # the last AOF and memory readings


set_subreaper = C.set_subreaper          # the JVM and daemon a driver leaves behind: countable
reap_descendants = C.reap_descendants


def children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Phase:
    name: str
    wall: float = 0.0
    cpu: float = 0.0
    redis_cpu: float = 0.0
    workers: int = 0                    # auto-reaped processes whose CPU was polled ...
    worker_cpu: float = 0.0             # ... and that CPU (part of `cpu`)
    driver_peak: int = 0
    redis_peak: int = 0
    aof_written: int = 0
    aof_rewrites: int = 0
    spill: int = 0
    result: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    roots: int
    rate: float
    phases: list[Phase] = field(default_factory=list)
    server_peak: int | None = None      # used_memory_peak - baseline (fresh embedded server)
    failed_tuples: int = 0

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    @property
    def redis_peak(self) -> int:
        sampled = max((p.redis_peak for p in self.phases), default=0)
        return max(sampled, self.server_peak or 0)

    @property
    def driver_peak(self) -> int:
        return max((p.driver_peak for p in self.phases), default=0)


class DriverFailed(RuntimeError):
    pass


def run_driver(name: str, argv: list[str], env: dict[str, str], client: Any, baseline: int,
               log: Path) -> Phase:
    """One CLI driver process, measured; its --json output is the phase's result."""
    phase = Phase(name)
    cpu0 = children_cpu_seconds()
    rcpu0 = redis_cpu_seconds(client.info("cpu")) if client is not None else 0.0
    with open(log, "ab") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO))
        with Sampler(proc.pid, client, baseline) as sampler:
            out, _ = proc.communicate()
            phase.wall = time.perf_counter() - t0
    reaped, left = reap_descendants()
    # a worker orphaned before it exited was reaped here: RUSAGE_CHILDREN has its CPU already
    polled = {key: secs for key, secs in sampler.auto_reaped.items() if key[0] not in reaped}
    if left:
        print(f"warning: {name}: processes still running {REAP_TIMEOUT:.0f}s after the driver "
              f"exited, their CPU is not counted: {left}", file=sys.stderr)
    phase.worker_cpu = sum(polled.values())
    phase.cpu = children_cpu_seconds() - cpu0 + phase.worker_cpu
    phase.workers = len(polled)
    if client is not None:
        phase.redis_cpu = redis_cpu_seconds(client.info("cpu")) - rcpu0
    phase.driver_peak = sampler.driver_peak
    phase.redis_peak = sampler.redis_peak
    if sampler.aof is not None and sampler.aof_enabled:
        phase.aof_written = sampler.aof.written
    phase.aof_rewrites = sampler.forks - sampler.forks0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise DriverFailed(f"{name} exited {proc.returncode} ({' '.join(argv[2:5])}...); "
                           f"the end of {log}:\n" + "\n".join(tail))
    phase.result = json.loads(out)
    phase.spill = int(phase.result.get("spill_bytes", 0))
    return phase


# --------------------------------------------------------------------------- a case

def generate_input(workflow: str, xml: Path, n: int, cache: Path) -> None:
    """The workflow's own deterministic generator, once per n (hard-linked into each case)."""
    if workflow == "bench_pipeline":
        target = xml.parent / "bench_pipeline" / "data" / "events.csv"
    else:
        target = xml.parent / "data" / "cdn.log"
    source = cache / f"{workflow}-{n}.input"
    if not source.exists():
        if str(C.WORKFLOWS) not in sys.path:
            sys.path.insert(0, str(C.WORKFLOWS))
        t0 = time.perf_counter()
        if workflow == "bench_pipeline":
            from bench_pipeline.generate import generate
            generate(str(source), n)
        else:
            from cdn_logs.generate import generate as generate_logs
            generate_logs(str(source), n, seed=4, invalid=0.0)
        print(f"input: {n:,} roots of {workflow} ({source.stat().st_size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    os.link(source, target)


def progress(p: Phase) -> str:
    return (f"CPU {p.cpu:.1f}s (of it {p.worker_cpu:.1f}s polled from {p.workers} Spark Python "
            f"workers) + Redis {p.redis_cpu:.1f}s, driver peak RSS {mb(p.driver_peak)} MB")


def injection(rate: float) -> list[str]:
    props = {"component": FAILING, "mode": "transient", "rate": str(rate), "attempts": "1"}
    return [x for k, v in props.items() for x in ("-p", f"recovery.inject.scale.{k}={v}")]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "recovery", *args]


def run_case(args: argparse.Namespace, n: int, rate: float, tmp: Path) -> Case:
    case = Case(n, rate)
    folder = tmp / f"case-{n}-{rate:g}"
    home = folder / "home"
    home.mkdir(parents=True)
    xml = C.copy_workflow(args.workflow, folder / "wf")
    generate_input(args.workflow, xml, n, tmp)
    env = dict(os.environ, RECOVERY_HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    redis_opt = ["--redis", args.redis] if args.redis else []
    log = folder / "driver.log"
    import redis as redis_py  # the client library, not the project's wrapper
    if args.redis:
        url = args.redis
    else:
        set_subreaper(False)            # the daemonized server must not become our child
        try:
            started = subprocess.run(cli("server", "start", "--json"), env=env, cwd=str(REPO),
                                     capture_output=True, text=True, check=True)
        finally:
            set_subreaper(True)
        url = json.loads(started.stdout)["url"]
    client = redis_py.Redis.from_url(url)
    if not args.redis:   # a daemon outside this process tree, but the bench's own
        C.count_as_bench(int(client.info("server")["process_id"]))
    run_id = f"scale-{n}-{str(rate).replace('.', 'p')}"
    try:
        baseline = int(client.info("memory")["used_memory"])
        submit = run_driver("submit", cli("submit", str(xml), "--master", args.master, "--json",
                                          "--run-id", run_id, *injection(rate), *redis_opt),
                            env, client, baseline, log)
        case.phases.append(submit)
        case.failed_tuples = int(submit.result.get("failed", 0))
        print(f"{n:,} roots, rate {rate:g}: submit {submit.wall:.1f}s, {submit.result.get('status')}, "
              f"{case.failed_tuples:,} failed tuples; {progress(submit)}", file=sys.stderr)
        recover = run_driver("recover", cli("recover", run_id, "--master", args.master, "--json",
                                            *redis_opt), env, client, baseline, log)
        case.phases.append(recover)
        print(f"{n:,} roots, rate {rate:g}: recover {recover.wall:.1f}s, "
              f"{recover.result.get('status')}; {progress(recover)}", file=sys.stderr)
        if not args.redis:
            case.server_peak = int(client.info("memory")["used_memory_peak"]) - baseline
            print(f"{n:,} roots, rate {rate:g}: Redis peak {case.redis_peak / n:.0f} B per root "
                  f"({case.redis_peak / n / REDIS_GOAL_BYTES:.2f}x the goal of {REDIS_GOAL_BYTES} B; "
                  f"polled: {max(p.redis_peak for p in case.phases) / n:.0f} B)", file=sys.stderr)
        else:
            subprocess.run(cli("clear", run_id, "--json", *redis_opt), env=env, cwd=str(REPO),
                           capture_output=True, check=False)
    finally:
        client.close()
        if not args.redis:
            subprocess.run(cli("server", "stop", "--json"), env=env, cwd=str(REPO),
                           capture_output=True, check=False)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return case


# --------------------------------------------------------------------------- the report

def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def status_of(phase: Phase) -> str:
    return str(phase.result.get("status", "?"))


def phase_rows(cases: list[Case]) -> list[list[str]]:
    rows = []
    for c in cases:
        for p in c.phases:
            rows.append([f"{c.roots:,}", f"{c.rate:g}", p.name, status_of(p),
                         f"{p.wall:.1f}", f"{p.cpu + p.redis_cpu:.1f}", f"{p.redis_cpu:.1f}",
                         mb(p.driver_peak), mb(p.redis_peak), f"{p.redis_peak / c.roots:.0f}",
                         mb(p.aof_written), str(p.aof_rewrites), str(p.spill)])
    return rows


def case_rows(cases: list[Case]) -> list[list[str]]:
    rows = []
    for c in cases:
        rows.append([f"{c.roots:,}", f"{c.rate:g}", f"{c.failed_tuples:,}",
                     f"{c.redis_peak / c.roots:.0f}", f"{c.redis_peak / 1e6:,.1f}",
                     mb(sum(p.aof_written for p in c.phases)),
                     str(sum(p.aof_rewrites for p in c.phases)),
                     str(sum(p.spill for p in c.phases)), mb(c.driver_peak),
                     f"{sum(p.wall for p in c.phases):.1f}",
                     f"{sum(p.cpu + p.redis_cpu for p in c.phases):.1f}"])
    return rows


def goals(cases: list[Case]) -> list[str]:
    """The scale goals, each as met / not met with the figure (or why it cannot be judged)."""
    lines: list[str] = []
    if not cases:
        return lines
    low = min(c.rate for c in cases)
    success = [c for c in cases if c.rate == low]
    worst = max(success, key=lambda c: c.redis_peak / c.roots)
    per_root = worst.redis_peak / worst.roots
    lines.append(f"Redis per root on the success path (rate {low:g}; worst at {worst.roots:,} roots): "
                 f"{per_root:.0f} B, {per_root / REDIS_GOAL_BYTES:.2f}x the goal of <= {REDIS_GOAL_BYTES} B: "
                 f"{'met' if per_root <= REDIS_GOAL_BYTES else 'not met'}")
    small = min(cases, key=lambda c: (c.roots, c.rate))
    big = max(cases, key=lambda c: (c.roots, c.rate))
    if small is big or not small.driver_peak:
        lines.append("driver RSS ratio: needs two cases")
    else:
        ratio = big.driver_peak / small.driver_peak
        lines.append(f"driver peak RSS at ({big.roots:,}, {big.rate:g}) / at ({small.roots:,}, "
                     f"{small.rate:g}): {mb(big.driver_peak)} / {mb(small.driver_peak)} MB = "
                     f"{ratio:.2f}, goal <= {RSS_GOAL_RATIO}: "
                     f"{'met' if ratio <= RSS_GOAL_RATIO else 'not met'}")
    return lines


PHASE_HEADERS = ["roots", "rate", "phase", "status", "wall s", "CPU s", "of it Redis CPU s",
                 "driver peak RSS MB", "Redis peak MB", "Redis B/root", "AOF MB written",
                 "AOF rewrites", "spill bytes"]
CASE_HEADERS = ["roots", "rate", "failed tuples", "Redis peak B/root", "Redis peak MB",
                "AOF MB written", "AOF rewrites", "spill bytes", "driver peak RSS MB",
                "wall s", "CPU s"]


def report(cases: list[Case], args: argparse.Namespace, load: tuple[float, float]) -> str:
    where = f"Redis {args.redis}" if args.redis else "a fresh embedded Redis per case (AOF on)"
    lines = [(f"{args.workflow}, {args.master}, {where}, {FAILING} failing once for the given rate "
              f"of its tuples; {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
              f"load average {load[0]:.1f} at start, {load[1]:.1f} at end"),
             "",
             C.table(PHASE_HEADERS, phase_rows(cases)),
             "",
             C.table(CASE_HEADERS, case_rows(cases)),
             "",
             ("Redis peak: used_memory above its level before the submit (per case: the larger of "
              "the polled peak and the server's used_memory_peak); CPU: the driver's process tree "
              "(JVM and Python workers included) plus the Redis server; driver peak RSS: VmHWM "
              "of the Python driver process; spill: the compressed task outputs the tasks wrote to the spill store."),
             ""]
    lines += [f"goal: {g}" for g in goals(cases)]
    return "\n".join(lines)


def case_figures(c: Case) -> dict[str, Any]:
    """One case as the JSON results hold it (bytes and seconds, unrounded counts)."""
    return {
        "roots": c.roots, "rate": c.rate, "failed_tuples": c.failed_tuples,
        "redis_peak_bytes": c.redis_peak, "redis_bytes_per_root": round(c.redis_peak / c.roots, 1),
        "redis_server_peak_bytes": c.server_peak,
        "redis_polled_bytes_per_root": round(max((p.redis_peak for p in c.phases), default=0) / c.roots, 1),
        "driver_peak_rss_bytes": c.driver_peak,
        "aof_bytes": sum(p.aof_written for p in c.phases), "spill_bytes": sum(p.spill for p in c.phases),
        "wall_s": round(sum(p.wall for p in c.phases), 2),
        "cpu_s": round(sum(p.cpu + p.redis_cpu for p in c.phases), 2),
        "phases": [{"phase": p.name, "status": status_of(p), "wall_s": round(p.wall, 2),
                    "cpu_s": round(p.cpu + p.redis_cpu, 2), "redis_cpu_s": round(p.redis_cpu, 2),
                    "driver_peak_rss_bytes": p.driver_peak, "redis_peak_bytes": p.redis_peak,
                    "aof_bytes": p.aof_written, "aof_rewrites": p.aof_rewrites, "spill_bytes": p.spill}
                   for p in c.phases],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.redis_cluster is not None:
        from bench import cluster_commit
        return cluster_commit.run(args)
    results = C.Results("scale", args, {"workflow": args.workflow, "roots": list(args.roots),
                                        "rates": list(args.rates), "failing_component": FAILING,
                                        "master": args.master,
                                        "redis": "external" if args.redis else "embedded, fresh per case"})
    if not sys.platform.startswith("linux"):
        print("bench/scale.py: Linux only (/proc, prctl)", file=sys.stderr)
        return 2
    load0 = os.getloadavg()[0]
    set_subreaper(True)
    cases: list[Case] = []
    try:
        with C.scratch("recovery-bench-scale-", args.keep) as tmp:
            for n in args.roots:
                for rate in args.rates:
                    cases.append(run_case(args, n, rate, tmp))
    except DriverFailed as exc:
        print(f"bench/scale.py: {exc}", file=sys.stderr)
        return 1
    finally:
        if cases:
            print(report(cases, args, (load0, os.getloadavg()[0])))
    results.write({"cases": [case_figures(c) for c in cases], "goals": goals(cases)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
