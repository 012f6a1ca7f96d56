"""The sandbox on a real Spark and Redis: the next round runs under a scratch run, says what
fails again and what each sink would get, and leaves every key and sink file as it was."""
from __future__ import annotations

from pathlib import Path

import pytest

from recovery.jobs import clear, sandbox
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs, scratch, spill
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
    spill_folder = Path(spill.run_location(runs.get(redis_client, s.run_id)))
    keys_before, files_before = redis_dump(redis_client), folder_bytes(tmp_path)
    spilled_before = folder_bytes(spill_folder)

    result = sandbox.run_sandboxed(spark, redis_client, redis_url, s.run_id)

    assert redis_dump(redis_client) == keys_before and folder_bytes(tmp_path) == files_before
    assert folder_bytes(spill_folder) == spilled_before   # the scratch run's spill files went with it
    assert scratch.scratch_ids(redis_client, s.run_id) == []
    assert len(result.replayed) == sum(queued.values()) and result.round == 1 and not result.code_changed
    assert all(result.failed_again(t) for t in result.replayed)
    assert {f.error.split(":")[0] for f in result.failures} == {"InjectedFailure"}
    assert [(c.component, c.records) for c in result.sinks] == [("out", 0)]
    assert failed_queue.counts(redis_client, s.run_id) == [(c, t, n) for (c, t), n in sorted(queued.items())]


def left_scratch(client, run_id: str, alive: bool = False) -> str:
    """A scratch run as a preview killed mid-round leaves it (`alive`: its process still at it)."""
    rec = runs.get(client, run_id)
    left = scratch.new_id(run_id)
    lease = scratch.create(client, rec, left, rec.workflow_json, rec.round + 1)
    assert scratch.copy_keys(client, run_id, left) > 0   # the keyed state of `count`, at least
    if not alive:
        lease.release()   # the process that held it is gone
    return left


def test_a_scratch_run_a_killed_preview_left_is_cleared_by_the_next_preview_or_clear(spark, redis_url, redis_client,
                                                                                    tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, PERMANENT_COUNT)
    before = redis_dump(redis_client)
    left = left_scratch(redis_client, s.run_id)
    assert scratch.scratch_ids(redis_client, s.run_id) == [left]
    assert sandbox.remove_stale(redis_client, s.run_id) == [left]
    assert redis_dump(redis_client) == before

    live = left_scratch(redis_client, s.run_id, alive=True)
    assert sandbox.remove_stale(redis_client, s.run_id) == []          # a live preview's stays
    killed = left_scratch(redis_client, s.run_id)
    removed = clear.clear(redis_client, s.run_id).keys                 # `clear RUN` takes the killed one's
    assert any(killed in k for k in removed) and not any(live in k for k in removed)
    assert scratch.all_ids(redis_client) == [live]
    clear.clear_all(redis_client)                                      # `clear --all` keeps a live one's
    assert scratch.all_ids(redis_client) == [live]
    clear.clear_all(redis_client, force=True)
    assert scratch.all_ids(redis_client) == [] and redis_client.dbsize() == 0


def test_a_preview_interrupted_after_its_round_ran_leaves_nothing(spark, redis_url, redis_client, tmp_path,
                                                                  monkeypatch):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, PERMANENT_COUNT)
    spill_folder = Path(spill.run_location(runs.get(redis_client, s.run_id)))
    before, files, spilled = redis_dump(redis_client), folder_bytes(tmp_path), folder_bytes(spill_folder)
    real_round = sandbox.engine_rounds.run_round

    def round_then_ctrl_c(*args, **kwargs):   # the round ran and wrote its scratch keys, then Ctrl-C
        real_round(*args, **kwargs)
        assert scratch.all_ids(redis_client) != []
        raise KeyboardInterrupt
    monkeypatch.setattr(sandbox.engine_rounds, "run_round", round_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        sandbox.run_sandboxed(spark, redis_client, redis_url, s.run_id)
    assert redis_dump(redis_client) == before and scratch.all_ids(redis_client) == []
    assert folder_bytes(tmp_path) == files and folder_bytes(spill_folder) == spilled


def test_a_component_that_no_longer_imports_is_previewed_failing_with_its_error(spark, redis_url, redis_client,
                                                                               tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    s = submit(spark, redis_url, redis_client, xml, PERMANENT_COUNT)
    before = redis_dump(redis_client)
    (tmp_path / "wordcount" / "components.py").write_text("raise ImportError('broken on purpose')\n")
    result = sandbox.run_sandboxed(spark, redis_client, redis_url, s.run_id)
    # a task whose class does not load fails its tuples, as in a round: the preview says why
    assert result.code_changed and all(result.failed_again(t) for t in result.replayed)
    assert all(f.error.startswith("count could not start: ClassLoadError") and "broken on purpose" in f.error
               for f in result.failures)
    assert redis_dump(redis_client) == before and scratch.all_ids(redis_client) == []


@pytest.mark.parametrize("redis_cluster", [3], indirect=True)
def test_a_sandboxed_round_on_a_redis_cluster_writes_nothing_of_the_run(spark, redis_cluster, tmp_path):
    """The scratch run's keys spread over the masters as a run's do (its ledger buckets, its
    queues): each copied, queued and cleared in its own slot, the run's keys as they were."""
    from recovery.controlplane.connection import connect
    client = connect(redis_cluster.url)
    try:
        xml = copy_workflow("wordcount", tmp_path)
        s = submit(spark, redis_cluster.url, client, xml, PERMANENT_COUNT)

        def dump() -> dict:
            return {k: (client.type(k), client.dump(k)) for ks in redis_cluster.keys_per_master() for k in ks}
        before = dump()
        result = sandbox.run_sandboxed(spark, client, redis_cluster.url, s.run_id)
        assert dump() == before and scratch.all_ids(client) == []
        assert result.replayed and all(result.failed_again(t) for t in result.replayed)
        clear.clear(client, s.run_id)
    finally:
        client.close()
