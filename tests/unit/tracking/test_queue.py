"""tracking/queue/ on fakeredis: a task's commit puts failed tuples in their queues (staged,
then applied) or moves them to the dead letters; the readers see counts, chunks and samples;
an empty position leaves the failed set; clear drops every queue; a requeue moves a dead
letter back once; a flush and the retention cap take dead letters out of Redis."""
from __future__ import annotations

import pytest

from recovery.errors import RunError
from recovery.model.failed import FailedTuple
from recovery.tracking import queue

RUN = "q1"


def failed(tid: int, component: str = "split", task: int = 3, dead: bool = False, when: float = 0.0) -> FailedTuple:
    return FailedTuple(id=tid, roots=[tid * 10], component=component, task=task, values=[f"v{tid}"],
                       error=f"boom {tid}", attempt=2, dead=dead, time=when, not_before=5.0 + tid)


def commit(client, failures: list[FailedTuple], replays: list[tuple[str, int, int]] = (), token: str = "t") -> None:
    """What a task's commit does with its failures, in the tracker's three steps."""
    staged = queue.staged_writes(replays, failures)
    with client.pipeline(transaction=False) as pipe:
        queue.stage(pipe, RUN, 0, token, staged)
        pipe.execute()
    with client.pipeline() as pipe:
        queue.record_failures(pipe, RUN, failures)
        pipe.execute()
    queue.apply_staged(client, RUN, 0, token, list(staged))


def test_a_commit_queues_its_failures_and_moves_the_dead_ones(fake_redis):
    commit(fake_redis, [failed(1), failed(2), failed(3, task=4), failed(4, dead=True)])
    assert queue.positions(fake_redis, RUN) == [("split", 3), ("split", 4)]
    assert queue.counts(fake_redis, RUN) == [("split", 3, 2), ("split", 4, 1)]
    assert [t.id for t in queue.read(fake_redis, RUN, "split", 3)] == [1, 2]
    assert len(queue.sample(fake_redis, RUN, "split", 3, 1)) == 1 and queue.sample(fake_redis, RUN, "split", 3, 0) == []
    assert queue.earliest_due(fake_redis, RUN) == 6.0
    assert queue.queued_roots(fake_redis, RUN) == {10, 20, 30}
    assert [d.id for d in queue.dead_letters(fake_redis, RUN)] == [4] and queue.dead_count(fake_redis, RUN) == 1
    assert queue.dead_among(fake_redis, RUN, [10, 40]) == {40}


def test_a_replay_acked_leaves_its_queue_and_an_empty_position_leaves_the_failed_set(fake_redis):
    commit(fake_redis, [failed(1)])
    commit(fake_redis, [], replays=[("split", 3, 1)], token="u")
    assert queue.counts(fake_redis, RUN) == [("split", 3, 0)]
    queue.prune_empty(fake_redis, RUN)
    assert queue.positions(fake_redis, RUN) == [] and queue.earliest_due(fake_redis, RUN) == 0.0


def test_clear_drops_every_queue_and_the_due_times(fake_redis):
    commit(fake_redis, [failed(1), failed(2, task=9)])
    assert queue.clear(fake_redis, RUN, None, also=lambda pipe: pipe.set("mark", 1)) == 2
    assert queue.counts(fake_redis, RUN) == [] and fake_redis.get("mark") == b"1"
    assert queue.read(fake_redis, RUN, "split", 3) == []


def test_a_requeue_moves_each_dead_letter_back_once(fake_redis):
    commit(fake_redis, [failed(4, dead=True), failed(5, component="count", dead=True)])
    undead: list[int] = []
    assert queue.requeue(fake_redis, RUN, None, component="count",
                         adjust_counts=lambda pipe, n: undead.append(n)) == 1
    assert undead == [1] and [d.id for d in queue.dead_letters(fake_redis, RUN)] == [4]
    [back] = queue.read(fake_redis, RUN, "count", 3)
    assert back.id == 5 and back.attempt == 0 and not back.dead
    assert queue.requeue(fake_redis, RUN, None, component="count") == 0
    with pytest.raises(RunError, match="has no dead tuple .count:3:5."):
        queue.requeue(fake_redis, RUN, None, tuple_keys=["count:3:5"])


def test_a_flush_takes_a_fixed_set_and_counts_it_written_once(fake_redis):
    commit(fake_redis, [failed(4, dead=True), failed(6, dead=True)])
    assert queue.take_for_flush(fake_redis, RUN, None) == 1
    commit(fake_redis, [failed(7, dead=True)], token="u")        # dies meanwhile: not in flush 1
    assert [d.id for d in queue.flush_of(fake_redis, RUN, 1)] == [4, 6]
    assert queue.dead_count(fake_redis, RUN) == 3                 # Redis still holds all three
    assert queue.flush_done(fake_redis, RUN, None, 1) and queue.flush_done(fake_redis, RUN, None, 1)
    assert queue.dead_totals(fake_redis, RUN) == (2, 0) and queue.pending_flushes(fake_redis, RUN) == []
    assert queue.take_for_flush(fake_redis, RUN, None) == 2
    assert queue.take_for_flush(fake_redis, RUN, None) is None     # nothing left to take


def test_the_cap_drops_the_oldest_beyond_a_count_or_before_a_time(fake_redis):
    commit(fake_redis, [failed(i, dead=True, when=100.0 + i) for i in range(1, 6)])
    assert [d.id for d in queue.drop_dead(fake_redis, RUN, None, keep=3)] == [1, 2]
    assert [d.id for d in queue.drop_dead(fake_redis, RUN, None, older_than=104.0)] == [3]
    assert [d.id for d in queue.dead_letters(fake_redis, RUN)] == [4, 5]
    assert queue.dead_totals(fake_redis, RUN) == (0, 3)
    assert queue.dead_among(fake_redis, RUN, [10, 50]) == {10, 50}   # the roots stay dead
