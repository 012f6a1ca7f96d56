"""recovery.engine.rounds on fakeredis: clearing a settled round is fenced by the run's generation
(`recover --force`): a driver taken over removes no done marker, spill reference or spill file. A
round's acker counts come from its last task when it counted them under the settling driver's
generation, the same as the per-bucket job's."""
from __future__ import annotations

from typing import Any

import msgpack
import pytest

from recovery import testing
from recovery.engine import rounds
from recovery.errors import RunCleared, RunTakenOver
from recovery.jobs import clear
from recovery.model.run import RunSpec
from recovery.tracking import keys, ledger, runs, spill, tracker
from tests.unit.jobs.test_recover import WORDS, shouting
from tests.unit.run_records import WF, create_run, ledger_pending


def _round_1_in_flight(client, where: str) -> spill.SpillRef:
    """A committed task of round 1: its done marker, its spill file and the reference to it."""
    writer = spill.SpillStore.at(where).writer("r1", 1, "mid", 0)
    writer.add(("out", 0), b"chunk")
    ref = writer.close()
    assert ref is not None
    client.hset(keys.task_spill("r1", 1), "mid:0", ref.pack())
    client.hset(keys.task_done("r1", 1), "mid:0", msgpack.packb({"executed": 1}))
    client.sadd(keys.root_replay_set("r1", 1), 7)
    client.set(keys.round_counts("r1", 1), msgpack.packb(["g", 0, 0, 0]))
    return ref


def test_clear_round_of_a_driver_taken_over_removes_nothing(fake_redis, tmp_path):
    where = str(tmp_path / "spill")
    old = create_run(fake_redis)
    _round_1_in_flight(fake_redis, where)
    files = spill.SpillStore.at(where).run_files("r1")
    assert files
    new = runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    with pytest.raises(RunTakenOver):
        rounds.clear_round(fake_redis, "r1", 1, where, old.generation, root_replay=True)
    assert fake_redis.hexists(keys.task_done("r1", 1), "mid:0")
    assert fake_redis.hexists(keys.task_spill("r1", 1), "mid:0")
    assert fake_redis.exists(keys.root_replay_set("r1", 1), keys.round_counts("r1", 1)) == 2
    assert spill.SpillStore.at(where).run_files("r1") == files
    # the driver that owns the run clears it; again (a resumed driver repeats it): nothing more
    for _ in range(2):
        rounds.clear_round(fake_redis, "r1", 1, where, new.generation, root_replay=True)
        assert not fake_redis.exists(keys.task_done("r1", 1), keys.task_spill("r1", 1),
                                     keys.root_replay_set("r1", 1), keys.round_counts("r1", 1))
        assert spill.SpillStore.at(where).run_files("r1") == []


def test_clear_round_of_a_cleared_run_says_cleared(fake_redis, tmp_path):
    lease = create_run(fake_redis)
    clear.clear(fake_redis, "r1", force=True)
    with pytest.raises(RunCleared):
        rounds.clear_round(fake_redis, "r1", 1, str(tmp_path), lease.generation)
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))


# --- the round's counts ride in its job ---------------------------------------------
# a third of the words fail at `shout`: queued with 3 attempts, dead with 1
FAILING = {"recovery.inject.f.component": "shout", "recovery.inject.f.rate": "0.35",
           "recovery.retry.delay.period.ms": "0"}


def _per_bucket_counts(client: Any, run_id: str, generation: str) -> ledger.RootCounts:
    """What the per-bucket job's tasks count (engine.rounds._resolve_bucket), bucket by bucket."""
    return sum((ledger.count_bucket(client, run_id, b, ledger.fold_bucket(client, run_id, b, generation))
                for b in range(ledger.LEDGER_BUCKETS)), ledger.RootCounts())


@pytest.mark.parametrize("attempts", ["1", "3"])
@pytest.mark.parametrize("last_task_counts", [True, False], ids=["counted-in-round", "task-died-before-counting"])
def test_a_round_settles_with_the_counts_the_per_bucket_job_would_count(attempts, last_task_counts, fake_redis,
                                                                        monkeypatch):
    """The round's last task counts the acker's verdict (roots pending, failed, dead) and the
    settle takes it, starting no per-bucket job; when that task stored nothing (it died first),
    the settle's per-bucket job counts it. Either way the record holds what the per-bucket
    tasks count from the ledger the round left."""
    jobs: list[int] = []
    real = rounds._per_bucket
    monkeypatch.setattr(rounds, "_per_bucket", lambda spark, each: jobs.append(1) or real(spark, each))
    if not last_task_counts:
        monkeypatch.setattr(tracker, "count_round", lambda *a, **k: None)
    run = testing.run_local(shouting(), fake_redis, run_id="c", inputs={"words": WORDS},
                            config={**FAILING, "recovery.max.attempts": attempts})
    assert jobs == ([] if last_task_counts else [1])
    _, stored = ledger.stored_counts(runs.get(fake_redis, "c"))
    assert stored == _per_bucket_counts(fake_redis, "c", runs.get(fake_redis, "c").generation)
    assert stored is not None and stored.pending > 0
    assert (stored.failed, stored.dead) == ((stored.pending, 0) if attempts == "3" else (0, stored.pending))
    assert getattr(run.summary, "failed" if attempts == "3" else "dead") == stored.pending
    assert not fake_redis.exists(keys.round_counts("c", 0))   # dropped with the settled round
    testing.recover_local(run)
    if attempts == "3":
        assert run.summary.status == runs.COMPLETED and run.summary.recovered == stored.pending
        testing.assert_same_output(run, testing.failure_free_output(shouting(), inputs={"words": WORDS}))


def test_the_settle_takes_stored_counts_only_under_its_own_generation(fake_redis, monkeypatch):
    """Counts stored by the tasks of a driver since taken over are not the new driver's verdict:
    it counts again (the per-bucket job); a task fenced out stores none."""
    old = create_run(fake_redis)
    ledger_pending(fake_redis, "r1", [5, 6, 7])
    assert ledger.count_round(fake_redis, "r1", 0, old.generation) == ledger.RootCounts(3, 0, 0)
    jobs: list[int] = []
    monkeypatch.setattr(rounds, "_per_bucket", lambda spark, each: jobs.append(1) or [ledger.RootCounts(9, 0, 0)])

    def spec(generation: str) -> RunSpec:
        return RunSpec("r1", 0, WF.to_task_json(), "redis://fake", True, generation=generation)
    assert rounds.resolve_ledger(None, fake_redis, spec(old.generation)) == ledger.RootCounts(3, 0, 0)
    assert jobs == []
    new = runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    assert rounds.resolve_ledger(None, fake_redis, spec(new.generation)) == ledger.RootCounts(9, 0, 0)
    assert jobs == [1]
    fake_redis.delete(keys.round_counts("r1", 0))
    assert ledger.count_round(fake_redis, "r1", 0, old.generation) is None   # fenced out: stores nothing
    assert not fake_redis.exists(keys.round_counts("r1", 0))
