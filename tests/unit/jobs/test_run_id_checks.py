"""Every job that takes a run id refuses an unsafe one before it reads or writes anything:
submit (the test kit's too), recover, status, plan, dead, requeue, clear.
The check lives below the jobs (tracking/keys.py check_run_id, applied where it builds a
run's keys), so the CLI, the web view and the test kit all get it."""
from __future__ import annotations

from pathlib import Path

import pytest

from recovery import BasicBolt, testing
from recovery.jobs import clear as jobs_clear
from recovery.jobs import dead_letters, reports
from recovery.jobs import recover as jobs_recover
from recovery.jobs import submit as jobs_submit
from recovery.model.xml.parse import parse_string
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from tests.unit.run_records import create_run

UNSAFE = ["a/../../b", "*", "a:b", "{x}", ".x", ""]


class Echo(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"]])


XML = f'''<workflow xmlns="urn:recovery:workflow:1" name="ids">
  <spout id="words" class="recovery.testing:TestingSpout"><stream fields="word"/></spout>
  <bolt id="echo" class="{__name__}:Echo"><input from="words"/><stream fields="word"/></bolt>
  <bolt id="out"><sink type="jsonl" path="out/x"/><input from="echo"/></bolt>
</workflow>'''


def snapshot(client) -> dict[bytes, bytes]:
    return {k: client.dump(k) for k in client.keys("*")}


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("run_id", UNSAFE)
@pytest.mark.parametrize("job", [
    lambda c, r: reports.run_status(c, r),
    lambda c, r: reports.rounds(c, r),
    lambda c, r: reports.failed(c, r),
    lambda c, r: reports.plan(c, r),
    lambda c, r: reports.partitions(c, r),
    lambda c, r: dead_letters.dead(c, r),
    lambda c, r: dead_letters.requeue(c, r),
    lambda c, r: jobs_clear.clear(c, r, force=True),
    lambda c, r: jobs_recover.reconfigure(c, r, {"recovery.max.attempts": "5"}),
    lambda c, r: jobs_recover.recover(None, c, "redis://unused", r, force=True),
], ids=["status", "rounds", "failed", "plan", "partitions", "dead", "requeue", "clear",
        "reconfigure", "recover"])
def test_each_job_refuses_an_unsafe_run_id_and_changes_nothing(fake_redis, job, run_id):
    create_run(fake_redis, "victim")
    fake_redis.hset(failed_queue.queue_key("victim", "out", 1), "7", b"a queued tuple")
    before = snapshot(fake_redis)
    with pytest.raises(keys.RunIdError):
        job(fake_redis, run_id)
    # `clear '*'` used to match every run's keys (a SCAN pattern) and remove them all
    assert snapshot(fake_redis) == before


@pytest.mark.parametrize("run_id", UNSAFE)
def test_submit_through_the_test_kit_refuses_an_unsafe_run_id_and_writes_no_file(fake_redis, tmp_path, run_id):
    wf = parse_string(XML, base_dir=str(tmp_path / "flows"))
    (tmp_path / "flows").mkdir()
    with pytest.raises(keys.RunIdError):
        # the trial's `a/../../b` wrote its part two folders above the sink's, and a `part-a/` in it
        testing.run_local(wf, fake_redis, inputs={"words": ["x", "y"]}, list_sinks=False, run_id=run_id)
    assert files_under(tmp_path) == {"flows"}
    assert fake_redis.keys("*") == []


def test_submit_refuses_an_empty_run_id_instead_of_making_one_up(fake_redis, tmp_path):
    wf = parse_string(XML, base_dir=str(tmp_path))
    with pytest.raises(keys.RunIdError, match="cannot be empty"):
        jobs_submit.submit(None, fake_redis, "redis://unused", wf, XML, None, run_id="")
    assert fake_redis.keys("*") == [] and files_under(tmp_path) == set()


def test_a_long_workflow_name_still_makes_a_valid_run_id(fake_redis):
    wf = testing.feed(parse_string(XML.replace('name="ids"', f'name="{"n" * 200}"')), "words", ["x"])
    run = testing.run_local(wf, fake_redis)
    assert run.status == runs.COMPLETED and len(run.run_id) <= 128 and run.run_id.startswith("n" * 100)


def test_clear_all_removes_a_run_stored_under_an_id_no_command_accepts(fake_redis):
    """A run an earlier version stored under an unsafe id: `clear --all` still removes it."""
    create_run(fake_redis, "kept")
    legacy = "a/../../b"
    fake_redis.zadd(runs.index_key(), {legacy: 1})
    fake_redis.hset(keys.runs_base() + legacy, "status", "completed")
    fake_redis.hset(keys.runs_base() + legacy + ":done:0", "x:0", b"1")
    removed = jobs_clear.clear_all(fake_redis, force=True)
    assert {"kept", legacy} <= set(removed)
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern())) and runs.list_ids(fake_redis) == []
