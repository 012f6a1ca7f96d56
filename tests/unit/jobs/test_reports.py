"""recovery/jobs/reports.py on fakeredis: the shapes the CLI's --json and the web API share, error
kinds, and requeue of one tuple, a selection or all of them (each moved atomically, never twice)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgpack
import pytest

from recovery.errors import RecoveryError, RunError
from recovery.jobs import dead_letters, reports, summary
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"


def _dead_tuple(run_id: str, component: str, task: int, tid: int, error: str) -> tuple[str, bytes]:
    rec = {"id": tid, "roots": [tid], "component": component, "task": task, "values": [f"v{tid}"],
           "raw": b"raw line\n", "attempt": 3, "error": error, "traceback": "Traceback ...", "dead": True}
    return f"{component}:{task}:{tid}", msgpack.packb(rec)


@pytest.fixture
def run(fake_redis):
    """A wordcount run record that ended `dead`, with three dead tuples and one queued."""
    wf = workflow_xml.load(WORKFLOWS / "wordcount.xml", check_paths=False)
    run_id = "wordcount-1"
    runs.create(fake_redis, run_id, "<workflow/>", wf.to_task_json(), None, "local[2]", True)
    runs.update(fake_redis, run_id, status=runs.DEAD, ended=float(fake_redis.hget(runs.record_key(run_id), "started")) + 2)
    for comp, task, tid, err in (("split", 6, 11, "ValueError: bad"), ("split", 7, 12, "not acked by split"),
                                 ("count", 1, 13, "failed by count")):
        field, packed = _dead_tuple(run_id, comp, task, tid, err)
        fake_redis.hset(failed_queue.dead_letters_key(run_id), field, packed)
        fake_redis.sadd(failed_queue.dead_roots_key(run_id), str(tid))
    queued = {"id": 21, "roots": [21], "component": "count", "task": 2, "values": ["w"], "attempt": 1,
              "error": "shell process `python x.py` (pid 7) exited with code 1", "traceback": ""}
    fake_redis.hset(failed_queue.queue_key(run_id, "count", 2), "21", msgpack.packb(queued))
    fake_redis.sadd(failed_queue.failed_key(run_id), "count:2")
    return run_id


def test_error_kinds():
    assert reports.error_kind("ValueError: invalid log") == "exception"
    assert reports.error_kind("failed by split") == "fail"
    assert reports.error_kind("not acked by aggregate") == "not acked"
    assert reports.error_kind("TupleTimeout: tuple timed out after 2s in split") == "timeout"
    assert reports.error_kind("shell process `python b.py` (pid 9) exited with code 1") == "shell process lost"
    assert reports.error_kind("shell component 'b' gave up after 3 restarts") == "shell process lost"
    assert reports.error_kind(None) == "exception"


def test_runs_list_newest_first_with_workflow_and_duration(fake_redis, run):
    wf = workflow_xml.load(WORKFLOWS / "wordcount.xml", check_paths=False)
    runs.create(fake_redis, "wordcount-2", "<workflow/>", wf.to_task_json(), None, "local[2]", True)
    fake_redis.zadd(runs.index_key(), {"wordcount-2": 10**10})     # started later
    rows = reports.runs_list(fake_redis)["runs"]
    assert [r["run_id"] for r in rows] == ["wordcount-2", run]
    assert rows[1]["workflow"] == "wordcount" and rows[1]["status"] == "dead" and rows[1]["duration"] == 2
    assert json.dumps(rows)       # JSON as it is
    assert [r["run_id"] for r in reports.runs_list(fake_redis, status="dead")["runs"]] == [run]


def test_dead_report_is_json_with_keys_and_kinds(fake_redis, run):
    rows = dead_letters.dead(fake_redis, run).to_json()["dead"]
    assert [r["key"] for r in rows] == ["count:1:13", "split:6:11", "split:7:12"]
    assert [r["kind"] for r in rows] == ["fail", "exception", "not acked"]
    assert rows[0]["raw"] == "raw line\n"           # bytes become text
    json.dumps(rows)


def test_failed_report_has_full_errors(fake_redis, run):
    report = reports.failed(fake_redis, run)
    (pos,) = report.failed_positions
    assert (pos.component, pos.task, pos.count, pos.kind) == ("count", 2, 1, "shell process lost")
    assert pos.tuples[0].record.traceback == "" and pos.tuples[0].record.error.startswith("shell process")
    # its JSON (/api/v1/runs/ID/failed): the position's fields, then the tuples' own
    (shown,) = report.to_json()["failed_positions"]
    assert shown["kind"] == "shell process lost" and shown["tuples"][0]["error"] == pos.tuples[0].record.error


def test_plan_report(fake_redis, run):
    p = reports.plan(fake_redis, run)
    assert p.failed == {"count": [2]} and p.rerun == ["count", "out"]
    assert p.xml is not None and 'type="queue"' in p.xml and "FAILED task 2: 1 tuple" in p.marks["count"]
    assert p.to_json()["failed"] == {"count": [2]}


def test_requeue_one_then_a_selection(fake_redis, run):
    assert dead_letters.requeue(fake_redis, run, tuple_keys=["split:7:12"]) == {"run_id": run, "requeued": 1}
    assert fake_redis.hexists(failed_queue.queue_key(run, "split", 7), "12")
    assert msgpack.unpackb(fake_redis.hget(failed_queue.queue_key(run, "split", 7), "12"))["attempt"] == 0
    assert not fake_redis.sismember(failed_queue.dead_roots_key(run), "12")
    assert fake_redis.sismember(failed_queue.failed_key(run), "split:7")
    assert sorted(r.key or "" for r in dead_letters.dead(fake_redis, run).dead) == ["count:1:13", "split:6:11"]
    assert dead_letters.requeue(fake_redis, run, tuple_keys=["count:1:13", "split:6:11"])["requeued"] == 2
    assert dead_letters.dead(fake_redis, run).dead == []
    assert runs.get(fake_redis, run).status == runs.PENDING


def test_requeue_an_unknown_tuple_names_it_and_moves_nothing(fake_redis, run):
    with pytest.raises(RunError, match="no dead tuple 'split:9:99'"):
        dead_letters.requeue(fake_redis, run, tuple_keys=["split:6:11", "split:9:99"])
    assert len(dead_letters.dead(fake_redis, run).dead) == 3


def test_requeue_refuses_a_running_run(fake_redis, run):
    runs.update(fake_redis, run, status=runs.RUNNING, driver_pid=os.getpid())
    with pytest.raises(RunError, match="still running"):
        dead_letters.requeue(fake_redis, run)
    assert len(dead_letters.dead(fake_redis, run).dead) == 3


class _Interleaved:
    """A client on which another requeue (and the recovery that replayed and acked its tuple)
    happens right after this requeue listed the dead tuples."""

    def __init__(self, client, run_id: str):
        self._client, self._run_id, self._done = client, run_id, False

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if name not in ("hgetall", "hkeys"):
            return attr

        def listed(key, *a, **kw):
            out = attr(key, *a, **kw)
            if key == failed_queue.dead_letters_key(self._run_id) and not self._done:
                self._done = True
                dead_letters.requeue_dead(self._client, self._run_id, tuple_keys=["split:6:11"])
                self._client.hdel(failed_queue.queue_key(self._run_id, "split", 6), "11")   # replayed, acked
            return out
        return listed


def test_a_tuple_requeued_meanwhile_is_not_requeued_again(fake_redis, run):
    """The stale listing must not put back a tuple another requeue already moved (and whose
    replay already completed): that would replay it twice."""
    n = dead_letters.requeue_dead(_Interleaved(fake_redis, run), run)
    assert n == 2
    assert not fake_redis.hexists(failed_queue.queue_key(run, "split", 6), "11")


def test_rounds_replayed_recovered_dead_and_duration(fake_redis, run):
    runs.update(fake_redis, run, rounds=[
        {"round": 0, "components": {"split": {"executed": 10, "failed": 2}}, "started": 100.0, "ended": 104.0},
        {"round": 1, "components": {"replay-split": {"emitted": 2}, "split": {"executed": 2, "failed": 1, "dead": 1}},
         "started": 130.0, "ended": 131.5}])
    report = reports.rounds(fake_redis, run)
    r0, r1 = report.rounds
    assert (r0.replayed, r0.duration) == (0, 4.0)
    # the idle time between the submit and the recover is not the round's
    assert (r1.replayed, r1.recovered, r1.dead, r1.duration) == (2, 1, 1, 1.5)
    # its JSON (/api/v1/runs/ID/rounds): each round's counters as its tasks reported them
    assert report.to_json()["rounds"][1] == {
        "round": 1, "components": {"replay-split": {"emitted": 2}, "split": {"executed": 2, "failed": 1, "dead": 1}},
        "replayed": 2, "recovered": 1, "failed": 1, "dead": 1, "ended": 131.5, "duration": 1.5}


def test_plan_shows_the_recovery_rounds_chains_in_its_report_drawings_and_xml(fake_redis, monkeypatch):
    """cdn_logs with tuples queued at split: the recovery round runs split from its queue,
    chained again with normalize (local_or_shuffle); `recovery plan` says so in every form."""
    from click.testing import CliRunner

    from recovery.cli import main
    from recovery.model.graph import TaskMap
    from recovery.model.xml.parse import parse_string
    wf = workflow_xml.load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    run_id = "cdn-1"
    runs.create(fake_redis, run_id, "<workflow/>", wf.to_task_json(), None, "local[2]", True)
    task = TaskMap.of(wf).task_id("split", 1)
    queued = {"id": 31, "roots": [31], "component": "split", "task": task, "values": ["x"], "attempt": 1,
              "error": "ValueError: bad line", "traceback": ""}
    fake_redis.hset(failed_queue.queue_key(run_id, "split", task), "31", msgpack.packb(queued))
    fake_redis.sadd(failed_queue.failed_key(run_id), f"split:{task}")
    p = reports.plan(fake_redis, run_id)
    assert p.chains == [["split", "normalize"]]
    monkeypatch.setattr("recovery.run.client_for", lambda redis_url: (fake_redis, "redis://fake"))
    xml = CliRunner().invoke(main, ["plan", run_id], catch_exceptions=False).stdout
    assert "chain: split -> normalize (one Spark stage)" in xml
    assert parse_string(xml).name == "cdn_logs.recovery"    # still a workflow file, comment and all
    text = CliRunner().invoke(main, ["plan", run_id, "-f", "text"], catch_exceptions=False).stdout
    assert "chain: split -> normalize" in text and "chain: logs -> split" not in text


def test_a_dead_root_whose_message_was_gone_is_its_own_kind_warned_of_and_requeued_without_its_mark(fake_redis, run):
    """A root replay found a failed root's message gone (SourceRunner.message_gone): its dead
    letter is of kind "message gone", `status` warns of it, and a requeue takes its mark too
    (a replay that finds it gone again marks it again)."""
    error = "message gone: topic 'events' partition 1 offset 4 (entry id 4-1) was trimmed from the stream"
    rec = {"id": 31, "roots": [31], "component": "sentences", "task": 1, "message_id": [1, 4], "attempt": 1,
           "error": error, "gone": True, "dead": True}
    fake_redis.hset(failed_queue.dead_letters_key(run), "sentences:1:31", msgpack.packb(rec))
    fake_redis.sadd(failed_queue.dead_roots_key(run), "31")
    fake_redis.hset(failed_queue.gone_key(run), "sentences:1:31", error)
    row = next(r for r in dead_letters.dead(fake_redis, run).to_json()["dead"] if r["key"] == "sentences:1:31")
    assert row["kind"] == "message gone" and row["gone"] is True
    (warning,) = summary.summarize(fake_redis, runs.get(fake_redis, run)).warnings
    assert warning.startswith("1 root is dead because its message was gone from the source when root "
                              f"replay read it again (e.g. {error})")
    assert dead_letters.requeue(fake_redis, run, tuple_keys=["sentences:1:31"])["requeued"] == 1
    assert not fake_redis.exists(failed_queue.gone_key(run)) and summary.summarize(fake_redis, runs.get(fake_redis, run)).warnings is None


def test_component_report_lists_its_counters_per_round_and_its_failed_positions(fake_redis, run):
    runs.update(fake_redis, run, rounds=[
        {"round": 0, "components": {"count": {"executed": 10, "failed": 2}}, "started": 100.0, "ended": 104.0},
        {"round": 1, "components": {"replay-count": {"emitted": 2}}, "started": 130.0, "ended": 131.5}])
    report = reports.component(fake_redis, run, "count")
    assert [(r.round, r.stats.executed if r.stats else None) for r in report.rounds] == [(0, 10), (1, None)]
    assert [(p.component, p.task, p.count) for p in report.failed_positions] == [("count", 2, 1)]
    # its JSON (/api/v1/runs/ID/components/C): each round's number, then the counters reported
    shown = report.to_json()
    assert shown["rounds"] == [{"round": 0, "executed": 10, "failed": 2}, {"round": 1}]
    assert (shown["kind"], shown["failed_positions"][0]["count"]) == ("bolt", 1)
    with pytest.raises(RecoveryError, match="no component 'nope'"):
        reports.component(fake_redis, run, "nope")


def test_plan_gives_the_mode_of_each_component_the_recovery_round_runs(fake_redis, monkeypatch):
    """cdn_logs with tuples queued at aggregate: its recovery round runs aggregate from its
    queue in the chunk mode, and the sink after it; the plan's report and its text drawing say
    so, and name no mode for what does not run again."""
    from click.testing import CliRunner

    from recovery.cli import main
    from recovery.model.graph import Mode, TaskMap
    wf = workflow_xml.load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    run_id = "cdn-2"
    runs.create(fake_redis, run_id, "<workflow/>", wf.to_task_json(), None, "local[2]", True)
    task = TaskMap.of(wf).task_id("aggregate", 0)
    queued = {"id": 32, "roots": [32], "component": "aggregate", "task": task, "values": ["x"], "attempt": 1,
              "error": "ValueError: bad", "traceback": ""}
    fake_redis.hset(failed_queue.queue_key(run_id, "aggregate", task), "32", msgpack.packb(queued))
    fake_redis.sadd(failed_queue.failed_key(run_id), f"aggregate:{task}")
    p = reports.plan(fake_redis, run_id)
    assert p.modes == {"aggregate": Mode.CHUNK, "output": Mode.SINK}
    assert p.to_json()["modes"] == {"aggregate": "chunk", "output": "sink"}
    monkeypatch.setattr("recovery.run.client_for", lambda redis_url: (fake_redis, "redis://fake"))
    text = CliRunner().invoke(main, ["plan", run_id, "-f", "text"], catch_exceptions=False).stdout
    assert text.count("mode    ") == 2 and "mode    chunk" in text and "mode    sink" in text
