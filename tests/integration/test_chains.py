"""Chains (Flink's operator chaining) on a real local Spark (local[2,3]) and a real Redis:
components joined by local_or_shuffle (cdn_logs: logs -> split -> normalize), or by shuffle with
recovery.chain.shuffle=true (wordcount: sentences -> split), run as one stage. What a run
writes, its ledger, counters, failed positions, recovery, kill -9 and Spark retries are those
of the same workflow run without chaining (recovery.chain=false)."""
from __future__ import annotations

import json

from recovery.engine import rounds
from recovery.jobs import dead_letters, recover
from recovery.model.graph import ChainPlan, TaskMap
from recovery.model.run import RunSpec
from recovery.model.synthesis import synthesize
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key
from tests.integration.conftest import copy_workflow, kill_when_round_0, sink_records, submit
from tests.integration.test_engine import tracking_keys, wordcount_reference
from tests.integration.test_recovery import _spawn_submit

FAST_RETRY = {"recovery.retry.delay.period.ms": "10"}
UNCHAINED = {"recovery.chain": "false"}
CHAIN_SHUFFLE = {"recovery.chain.shuffle": "true"}
# transient failures at split, chosen by value: chained edges route task i to task i, so tuple
# ids (derived from the target task) differ from an unchained run's, and a choice by id would
# pick other tuples. split also fails the data's malformed lines for good (dead either way).
TRANSIENT_SPLIT = {"recovery.inject.s.component": "split", "recovery.inject.s.match": ":10:03:",
                   "recovery.max.attempts": "2", **FAST_RETRY}


def _cdn(tmp_path, name: str):
    return copy_workflow("cdn_logs", tmp_path / name)


def _out(tmp_path, name: str) -> list[str]:
    return sink_records(tmp_path / name / "out" / "cdn_logs")


def test_a_chain_is_one_stage_with_nothing_persisted_between_its_members(spark, tmp_path):
    wf = workflow_xml.load(_cdn(tmp_path, "a"))
    spec = RunSpec("plan-only", 0, wf.to_task_json(), None, False)
    graph = rounds.build(spark, wf, spec)
    assert [s.name for s in graph.outputs] == ["logs -> split -> normalize", "aggregate"]
    assert [s.name for s in graph.leaves] == ["output"]
    # (each stage's output is read by one stage: Spark computes it once without persisting it)
    assert graph.persisted == [] and not any(s.frame.is_cached for s in graph.outputs + graph.leaves)
    unchained = wf.with_config(UNCHAINED)
    graph = rounds.build(spark, unchained, RunSpec("plan-only", 0, unchained.to_task_json(), None, False))
    assert [s.name for s in graph.outputs] == ["logs", "split", "normalize", "aggregate"]
    assert graph.persisted == []


def test_a_stage_read_by_several_stages_is_persisted_and_computed_once(spark, tmp_path):
    """fanout's source feeds two stages: its output is persisted (its tasks run once for both)."""
    wf = workflow_xml.load(copy_workflow("fanout", tmp_path / "f"))
    graph = rounds.build(spark, wf, RunSpec("plan-only", 0, wf.to_task_json(), None, False))
    shared = [s.name for s in graph.persisted]
    assert shared and all(s.frame.is_cached for s in graph.persisted)
    for stage in graph.persisted:
        stage.frame.unpersist()
    plan = ChainPlan.of_workflow(wf)
    assert shared == [ch.name for ch in plan.chains if len(plan.consumers[ch.head]) > 1]


def test_a_chained_run_writes_counts_fails_and_recovers_what_the_unchained_run_does(spark, redis_url, redis_client, tmp_path):
    chained = submit(spark, redis_url, redis_client, _cdn(tmp_path, "chained"), TRANSIENT_SPLIT)
    plain = submit(spark, redis_url, redis_client, _cdn(tmp_path, "plain"), {**TRANSIENT_SPLIT, **UNCHAINED})
    assert _out(tmp_path, "chained") == _out(tmp_path, "plain") and _out(tmp_path, "chained")
    for k in ("roots", "complete", "pending", "failed", "dead"):
        assert getattr(chained, k) == getattr(plain, k), k
    # per member counters, and failures localized to the member's tasks, as without chaining
    for comp in ("logs", "split", "normalize", "aggregate", "output"):
        for k in ("executed", "acked", "failed", "emitted"):
            assert getattr(chained.components[comp], k) == getattr(plain.components[comp], k), (comp, k)
    positions = lambda s: {p.component for p in s.failed_positions}   # noqa: E731
    # (the data's status-0 lines fail at normalize)
    assert positions(chained) == positions(plain) == {"split", "normalize"}
    queued = lambda s, comp: sorted(   # noqa: E731
        json.dumps(rec["values"]) for p in s.failed_positions if p.component == comp
        for rec in map(_unpack, redis_client.hvals(failed_queue.queue_key(s.run_id, comp, p.task))))
    for comp in ("split", "normalize"):
        assert queued(chained, comp) == queued(plain, comp) != []
    # a recovery round of split's failures alone: split fed from its queue, chained again with
    # normalize; with normalize's failures too, normalize reads its queue as well: not chained
    wf = workflow_xml.load(tmp_path / "chained" / "cdn_logs.xml").with_config(TRANSIENT_SPLIT)
    failed = {c: sorted({p.task for p in chained.failed_positions if p.component == c})
              for c in ("split", "normalize")}
    assert [c.members for c in ChainPlan.of_workflow(synthesize(wf, {"split": failed["split"]})).chained] == [
        ("split", "normalize")]
    assert ChainPlan.of_workflow(synthesize(wf, failed)).chained == []
    for s in (chained, plain):
        r = recover.recover(spark, redis_client, redis_url, s.run_id)
        assert r.status == "dead" and r.pending == 0    # only the data's bad lines are dead
    assert _out(tmp_path, "chained") == _out(tmp_path, "plain")
    state = lambda rid: redis_client.hgetall(state_key(rid, "aggregate"))   # noqa: E731
    assert state(chained.run_id) == state(plain.run_id)
    dead = lambda rid: sorted(json.dumps(d.values) for d in dead_letters.dead_letters(redis_client, rid))   # noqa: E731
    assert dead(chained.run_id) == dead(plain.run_id) != []


def _unpack(raw: bytes) -> dict:
    import msgpack
    return msgpack.unpackb(raw)


def test_a_failure_at_the_second_member_of_a_chain_is_recovered_from_its_queue_exactly(spark, redis_url, redis_client, tmp_path):
    """wordcount with recovery.chain.shuffle=true: sentences -> split is a chain; transient
    failures at split (the chain's second member) are queued at split's tasks; the recovery
    workflow runs split from its queue, then count and out; the sink is exact."""
    xml = copy_workflow("wordcount", tmp_path)
    inject = {"recovery.inject.s.component": "split", "recovery.inject.s.rate": "0.05",
              "recovery.inject.s.attempts": "2", **CHAIN_SHUFFLE, **FAST_RETRY}
    s = submit(spark, redis_url, redis_client, xml, inject)
    assert {p.component for p in s.failed_positions} == {"split"} and s.status == "pending"
    wf = workflow_xml.load(xml).with_config(inject)
    assert [c.members for c in ChainPlan.of_workflow(wf).chained] == [("sentences", "split")]
    failed = {"split": sorted({p.task for p in s.failed_positions})}
    plan = ChainPlan.of_workflow(synthesize(wf, failed))
    assert plan.chained == []    # split is fed by its queue spout (direct): nothing to chain
    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "completed" and r.rounds == 2 and r.pending == 0
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert tracking_keys(redis_client, s.run_id) == {state_key(s.run_id, "count")}


def test_kill_9_of_a_chained_run_then_recover_is_exact_and_members_commit_together(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    run_id = "chain-crash"
    go = tmp_path / "let-count-go"    # count holds every word until then: out never commits
    slow = {"recovery.inject.z.component": "count", "recovery.inject.z.mode": "hold",
            "recovery.inject.z.marker": str(go), "recovery.inject.z.rate": "1",
            "recovery.inject.s.component": "split",
            "recovery.inject.s.rate": "0.03", **CHAIN_SHUFFLE, **FAST_RETRY}
    proc = _spawn_submit(xml, redis_url, run_id, slow)
    seen: list[set[str]] = []

    def chain_task_done(done: set[str]) -> bool:
        seen.append(set(done))
        return any(f.startswith("split:") for f in done)
    done = kill_when_round_0(proc, redis_client, run_id, chain_task_done, "a chain task committed")
    assert "out:0" not in done, done
    # a chain task commits all its members at once: never one without the other
    for markers in seen + [done]:
        for i in (0, 1):
            assert (f"sentences:{i}" in markers) == (f"split:{i}" in markers), markers
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    go.touch()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert tracking_keys(redis_client, run_id) == {state_key(run_id, "count")}


def test_spark_retries_of_a_chain_task_change_no_result_and_no_ledger(spark, redis_url, redis_client, tmp_path):
    """The worker running the chain's task 2 dies in its second member (split) on Spark's first
    attempt; Spark re-runs the chain task: sink, ledger, state and counts equal a run without."""
    inject = {"recovery.inject.t.component": "split", "recovery.inject.t.rate": "0.05", **CHAIN_SHUFFLE}
    base = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path / "a"), inject)
    xml = copy_workflow("wordcount", tmp_path / "b")
    task = TaskMap.of(workflow_xml.load(xml)).task_ids("split")[1]
    crashed = submit(spark, redis_url, redis_client, xml, {
        **inject, "recovery.inject.c.component": "split", "recovery.inject.c.mode": "crash",
        "recovery.inject.c.task": str(task), "recovery.inject.c.after": "20",
        "recovery.inject.c.marker": str(tmp_path / "crashed")})
    assert (tmp_path / "crashed").exists()      # the first attempt really died
    out = lambda d: sink_records(tmp_path / d / "out" / "wordcount")   # noqa: E731
    assert out("a") == out("b") and out("a")
    for k in ("roots", "complete", "pending", "failed"):
        assert getattr(base, k) == getattr(crashed, k)
    assert base.failed > 0
    for comp in ("sentences", "split", "count"):
        assert base.components[comp].executed == crashed.components[comp].executed
    assert ledger.pending_roots(redis_client, base.run_id) == ledger.pending_roots(redis_client, crashed.run_id)
    state = lambda rid: redis_client.hgetall(state_key(rid, "count"))   # noqa: E731
    assert state(base.run_id) == state(crashed.run_id)
