"""A root's tuple tree, re-derived (`recovery trace --tree`, `Run.trace(root, tree=True)`): the
root's message replayed from its spout through the whole workflow, with the code as it is now,
in the sandbox of jobs/sandbox.py (a scratch run; every sink a capture sink; nothing of the run
written), every bolt task recording the root's tuples it receives (runtime/lineage.py). Chaining
is off in that round, so every tuple passes from task to task where it is recorded.

Each tuple's parent is found from the ids, which are derived: a tuple emitted by a task while
it processed tuple x on stream s, as its n-th emit, to task t has the id
derive2(derive3(x, salt(component, s), n), t) (runtime/routing.py, runtime/chunks.py). The tree
is then checked against what the run recorded of the root (its failures, queue entries and dead
letters): a tuple the run recorded at a task where the tree has other ids was made by a
component that is not deterministic (a random draw, a clock, a lookup), which is named.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgpack
from pydantic import BaseModel
from redis import Redis

from recovery.engine import rounds as engine_rounds
from recovery.jobs import clear as clear_job
from recovery.jobs import sandbox
from recovery.model.run import RunSpec
from recovery.model.workflow import SinkImpl
from recovery.runtime.lineage import lineage_key
from recovery.tracking import ids, keys, runs, scratch
from recovery.tracking import queue as failed_queue
from recovery.tracking.queue import history

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)

#: The emits per input a parent is looked for among (a tuple's emit index).
MAX_EMITS = 4096


class TreeNode(BaseModel):
    """A tuple of the root's tree: where it was received (the root: where it was emitted), the
    stream, its parent (None for the root, or when it cannot be told: a multi-anchored emit), the
    records a sink got from it, and whether the run's records agree with its id (None: the run
    recorded nothing of the root at that task)."""
    id: int
    component: str
    task: int
    stream: str
    parent: int | None = None
    records: list[Any] = []
    recorded: bool | None = None


class Tree(BaseModel):
    nodes: list[TreeNode]
    nondeterministic: list[str] = []


def _recorded(client: Redis, run_id: str, root: int) -> dict[tuple[str, int], dict[int, str]]:
    """The tuple ids the run recorded of `root`, per (component, task), with who sent each (""
    when not known): its history's failures, its queued tuples and its dead letters."""
    out: dict[tuple[str, int], dict[int, str]] = {}
    for p in history.of_root(client, run_id, root):
        for e in p.events:
            if e.kind == history.FAILED:
                out.setdefault((e.component, e.task), {})[e.tuple_id] = e.src_component
    for comp, task in failed_queue.positions(client, run_id):
        for t in failed_queue.read(client, run_id, comp, task):
            if root in t.roots:
                out.setdefault((comp, task), {})[t.id] = t.src_component
    for d in failed_queue.dead_letters(client, run_id):
        if root in d.roots:
            out.setdefault((d.component, d.task), {})[d.id] = d.src_component
    return out


def _parent(child_id: int, task: int, salt: int, candidates: list[int]) -> int | None:
    for x in candidates:
        for n in range(MAX_EMITS):
            if ids.derive2(ids.derive3(x, salt, n), task) == child_id:
                return x
    return None


def derive_tree(spark: SparkSession | Callable[[], SparkSession], client: Redis, redis_url: str, run_id: str,
                root: int) -> Tree:
    """The tree of `root` (module doc), re-derived in a sandbox and checked against the run."""
    rec = runs.get(client, run_id)
    original = sandbox.sandboxed(rec.original_workflow()).with_config({"recovery.chain": "false"})
    sandbox.remove_stale(client, run_id)
    round_no = rec.round + 1
    scratch_id = scratch.new_id(run_id)
    lease = scratch.create(client, rec, scratch_id, original.to_task_json(), round_no)
    try:
        with lease:
            scratch.copy_keys(client, run_id, scratch_id)
            client.sadd(keys.root_replay_set(scratch_id, round_no), str(root))
            spec = RunSpec(scratch_id, round_no, original.to_task_json(), redis_url, True, root_replay=True,
                           root_epoch=rec.root_epoch, filter_epoch=rec.root_epoch,
                           old_epochs=tuple(rec.root_epochs), original_json=original.to_task_json(),
                           generation=lease.generation, spill_dir=rec.spill_dir or None, lineage_roots=(root,))
            log.info("run %s: re-deriving the tree of root %d in scratch run %s", run_id, root, scratch_id)
            session = spark() if callable(spark) else spark
            engine_rounds.run_round(session, original, spec)
            raw = cast(dict[bytes, bytes], client.hgetall(lineage_key(scratch_id)))
    finally:
        clear_job.clear(client, scratch_id, force=True, code_archives=False)

    sinks = {c.id for c in original.components if isinstance(c.impl, SinkImpl)}
    spouts = {c.id for c in original.components if c.kind == "spout"}
    received = []
    for field, value in raw.items():
        at_component, at_task, at_tid = field.decode().rsplit(":", 2)
        sent_by, sent_from, on_stream, got, _ = msgpack.unpackb(value, strict_map_key=False)
        received.append((at_component, int(at_task), int(at_tid), sent_by, int(sent_from), on_stream, got))
    received.sort(key=lambda r: (r[0], r[1], r[2]))
    at: dict[tuple[str, int], list[int]] = {}
    for component, task, tid, *_ in received:
        at.setdefault((component, task), []).append(tid)
    nodes: list[TreeNode] = []
    sender: dict[tuple[str, int, int], str] = {}
    first = next((r for r in received if r[3] in spouts), None)
    nodes.append(TreeNode(id=root, component=first[3] if first else sorted(spouts)[0],
                          task=first[4] if first else 0, stream=first[5] if first else "default"))
    for component, task, tid, src, src_task, stream, values in received:
        candidates = [root] if src in spouts else at.get((src, src_task), [])
        parent = _parent(tid, task, ids.name_salt(src, stream), candidates)
        nodes.append(TreeNode(id=tid, component=component, task=task, stream=stream, parent=parent,
                              records=[values] if component in sinks else []))
        sender[(component, task, tid)] = src
    recorded = _recorded(client, run_id, root)
    by_position: dict[tuple[str, int], set[int]] = {}
    for node in nodes:
        by_position.setdefault((node.component, node.task), set()).add(node.id)
    for node in nodes:
        seen = recorded.get((node.component, node.task))
        node.recorded = None if seen is None else node.id in seen
    # a tuple the run recorded at a component the tree reached, missing from the tree: its sender
    # made other tuples from the same input this time
    reached = {n.component for n in nodes}
    odd: set[str] = set()
    for (component, task), seen in recorded.items():
        if component in reached:
            derived = by_position.get((component, task), set())
            odd.update(src or component for tid, src in seen.items() if tid not in derived)
    return Tree(nodes=nodes, nondeterministic=sorted(odd))
