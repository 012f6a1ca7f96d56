"""The run record model: a real record hash read into typed fields and encoded back; records
written by older (or newer) versions; fields that do not parse are one line naming the key."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.errors import RunError
from recovery.model.record import ComponentStats, RoundRecord, RunRecord
from recovery.tracking import runs
from tests.unit.run_records import create_run

ROUNDS = [{"round": 0, "components": {"src": {"executed": 0, "roots": 3}}, "started": 1.5, "ended": 2.5}]


def _submitted_and_settled(client) -> dict[bytes, bytes]:
    """A record as `submit` leaves it: created, its round run and settled, its summary stored."""
    lease = create_run(client)
    runs.update(client, "r1", lease.generation, round=0, current_workflow="{}", current_spec='{"root_epoch": 0}')
    runs.update(client, "r1", lease.generation, rounds=ROUNDS, stats=ROUNDS[0]["components"])
    runs.update(client, "r1", lease.generation, settled_round=0)
    runs.update(client, "r1", lease.generation, summary={"status": "pending", "pending": 2},
                status=runs.PENDING, ended=1700000000.25, follow=True, follow_batches=1, follow_messages=3)
    return client.hgetall(runs.record_key("r1"))


def test_a_real_record_hash_reads_typed_and_encodes_back_to_the_same_strings(fake_redis):
    raw = _submitted_and_settled(fake_redis)
    rec = RunRecord.from_hash(raw)
    assert (rec.run_id, rec.status, rec.round, rec.settled_round) == ("r1", runs.PENDING, 0, 0)
    assert rec.tracking is True and rec.follow is True and (rec.follow_batches, rec.follow_messages) == (1, 3)
    assert isinstance(rec.started, float) and rec.ended == 1700000000.25
    assert rec.file is None and rec.error is None and rec.root_epoch == 0   # stored as "" / never written
    assert [r.to_json() for r in rec.rounds] == ROUNDS
    assert {c: s.to_json() for c, s in rec.stats.items()} == ROUNDS[0]["components"]
    assert isinstance(rec.rounds[0], RoundRecord) and isinstance(rec.stats["src"], ComponentStats)
    assert rec.summary == {"status": "pending", "pending": 2}
    assert rec.generation and isinstance(rec.driver_pid, int) and rec.driver_host
    assert rec.current_spec == '{"root_epoch": 0}' and rec.model_extra == {}
    stored = rec.to_hash()
    assert {k.decode(): v.decode() for k, v in raw.items()} == \
        {k: str(stored[k]) for k in (k.decode() for k in raw)}
    assert RunRecord.from_hash(stored) == rec


def test_runs_get_adds_the_lease_as_read_now(fake_redis):
    raw = _submitted_and_settled(fake_redis)
    rec = runs.get(fake_redis, "r1")
    assert rec.lease_holder and rec.lease_ms > 0 and runs.round_settled(rec)
    fake_redis.delete(runs.lease_key("r1"))
    rec = runs.get(fake_redis, "r1")
    assert (rec.lease_holder, rec.lease_ms) == (None, -2)
    assert "lease_holder" not in rec.to_hash() and fake_redis.hgetall(runs.record_key("r1")) == raw


def test_a_record_from_before_leases_reads_with_defaults():
    """What older versions wrote: no generation, no settled round, no follow fields."""
    rec = RunRecord.from_hash({b"run_id": b"old", b"status": b"completed", b"workflow_json": b"{}",
                               b"tracking": b"0", b"round": b"2", b"ended": b"", b"stats": b"{}"})
    assert (rec.generation, rec.settled_round, rec.tracking, rec.follow, rec.ended) == (None, None, False, False, None)
    assert rec.round == 2 and rec.rounds == [] and not runs.round_settled(rec)


def test_a_field_this_version_does_not_know_is_kept(fake_redis):
    create_run(fake_redis)
    fake_redis.hset(runs.record_key("r1"), "added_later", "x")
    rec = runs.get(fake_redis, "r1")
    assert rec.model_extra == {"added_later": "x"} and rec.to_hash()["added_later"] == "x"
    runs.update(fake_redis, "r1", round=1)        # an update leaves it stored
    assert runs.get(fake_redis, "r1").model_extra == {"added_later": "x"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("round", "three", "field 'round': Input should be a valid integer"),
    ("tracking", "maybe", "field 'tracking': Input should be a valid boolean"),
    ("started", "yesterday", "field 'started': Input should be a valid number"),
    ("rounds", "[{", "field 'rounds' is not JSON"),
    ("summary", "[1, 2]", "field 'summary': Input should be a valid dictionary"),
    ("run_id", "", "field 'run_id' is missing"),
])
def test_a_field_that_does_not_parse_is_one_line_naming_the_key(fake_redis, field, value, says):
    create_run(fake_redis)
    fake_redis.hset(runs.record_key("r1"), field, value)
    before = fake_redis.hgetall(runs.record_key("r1"))
    with pytest.raises(RunError) as err:
        runs.get(fake_redis, "r1")
    assert str(err.value).startswith(f"{runs.record_key('r1')}: {says}") and "\n" not in str(err.value)
    assert fake_redis.hgetall(runs.record_key("r1")) == before     # reading stored nothing


def test_a_missing_field_is_named():
    with pytest.raises(RunError, match=r"^run record: field 'workflow_json' is missing"):
        RunRecord.from_hash({b"run_id": b"r", b"status": b"running"})


def test_status_of_a_bad_record_is_one_line_and_exit_2(fake_redis, monkeypatch):
    create_run(fake_redis)
    fake_redis.hset(runs.record_key("r1"), "round", "three")
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))
    r = CliRunner().invoke(main, ["status", "r1"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert runs.record_key("r1") in r.stderr and "'round'" in r.stderr
