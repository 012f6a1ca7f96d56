"""The sandbox's steps on the driver (fakeredis): what it replays, what it refuses before any
round, what it copies of a run and what not."""
from __future__ import annotations

import pytest

from recovery.errors import BadRequest, RunError
from recovery.jobs import sandbox
from recovery.model.failed import FailedTuple
from recovery.tracking import ledger, runs, scratch
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key
from tests.unit.run_records import WF, create_run


def settled_run(client, run_id: str = "r1") -> None:
    lease = create_run(client, run_id)
    runs.update(client, run_id, lease.generation, status=runs.PENDING, settled_round=0)
    lease.release()


def queued(client, run_id: str, component: str, task: int, *ids: int) -> None:
    failed_queue.enqueue(client, run_id, [FailedTuple(id=i, roots=[i * 10], component=component, task=task,
                                                      values=[str(i)], not_before=9e9) for i in ids])


def test_it_replays_each_position_s_queue_by_id_ready_now_limited_and_of_one_component(fake_redis):
    settled_run(fake_redis)
    queued(fake_redis, "r1", "out", 2, 7, 3, 5)
    queued(fake_redis, "r1", "mid", 3, 4)
    rec = runs.get(fake_redis, "r1")
    picked = sandbox.pick(fake_redis, rec)
    assert [(t.component, t.task, t.id) for t in picked] == [("mid", 3, 4), ("out", 2, 3), ("out", 2, 5),
                                                             ("out", 2, 7)]
    assert {t.not_before for t in picked} == {0.0}   # a tuple backing off is previewed too
    assert [t.id for t in sandbox.pick(fake_redis, rec, component="out", limit=2)] == [3, 5]
    assert [t.id for t in sandbox.pick(fake_redis, rec, select=lambda t: t.id % 2 == 0)] == [4]
    with pytest.raises(BadRequest, match="run r1 has no component 'nope'"):
        sandbox.pick(fake_redis, rec, component="nope")


def test_a_run_without_tracking_or_with_a_round_under_way_is_refused_before_anything(fake_redis):
    create_run(fake_redis).release()   # status running, round 0 not settled: a driver in it, or killed
    with pytest.raises(RunError, match="has round 0 under way or to resume"):
        sandbox.run_sandboxed(None, fake_redis, "redis://fake", "r1")
    runs.update(fake_redis, "r1", tracking=False)
    with pytest.raises(RunError, match="ran with tracking off"):
        sandbox.run_sandboxed(None, fake_redis, "redis://fake", "r1")
    assert scratch.all_ids(fake_redis) == []


def test_nothing_queued_runs_no_round(fake_redis):
    settled_run(fake_redis)
    result = sandbox.run_sandboxed(lambda: pytest.fail("no session is started"), fake_redis, "redis://fake", "r1")
    assert result.replayed == [] and result.scratch_id is None and result.round == 1


def test_a_scratch_run_copies_the_keyed_state_but_not_the_ledger_queues_or_dead_letters(fake_redis):
    settled_run(fake_redis)
    fake_redis.hset(state_key("r1", "mid"), "k", "v")
    fake_redis.hset(ledger.bucket_key("r1", 3), "compacted", b"x")
    queued(fake_redis, "r1", "out", 2, 7)
    rec = runs.get(fake_redis, "r1")
    sid = scratch.new_id("r1")
    scratch.create(fake_redis, rec, sid, sandbox.sandboxed(WF).to_task_json(), 1).release()
    assert scratch.copy_keys(fake_redis, "r1", sid) == 1
    assert fake_redis.hgetall(state_key(sid, "mid")) == {b"k": b"v"}
    assert failed_queue.positions(fake_redis, sid) == [] and not fake_redis.exists(ledger.bucket_key(sid, 3))
    assert sid not in runs.list_ids(fake_redis) and scratch.scratch_ids(fake_redis, "r1") == [sid]
    copy = runs.get(fake_redis, sid)
    assert scratch.is_scratch(copy) and {c.impl.type for c in copy.original_workflow().bolts} == {"capture"}
