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
