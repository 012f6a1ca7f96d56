"""The sandbox on a real Spark and Redis: the next round runs under a scratch run, says what
fails again and what each sink would get, and leaves every key and sink file as it was."""
from __future__ import annotations

from pathlib import Path

from recovery.jobs import sandbox
from recovery.tracking import queue as failed_queue
from recovery.tracking import scratch
from tests.integration.conftest import copy_workflow, submit

PERMANENT_COUNT = {"recovery.inject.p.component": "count", "recovery.inject.p.match": "acker",
                   "recovery.inject.p.mode": "permanent", "recovery.max.attempts": "3",
                   "recovery.retry.delay.period.ms": "10"}


def redis_dump(client) -> dict[bytes, tuple[bytes, bytes | None, bool]]:
    """Every key of the server: its type, its DUMP and whether it expires."""
    return {k: (client.type(k), client.dump(k), client.pttl(k) >= 0) for k in client.scan_iter(count=1000)}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_sandboxed_round_says_what_fails_again_and_writes_nothing_of_the_run(spark, redis_url, redis_client,
                                                                              tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, PERMANENT_COUNT)
    queued = {(p.component, p.task): p.count for p in s.failed_positions}
    assert queued and set(c for c, _ in queued) == {"count"}
    keys_before, files_before = redis_dump(redis_client), folder_bytes(tmp_path)

    result = sandbox.run_sandboxed(spark, redis_client, redis_url, s.run_id)

    assert redis_dump(redis_client) == keys_before and folder_bytes(tmp_path) == files_before
    assert scratch.scratch_ids(redis_client, s.run_id) == []
    assert len(result.replayed) == sum(queued.values()) and result.round == 1 and not result.code_changed
    assert all(result.failed_again(t) for t in result.replayed)
    assert {f.error.split(":")[0] for f in result.failures} == {"InjectedFailure"}
    assert [(c.component, c.records) for c in result.sinks] == [("out", 0)]
    assert failed_queue.counts(redis_client, s.run_id) == [(c, t, n) for (c, t), n in sorted(queued.items())]


def test_a_scratch_run_a_killed_preview_left_is_cleared_by_the_next(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, PERMANENT_COUNT)
    from recovery.tracking import runs
    rec = runs.get(redis_client, s.run_id)
    left = scratch.new_id(s.run_id)
    lease = scratch.create(redis_client, rec, left, rec.workflow_json, rec.round + 1)
    scratch.copy_keys(redis_client, s.run_id, left)
    lease.release()   # the process that held it is gone
    assert scratch.scratch_ids(redis_client, s.run_id) == [left]
    assert sandbox.remove_stale(redis_client, s.run_id) == [left]
    assert scratch.scratch_ids(redis_client, s.run_id) == []
