"""The baselines recovery is measured against: the workflow's component classes in a plain
PySpark pipeline (no tracking, no engine), and a hand-written PySpark job of the same
functions."""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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
