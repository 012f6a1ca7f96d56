"""recovery.jobs.clear on fakeredis: a run's keys, orphans of a run without a record."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.errors import RunError
from recovery.jobs import clear
from recovery.tracking import keys
from tests.unit.run_records import create_run as _create


def test_clear_finds_orphan_keys_of_a_run_without_record(fake_redis, monkeypatch):
    _create(fake_redis, "kept")
    fake_redis.hset(keys.task_done("gone", 3), "mid:0", b"x")         # an orphan of a cleared run
    fake_redis.set("unrelated", "1")
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))
    r = CliRunner().invoke(main, ["clear", "--all", "--force", "--json"])
    assert r.exit_code == 0, r.stderr
    removed = json.loads(r.stdout)["removed"]
    assert keys.task_done("gone", 3) in removed["gone"] and "kept" in removed
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))
    assert fake_redis.get("unrelated") == b"1"
    # and `clear RUN` of an orphan alone
    fake_redis.hset(keys.task_done("gone2", 1), "mid:0", b"x")
    assert clear.clear(fake_redis, "gone2").keys == [keys.task_done("gone2", 1)]
    with pytest.raises(RunError, match="no run 'gone3'"):
        clear.clear(fake_redis, "gone3")
