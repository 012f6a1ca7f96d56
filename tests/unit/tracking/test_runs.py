"""Run records' lifecycle without Spark (fakeredis): atomic creation, leases, fencing of a
cleared run, counts of an unsettled round, one status for `runs` and `status`, clearing orphans."""
from __future__ import annotations

import socket
import threading

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.errors import RunCleared, RunError, RunTakenOver
from recovery.jobs import clear
from recovery.model.failed import FailedTuple
from recovery.model.run import TaskIdentity
from recovery.tracking import keys, ledger, runs, tracker
from tests.unit.run_records import create_run as _create
from tests.unit.run_records import dead_pid as _dead_pid


# --- creation is atomic ------------------------------------------------------------------
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
    monkeypatch.setenv("RECOVERY_KEY_PREFIX", "other:")
    _create(fake_redis, "dup")
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))

    def no_spark(*a, **k):
        raise AssertionError("Spark started for a run id that exists")
    monkeypatch.setattr("recovery.run.start_session", no_spark)
    xml = tmp_path / "wf.xml"
    (tmp_path / "in.txt").write_text("a\n")
    xml.write_text('<workflow xmlns="urn:recovery:workflow:1" name="wf">'
                   '<spout id="s"><source type="file" path="in.txt"/><stream fields="line"/></spout>'
                   '<bolt id="o"><sink type="jsonl" path="out"/><input from="s" grouping="shuffle"/></bolt>'
                   '</workflow>')
    r = CliRunner().invoke(main, ["submit", str(xml), "--run-id", "dup"])
    assert r.exit_code == 2 and "exists already" in r.stderr and r.stderr.count("\n") == 1


# --- leases ------------------------------------------------------------------------
def test_a_driver_on_another_host_is_alive_while_its_lease_is_valid_then_crashed(fake_redis):
    _create(fake_redis)
    fake_redis.set(runs.lease_key("r1"), "elsewhere:4242:abcd", px=60_000)
    rec = runs.get(fake_redis, "r1")
    assert runs.status_of(rec) == runs.RUNNING
    fake_redis.delete(runs.lease_key("r1"))             # the lease expired: nobody refreshed it
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED


def test_on_this_host_a_dead_pid_is_crashed_before_its_lease_expires(fake_redis):
    _create(fake_redis)
    fake_redis.set(runs.lease_key("r1"), f"{socket.gethostname()}:{_dead_pid()}:abcd", px=60_000)
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED


def test_on_this_host_a_driver_without_a_pid_is_not_alive(fake_redis):
    """A record from before leases without a driver pid, or a lease whose holder names pid 0:
    nothing to check, so not alive (it was read as pid 0, which os.kill takes for this
    process's own group: alive for ever)."""
    _create(fake_redis)
    fake_redis.hdel(runs.record_key("r1"), "generation", "driver_pid")
    fake_redis.delete(runs.lease_key("r1"))
    assert runs.status_of(runs.get(fake_redis, "r1")) == runs.CRASHED
    _create(fake_redis, "r2")
    fake_redis.set(runs.lease_key("r2"), f"{socket.gethostname()}:0:abcd", px=60_000)
    assert runs.status_of(runs.get(fake_redis, "r2")) == runs.CRASHED


def test_two_takers_of_a_crashed_run_only_one_gets_it(fake_redis):
    _create(fake_redis)
    fake_redis.set(runs.lease_key("r1"), f"{socket.gethostname()}:{_dead_pid()}:abcd", px=60_000)
    rec_a, rec_b = runs.get(fake_redis, "r1"), runs.get(fake_redis, "r1")
    runs.take_over(fake_redis, rec_a)
    with pytest.raises(RunError, match="held by another driver"):
        runs.take_over(fake_redis, rec_b)


def test_lease_is_refreshed_and_released(fake_redis):
    lease = _create(fake_redis)
    with lease:
        assert lease.refresh()
        assert fake_redis.pttl(runs.lease_key("r1")) > 0
    assert not fake_redis.exists(runs.lease_key("r1"))


# --- counts of an unsettled round ----------------------------------------------------
# --- one status ------------------------------------------------------------------------
# --- fencing --------------------------------------------------------------------------
def _tracker(client, generation):
    conf = {"recovery.max.attempts": "3", "recovery.retry.initial.delay.ms": "0",
            "recovery.retry.delay.period.ms": "1", "recovery.retry.max.delay.ms": "1"}
    return tracker.TaskTracker(client, TaskIdentity("r1", 1, "mid", 0, 2), conf, generation=generation)


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


# --- a take-over fences the driver it took the run from -------------------------
def test_a_take_over_draws_a_new_generation_and_the_old_driver_writes_nothing(fake_redis):
    old = _create(fake_redis)                       # a live driver: this process holds the lease
    rec = runs.get(fake_redis, "r1")
    with pytest.raises(RunError, match="held by another driver"):
        runs.take_over(fake_redis, rec)
    new = runs.take_over(fake_redis, rec, force=True)
    assert new.generation != old.generation
    stored = runs.get(fake_redis, "r1")
    assert stored.generation == new.generation and fake_redis.get(runs.lease_key("r1")).decode() == new.holder
    # every write of the old driver is refused, and says it was a take-over, not a clear
    with pytest.raises(RunTakenOver, match=r"^run r1 was taken over by another driver \(pid \d+ on .+\) "
                                           r"while this driver worked on it; this driver stopped") as err:
        runs.update(fake_redis, "r1", old.generation, status=runs.COMPLETED)
    assert "cleared" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RunTakenOver):
        runs.increment(fake_redis, "r1", old.generation, follow_batches=1)
    with pytest.raises(RunTakenOver):
        runs.check_generation(fake_redis, "r1", old.generation)
    assert old.refresh() is False and old.lost.is_set()
    assert fake_redis.get(runs.lease_key("r1")).decode() == new.holder      # its refresh took nothing
    before = {k: fake_redis.dump(k) for k in fake_redis.keys("*")}
    t = _tracker(fake_redis, old.generation)
    t.failure(FailedTuple(id=1, roots=[5], values=["x"], attempt=1))
    assert t.commit({5: 9}, {"executed": 1}) is False
    with pytest.raises(RunTakenOver):
        t.committed()                               # a task of the old driver does not start
    assert {k: fake_redis.dump(k) for k in fake_redis.keys("*")} == before
    assert runs.get(fake_redis, "r1").status == runs.RUNNING
    # the new driver writes; taken over again, it is fenced in turn (the message names the taker)
    runs.update(fake_redis, "r1", new.generation, status=runs.PENDING)
    assert _tracker(fake_redis, new.generation).commit({5: 9}, {"executed": 1}) is True
    fake_redis.set(runs.lease_key("r1"), "elsewhere:4242:abcd", px=60_000)
    third = runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    fake_redis.set(runs.lease_key("r1"), "elsewhere:4242:abcd", px=60_000)   # (as if held on another host)
    for gen in (old.generation, new.generation):
        with pytest.raises(RunTakenOver, match=r"taken over by another driver \(pid 4242 on elsewhere\)"):
            runs.update(fake_redis, "r1", gen, status=runs.COMPLETED)
    runs.update(fake_redis, "r1", third.generation, status=runs.PENDING)


def test_a_task_of_a_driver_taken_over_removes_no_spill_file(fake_redis, tmp_path):
    """Consumed outputs are dropped by the last reader to commit: references first, in a
    transaction fenced by the run's generation, then the files. A task of the driver taken over
    removes no file the new driver's tasks may be replaying."""
    from recovery.tracking import spill
    old = _create(fake_redis)
    writer = spill.SpillStore.at(str(tmp_path)).writer("r1", 1, "src", 0)
    writer.add(("mid", 0), b"chunk")
    ref = writer.close()
    fake_redis.hset(keys.task_spill("r1", 1), "src:0", ref.pack())
    runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    t = _tracker(fake_redis, old.generation)
    t.spill_dir = str(tmp_path)
    t.drop_outputs("src", 1)
    assert fake_redis.hexists(keys.task_spill("r1", 1), "src:0")
    assert spill.SpillStore.at(str(tmp_path)).run_files("r1") != []


def test_a_take_over_of_a_crashed_run_fences_its_dead_driver_too(fake_redis):
    """A driver seen as dead (its lease expired: it may only be stalled) is fenced the same way:
    if it comes back, it writes nothing."""
    old = _create(fake_redis)
    fake_redis.delete(runs.lease_key("r1"))
    new = runs.take_over(fake_redis, runs.get(fake_redis, "r1"))
    assert new.generation != old.generation
    with pytest.raises(RunTakenOver):
        runs.update(fake_redis, "r1", old.generation, status=runs.COMPLETED)


def test_a_cleared_run_is_still_said_cleared_not_taken_over(fake_redis):
    old = _create(fake_redis)
    runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    clear.clear(fake_redis, "r1", force=True)
    _create(fake_redis)                             # created anew: not the run it was taken from
    for gen in (old.generation, "nosuchgeneration"):
        with pytest.raises(RunCleared, match="r1 was cleared") as err:
            runs.update(fake_redis, "r1", gen, status=runs.COMPLETED)
        assert not isinstance(err.value, RunTakenOver)


# --- stage order ----------------------------------------------------------------------
