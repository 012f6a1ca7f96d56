"""The chunk path against the per-tuple path: random workflows of BasicBolts (groupings,
parallelism, fan-out, failures, early acks, kept tuples, chains) run through both, and what
they leave must be equal: every chunk's records (ids, roots, values, in order), every task's
ledger contributions, failed positions, queue entries, stats, dead letters and sink outputs."""
from __future__ import annotations

import collections
import json
import os
import tempfile
from typing import Any

import fakeredis
import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, SourceImpl, StreamDef, Workflow
from recovery.runtime import chunks, collector, wire
from recovery.testing import execute_round, feed, recover_local, run_local
from recovery.testing.run import LIST_SINK
from recovery.tracking import keys, ledger
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key

SHAPED = "tests.unit.chunk_components:Shaped"
SHAPED_BOLT = "tests.unit.chunk_components:ShapedBolt"
# a failing example is reported as drawn: shrinking one of these workflows takes minutes
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
GROUPINGS = [Grouping.SHUFFLE, Grouping.FIELDS, Grouping.LOCAL_OR_SHUFFLE, Grouping.ALL, Grouping.GLOBAL,
             Grouping.NONE]


@st.composite
def shaped_workflows(draw: Any) -> tuple[Workflow, list[int]]:
    """spout -> 1 to 3 Shaped bolts in a line -> a ListSink fed by the last one's default
    stream and every bolt's `other` stream."""
    p_spout = draw(st.integers(1, 2))
    n = draw(st.integers(0, 60))
    from_file = draw(st.booleans())
    impl: Any = ClassImpl(ref="x:y")
    if from_file:   # a jsonl file source, some of its lines undecodable
        base_dir = tempfile.mkdtemp(prefix="chunks-")
        bad = set(draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=4)))
        with open(os.path.join(base_dir, "in.jsonl"), "w") as fh:
            for i in range(n):
                fh.write("{not json\n" if i in bad else json.dumps({"v": i, "k": f"k{i % 7}"}) + "\n")
        impl = SourceImpl(type="file", params=(("path", os.path.join(base_dir, "in.jsonl")), ("format", "jsonl")))
    comps = [Component(id="src", kind="spout", parallelism=p_spout, impl=impl,
                       streams=(StreamDef(fields=("v", "k")),))]
    upstream, p_up = "src", p_spout
    bolts = []
    for b in range(draw(st.integers(1, 3))):
        grouping = draw(st.sampled_from(GROUPINGS))
        p = p_up if grouping == Grouping.LOCAL_OR_SHUFFLE and draw(st.booleans()) else draw(st.integers(1, 3))
        mod = draw(st.integers(2, 9))
        residues = st.lists(st.integers(0, mod - 1), max_size=2)
        shape = {"mod": mod, "fan": draw(st.lists(st.integers(0, 2), min_size=1, max_size=3)),
                 "fail": draw(residues), "raise": draw(residues), "transient": draw(st.booleans()),
                 "ack_early": draw(residues), "keep": draw(residues),
                 "hold": draw(residues), "unanchored": draw(residues)}
        cid = f"b{b}"
        comps.append(Component(
            id=cid, kind="bolt", parallelism=p, impl=ClassImpl(ref=draw(st.sampled_from([SHAPED, SHAPED_BOLT]))),
            streams=(StreamDef(fields=("v", "k")), StreamDef(id="other", fields=("v", "k"))),
            inputs=(Input(source=upstream, grouping=grouping,
                          fields=("k",) if grouping == Grouping.FIELDS else ()),),
            config=(("shape", json.dumps(shape)),)))
        bolts.append(cid)
        upstream, p_up = cid, p
    sink_inputs = (Input(source=upstream), *(Input(source=b, stream="other") for b in bolts))
    comps.append(Component(id="sink", kind="bolt", parallelism=draw(st.integers(1, 2)),
                           impl=ClassImpl(ref=LIST_SINK), inputs=sink_inputs))
    wf = Workflow(name="chunks", components=tuple(comps),
                  config=(("recovery.max.attempts", "2"), ("recovery.retry.delay.period.ms", "0")))
    if from_file:
        return wf, list(range(n))
    return feed(wf, "src", [[i, f"k{i % 7}"] for i in range(n)]), list(range(n))


class Observed:
    """What one round leaves, the parts that must not depend on the path taken."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.contributions: dict[tuple[str, int], dict[int, int]] = {}
        self.sealed: dict[tuple[str, int, tuple[str, int]], list] = collections.defaultdict(list)
        original_contributions = collector.TaskCollector.contributions
        original_seal = collector.TaskCollector.seal
        me = self

        def contributions(self: collector.TaskCollector) -> Any:
            got = original_contributions(self)
            roots, xors = ledger.combine([got])
            me.contributions[(self.component_id, self.task_id)] = dict(zip(roots.tolist(), xors.tolist()))
            return got

        def seal(self: collector.TaskCollector, key: tuple[str, int]) -> None:
            # (roots: a tuple or a list, one msgpack array either way)
            me.sealed[(self.component_id, self.task_id, key)].append(
                [[rec[0], list(rec[1]), *rec[2:]] for rec in self.out[key]])
            original_seal(self, key)

        monkeypatch.setattr(collector.TaskCollector, "contributions", contributions)
        monkeypatch.setattr(collector.TaskCollector, "seal", seal)


def users_frames(tb: str) -> str:
    """A traceback without the runtime's frames (the loop that called process differs)."""
    lines = tb.splitlines()
    keep, skip = [], False
    for line in lines:
        if line.startswith("  File "):
            skip = "recovery/runtime/" in line
        if not skip:
            keep.append(line)
    return "\n".join(keep)


def stored(client: Any, run_id: str) -> dict[str, Any]:
    """Failed positions, their queue entries (without the times), task stats (without their
    seconds), the ledger's pending roots and each sink's records."""
    failed = sorted(p.decode() for p in client.smembers(failed_queue.failed_key(run_id)))
    queues = {}
    for pos in failed:
        comp, task = pos.rsplit(":", 1)
        entries = [msgpack.unpackb(v, strict_map_key=False) for v in client.hvals(failed_queue.queue_key(run_id, comp, int(task)))]
        for e in entries:
            e.pop("time", None)
            e.pop("not_before", None)
            e["traceback"] = users_frames(e["traceback"])
        queues[pos] = sorted(entries, key=lambda e: e["id"])
    stats = {}
    for field, raw in client.hgetall(keys.task_done(run_id, 0)).items():
        s = msgpack.unpackb(raw, strict_map_key=False)
        if isinstance(s, dict):
            s.pop("seconds", None)
            # the chunks for different consumer tasks are sealed in another order (each one's
            # records are the same, in the same order: compared above), so the spill file
            # compresses them to another size
            s.pop("spill_bytes", None)
            # the rows the chunk mode ran one at a time: the one counter that tells the modes apart
            s.pop("per_tuple_rows", None)
        stats[field.decode()] = s
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(client, run_id, b)
    sinks = {k.decode(): sorted(client.hgetall(k).items()) for k in client.scan_iter(state_key(run_id, "*"))}
    return {"failed": failed, "queues": queues, "stats": stats,
            "pending": sorted(ledger.pending_roots(client, run_id)), "sinks": sinks}


def one_round(wf: Workflow, chunked: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Observed, dict, dict]:
    with monkeypatch.context() as m:
        m.setattr(chunks, "ENABLED", chunked)
        m.setattr(collector, "CHUNK", 5)   # small chunks: sealing boundaries are compared too
        m.setattr(chunks, "SMALL_CHUNK", 3)   # a chunk's tail of 1 or 2 rows by the per-tuple path
        seen = Observed(m)
        client = fakeredis.FakeRedis()
        received = execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), client)
        # what each consumer task received, as a multiset of (producer, its task, record): the
        # members of a chain run a chunk at a time on the chunk path, so a consumer fed by two of
        # them gets their records interleaved otherwise than tuple by tuple (no order holds
        # between different producers; each producer's own output is compared by `sealed`)
        chunks_in = {key: sorted((repr((src, src_task, rec)) for b in blobs
                                  for src, src_task, recs in [wire.unpack_rows(b)] for rec in recs))
                     for key, blobs in received.items()}
        return seen, chunks_in, stored(client, "r")


@settings(max_examples=20, deadline=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shaped_workflows())
def test_a_round_leaves_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch, drawn: tuple[Workflow, list[int]]):
    wf, _ = drawn
    per_tuple = one_round(wf, False, monkeypatch)
    chunked = one_round(wf, True, monkeypatch)
    assert chunked[0].sealed == per_tuple[0].sealed
    assert chunked[0].contributions == per_tuple[0].contributions
    assert chunked[1] == per_tuple[1]
    assert chunked[2] == per_tuple[2]


@settings(max_examples=6, deadline=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shaped_workflows())
def test_a_run_and_its_recovery_end_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch,
                                                           drawn: tuple[Workflow, list[int]]):
    wf, _ = drawn
    ends = []
    for chunked in (False, True):
        with monkeypatch.context() as m:
            m.setattr(chunks, "ENABLED", chunked)
            m.setattr(chunks, "SMALL_CHUNK", 3)
            client = fakeredis.FakeRedis()
            run = run_local(wf, client, list_sinks=False, run_id="r")
            recover_local(run, max_rounds=4)
            dead = sorted((d.component, d.task, d.id, d.attempt, d.error) for d in run.dead_tuples())
            ends.append((run.sinks, dead, sorted((f.component, f.task, f.id) for f in run.failed_tuples()),
                         run.summary.status))
    assert ends[0] == ends[1]
