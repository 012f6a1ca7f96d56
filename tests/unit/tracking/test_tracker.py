"""recovery.tracking.tracker on fakeredis: the last task of a component to commit folds the
ledger, so a long chain holds about one ledger entry per root in flight, not one per stage."""
from __future__ import annotations

import pytest

from recovery import BasicBolt, testing
from recovery.model.run import TaskIdentity
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.tracking import keys, ledger, tracker
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import bucket_key

STAGES = 5


class Pass(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"]])


def chain() -> Workflow:
    """words -> s0 -> s1 -> ... -> s4 -> out (ListSink), two tasks per stage."""
    comps = [Component(id="words", kind="spout", parallelism=2, impl=ClassImpl(ref=testing.TESTING_SPOUT),
                       streams=(StreamDef(fields=("word",)),))]
    for i in range(STAGES):
        comps.append(Component(id=f"s{i}", kind="bolt", parallelism=2, impl=ClassImpl(ref=f"{__name__}:Pass"),
                               streams=(StreamDef(fields=("word",)),),
                               inputs=(Input(source=comps[-1].id),)))
    comps.append(Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK),
                           inputs=(Input(source=comps[-1].id),)))
    return Workflow(name="chain", components=tuple(comps))


def test_a_chain_holds_at_most_32_ledger_bytes_per_root_in_flight(fake_redis, monkeypatch):
    peak = [0]
    commit = tracker.TaskTracker.commit

    def measured(self, *args, **kwargs):
        ok = commit(self, *args, **kwargs)
        held = sum(len(v) for b in range(ledger.LEDGER_BUCKETS) for v in fake_redis.hvals(bucket_key("c", b)))
        peak[0] = max(peak[0], held)
        return ok
    monkeypatch.setattr(tracker.TaskTracker, "commit", measured)
    n = 400
    run = testing.run_local(chain(), fake_redis, run_id="c", inputs={"words": [f"w{i}" for i in range(n)]})
    assert run.summary.status == "completed" and len(run.sinks["out"]) == n
    # 16 bytes (root, xor) for each root folded, plus the running stage's own blobs: was 16 per
    # stage that touched the root (6 x 16 = 96) until the fold at the end of the round
    assert peak[0] / n <= 32, peak[0] / n


# --- the commit in single-slot steps (tracker module doc) ---------------------------------------

def started_run(client, run_id: str = "t"):
    from recovery.tracking import runs
    return runs.create(client, run_id, "<workflow/>", "{}", None, "local", True)


def attempt(client, lease, index: int = 0, round_no: int = 0, component: str = "split") -> tracker.TaskTracker:
    return tracker.TaskTracker(client, TaskIdentity(lease.run_id, round_no, component, index, 10 + index), {},
                               generation=lease.generation)


def failed(tid: int, roots=(5,), task: int = 10):
    from recovery.model.failed import FailedTuple
    return FailedTuple(values=["v"], id=tid, roots=list(roots), component="split", task=task, stream="default",
                       error="boom")


def test_pieces_of_an_attempt_that_never_reached_its_commit_point_count_for_nothing(fake_redis):
    lease = started_run(fake_redis)
    dead_attempt = attempt(fake_redis, lease)
    dead_attempt._write_pieces({1: 11, 2: 22})   # step 1 only: then the worker died
    assert ledger.pending_roots(fake_redis, "t") == set()
    retry = attempt(fake_redis, lease)
    assert retry.commit({1: 11, 2: 22}, {"executed": 1})
    assert ledger.pending_roots(fake_redis, "t") == {1, 2}     # once, not XORed twice (which is zero)
    assert [ledger.resolve_bucket(fake_redis, "t", b, lease.generation) for b in (1, 2)] == [1, 1]
    # the fold drops the dead attempt's pieces (another attempt committed) and folds the other's
    fields = {f for b in range(ledger.LEDGER_BUCKETS) for f in fake_redis.hkeys(bucket_key("t", b))}
    assert fields == {b"compacted"}
    assert ledger.pending_roots(fake_redis, "t") == {1, 2}


def test_a_second_attempt_reaching_the_commit_point_commits_nothing_more(fake_redis):
    lease = started_run(fake_redis)
    first, second = attempt(fake_redis, lease), attempt(fake_redis, lease)
    first.failure(failed(7))
    second.failure(failed(7))
    assert first.commit({3: 33}, {"executed": 1})
    assert second.commit({3: 33}, {"executed": 1})   # a zombie: finds the done marker
    assert ledger.pending_roots(fake_redis, "t") == {3}
    commits = fake_redis.hgetall(keys.task_commits("t", 0))
    assert list(commits) == [b"split:0"] and first.token.encode() in commits[b"split:0"]
    assert fake_redis.hkeys(failed_queue.queue_key("t", "split", 10)) == [b"7"]


def test_staged_queue_writes_of_a_task_killed_after_its_commit_point_are_applied_by_the_driver(fake_redis, monkeypatch):
    lease = started_run(fake_redis)
    task = attempt(fake_redis, lease)
    task.failure(failed(7))
    task.failure(failed(8, task=11))
    task.replay_done("split", 11, 9)
    fake_redis.hset(failed_queue.queue_key("t", "split", 11), "9", b"an earlier failure, replayed and acked here")
    monkeypatch.setattr(tracker, "apply_staged", lambda *a, **k: 0)   # killed right after step 2
    assert task.commit({4: 44}, {"executed": 1})
    assert fake_redis.smembers(failed_queue.failed_key("t")) == {b"split:10", b"split:11"}
    assert not fake_redis.exists(failed_queue.queue_key("t", "split", 10))      # staged, not applied
    monkeypatch.undo()
    assert tracker.apply_round(fake_redis, "t", 0, lease.generation) == 3
    assert fake_redis.hkeys(failed_queue.queue_key("t", "split", 10)) == [b"7"]
    assert fake_redis.hkeys(failed_queue.queue_key("t", "split", 11)) == [b"8"]
    assert tracker.apply_round(fake_redis, "t", 0, lease.generation) == 0   # idempotent: done once
    assert not list(fake_redis.scan_iter(match="*staged*"))


def test_no_command_of_a_commit_carries_more_than_a_bounded_piece_of_ledger(fake_redis):
    lease = started_run(fake_redis)
    n = ledger.PIECE_ROOTS * ledger.LEDGER_BUCKETS * 3
    task = attempt(fake_redis, lease)
    assert task.commit({r: r * 3 + 1 for r in range(1, n + 1)}, {"executed": n})
    sizes = [len(v) for b in range(ledger.LEDGER_BUCKETS) for v in fake_redis.hvals(bucket_key("t", b))]
    assert len(sizes) > ledger.LEDGER_BUCKETS and max(sizes) <= ledger.PIECE_ROOTS * 16
    assert len(ledger.pending_roots(fake_redis, "t")) == n


def test_the_fence_counts_the_drivers_before_the_task_s_and_refuses_one_taken_over(fake_redis):
    """check_fence returns how many drivers held the run before the task's: a sink that cannot
    lock orders its commit by it (connectors.sink_objects)."""
    from recovery.errors import RunTakenOver
    from recovery.tracking import runs
    lease = started_run(fake_redis)
    first = attempt(fake_redis, lease)
    assert first.check_fence() == 0
    second = runs.take_over(fake_redis, runs.get(fake_redis, "t"), force=True)
    with pytest.raises(RunTakenOver):
        first.check_fence()
    assert attempt(fake_redis, second).check_fence() == 1
    third = runs.take_over(fake_redis, runs.get(fake_redis, "t"), force=True)
    assert attempt(fake_redis, third).check_fence() == 2
    assert tracker.TaskTracker(fake_redis, TaskIdentity("t", 0, "split", 0, 10), {}).check_fence() == 0   # no generation: unchecked


def test_a_commit_into_a_run_taken_over_writes_no_commit_point(fake_redis):
    from recovery.tracking import runs
    lease = started_run(fake_redis)
    task = attempt(fake_redis, lease)
    rec = runs.get(fake_redis, "t")
    runs.take_over(fake_redis, rec, force=True)
    assert not task.commit({1: 11}, {"executed": 1})
    assert not fake_redis.exists(keys.task_done("t", 0)) and ledger.pending_roots(fake_redis, "t") == set()
