"""recovery.engine.rounds on fakeredis: clearing a settled round is fenced by the run's generation
(issue 17 §2.1): a driver taken over removes no done marker, spill reference or spill file."""
from __future__ import annotations

import msgpack
import pytest

from recovery.engine import rounds
from recovery.errors import RunCleared, RunTakenOver
from recovery.jobs import clear
from recovery.tracking import keys, runs, spill
from tests.unit.run_records import create_run


def _round_1_in_flight(client, where: str) -> spill.SpillRef:
    """A committed task of round 1: its done marker, its spill file and the reference to it."""
    writer = spill.SpillStore.at(where).writer("r1", 1, "mid", 0)
    writer.add(("out", 0), b"chunk")
    ref = writer.close()
    assert ref is not None
    client.hset(keys.task_spill("r1", 1), "mid:0", ref.pack())
    client.hset(keys.task_done("r1", 1), "mid:0", msgpack.packb({"executed": 1}))
    client.sadd(keys.root_replay_set("r1", 1), 7)
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
    assert fake_redis.exists(keys.root_replay_set("r1", 1))
    assert spill.SpillStore.at(where).run_files("r1") == files
    # the driver that owns the run clears it; again (a resumed driver repeats it): nothing more
    for _ in range(2):
        rounds.clear_round(fake_redis, "r1", 1, where, new.generation, root_replay=True)
        assert not fake_redis.exists(keys.task_done("r1", 1), keys.task_spill("r1", 1),
                                     keys.root_replay_set("r1", 1))
        assert spill.SpillStore.at(where).run_files("r1") == []


def test_clear_round_of_a_cleared_run_says_cleared(fake_redis, tmp_path):
    lease = create_run(fake_redis)
    clear.clear(fake_redis, "r1", force=True)
    with pytest.raises(RunCleared):
        rounds.clear_round(fake_redis, "r1", 1, str(tmp_path), lease.generation)
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))
