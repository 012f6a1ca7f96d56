"""The XOR acker against a brute-force reference, on random topologies and random behaviour
(hypothesis): every root ends complete, or pending with its failure localized, never neither."""
from __future__ import annotations

import fakeredis
import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.model.graph import TaskMap
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.testing import execute_round
from recovery.tracking import keys
from recovery.tracking import ledger as tracking_ledger
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import bucket_key
from tests.unit import ledger_components as lc


@st.composite
def topologies(draw):
    comps = [Component(id="s0", kind="spout", parallelism=draw(st.integers(1, 2)),
                       impl=ClassImpl(ref="tests.unit.ledger_components:CountingSpout"),
                       streams=(StreamDef(fields=("n",)),))]
    for b in range(draw(st.integers(1, 5))):
        sources = draw(st.lists(st.sampled_from([c.id for c in comps]), min_size=1, max_size=2, unique=True))
        inputs = []
        for s in sources:
            g = draw(st.sampled_from([Grouping.SHUFFLE, Grouping.FIELDS, Grouping.ALL, Grouping.GLOBAL]))
            inputs.append(Input(source=s, grouping=g, fields=("n",) if g == Grouping.FIELDS else ()))
        comps.append(Component(id=f"b{b}", kind="bolt", parallelism=draw(st.integers(1, 3)),
                               impl=ClassImpl(ref="tests.unit.ledger_components:RandomBolt"),
                               streams=(StreamDef(fields=("n",)),), inputs=tuple(inputs)))
    return Workflow(name="random", components=tuple(comps))


def check_every_root(wf: Workflow, seed: int) -> tuple[int, int]:
    """Run `wf` once with RandomBolt outcomes drawn from `seed`, check every root ended
    complete or failed with its position; returns (pending roots, roots)."""
    lc.OUTCOMES.clear()
    lc.SEED[0] = seed
    client = fakeredis.FakeRedis()
    spec = RunSpec("r1", 0, wf.model_dump_json(), "fake://", True)
    execute_round(wf, spec, client)
    for b in range(tracking_ledger.LEDGER_BUCKETS):
        tracking_ledger.resolve_bucket(client, "r1", b)
    pending = tracking_ledger.pending_roots(client, "r1")

    # brute force: a root is incomplete iff some tuple of its tree was not acked
    failed_roots = {r for _, outcome, _, roots in lc.OUTCOMES if outcome == "fail" for r in roots}
    acked_roots = {r for _, outcome, _, roots in lc.OUTCOMES if outcome == "ack" for r in roots}
    assert pending == failed_roots

    # every failed tuple (with roots) is in the queue of the position where it failed
    tm = TaskMap.of(wf)
    queued = {}
    for pos in client.smembers(failed_queue.failed_key("r1")):
        comp, task = pos.decode().rsplit(":", 1)
        assert int(task) in tm.task_ids(comp)
        for raw in client.hvals(failed_queue.queue_key("r1", comp, int(task))):
            rec = msgpack.unpackb(raw)
            queued.setdefault((comp, int(task)), set()).update(rec["roots"])
    expected = {}
    for comp, outcome, task, roots in lc.OUTCOMES:
        if outcome == "fail":
            expected.setdefault((comp, task), set()).update(roots)
    assert {k: v for k, v in queued.items()} == {k: v for k, v in expected.items() if k in queued}
    assert set(queued) == {k for k in expected}
    # roots never touched by a failure are complete
    assert not (acked_roots - failed_roots) & pending
    roots = sum(msgpack.unpackb(v)["roots"] for v in client.hvals(keys.task_done("r1", 0)))
    assert roots == lc.CountingSpout.N and len(pending) <= roots
    return len(pending), roots


def test_every_root_ends_complete_or_failed_with_its_position():
    # the statistics live in this test (not in a module global another test reads), so the
    # check that the property saw both outcomes holds in any test order
    seen = {"examples": 0, "with_failures": 0, "with_complete": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(topologies(), st.integers(0, 10_000))
    def every_root_ends_complete_or_failed(wf, seed):
        pending, roots = check_every_root(wf, seed)
        seen["examples"] += 1
        seen["with_failures"] += bool(pending)
        seen["with_complete"] += pending < roots

    every_root_ends_complete_or_failed()
    # it must have exercised failures and completions
    assert seen["examples"] > 10, seen
    assert seen["with_failures"] > 0 and seen["with_complete"] > 0, seen


def test_a_committed_task_is_replayed_not_executed_again():
    """Idempotence under Spark retries: the second execution of a committed task yields the
    stored output and changes no ledger entry."""
    wf = Workflow(name="w", components=(
        Component(id="s0", kind="spout", impl=ClassImpl(ref="tests.unit.ledger_components:CountingSpout"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="b0", kind="bolt", parallelism=2, impl=ClassImpl(ref="tests.unit.ledger_components:RandomBolt"),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="s0"),))))
    client = fakeredis.FakeRedis()
    spec = RunSpec("r2", 0, wf.model_dump_json(), "fake://", True)
    lc.OUTCOMES.clear()
    first = execute_round(wf, spec, client)
    ledger = {b: client.hgetall(bucket_key("r2", b)) for b in range(tracking_ledger.LEDGER_BUCKETS)}
    n = len(lc.OUTCOMES)
    # every reader of s0 committed, so s0's stored output is gone already (it cannot be needed)
    assert not client.hexists(keys.task_spill("r2", 0), "s0:0")
    second = execute_round(wf, spec, client)
    assert len(lc.OUTCOMES) == n                 # no component code ran again
    assert first and all(not v for v in second.values())
    assert ledger == {b: client.hgetall(bucket_key("r2", b)) for b in range(tracking_ledger.LEDGER_BUCKETS)}


@given(st.lists(st.dictionaries(st.integers(1, 40), st.integers(0, 2**64 - 1), max_size=30), max_size=5))
def test_combined_contributions_fold_to_what_their_pieces_fold_to(contribs):
    import numpy as np
    as_arrays = [c if i % 2 else (np.array(list(c), dtype=np.uint64), np.array(list(c.values()), dtype=np.uint64))
                 for i, c in enumerate(contribs)]
    roots, xors = tracking_ledger.combine(as_arrays)
    expected: dict[int, int] = {}
    for c in contribs:
        for r, x in c.items():
            expected[r] = expected.get(r, 0) ^ x
    assert dict(zip(roots.tolist(), xors.tolist())) == {r: x for r, x in expected.items() if x}
    blobs = [b for c in contribs for b in tracking_ledger.pack_xors(c) if c]
    folded = tracking_ledger.fold(blobs)
    assert roots.tolist() == folded[0].tolist() and xors.tolist() == folded[1].tolist()
