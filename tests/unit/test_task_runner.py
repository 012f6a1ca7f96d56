"""The task runner without Spark (fakeredis): timeouts, direct emits, double acks."""
from __future__ import annotations

import fakeredis
import msgpack

from recovery import keys, tracking
from recovery.model import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.runtime import RunSpec
from tests.unit import runner_components as rc
from tests.unit.local_executor import execute

REF = "tests.unit.runner_components:"


def _run(wf: Workflow, run_id: str = "r"):
    client = fakeredis.FakeRedis()
    execute(wf, RunSpec(run_id, 0, wf.model_dump_json(), "fake://", True), client)
    for b in range(tracking.LEDGER_BUCKETS):
        tracking.resolve_bucket(client, run_id, b)
    return client


def _queued(client, run_id="r"):
    out = []
    for pos in client.smembers(keys.failed_set(run_id)):
        comp, task = pos.decode().rsplit(":", 1)
        out += [msgpack.unpackb(v) for v in client.hvals(keys.queue(run_id, comp, int(task)))]
    return out


def test_a_tuple_over_the_message_timeout_fails_and_the_task_goes_on():
    wf = Workflow(name="t", config=(("topology.message.timeout.secs", "1"),), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="slow", kind="bolt", impl=ClassImpl(ref=REF + "SlowOnThree"),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="src"),))))
    client = _run(wf)
    [rec] = _queued(client)
    assert rec["values"] == [3] and "timed out after 1s" in rec["error"]
    assert len(tracking.pending_roots(client, "r")) == 1
    stats = msgpack.unpackb(client.hget(keys.task_done("r", 0), "slow:0"))
    assert stats["executed"] == 6 and stats["acked"] == 5


def test_direct_emits_reach_the_named_task_and_double_acks_are_ignored():
    rc.Collect.SEEN.clear()
    wf = Workflow(name="d", components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=REF + "Numbers"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="router", kind="bolt", parallelism=2, impl=ClassImpl(ref=REF + "DirectToLast"),
                  streams=(StreamDef(id="direct", fields=("n",), direct=True),), inputs=(Input(source="src"),)),
        Component(id="sink", kind="bolt", parallelism=3, impl=ClassImpl(ref=REF + "Collect"),
                  inputs=(Input(source="router", stream="direct", grouping=Grouping.DIRECT),))))
    client = _run(wf)
    from recovery.graph import TaskMap
    last = TaskMap.of(wf).task_ids("sink")[-1]
    assert sorted(rc.Collect.SEEN) == [(last, n) for n in range(6)]
    assert tracking.pending_roots(client, "r") == set() and _queued(client) == []


def test_a_state_value_that_cannot_be_stored_fails_only_its_tuple():
    wf = Workflow(name="u", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="bad", kind="bolt", impl=ClassImpl(ref=REF + "Unmsgpackable"),
                  inputs=(Input(source="src"),))))
    client = _run(wf)
    assert len(_queued(client)) == 6
    assert all("TypeError" in r["error"] for r in _queued(client))


def test_tick_tuples_reach_process_tick_and_a_last_one_ends_the_input():
    rc.Collect.SEEN.clear()
    wf = Workflow(name="k", config=(("topology.tick.tuple.freq.secs", "1"),), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="ticker", kind="bolt", impl=ClassImpl(ref=REF + "TickCounter"),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="src"),)),
        Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "Collect"),
                  inputs=(Input(source="ticker"),))))
    client = _run(wf)
    counts = [n for _, n in rc.Collect.SEEN]
    assert counts and counts[-1] == 6            # the last tick saw the whole input
    assert tracking.pending_roots(client, "r") == set()
