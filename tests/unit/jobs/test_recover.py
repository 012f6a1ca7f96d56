"""recovery.jobs.recover on fakeredis: a live run is refused, --force takes it over."""
from __future__ import annotations

import pytest

from recovery.errors import RunError
from recovery.jobs import recover
from recovery.tracking import keys, runs
from tests.unit.run_records import create_run as _create


def test_recover_refuses_a_live_run_and_force_takes_it_over(fake_redis):
    _create(fake_redis)
    fake_redis.set(keys.lease("r1"), "elsewhere:4242:abcd", px=60_000)
    with pytest.raises(RunError, match=r"still running \(driver pid 4242 on elsewhere.*--force"):
        recover.recover(None, fake_redis, "redis://fake", "r1")
    rec = runs.get(fake_redis, "r1")
    with pytest.raises(RunError, match="held by another driver"):
        runs.take_over(fake_redis, rec)             # without force a live holder keeps it
    lease = runs.take_over(fake_redis, rec, force=True)
    assert fake_redis.get(keys.lease("r1")).decode() == lease.holder
    # the old driver's refresh learns it lost the lease, and stops
    old = runs.Lease(fake_redis, "r1", rec.generation)
    old.holder = "elsewhere:4242:abcd"
    assert old.refresh() is False and old.lost.is_set()


def _crash_after(fn):
    """`fn`, then the driver dies (DriverCrash leaves the run as a killed driver would)."""
    from recovery.testing.components import DriverCrash

    def crashing(*args, **kwargs):
        fn(*args, **kwargs)
        raise DriverCrash(f"killed after {fn.__name__}")
    return crashing


@pytest.mark.parametrize("kill_point", ["roots-superseded", "queues-dropped"])
def test_root_replay_resumed_after_a_driver_killed_while_preparing_loses_and_doubles_no_root(
        kill_point, fake_redis, monkeypatch):
    """Root replay selects its roots in tasks (supersede + the round's replay set), then the
    driver drops the queues, then the round runs. A driver killed after either step: the next
    `recover` resumes the round, and every word reaches the sink exactly once."""
    from recovery import testing
    from recovery.engine import rounds
    from tests.unit.jobs.test_driver_reads import NO_BACKOFF, Upper, pipeline
    Upper.SEEN.clear()          # every word fails once, at `upper`
    words = [f"w{i}" for i in range(30)]
    run = testing.run_local(pipeline(), fake_redis, run_id="rr", config=NO_BACKOFF, inputs={"words": words})
    assert run.summary["failed"] == 30
    if kill_point == "roots-superseded":
        monkeypatch.setattr(rounds, "supersede_failed_roots", _crash_after(rounds.supersede_failed_roots))
    else:
        monkeypatch.setattr(recover, "prepare_root_replay", _crash_after(recover.prepare_root_replay))
    testing.recover_local(run, strategy="root-replay")
    assert run.interrupted == "crash" and run.status == runs.CRASHED
    assert run.summary["counts_known"] is False
    monkeypatch.undo()
    testing.recover_local(run, strategy="root-replay")
    assert run.interrupted is None and run.summary["status"] == runs.COMPLETED
    assert run.summary["resumed"] and run.summary["rounds"] == 0     # the killed round, resumed, did it all
    assert sorted(v[0] for v in run.sinks["out"]) == sorted(w.upper() for w in words)
    assert (run.summary["complete"], run.summary["pending"]) == (30, 0)
    assert not fake_redis.exists(keys.root_replay_set("rr", 1))
