"""Where a bench runs: a temporary RECOVERY_HOME with one Spark session and one Redis, and the
example workflows copied there, submitted, and their sinks read back as multisets."""
from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._machine import count_as_bench

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / "workflows"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# --------------------------------------------------------------------------- environment

@contextlib.contextmanager
def scratch(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temporary folder under /tmp: removed at the end, or kept (and said) with `keep`."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def bench_home(keep: bool = False, prefix: str = "recovery-bench-") -> Iterator[Path]:
    """A temporary RECOVERY_HOME, set before anything reads it; removed at the end."""
    with scratch(prefix, keep) as home:
        os.environ["RECOVERY_HOME"] = str(home)
        from recovery.engine.session import prepare_environment
        prepare_environment(home)          # PYSPARK_PYTHON, SPARK_LOCAL_IP, PYTHONHASHSEED, log4j
        yield home


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


def generate_input(workflow: str, folder: Path, n: int, invalid: float) -> Path:
    """The workflow's own deterministic generator, writing into the copy's data folder."""
    sys.path.insert(0, str(folder))
    if workflow in ("cdn_logs", "cdn_logs_batch"):
        from cdn_logs.generate import generate
        path = folder / "data" / "cdn.log"
        generate(str(path), n, seed=4, invalid=invalid)
    elif workflow == "wordcount":
        from wordcount.generate import generate
        path = folder / "data" / "sentences.txt"
        generate(str(path), n)
    else:
        raise SystemExit(f"unknown workflow {workflow!r} (cdn_logs or wordcount)")
    return path


def sink_folder(wf) -> Path:
    from recovery.connectors.files import resolve
    sinks = [c for c in wf.components if c.impl.kind == "sink"]
    return Path(resolve(sinks[0].impl.param("path"), wf.base_dir))


def fingerprint(workflow: str, folder: Path) -> tuple[int, str]:
    """(records, an order-insensitive digest of every record) of a sink folder: the examples
    emit records that do not depend on the order tuples arrived in, so any two runs of the
    same input agree record for record (a sum of per-record hashes: flat memory). The jsonl
    sink's parts, or saveAsTextFile's (part-NNNNN)."""
    import hashlib
    n = digest = 0
    parts = [p for p in folder.glob("part-*") if p.suffix in ("", ".jsonl")]
    for part in sorted(parts):
        with open(part, encoding="utf-8") as fh:
            for line in fh:
                canon = json.dumps(json.loads(line), sort_keys=True).encode()
                digest = (digest + int.from_bytes(hashlib.blake2b(canon, digest_size=8).digest(), "big")) % 2**64
                n += 1
    return n, f"{digest:016x}"[:12]
