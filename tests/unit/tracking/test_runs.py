"""Run records' lifecycle without Spark (fakeredis): atomic creation, leases, fencing of a
cleared run, counts of an unsettled round, one status for `runs` and `status`, clearing orphans."""
from __future__ import annotations

import socket
import threading

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.errors import RunCleared, RunError
from recovery.jobs import clear
from recovery.model.failed import FailedTuple
from recovery.tracking import keys, ledger, runs, tracker
from tests.unit.run_records import create_run as _create
from tests.unit.run_records import dead_pid as _dead_pid


# --- item 5: creation is atomic ------------------------------------------------------------------
def test_two_racing_creates_of_one_run_id_one_is_refused(fake_redis):
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def create() -> None:
        barrier.wait()
        try:
            outcomes.append(_create(fake_redis))
        except RunError as err:
            outcomes.append(err)

    threads = [threading.Thread(target=create) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [o for o in outcomes if isinstance(o, RunError)]
    won = [o for o in outcomes if isinstance(o, runs.Lease)]
    assert len(won) == 1 and len(refused) == 1
    assert "exists already" in str(refused[0]) and "\n" not in str(refused[0])
    assert runs.get(fake_redis, "r1").generation == won[0].generation


def test_submit_run_id_check_uses_the_key_prefix(fake_redis, monkeypatch, tmp_path):
    """`submit --run-id X` of an existing X is refused before Spark starts, under any prefix."""
    monkeypatch.setattr(keys, "PREFIX", "other:")
    _create(fake_redis, "dup")
    monkeypatch.setattr("recovery.cli.run._client", lambda url: (fake_redis, "redis://fake"))

    def no_spark(*a, **k):
        raise AssertionError("Spark started for a run id that exists")
    monkeypatch.setattr("recovery.cli.run._spark", no_spark)
    xml = tmp_path / "wf.xml"
    (tmp_path / "in.txt").write_text("a\n")
    xml.write_text('<workflow xmlns="urn:recovery:workflow:1" name="wf">'
                   '<spout id="s"><source type="file" path="in.txt"/><stream fields="line"/></spout>'
                   '<bolt id="o"><sink type="jsonl" path="out"/><input from="s" grouping="shuffle"/></bolt>'
                   '</workflow>')
    r = CliRunner().invoke(main, ["submit", str(xml), "--run-id", "dup"])
    assert r.exit_code == 2 and "exists already" in r.stderr and r.stderr.count("\n") == 1


# --- item 11: leases ------------------------------------------------------------------------
def test_a_driver_on_another_host_is_alive_while_its_lease_is_valid_then_crashed(fake_redis):
    _create(fake_redis)
    fake_redis.set(keys.lease("r1"), "elsewhere:4242:abcd", px=60_000)
    rec = runs.get(fake_redis, "r1")
    assert runs.status_of(rec) == runs.RUNNING
    fake_redis.delete(keys.lease("r1"))             # the lease expired: nobody refreshed it
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED


def test_on_this_host_a_dead_pid_is_crashed_before_its_lease_expires(fake_redis):
    _create(fake_redis)
    fake_redis.set(keys.lease("r1"), f"{socket.gethostname()}:{_dead_pid()}:abcd", px=60_000)
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED


def test_on_this_host_a_driver_without_a_pid_is_not_alive(fake_redis):
    """A record from before leases without a driver pid, or a lease whose holder names pid 0:
    nothing to check, so not alive (it was read as pid 0, which os.kill takes for this
    process's own group: alive for ever)."""
    _create(fake_redis)
    fake_redis.hdel(keys.run_record("r1"), "generation", "driver_pid")
    fake_redis.delete(keys.lease("r1"))
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED
    _create(fake_redis, "r2")
    fake_redis.set(keys.lease("r2"), f"{socket.gethostname()}:0:abcd", px=60_000)
    assert runs.status_of(runs.get(fake_redis, "r2")) == runs.CRASHED


def test_two_takers_of_a_crashed_run_only_one_gets_it(fake_redis):
    _create(fake_redis)
    fake_redis.set(keys.lease("r1"), f"{socket.gethostname()}:{_dead_pid()}:abcd", px=60_000)
    rec_a, rec_b = runs.get(fake_redis, "r1"), runs.get(fake_redis, "r1")
    runs.take_over(fake_redis, rec_a)
    with pytest.raises(RunError, match="held by another driver"):
        runs.take_over(fake_redis, rec_b)


def test_lease_is_refreshed_and_released(fake_redis):
    lease = _create(fake_redis)
    with lease:
        assert lease.refresh()
        assert fake_redis.pttl(keys.lease("r1")) > 0
    assert not fake_redis.exists(keys.lease("r1"))


# --- item 6: counts of an unsettled round ----------------------------------------------------
# --- item 7: one status ------------------------------------------------------------------------
# --- item 10: fencing --------------------------------------------------------------------------
def _tracker(client, generation):
    conf = {"recovery.max.attempts": "3", "recovery.retry.initial.delay.ms": "0",
            "recovery.retry.delay.period.ms": "1", "recovery.retry.max.delay.ms": "1"}
    return tracker.TaskTracker(client, "r1", 1, "mid", 0, 2, conf, generation=generation)


def test_a_commit_into_a_cleared_or_recreated_run_writes_nothing(fake_redis):
    lease = _create(fake_redis)
    t = _tracker(fake_redis, lease.generation)
    t.add_output(("out", 0), b"blob")
    clear.clear(fake_redis, "r1", force=True)
    assert t.commit({5: 9}, {"executed": 1}) is False
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))
    # created anew under the same id: the old run's task still writes nothing
    _create(fake_redis)
    before = set(fake_redis.keys("*"))
    t2 = _tracker(fake_redis, lease.generation)
    t2.failure(FailedTuple(id=1, roots=[5], values=["x"], attempt=1))
    assert t2.commit({5: 9}, {"executed": 1}) is False
    assert set(fake_redis.keys("*")) == before
    # the live generation commits
    t3 = _tracker(fake_redis, runs.get(fake_redis, "r1").generation)
    assert t3.commit({5: 9}, {"executed": 1}) is True
    assert fake_redis.hexists(keys.task_done("r1", 1), "mid:0")


def test_driver_writes_never_recreate_a_cleared_run(fake_redis):
    lease = _create(fake_redis)
    clear.clear(fake_redis, "r1", force=True)
    with pytest.raises(RunCleared, match="r1 was cleared"):
        runs.update(fake_redis, "r1", lease.generation, status=runs.COMPLETED)
    with pytest.raises(RunCleared):
        runs.update(fake_redis, "r1", status=runs.COMPLETED)      # unfenced: still no recreation
    assert lease.refresh() is False
    assert ledger.resolve_bucket(fake_redis, "r1", 0, lease.generation) == 0
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))


# --- item 16: stage order ----------------------------------------------------------------------
