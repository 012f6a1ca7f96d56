"""Redis-stream topics on a real Redis and a real local Spark: bounded runs, lag in `status`,
kill -9 of a `submit --follow` driver and its restart, a poison message at the head of a
partition (the stalled topology of docs/references.md), a topic that does not exist.

Workflows are copied into tmp_path (sinks write next to the XML), so nothing lands in the
checkout. The `spark` fixture (one session for the whole test session) is tests/integration's.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors.redis_stream import offsets, topics
from recovery.connectors.redis_stream import report as stream_report
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import follow, submit
from recovery.jobs import follow_events as events
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys, runs
from tests.helpers import wait_for
from tests.integration.conftest import topic_copy_xml, valid_cdn_lines

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"

COPY_XML = topic_copy_xml("topic_copy", spouts=3)


def _canon(records) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in records)


def _copy_cdn_stream(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(WORKFLOWS / "cdn_logs_stream.xml", dest / "cdn_logs_stream.xml")
    shutil.copytree(WORKFLOWS / "cdn_logs", dest / "cdn_logs", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "cdn_logs_stream.xml"


def _assert_aggregates_exactly_once(sink: list[dict], valid: list[list]) -> None:
    """The aggregate bolt emits each accepted line's share [key, 1, bytes]: each line's effect
    exactly once means the sink holds exactly those records (a multiset)."""
    got = collections.Counter((r["key"], r["requests"], r["bytes"]) for r in sink)
    assert got == collections.Counter((v[0], 1, v[4]) for v in valid)


def _committed_to_end(client, wf) -> bool:
    return all(r.committed == r.end for r in stream_report.partition_report(client, wf))


# --- bounded ----------------------------------------------------------------------------------
def test_bounded_run_from_a_topic_equals_its_input_and_status_shows_lag(spark, redis_url, redis_client, tmp_path):
    xml = tmp_path / "copy.xml"
    xml.write_text(COPY_XML)
    records = [{"id": i, "word": f"w{i % 13}"} for i in range(500)]
    counts = topics.produce(redis_client, "events",
                               [(r["word"], json.dumps(r).encode()) for r in records], 5, "jsonl")
    assert sum(counts.values()) == 500
    wf = workflow_xml.load(xml)

    summary = submit.submit(spark, redis_client, redis_url, wf, COPY_XML, str(xml))
    assert summary.status == "completed"
    assert summary.roots == summary.complete == 500
    assert _canon(read_jsonl_dir(str(tmp_path / "out" / "copy"))) == _canon(records)
    assert _committed_to_end(redis_client, wf)
    # the plan went into the run record: a resumed round would read the same ranges
    rec = runs.get(redis_client, summary.run_id)
    plan = json.loads(json.loads(rec.current_spec or "{}")["source_json"])["events"]
    assert {int(p): r[1] for p, r in plan["ranges"].items()} == counts

    # 40 more messages: status shows them as lag, per partition
    more = [{"id": 500 + i, "word": f"w{i % 13}"} for i in range(40)]
    added = topics.produce(redis_client, "events", [(r["word"], json.dumps(r).encode()) for r in more])
    res = CliRunner().invoke(main, ["status", summary.run_id, "--json", "--redis", redis_url])
    assert res.exit_code == 0, res.output
    parts = json.loads(res.output)["partitions"]
    assert [(p["partition"], p["lag"]) for p in parts] == sorted(added.items())
    assert all(p["committed"] + p["lag"] == p["end"] and p["task_index"] == p["partition"] % 3 for p in parts)
    res = CliRunner().invoke(main, ["status", summary.run_id, "--redis", redis_url])
    assert res.exit_code == 0 and f"lag {added[0]}" in res.output and "events <- events[4]" in res.output

    # a second bounded run of the same consumer reads only the new messages (sink elsewhere)
    again = tmp_path / "again"
    again.mkdir()
    (again / "copy.xml").write_text(COPY_XML)
    s2 = submit.submit(spark, redis_client, redis_url, workflow_xml.load(again / "copy.xml"), COPY_XML,
                     str(again / "copy.xml"))
    assert s2.roots == s2.complete == 40
    assert _canon(read_jsonl_dir(str(again / "out" / "copy"))) == _canon(more)
    assert _committed_to_end(redis_client, wf)


def test_a_second_bounded_submit_of_a_stream_continues_into_the_same_folders(spark, redis_url, redis_client, tmp_path):
    """A topic-reading workflow's file sinks append by default, so the next
    bounded submit (how a stream goes on from its committed offsets) is not refused for the
    folder holding the previous run's parts; the folder then holds the whole stream once."""
    xml = tmp_path / "copy.xml"
    xml.write_text(COPY_XML)
    first = [{"id": i, "word": f"w{i % 7}"} for i in range(120)]
    topics.produce(redis_client, "events", [(r["word"], json.dumps(r).encode()) for r in first], 3, "jsonl")

    def submit_cli() -> dict:
        res = CliRunner().invoke(main, ["submit", str(xml), "--json", "--redis", redis_url], catch_exceptions=False)
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)

    s1 = submit_cli()
    assert s1["status"] == "completed" and s1["roots"] == 120
    more = [{"id": 120 + i, "word": f"w{i % 7}"} for i in range(30)]
    topics.produce(redis_client, "events", [(r["word"], json.dumps(r).encode()) for r in more])
    s2 = submit_cli()   # was: "sink 'out' (jsonl): folder ... already holds another run's output"
    assert s2["status"] == "completed" and s2["roots"] == 30 and s2["run_id"] != s1["run_id"]
    assert _canon(read_jsonl_dir(str(tmp_path / "out" / "copy"))) == _canon(first + more)

    # mode="error" written on the sink still refuses, before anything is stored
    strict = tmp_path / "strict.xml"
    strict.write_text(COPY_XML.replace('path="out/copy"', 'path="out/copy" mode="error"'))
    before = set(redis_client.keys("*"))
    res = CliRunner().invoke(main, ["submit", str(strict), "--redis", redis_url], catch_exceptions=False)
    assert res.exit_code == 2 and "already holds another run's output" in res.stderr
    assert set(redis_client.keys("*")) == before


# --- a poison message at the head of a partition (docs/references.md, KafkaSpout) -----------------
def test_a_poison_message_at_the_head_of_a_partition_does_not_hold_the_stream(spark, redis_url, redis_client, tmp_path):
    xml = _copy_cdn_stream(tmp_path)
    wf = workflow_xml.load(xml)
    wf = wf.with_config({"topology.max.spout.pending": "1000", "recovery.auto": "true",
                         "recovery.max.attempts": "2", "recovery.retry.delay.period.ms": "0"})
    lines = [x for x in (WORKFLOWS / "data" / "cdn.log").read_text().splitlines() if x.strip()]
    valid_lines = [x for x in lines if valid_cdn_lines([x])]
    first, second = valid_lines[:300], valid_lines[300:400]
    poison_key = next(k for k in (f"poison{i}" for i in range(100)) if topics.partition_of(k, 2) == 0)
    topics.produce(redis_client, "cdn_logs", [(poison_key, b"this is not a log line")], 2)
    topics.produce(redis_client, "cdn_logs", [(x, x.encode()) for x in first])
    head = redis_client.xrange(keys.topic_partition("cdn_logs", 0), count=1)[0]
    assert head == (b"0-1", {b"v": b"this is not a log line"})          # offset 0 of partition 0
    after_poison = redis_client.xlen(keys.topic_partition("cdn_logs", 0)) - 1
    assert after_poison > 100

    batches: list[events.Batch] = []

    def on_event(event: events.FollowEvent) -> None:
        if isinstance(event, events.Batch):
            batches.append(event)
            if len(batches) == 1:   # the partitions were read to their ends, the poison included
                assert _committed_to_end(redis_client, wf)
                topics.produce(redis_client, "cdn_logs", [(x, x.encode()) for x in second])

    outcome = follow.follow(spark, redis_client, redis_url, wf, xml.read_text(), str(xml),
                            max_batches=2, on_event=on_event)
    # batch 1 processed every message after the poison (in both partitions alike): it read all
    # of them, and only the poison is not complete
    assert [b.messages for b in batches] == [1 + len(first), len(second)]
    assert batches[0].roots == 1 + len(first) and batches[0].failed == 1
    assert batches[0].pending == 1
    # the poison was retried between batches and is dead; batch 2 read only new messages
    assert batches[1].roots == len(second) and batches[1].failed == 0
    assert outcome.summary is not None and outcome.summary.dead == 1 and outcome.summary.pending == 0
    assert outcome.follow["recovery_rounds"] >= 1
    assert _committed_to_end(redis_client, wf)
    sink = read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_stream"))
    _assert_aggregates_exactly_once(sink, valid_cdn_lines(first + second))
    part0 = [f for f in os.listdir(tmp_path / "out" / "cdn_logs_stream") if "-r0000-" in f]
    assert sum(1 for f in part0 for _ in open(tmp_path / "out" / "cdn_logs_stream" / f)) == len(first)


# --- kill -9 of a follow driver, then restart ------------------------------------------------------
def _cli_env(redis_url: str, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"RECOVERY_REDIS_URL": redis_url, "RECOVERY_HOME": str(home),
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    return env


def test_kill_9_of_a_follow_driver_then_restart_gives_every_effect_exactly_once(spark, redis_url, redis_client,
                                                                               tmp_path):
    xml = _copy_cdn_stream(tmp_path)
    lines = [x for x in (WORKFLOWS / "data" / "cdn.log").read_text().splitlines() if x.strip()][:240]
    topics.produce(redis_client, "cdn_logs", [(x, x.encode()) for x in lines], 4)
    wf = workflow_xml.load(xml)
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--follow", "--json",
           "-p", "topology.max.spout.pending=40", "--idle-exit", "2"]
    env = _cli_env(redis_url, tmp_path / "home")
    with open(tmp_path / "first.err", "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    killed = None

    def mid_round() -> tuple[str, int, int] | None:
        assert proc.poll() is None, "the follow driver ended before a round after the first: " + \
            (tmp_path / "first.err").read_text()[-2000:]
        for rid in runs.list_ids(redis_client):
            rec = runs.get(redis_client, rid)
            r = rec.round
            done = redis_client.hlen(keys.task_done(rid, r))
            # mid-round: a batch after the first one, some of its tasks committed
            if r >= 1 and rec.status == runs.RUNNING and done > 0:
                return rid, r, done
        return None

    try:
        state = wait_for(mid_round, 150, "a follow round after the first with a task committed")
        os.kill(proc.pid, signal.SIGKILL)
        killed = state
    finally:
        if proc.poll() is None and not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert killed, (tmp_path / "first.err").read_text()[-2000:]
    run_id, killed_round, _ = killed
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    assert not _committed_to_end(redis_client, wf)

    # restarted in this process (the CLI's part, killed, is above): what `submit --follow --json` prints
    summary = follow.follow(spark, redis_client, redis_url, wf.with_config({"topology.max.spout.pending": "40"}),
                            xml.read_text(), str(xml), idle_exit=2).to_json()
    assert summary["run_id"] == run_id                       # the crashed run, continued
    assert summary["follow"]["resumed"] == [run_id]
    assert summary["round"] > killed_round
    assert _committed_to_end(redis_client, wf)
    valid = valid_cdn_lines(lines)
    # every root complete, or queued at the task where it failed: nothing lost
    assert summary["roots"] == len(lines)
    assert summary["pending"] == summary["failed"] == len(lines) - len(valid) and summary["dead"] == 0
    _assert_aggregates_exactly_once(read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_stream")), valid)


# --- a topic that does not exist -------------------------------------------------------------------
def test_a_topic_that_does_not_exist_is_exit_2_with_a_one_line_error(redis_url, tmp_path):
    xml = _copy_cdn_stream(tmp_path)
    env = _cli_env(redis_url, tmp_path / "home")
    for extra in ([], ["--follow"]):
        out = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), *extra], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2
        err = [x for x in out.stderr.splitlines() if x.strip()]
        assert len(err) == 1 and "topic 'cdn_logs'" in err[0] and "does not exist" in err[0], out.stderr
        assert not os.path.exists(tmp_path / "out")


def test_claims_racing_on_a_real_redis_exactly_one_wins(redis_client):
    """Eight drivers claim one consumer at once (released together by a barrier) after the
    previous owner finished: exactly one takes it, every other one is refused."""
    import threading

    from recovery.model.workflow import Component, SourceImpl, StreamDef, Workflow
    wf = Workflow(name="wf", components=(Component(
        id="src", kind="spout", impl=SourceImpl(type="redis-stream", params=(("topic", "t"),)),
        streams=(StreamDef(fields=("line",)),)),))
    topics.produce(redis_client, "t", [("k", b"x")], 1)
    offsets.plan_ranges(redis_client, wf, "run-old")
    runs.create(redis_client, "run-old", "<xml/>", "{}", None, "local", True)
    runs.update(redis_client, "run-old", status=runs.COMPLETED)
    barrier = threading.Barrier(8)
    won, refused = [], []

    def claim(run_id: str) -> None:
        barrier.wait()
        try:
            offsets.plan_ranges(redis_client, wf, run_id)
            won.append(run_id)
        except topics.TopicError as err:
            refused.append(str(err))

    threads = [threading.Thread(target=claim, args=(f"run-{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7, (won, refused)
    assert redis_client.get(keys.consumer_owner("wf:src", "t")).decode() == won[0]
    assert all(f"run {won[0]}" in msg for msg in refused)
