"""Recovery end to end on a real local Spark and a real Redis (docs/guarantees.md)."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack

from recovery.jobs import clear, dead_letters, recover, summary
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key
from tests.integration.conftest import copy_workflow, kill_when_round_0, sink_records, submit
from tests.integration.test_engine import fanout_reference, run_keys, tracking_keys, wordcount_reference

TRANSIENT_SPLIT = {"recovery.inject.s.component": "split", "recovery.inject.s.rate": "0.03"}
TRANSIENT_COUNT = {"recovery.inject.c.component": "count", "recovery.inject.c.rate": "0.02",
                   "recovery.inject.c.attempts": "2"}
FAST_RETRY = {"recovery.retry.delay.period.ms": "10"}


def final_counts(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in sink_records(path):
        r = json.loads(line)
        out[r["word"]] = max(out.get(r["word"], 0), r["count"])
    return out


def test_transient_failures_at_two_positions_on_one_path_recover_exactly(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, {**TRANSIENT_SPLIT, **TRANSIENT_COUNT, **FAST_RETRY})
    failed_components = {p.component for p in s.failed_positions}
    assert failed_components == {"split", "count"} and s.status == "pending"
    out = tmp_path / "out" / "wordcount"
    assert sink_records(out) != wordcount_reference(tmp_path / "data" / "sentences.txt")
    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "completed" and r.pending == 0 and r.dead == 0
    assert r.rounds >= 2          # count's tuples fail their first two attempts
    # nothing lost, nothing twice; the fields-grouped aggregate equals the failure-free one
    assert sink_records(out) == wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert redis_client.scard(failed_queue.failed_key(s.run_id)) == 0
    assert tracking_keys(redis_client, s.run_id) == {state_key(s.run_id, "count")}
    state = {msgpack.unpackb(k): msgpack.unpackb(v)
             for k, v in redis_client.hgetall(state_key(s.run_id, "count")).items()}
    assert state == final_counts(out)


def test_permanent_failures_end_dead_after_max_attempts_and_recover_terminates(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, {
        "recovery.inject.p.component": "count", "recovery.inject.p.match": "acker",
        "recovery.inject.p.mode": "permanent", "recovery.max.attempts": "3", **FAST_RETRY})
    n_failed = sum(p.count for p in s.failed_positions)
    assert n_failed > 0
    r = recover.recover(spark, redis_client, redis_url, s.run_id, max_rounds=10)
    assert r.rounds == 2 and r.status == "dead"
    assert r.dead_tuples == n_failed and r.pending == 0 and r.dead > 0
    dead = dead_letters.dead_letters(redis_client, s.run_id)
    assert len(dead) == n_failed
    assert all(d.attempt == 3 and "injected permanent failure" in d.error for d in dead)
    assert all(d.values[0] == "acker" for d in dead)
    # a second recover has nothing to do and ends at once
    again = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert again.rounds == 0
    # requeue after "fixing the cause" (here: nothing fixed, so they die again, attempts fresh)
    assert dead_letters.requeue_dead(redis_client, s.run_id) == n_failed
    assert summary.summarize(redis_client, runs.get(redis_client, s.run_id)).failed > 0
    third = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert third.rounds == 3 and third.dead_tuples == n_failed


def test_localized_recovery_writes_no_duplicates_where_root_replay_does(spark, redis_url, redis_client, tmp_path):
    """fanout: a failure in `cube`. Localized recovery re-runs cube, join, out; root replay
    re-runs the whole tree, so the branch that succeeded (archive) is written twice."""
    # (a root replay gives the roots new ids, and the rate chooses among them again: enough
    # attempts that no root is chosen every time)
    inject = {"recovery.inject.f.component": "cube", "recovery.inject.f.rate": "0.05", "recovery.max.attempts": "8",
              **FAST_RETRY}
    results = {}
    for strategy in ("localized", "root-replay"):
        xml = copy_workflow("fanout", tmp_path / strategy)
        s = submit(spark, redis_url, redis_client, xml, inject)
        assert {p.component for p in s.failed_positions} == {"cube"}
        r = recover.recover(spark, redis_client, redis_url, s.run_id, strategy=strategy)
        assert r.status == "completed"
        results[strategy] = (sink_records(tmp_path / strategy / "out" / "fanout" / "archive"),
                             sink_records(tmp_path / strategy / "out" / "fanout" / "joined"))
        n_failed = sum(p.count for p in s.failed_positions)
    clean_archive, clean_joined = fanout_reference(tmp_path / "localized" / "data" / "numbers.txt")
    assert results["localized"] == (clean_archive, clean_joined)
    archive_rr = results["root-replay"][0]
    dupes = collections.Counter(archive_rr) - collections.Counter(clean_archive)
    assert sum(dupes.values()) == n_failed > 0      # every replayed root written twice


def test_clear_removes_every_key_of_the_run_and_nothing_else(spark, redis_url, redis_client, tmp_path):
    inject = {"recovery.inject.s.component": "split", "recovery.inject.s.rate": "0.05"}
    a = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path / "a"), inject)
    b = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path / "b"), inject)
    redis_client.set("unrelated:key", "1")
    before_b = {k: redis_client.dump(k) for k in run_keys(redis_client, b.run_id)}
    assert len(run_keys(redis_client, a.run_id)) > 2
    removed = clear.clear(redis_client, a.run_id).keys
    assert runs.record_key(a.run_id) in removed
    assert run_keys(redis_client, a.run_id) == set()
    assert not redis_client.exists(runs.record_key(a.run_id))
    assert a.run_id not in runs.list_ids(redis_client)
    assert {k: redis_client.dump(k) for k in run_keys(redis_client, b.run_id)} == before_b
    assert redis_client.get("unrelated:key") == b"1"
    assert b.run_id in runs.list_ids(redis_client)


def _spawn_submit(xml: Path, redis_url: str, run_id: str, props: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json"]
    for k, v in props.items():
        cmd += ["-p", f"{k}={v}"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# States of the first round (round 0, task commits in its done hash) at which the driver is
# killed, all well before the slowed-down `count` can finish: a spout task committed; a split
# task committed; every split task committed.
def _one_split_task_done(done: set[str]) -> bool:
    return any(f.startswith("split:") for f in done)


def test_kill_9_of_the_driver_then_recover_gives_exact_output(spark, redis_url, redis_client, tmp_path):
    """kill -9 of a `submit` while its first round runs, once a task of `split` committed: the
    resumed round replays the committed tasks' spill files (the spouts', a split task's) and
    runs the others (the other split task, maybe, and count), then `recover` recovers the
    failures: the sink is exact. (Other kill points of a running round are in test_spill.py,
    test_batch.py, test_chains.py and test_table_sinks.py; later phases in test_takeover.py and
    tests/unit/jobs/test_recover.py.)"""
    xml = copy_workflow("wordcount", tmp_path)
    run_id = "crash-mid-round-0"
    go = tmp_path / "let-count-go"    # count holds every word until then: out never commits
    slow = {"recovery.inject.z.component": "count", "recovery.inject.z.mode": "hold",
            "recovery.inject.z.marker": str(go), "recovery.inject.z.rate": "1",
            **TRANSIENT_SPLIT, **FAST_RETRY}
    proc = _spawn_submit(xml, redis_url, run_id, slow)

    # the kill lands mid-run: the round's last task did not commit and the run is crashed
    done = kill_when_round_0(proc, redis_client, run_id, _one_split_task_done, "a split task's commit")
    assert "out:0" not in done, done
    rec = runs.get(redis_client, run_id)
    assert rec.status == runs.RUNNING and runs.status_of(rec) == runs.CRASHED, rec
    go.touch()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert tracking_keys(redis_client, run_id) == {state_key(run_id, "count")}


REPLAY_MODULE = '''
import os
from recovery import BasicBolt, Spout


class Numbers(Spout):
    """0..19, message id = the number."""

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        if self.n >= 20:
            return False
        self.emit([self.n], tup_id=self.n)
        self.n += 1


class SquareFailingOnce(BasicBolt):
    """Squares; fails each number of `test.fail.numbers` the first time it sees it."""

    def prepare(self, conf, context):
        self.fail_on = {int(n) for n in conf["test.fail.numbers"].split(",")}
        self.markers = conf["test.fail.markers"]

    def process(self, tup):
        n = tup["n"]
        marker = os.path.join(self.markers, str(n))
        if n in self.fail_on and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(f"transient failure of {n}")
        self.emit([n, n * n])
'''
REPLAY_XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="replay_class_spout">
  <spout id="numbers" parallelism="1" class="replay_numbers:Numbers">
    <stream fields="n"/>
  </spout>
  <bolt id="square" parallelism="2" class="replay_numbers:SquareFailingOnce">
    <input from="numbers" grouping="shuffle"/>
    <stream fields="n square"/>
  </bolt>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/squares"/>
    <input from="square" grouping="global"/>
  </bolt>
</workflow>
"""


def test_root_replay_of_a_spout_class_replays_failed_roots_that_are_not_the_first(spark, redis_url, redis_client, tmp_path):
    """Roots 13 and 17 fail in `square`. Root replay re-runs the spout class, which emits
    0..12 unselected first: the spout must not be taken for exhausted at 0 (it was, and the
    superseded roots were then missing from the sink of a `completed` run)."""
    (tmp_path / "replay_numbers.py").write_text(REPLAY_MODULE)
    xml = tmp_path / "replay_class_spout.xml"
    xml.write_text(REPLAY_XML)
    markers = tmp_path / "markers"
    markers.mkdir()
    s = submit(spark, redis_url, redis_client, xml, {
        "test.fail.numbers": "13,17", "test.fail.markers": str(markers), **FAST_RETRY})
    assert [p.component for p in s.failed_positions] == ["square"] * len(s.failed_positions)
    assert sum(p.count for p in s.failed_positions) == 2 and s.complete == 18
    r = recover.recover(spark, redis_client, redis_url, s.run_id, strategy="root-replay")
    assert r.status == "completed" and r.rounds == 1
    expected = sorted(json.dumps({"n": n, "square": n * n}, sort_keys=True) for n in range(20))
    assert sink_records(tmp_path / "out" / "squares") == expected


def test_root_replay_of_lines_that_never_parse_ends_them_dead_and_writes_every_other_line_once(redis_client, tmp_path):
    """`recover --strategy root-replay` on a real Redis, through the test kit: a file source,
    a bolt that never parses some lines and fails others once, recovery.max.attempts=3. Each
    replay of a root is an attempt of it: two rounds, the lines that never parse dead with
    their error at attempt 3, every other line once in the sink, nothing left queued."""
    from recovery import testing
    from tests.unit.jobs.test_recover import (
        THREE_ATTEMPTS,
        Parse,
        check_permanent_failures_dead_after_three_attempts,
        parsing,
    )
    Parse.SEEN.clear()
    run = testing.run_local(parsing(tmp_path), redis_client, run_id="never-parse", config=THREE_ATTEMPTS)
    assert run.summary.status == "pending"
    testing.recover_local(run, strategy="root-replay", max_rounds=10)
    check_permanent_failures_dead_after_three_attempts(run)
    assert redis_client.scard(failed_queue.failed_key("never-parse")) == 0
    # every round's replay set and attempts went with the round
    assert not list(redis_client.scan_iter(match=keys.run_key("never-parse", "rootreplay", "*")))
