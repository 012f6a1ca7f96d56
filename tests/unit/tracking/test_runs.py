"""Run records' lifecycle without Spark (fakeredis): atomic creation, leases, fencing of a
cleared run, counts of an unsettled round, one status for `runs` and `status`, clearing orphans."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.errors import RunCleared, RunError
from recovery.jobs import clear, recover, submit, summary
from recovery.model.workflow import Component, Input, SinkImpl, SourceImpl, StreamDef, Workflow
from recovery.tracking import keys, ledger, runs, tracker

WF = Workflow(name="wf", components=(
    Component(id="src", kind="spout", parallelism=1, impl=SourceImpl(type="file", params=(("path", "x"),)),
              streams=(StreamDef(id="default", fields=("line",)),)),
    Component(id="out", kind="bolt", parallelism=1, impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
              inputs=(Input(source="src", grouping="shuffle"),)),
    Component(id="mid", kind="bolt", parallelism=1, impl=SinkImpl(type="jsonl", params=(("path", "m"),)),
              inputs=(Input(source="src", grouping="shuffle"),)),
))


def _create(client, run_id="r1"):
    return runs.create(client, run_id, "<xml/>", submit.workflow_json(WF), None, "local", True)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _ledger_pending(client, run_id, roots):
    """Ledger entries of a task that committed: these roots are pending (in flight)."""
    for b, blob in enumerate(ledger.pack_xors({r: r * 7 + 1 for r in roots})):
        if blob:
            client.hset(keys.ledger(run_id, b), "0:src:0", blob)


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
    assert runs.get(fake_redis, "r1")["generation"] == won[0].generation


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
    old = runs.Lease(fake_redis, "r1", rec["generation"])
    old.holder = "elsewhere:4242:abcd"
    assert old.refresh() is False and old.lost.is_set()


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
def test_a_crashed_unsettled_round_has_unknown_counts_never_negative(fake_redis):
    _create(fake_redis)
    fake_redis.delete(keys.lease("r1"))             # the driver died in round 0
    _ledger_pending(fake_redis, "r1", range(1, 5001))
    s = summary.summarize(fake_redis, "r1")
    assert s["status"] == runs.CRASHED
    assert s["counts_known"] is False and s["unsettled_round"] == 0
    assert all(s[k] is None for k in ("roots", "complete", "pending", "failed", "in_flight", "dead"))
    from recovery.cli.run import counts_line
    assert counts_line(s) == "roots: unknown (round 0 not settled; run `recovery recover r1`)"
    monkey_client = (fake_redis, "redis://fake")
    import recovery.cli.run as cli_run
    orig = cli_run._client
    cli_run._client = lambda url: monkey_client
    try:
        out = CliRunner().invoke(main, ["status", "r1"]).stdout
        listed = CliRunner().invoke(main, ["runs", "--json"]).stdout
        text = CliRunner().invoke(main, ["runs"]).stdout
    finally:
        cli_run._client = orig
    assert "-5000" not in out and "roots: unknown (round 0 not settled" in out
    row = json.loads(listed)["runs"][0]
    assert row["status"] == "crashed" and row["counts_known"] is False and row["roots"] is None
    assert "None" not in text and "roots unknown (round 0 not settled)" in text


# --- item 7: one status ------------------------------------------------------------------------
def test_status_and_runs_agree_on_a_run_that_failed_in_spark(fake_redis):
    _create(fake_redis)
    runs.update(fake_redis, "r1", status=runs.ERROR, error="RuntimeError: open failed")
    s = summary.summarize(fake_redis, "r1")
    assert s["status"] == runs.status_of(runs.get(fake_redis, "r1")) == runs.ERROR


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
    t2.failure({"id": 1, "roots": [5], "values": ["x"], "attempt": 1})
    assert t2.commit({5: 9}, {"executed": 1}) is False
    assert set(fake_redis.keys("*")) == before
    # the live generation commits
    t3 = _tracker(fake_redis, runs.get(fake_redis, "r1")["generation"])
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


def test_clear_finds_orphan_keys_of_a_run_without_record(fake_redis, monkeypatch):
    _create(fake_redis, "kept")
    fake_redis.hset(keys.task_done("gone", 3), "mid:0", b"x")         # an orphan of a cleared run
    fake_redis.set("unrelated", "1")
    monkeypatch.setattr("recovery.cli.run._client", lambda url: (fake_redis, "redis://fake"))
    r = CliRunner().invoke(main, ["clear", "--all", "--force", "--json"])
    assert r.exit_code == 0, r.stderr
    removed = json.loads(r.stdout)["removed"]
    assert keys.task_done("gone", 3) in removed["gone"] and "kept" in removed
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))
    assert fake_redis.get("unrelated") == b"1"
    # and `clear RUN` of an orphan alone
    fake_redis.hset(keys.task_done("gone2", 1), "mid:0", b"x")
    assert clear.clear(fake_redis, "gone2") == [keys.task_done("gone2", 1)]
    with pytest.raises(RunError, match="no run 'gone3'"):
        clear.clear(fake_redis, "gone3")


# --- item 16: stage order ----------------------------------------------------------------------
def test_component_tables_are_in_topological_order(fake_redis):
    lease = _create(fake_redis)
    stats = {"out": {"executed": 1}, "mid": {"executed": 1}, "src": {"roots": 1}}
    runs.update(fake_redis, "r1", lease.generation, stats=stats, settled_round=0, status=runs.COMPLETED,
                rounds=[{"round": 0, "components": stats}])
    assert list(summary.summarize(fake_redis, "r1")["components"]) == ["src", "out", "mid"]
    rounds = [{"round": 1, "components": {"mid": {"executed": 2, "seconds": 0.5}, "q": {"emitted": 2}}},
              {"round": 2, "components": {"mid": {"executed": 1, "seconds": 0.25}}}]
    total = summary.sum_components(rounds, WF)
    assert list(total) == ["q", "mid"] and total["mid"] == {"executed": 3, "seconds": 0.75}


def test_recover_summary_table_is_labelled_by_its_rounds():
    from recovery.cli.run import components_title
    assert components_title([0]) == "components (round 0)"
    assert components_title([1, 2]) == "components (rounds 1-2, added up)"
