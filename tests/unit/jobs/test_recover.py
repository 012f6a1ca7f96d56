"""recovery.jobs.recover on fakeredis: a live run is refused, --force takes it over and fences
the driver it took the run from at whatever step that driver was; a resumed round is counted;
roots that no task will ever run are said, never taken for complete."""
from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from recovery import BasicBolt, testing
from recovery.cli import main
from recovery.engine import rounds as engine_rounds
from recovery.errors import RunError, RunTakenOver
from recovery.jobs import recover, summary
from recovery.model.workflow import ClassImpl, Component, Input, SourceImpl, StreamDef, Workflow
from recovery.runtime import task
from recovery.testing.local_spark import LocalSession
from recovery.tracking import keys, ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.queue import history as queue_history
from recovery.tracking.state import state_key
from tests.unit.run_records import create_run as _create
from tests.unit.run_records import ledger_pending


def test_recover_refuses_a_live_run_and_force_takes_it_over(fake_redis):
    _create(fake_redis)
    fake_redis.set(runs.lease_key("r1"), "elsewhere:4242:abcd", px=60_000)
    with pytest.raises(RunError, match=r"still running \(driver pid 4242 on elsewhere.*--force"):
        recover.recover(None, fake_redis, "redis://fake", "r1")
    rec = runs.get(fake_redis, "r1")
    with pytest.raises(RunError, match="held by another driver"):
        runs.take_over(fake_redis, rec)             # without force a live holder keeps it
    lease = runs.take_over(fake_redis, rec, force=True)
    assert fake_redis.get(runs.lease_key("r1")).decode() == lease.holder
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
    assert run.summary.failed == 30
    if kill_point == "roots-superseded":
        monkeypatch.setattr(rounds, "supersede_failed_roots", _crash_after(rounds.supersede_failed_roots))
    else:
        monkeypatch.setattr(rounds, "prepare_root_replay", _crash_after(rounds.prepare_root_replay))
    testing.recover_local(run, strategy="root-replay")
    assert run.interrupted == "crash" and run.status == runs.CRASHED
    assert run.summary.counts_known is False
    monkeypatch.undo()
    testing.recover_local(run, strategy="root-replay")
    assert run.interrupted is None and run.summary.status == runs.COMPLETED
    # the killed round, resumed, did it all, and is counted
    assert run.summary.resumed and run.summary.rounds == 1 and run.summary.recovered == 30
    assert sorted(v[0] for v in run.sinks["out"]) == sorted(w.upper() for w in words)
    assert (run.summary.complete, run.summary.pending) == (30, 0)
    assert not fake_redis.exists(keys.root_replay_set("rr", 1))


# --- `recover --force` while the first driver still works -----------------------
class Shout(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"].upper()])


def shouting() -> Workflow:
    """words (TestingSpout, a Python spout: its acks are told at settle time) -> shout (2 tasks)
    -> out (ListSink)."""
    return Workflow(name="shouting", components=(
        Component(id="words", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("word",)),)),
        Component(id="shout", kind="bolt", parallelism=2, impl=ClassImpl(ref=f"{__name__}:Shout"),
                  streams=(StreamDef(fields=("word",)),), inputs=(Input(source="words"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="shout"),))))


WORDS = [f"w{i}" for i in range(60)]
# a third of the words fail their first two attempts at `shout`: two recovery rounds
TWO_ROUNDS = {"recovery.inject.f.component": "shout", "recovery.inject.f.rate": "0.35",
              "recovery.inject.f.attempts": "2", "recovery.retry.delay.period.ms": "0"}


def _first_driver_round(args: tuple, kwargs: dict) -> int | None:
    """The round of a settle step's call (its RunSpec argument), if it has one."""
    for a in (*args, *kwargs.values()):
        if hasattr(a, "generation") and hasattr(a, "round"):
            return int(a.round)
    return None


# Where the first driver is when the second takes the run over: (the object and attribute the
# first driver calls, which call of it). Its round 1 under way (one task of `shout` committed,
# the other not yet run); its round 1 ran, being settled (before its verdict is stored); its
# round 1 settled, clearing it; telling the spout its acks; between rounds 1 and 2.
TAKE_OVER_POINTS = {
    "task-running": (task.TaskRunner, "run_bolt", lambda self, *a, **k: (
        self.component_id == "shout" and self.index == 1 and self.spec.round == 1)),
    "round-ran": (engine_rounds, "resolve_ledger", lambda *a, **k: _first_driver_round(a, k) == 1),
    "round-settled": (engine_rounds, "clear_round", lambda client, run_id, round_no, *a, **k: round_no == 1),
    "telling-spouts": (engine_rounds, "tell_spouts", lambda *a, **k: _first_driver_round(a, k) == 1),
    "between-rounds": (failed_queue, "prune_empty", None),
}


@pytest.mark.parametrize("point", sorted(TAKE_OVER_POINTS))
def test_a_forced_take_over_fences_the_first_driver_and_the_second_finishes_exactly(point, fake_redis, monkeypatch):
    """Driver A recovers; at `point` driver B takes the run over with --force and recovers it to
    the end; then A goes on from where it was. A stops at its next write with one line saying
    it was taken over (never `completed`), and the sink holds exactly a failure-free run's
    records: nothing of A after the take-over lands, nothing B resumed is lost."""
    run = testing.run_local(shouting(), fake_redis, run_id="tk", config=TWO_ROUNDS, inputs={"words": WORDS})
    assert run.summary.status == runs.PENDING and run.summary.failed > 0
    owner, name, when = TAKE_OVER_POINTS[point]
    original = getattr(owner, name)
    calls: list[int] = []
    second: dict[str, Any] = {}

    def hooked(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        fire = (len(calls) == 2) if when is None else when(*args, **kwargs)   # (prune: after round 1)
        if fire and not second:
            second["fired"] = True   # (B's own calls come through here too)
            second["summary"] = recover.recover(LocalSession(), fake_redis, run.redis_url, "tk", force=True)
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, hooked)
    with pytest.raises(RunTakenOver, match=r"^run tk was taken over by another driver .*this driver "
                                           r"stopped without writing into it$"):
        testing.recover_local(run)
    monkeypatch.undo()
    assert "summary" in second, f"the take-over point {point} was never reached"
    b = second["summary"]
    # (between rounds A had settled round 1: there is no round to resume)
    assert b.status == runs.COMPLETED and b.resumed == (point != "between-rounds") and b.rounds is not None and b.rounds >= 1, b
    s = summary.summarize(fake_redis, runs.get(fake_redis, "tk"))
    assert (s.status, s.pending, s.in_flight, s.complete) == (runs.COMPLETED, 0, 0, len(WORDS))
    assert not s.warnings
    testing.assert_same_output(run, testing.failure_free_output(shouting(), inputs={"words": WORDS}))
    assert ledger.pending_roots(fake_redis, "tk") == set()
    assert not fake_redis.exists(failed_queue.failed_key("tk"))
    # nothing of either driver's rounds is left behind (A cleared nothing after the take-over,
    # and wrote nothing back)
    left = {k.decode() for k in fake_redis.scan_iter(match=keys.run_pattern("tk"))} - {runs.record_key("tk")}
    history = {failed_queue.history_positions_key("tk"),
               *(failed_queue.history_key("tk", c, t) for c, t in queue_history.positions(fake_redis, "tk"))}
    assert left - history <= {state_key("tk", "out"), keys.log("tk")}, left


def test_a_resumed_crashed_round_is_counted_in_the_summary(fake_redis, monkeypatch):
    """The driver dies after recovery round 1 ran, before it settled it; the next
    `recover` resumes that round: its summary counts it (rounds 1, recovered what the round's
    record says), in --json and in the CLI's line."""
    from recovery.jobs import reports
    from recovery.testing.components import DriverCrash
    inject = {"recovery.inject.f.component": "shout", "recovery.inject.f.rate": "0.35",
              "recovery.retry.delay.period.ms": "0"}
    _cli_on(monkeypatch, fake_redis, testing.run._url(fake_redis))

    def crash(*args: Any, **kwargs: Any) -> None:
        raise DriverCrash("killed before the settle")

    def crashed_in_round_1(run_id: str) -> tuple[testing.LocalRun, int]:
        run = testing.run_local(shouting(), fake_redis, run_id=run_id, inputs={"words": WORDS}, config=inject)
        failed = run.summary.failed
        with monkeypatch.context() as m:
            m.setattr(engine_rounds, "resolve_ledger", crash)
            testing.recover_local(run)
        assert run.interrupted == "crash" and run.status == runs.CRASHED
        return run, failed

    run, n = crashed_in_round_1("cr")
    assert n > 0
    with task.injected_client(run.redis_url, fake_redis):
        result = CliRunner().invoke(main, ["recover", "cr", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    r = json.loads(result.stdout)
    assert r["status"] == runs.COMPLETED and r["resumed"]
    assert (r["rounds"], r["recovered"], r["newly_dead"]) == (1, n, 0)
    assert [(x.replayed, x.recovered) for x in reports.rounds(fake_redis, "cr").rounds][1:] == [(n, n)]
    run, n = crashed_in_round_1("cr2")
    with task.injected_client(run.redis_url, fake_redis):
        text = CliRunner().invoke(main, ["recover", "cr2"], catch_exceptions=False).stdout
    assert f"rounds 1, recovered {n} tuples, dead 0 tuples" in text and "resumed a crashed round" in text


def _cli_on(monkeypatch: pytest.MonkeyPatch, client: Any, url: str) -> None:
    """The CLI's commands against `client` (fakeredis) and the test kit's in-process engine."""
    monkeypatch.setattr("recovery.run.client_for", lambda redis_url: (client, url))
    monkeypatch.setattr("recovery.run.start_session", lambda master, conf: LocalSession())
    monkeypatch.setattr("recovery.engine.rounds.connection.connect", lambda redis_url, start=False: client)


# --- roots in flight that no task will run ---------------------------------------
def test_roots_in_flight_with_nothing_queued_are_said_never_completed(fake_redis, monkeypatch):
    """Three roots' tuples are lost in the round (their ledger entries stay, no tuple of theirs
    is queued or dead): `status` and `recover` do not call the run completed, and say what they
    found, in the summary, its --json and the CLI's text."""
    real_run_round = engine_rounds.run_round
    lost = [11 * 2**40 + i for i in range(3)]

    def losing(*args: Any, **kwargs: Any) -> Any:
        ledger_pending(fake_redis, "lost", lost)   # (a task's committed entries, no tuple sent on)
        return real_run_round(*args, **kwargs)
    monkeypatch.setattr(engine_rounds, "run_round", losing)
    run = testing.run_local(shouting(), fake_redis, run_id="lost", inputs={"words": WORDS})
    monkeypatch.setattr(engine_rounds, "run_round", real_run_round)
    s = summary.summarize(fake_redis, runs.get(fake_redis, "lost"))
    assert s.status != runs.COMPLETED and (s.in_flight, s.failed, s.dead) == (3, 0, 0)
    assert "3 roots are in flight after round 0 settled" in s.warnings[0]
    testing.recover_local(run)
    r = run.summary
    assert r.status == runs.PENDING and r.rounds == 0 and r.in_flight == 3
    assert "no task that will run them" in r.warnings[0]
    _cli_on(monkeypatch, fake_redis, run.redis_url)
    with task.injected_client(run.redis_url, fake_redis):
        status = CliRunner().invoke(main, ["status", "lost"], catch_exceptions=False).stdout
        again = CliRunner().invoke(main, ["recover", "lost"], catch_exceptions=False).stdout
    for text in (status, again):
        flat = " ".join(text.split())
        assert "status pending" in flat and "warning: 3 roots are in flight" in flat, text
        assert "completed" not in flat


def test_pruning_the_failed_set_of_a_driver_taken_over_removes_no_position(fake_redis):
    old = _create(fake_redis)
    fake_redis.sadd(failed_queue.failed_key("r1"), "out:1")           # its queue is empty: prunable
    new = runs.take_over(fake_redis, runs.get(fake_redis, "r1"), force=True)
    with pytest.raises(RunTakenOver):
        failed_queue.prune_empty(fake_redis, "r1", old.generation)
    assert fake_redis.smembers(failed_queue.failed_key("r1")) == {b"out:1"}
    failed_queue.prune_empty(fake_redis, "r1", new.generation)
    assert not fake_redis.exists(failed_queue.failed_key("r1"))


# --- root replay and permanent failures ------------------------------------------
class Parse(BasicBolt):
    """Never parses a line starting with "bad"; fails a line starting with "flaky" the first
    time it sees it (in this process: the test kit's tasks)."""
    SEEN: set[str] = set()

    def process(self, tup):
        line = tup["line"]
        if line.startswith("bad"):
            raise ValueError(f"cannot parse {line!r}")
        if line.startswith("flaky") and line not in Parse.SEEN:
            Parse.SEEN.add(line)
            raise RuntimeError(f"flaky {line!r}")
        self.emit([line.upper()])


PARSE_LINES = [f"bad{i}" if i % 7 == 0 else f"flaky{i}" if i % 5 == 0 else f"ok{i}" for i in range(40)]
THREE_ATTEMPTS = {"recovery.max.attempts": "3", "recovery.retry.delay.period.ms": "0"}


def parsing(base_dir: Any) -> Workflow:
    """lines (a file source over PARSE_LINES) -> parse (2 tasks) -> out (ListSink)."""
    (base_dir / "in.txt").write_text("\n".join(PARSE_LINES) + "\n")
    return Workflow(name="parsing", base_dir=str(base_dir), components=(
        Component(id="lines", kind="spout", impl=SourceImpl(type="file", params=(("path", "in.txt"),)),
                  streams=(StreamDef(fields=("line",)),)),
        Component(id="parse", kind="bolt", parallelism=2, impl=ClassImpl(ref=f"{__name__}:Parse"),
                  streams=(StreamDef(fields=("line",)),), inputs=(Input(source="lines"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="parse"),))))


def check_permanent_failures_dead_after_three_attempts(run: testing.LocalRun) -> None:
    """After `recover` of a `parsing` run: two rounds (attempts 2 and 3), the lines that never
    parse dead at attempt 3 with their error, every other line once in the sink."""
    r = run.summary
    bad = sorted(line for line in PARSE_LINES if line.startswith("bad"))
    assert (r.status, r.rounds, r.pending, r.dead) == (runs.DEAD, 2, 0, len(bad)), r
    dead = run.dead_tuples()
    assert sorted(d.values[0] for d in dead) == bad
    assert all(d.attempt == 3 and d.error == f"ValueError: cannot parse {d.values[0]!r}" for d in dead)
    assert sorted(v[0] for v in run.sinks["out"]) == sorted(line.upper() for line in PARSE_LINES if line not in bad)
    assert not run.failed_positions


@pytest.mark.parametrize("strategy", ["localized", "root-replay"])
def test_permanent_failures_end_dead_after_max_attempts_and_recover_terminates_whatever_the_strategy(
        strategy, fake_redis, tmp_path):
    """Root replay re-emits a failed root under a new id each round; each replay is an attempt
    of that root, so a line that never parses is dead after recovery.max.attempts, as under
    localized recovery, and `recover` ends: no round past the last attempt."""
    Parse.SEEN.clear()
    run = testing.run_local(parsing(tmp_path), fake_redis, run_id="perm", config=THREE_ATTEMPTS)
    assert run.summary.failed == len([line for line in PARSE_LINES if not line.startswith("ok")])
    testing.recover_local(run, strategy=strategy, max_rounds=10)
    check_permanent_failures_dead_after_three_attempts(run)


def json_parsing(base_dir: Any, lines: list[str]) -> Workflow:
    """lines (a JSON-lines file source: a line that is not JSON fails at the spout) -> parse
    -> out (ListSink)."""
    (base_dir / "in.jsonl").write_text("\n".join(lines) + "\n")
    wf = parsing(base_dir)
    spout = wf.component("lines").model_copy(update={"impl": SourceImpl(type="file", params=(
        ("path", "in.jsonl"), ("format", "json")))})
    return wf.model_copy(update={"components": (spout, *wf.components[1:])})


@pytest.mark.parametrize("strategy", ["localized", "root-replay"])
def test_a_spout_record_dead_before_a_root_replay_and_requeued_after_it_is_replayed_under_its_own_root(
        strategy, fake_redis, tmp_path):
    """A line that is not JSON dies at the spout under the first ids; a root replay then runs
    (new root ids); the dead letter, requeued, is replayed under the root id its queue entry
    has (localized), or selected by it (root replay), so it dies again and `recover` ends,
    rather than queueing it under another id forever or dropping it unread."""
    from recovery.jobs import dead_letters
    Parse.SEEN.clear()
    lines = ['{"line": "ok1"}', "not json", '{"line": "flaky2"}', '{"line": "ok3"}']
    run = testing.run_local(json_parsing(tmp_path, lines), fake_redis, run_id="sp",
                            config={"recovery.max.attempts": "1", "recovery.retry.delay.period.ms": "0"})
    spout_letter, flaky = sorted(run.dead_tuples(), key=lambda d: d.component)
    assert (spout_letter.component, spout_letter.raw, flaky.values) == ("lines", b"not json\n", ["flaky2"])
    assert dead_letters.requeue_dead(fake_redis, "sp", component="parse") == 1
    testing.recover_local(run, strategy="root-replay")          # flaky2 passes, under new root ids
    assert run.summary.rounds == 1 and runs.get(fake_redis, "sp").root_epoch == 1
    assert dead_letters.requeue_dead(fake_redis, "sp") == 1
    testing.recover_local(run, strategy=strategy, max_rounds=5)
    r = run.summary
    assert (r.status, r.rounds, r.pending, r.dead) == (runs.DEAD, 1, 0, 1), r
    [again] = run.dead_tuples()
    assert (again.component, again.raw, again.attempt) == ("lines", b"not json\n", 1)
    # localized: replayed under its own root; root replay: re-read, under the round's new id
    assert (again.id == spout_letter.id) == (strategy == "localized")
    assert sorted(v[0] for v in run.sinks["out"]) == ["FLAKY2", "OK1", "OK3"]
