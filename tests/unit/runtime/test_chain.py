"""recovery.runtime.chain on fakeredis, through the engine's stages (recovery.testing): a chain
task runs its members' tasks in turn, hands chunks over in memory, spills only what leaves the
chain, and commits all its members in one transaction; per member, everything is as before."""
from __future__ import annotations

from recovery import BasicBolt, testing
from recovery.model.graph import TaskMap
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.tracking import keys, runs, tracker
from recovery.tracking import queue as failed_queue

N = 300


class Upper(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"].upper()])


class FailsOnce(BasicBolt):
    """Fails words ending in 7 at their first attempt (a transient failure of this member)."""

    def process(self, tup):
        if tup["word"].endswith("7") and tup.attempt == 1:
            raise RuntimeError(f"transient {tup['word']}")
        self.emit([tup["word"] + "!"])


def workflow(grouping: Grouping = Grouping.LOCAL_OR_SHUFFLE) -> Workflow:
    """words -> upper -> flaky -(fields)-> out: words, upper and flaky chain over `grouping`."""
    def bolt(cid: str, ref: str, source: str, g: Grouping) -> Component:
        return Component(id=cid, kind="bolt", parallelism=2, impl=ClassImpl(ref=ref),
                         streams=(StreamDef(fields=("word",)),),
                         inputs=(Input(source=source, grouping=g, fields=("word",) if g is Grouping.FIELDS else ()),))
    return Workflow(name="chained", components=(
        Component(id="words", kind="spout", parallelism=2, impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("word",)),)),
        bolt("upper", f"{__name__}:Upper", "words", grouping),
        bolt("flaky", f"{__name__}:FailsOnce", "upper", Grouping.NONE),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK),
                  inputs=(Input(source="flaky", grouping=Grouping.GLOBAL),)),
    ))


WORDS = {"words": [f"w{i}" for i in range(N)]}


def test_a_chained_run_equals_the_unchained_one_member_by_member(fake_redis):
    chained = testing.run_local(workflow(), fake_redis, inputs=WORDS)
    plain = testing.run_local(workflow(), fake_redis, inputs=WORDS, config={"recovery.chain": "false"})
    for comp in ("words", "upper", "flaky"):
        for k in ("executed", "acked", "failed", "emitted"):
            assert getattr(chained.summary.components[comp], k) == getattr(plain.summary.components[comp], k), (comp, k)
    assert chained.summary.components["flaky"].failed == N // 10
    for run in (chained, plain):
        testing.recover_local(run)
        assert run.status == "completed"
    assert testing.sink_multisets(chained) == testing.sink_multisets(plain)
    assert sorted(r[0] for r in chained.sinks["out"]) == sorted(f"W{i}!" for i in range(N))


def test_a_failure_at_a_chain_member_is_queued_at_that_members_task(fake_redis):
    run = testing.run_local(workflow(), fake_redis, inputs=WORDS, run_id="member-fails")
    assert {p.component for p in run.failed_positions} == {"flaky"}
    # a chained edge sends task i's tuples to task i: each failed word is queued at the flaky
    # task with the index of the upper task that emitted it
    tm = TaskMap.of(run.workflow)
    failed = run.failed_tuples()
    assert len(failed) == N // 10
    for t in failed:
        assert t.component == "flaky" and t.src_component == "upper"
        assert tm.index("flaky", t.task) == tm.index("upper", t.src_task)
    testing.recover_local(run)
    assert run.status == "completed"
    assert sorted(r[0] for r in run.sinks["out"]) == sorted(f"W{i}!" for i in range(N))


def test_a_chain_task_spills_only_what_leaves_the_chain_and_commits_its_members_at_once(fake_redis, monkeypatch):
    spilled: list[tuple[str, str]] = []
    together: list[list[str]] = []
    single: list[str] = []
    add_output, commit, commit_together = (tracker.TaskTracker.add_output, tracker.TaskTracker.commit,
                                           tracker.commit_together)

    def spy_add(self, key, blob):
        spilled.append((self.component, key[0]))
        return add_output(self, key, blob)

    def spy_commit(self, *args, **kwargs):
        single.append(self.component)
        return commit(self, *args, **kwargs)

    def spy_together(trackers, bodies):
        together.append([t.field for t in trackers])
        return commit_together(trackers, bodies)
    monkeypatch.setattr(tracker.TaskTracker, "add_output", spy_add)
    monkeypatch.setattr(tracker.TaskTracker, "commit", spy_commit)
    monkeypatch.setattr("recovery.runtime.chain.commit_together", spy_together)
    run = testing.run_local(workflow(), fake_redis, inputs=WORDS, run_id="spill")
    assert run.status == "pending"
    # one spill file per chain task, the head's, holding only the chunks for `out`
    assert set(spilled) == {("words", "out")}
    assert sorted(together) == [["words:0", "upper:0", "flaky:0"], ["words:1", "upper:1", "flaky:1"]]
    assert single == ["out"]


def test_a_committed_chain_task_replays_its_spill_and_executes_no_member(fake_redis, monkeypatch):
    """A chain task run again after its commit (a Spark retry, a resumed round) yields what it
    sent out of the stage from its spill file; no member runs."""
    from recovery.model.run import RunSpec
    from recovery.runtime import task
    wf = testing.feed(workflow(), "words", WORDS["words"])
    spec = RunSpec("again", 0, wf.to_task_json(), testing.run._url(fake_redis), True)
    fake_redis.hset(runs.record_key("again"), "status", "running")
    # the spill files stay (as when the driver died before `out` committed and dropped them)
    monkeypatch.setattr(tracker.TaskTracker, "drop_outputs", lambda self, component, parallelism: None)
    first = testing.execute_round(wf, spec, fake_redis)
    assert set(fake_redis.hkeys(keys.task_spill("again", 0))) == {b"words:0", b"words:1"}
    assert fake_redis.hget(keys.task_done("again", 0), "flaky:1") is not None
    executed: list[str] = []
    instantiate = task.TaskRunner.instantiate

    def spy(self):
        executed.append(self.component_id)
        return instantiate(self)
    monkeypatch.setattr(task.TaskRunner, "instantiate", spy)
    again = testing.execute_round(wf, spec, fake_redis)
    assert sorted(again[("out", 0)]) == sorted(first[("out", 0)]) != []
    assert executed == []


def test_a_chain_task_of_a_run_taken_over_while_it_ran_commits_no_member(fake_redis, monkeypatch):
    """Fencing, chain variant: the run's generation changes (a take-over) after the chain's
    members ran, before their commit: the chain task writes nothing for any member (no done
    marker, no ledger blob, no queued tuple) and fails with the fence's error."""
    import pytest

    from recovery.errors import RunFenced
    from recovery.model.run import RunSpec
    wf = testing.feed(workflow(), "words", WORDS["words"])
    spec = RunSpec("fenced", 0, wf.to_task_json(), testing.run._url(fake_redis), True, generation="g1")
    fake_redis.hset(runs.record_key("fenced"), mapping={"status": "running", "generation": "g1"})
    staged = tracker.TaskTracker.staged_commit

    def taken_over(self, *args, **kwargs):
        if self.component == "words":   # the chain's head: its commit is about to be staged
            fake_redis.hset(runs.record_key("fenced"), "generation", "g2")
        return staged(self, *args, **kwargs)
    monkeypatch.setattr(tracker.TaskTracker, "staged_commit", taken_over)
    with pytest.raises(RunFenced):
        testing.execute_round(wf, spec, fake_redis)
    assert fake_redis.hkeys(keys.task_done("fenced", 0)) == []
    assert not any(fake_redis.scan_iter(match=keys.run_prefix("fenced") + "*ledger*"))
    assert not fake_redis.exists(failed_queue.failed_key("fenced"))


def test_a_chain_task_keeps_each_members_commit_record_and_applies_its_staged_queue_writes(fake_redis):
    """The commit's three steps, chain variant: every member writes its own pieces under its
    own attempt token and gets its own commit record and done marker (the one commit point
    holds them all); the failing member's staged queue writes are in its queues afterwards."""
    import msgpack

    from recovery.model.run import RunSpec
    wf = testing.feed(workflow(), "words", WORDS["words"])
    spec = RunSpec("records", 0, wf.to_task_json(), testing.run._url(fake_redis), True)
    fake_redis.hset(runs.record_key("records"), "status", "running")
    testing.execute_round(wf, spec, fake_redis)
    commits = {f.decode(): msgpack.unpackb(v) for f, v in fake_redis.hgetall(keys.task_commits("records", 0)).items()}
    done = {f.decode() for f in fake_redis.hkeys(keys.task_done("records", 0))}
    members = {f"{m}:{i}" for m in ("words", "upper", "flaky") for i in range(2)}
    assert members <= set(commits) == done
    assert len({commits[f][0] for f in members}) == len(members)   # one attempt token each
    positions = {(c, t) for f in members for c, t in commits[f][1]}
    assert positions and {c for c, _ in positions} == {"flaky"}
    assert sum(fake_redis.hlen(failed_queue.queue_key("records", c, t)) for c, t in positions) == N // 10
    assert not list(fake_redis.scan_iter(match="*staged*"))


def test_a_chain_task_writes_one_set_of_ledger_pieces_for_all_its_members(fake_redis, monkeypatch):
    """The members commit at once, so their contributions are XORed together and written under
    the head's field: the ids handed from member to member cancel there, and each root has one
    entry per chain task, not one per member. The verdicts are those of the unchained run."""
    pieces: list[str] = []
    original = tracker.TaskTracker._write_pieces

    def spy(self, contrib):
        if (len(contrib[0]) if isinstance(contrib, tuple) else len(contrib)):
            pieces.append(self.component)
        return original(self, contrib)
    monkeypatch.setattr(tracker.TaskTracker, "_write_pieces", spy)
    chained = testing.run_local(workflow(), fake_redis, inputs=WORDS, run_id="one-piece-set")
    assert "upper" not in pieces and "flaky" not in pieces
    assert pieces.count("words") == 2
    plain = testing.run_local(workflow(), fake_redis, inputs=WORDS, run_id="pieces-unchained",
                              config={"recovery.chain": "false"})
    assert chained.summary.roots == plain.summary.roots
    for run in (chained, plain):
        testing.recover_local(run)
        assert run.status == "completed"
    assert testing.sink_multisets(chained) == testing.sink_multisets(plain)
