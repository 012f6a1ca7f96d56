"""tracking/queue/history.py on fakeredis: a commit's failures and successful replays become
events of their position's history, applied with its queue writes, once whatever retries them;
a requeue is one event; a root's history gathers its tuples' events; the cap counts what it
turns away; nothing is written for a tuple that never failed; `clear` removes it with the run."""
from __future__ import annotations

from recovery.jobs import clear
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, queue
from recovery.tracking.queue import history
from tests.unit.run_records import create_run

RUN = "h1"
CAP = 100


def failed(tid: int, round_no: int, attempt: int, dead: bool = False, task: int = 3, root: int = 7,
           when: float = 0.0) -> FailedTuple:
    return FailedTuple(id=tid, roots=[root], component="split", task=task, values=[f"v{tid}"],
                       error=f"boom {tid} at {attempt}", attempt=attempt, round=round_no, dead=dead,
                       time=when or 100.0 + round_no)


def commit(client, round_no: int, failures: list[FailedTuple], replays: list[tuple[str, int, int]] = (),
           token: str = "t", cap: int = CAP, apply_times: int = 1) -> None:
    """What a task's commit does, in the tracker's three steps (step 3 `apply_times` times: the
    task, then the driver's apply_round)."""
    staged = queue.staged_writes(replays, failures, round_no, cap)
    with client.pipeline(transaction=False) as pipe:
        queue.stage(pipe, RUN, round_no, token, staged)
        pipe.execute()
    with client.pipeline() as pipe:
        queue.record_failures(pipe, RUN, failures, history=cap > 0)
        pipe.execute()
    for _ in range(apply_times):
        queue.apply_staged(client, RUN, round_no, token, list(staged))


def kinds(client, root: int = 7) -> list[tuple[str, int | None, int | None]]:
    return [(e.kind, e.round, e.attempt) for p in history.of_root(client, RUN, root) for e in p.events]


def test_a_replay_acked_leaves_its_queue_but_not_its_history(fake_redis):
    commit(fake_redis, 0, [failed(1, 0, 1), failed(2, 0, 1, root=8)])
    commit(fake_redis, 1, [], replays=[("split", 3, 1)], token="u", apply_times=2)
    assert [t.id for t in queue.read(fake_redis, RUN, "split", 3)] == [2]
    assert kinds(fake_redis) == [("failed", 0, 1), ("replayed", 1, None)]
    assert kinds(fake_redis, 8) == [("failed", 0, 1)]
    event = history.of_root(fake_redis, RUN, 7)[0].events[0]
    assert (event.component, event.task, event.tuple_id, event.roots, event.error) == ("split", 3, 1, [7], "boom 1 at 1")
    assert history.positions(fake_redis, RUN) == [("split", 3)]


def test_three_failures_a_requeue_and_the_replay_that_completes_it(fake_redis):
    commit(fake_redis, 0, [failed(1, 0, 1)])
    commit(fake_redis, 1, [failed(1, 1, 2)], token="u")
    commit(fake_redis, 2, [failed(1, 2, 3, dead=True)], token="v")
    assert queue.read(fake_redis, RUN, "split", 3) == [] and [d.id for d in queue.dead_letters(fake_redis, RUN)] == [1]
    assert queue.requeue(fake_redis, RUN, None) == 1
    assert queue.requeue(fake_redis, RUN, None) == 0   # (requeued already: no second event)
    commit(fake_redis, 3, [], replays=[("split", 3, 1)], token="w")
    events = [e for p in history.of_root(fake_redis, RUN, 7) for e in p.events]
    assert [(e.kind, e.round, e.attempt, e.dead) for e in events] == [
        ("failed", 0, 1, False), ("failed", 1, 2, False), ("failed", 2, 3, True),
        ("requeued", None, None, False), ("replayed", 3, None, False)]
    assert events[3].time is not None and events[3].time >= events[2].time


def test_an_attempt_that_failed_what_it_replayed_records_a_failure_not_a_replay(fake_redis):
    commit(fake_redis, 0, [failed(1, 0, 1)])
    commit(fake_redis, 1, [failed(1, 1, 2)], replays=[("split", 3, 1)], token="u")
    assert kinds(fake_redis) == [("failed", 0, 1), ("failed", 1, 2)]


def test_two_attempts_of_a_task_stage_the_same_events_once(fake_redis):
    commit(fake_redis, 0, [failed(1, 0, 1, when=5.0)], token="a")
    commit(fake_redis, 0, [failed(1, 0, 1, when=6.0)], token="b")   # (a Spark retry's same failure)
    assert kinds(fake_redis) == [("failed", 0, 1)]


def test_the_cap_keeps_a_positions_first_events_and_counts_the_rest(fake_redis):
    commit(fake_redis, 0, [failed(i, 0, 1, root=i) for i in range(1, 6)], cap=3)
    whole = history.read(fake_redis, RUN, "split", 3)
    assert len(whole.events) == 3 and whole.dropped == 2
    assert queue.counts(fake_redis, RUN) == [("split", 3, 5)]   # (the queue itself is not capped)


def test_no_history_for_a_cap_of_zero_nor_for_a_commit_without_failures(fake_redis):
    commit(fake_redis, 0, [], token="a")
    commit(fake_redis, 0, [failed(1, 0, 1)], token="b", cap=0)
    assert history.positions(fake_redis, RUN) == []
    assert not fake_redis.exists(queue.history_key(RUN, "split", 3))


def test_clear_removes_the_history_with_the_run(fake_redis):
    create_run(fake_redis, RUN)
    commit(fake_redis, 0, [failed(1, 0, 1)])
    fake_redis.set("unrelated", "1")
    clear.clear(fake_redis, RUN, force=True)
    assert not list(fake_redis.scan_iter(match=keys.run_pattern(RUN)))
    assert fake_redis.get("unrelated") == b"1"


def test_a_positions_history_is_in_its_queues_hash_slot_and_the_positions_in_the_runs():
    for comp, task in (("split", 3), ("count", 11)):
        assert keys.hash_slot(queue.history_key(RUN, comp, task)) == keys.hash_slot(queue.queue_key(RUN, comp, task))
    assert keys.hash_slot(queue.history_positions_key(RUN)) == keys.hash_slot(queue.failed_key(RUN))
