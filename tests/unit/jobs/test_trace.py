"""jobs/trace.py on fakeredis: a root named by its id or by its message id in its source's
terms, its state from the dead roots and the ledger, its failures and replays from the history,
its message id found back from a file's lines or a log source's read ranges; bad input refused
in one line."""
from __future__ import annotations

import json

import pytest

from recovery.errors import BadRequest
from recovery.jobs import trace
from recovery.model.failed import FailedTuple
from recovery.model.record import RunRecord
from recovery.model.workflow import Component, Input, SinkImpl, SourceImpl, StreamDef, Workflow
from recovery.tracking import ids, keys, queue, runs

LOG = Workflow(name="logs", components=(
    Component(id="events", kind="spout", parallelism=1,
              impl=SourceImpl(type="redis-stream", params=(("topic", "t"),)),
              streams=(StreamDef(id="default", fields=("line",)),)),
    Component(id="out", kind="bolt", parallelism=1, impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
              inputs=(Input(source="events", grouping="shuffle"),)),
))


def log_run(client, run_id: str = "t1"):
    lease = runs.create(client, run_id, "<xml/>", LOG.to_task_json(), None, "local", True)
    plan = {"events": {"topic": "t", "partitions": 2, "ranges": {"0": [0, 50, 0], "1": [10, 40, 0]}}}
    client.rpush(keys.replay_ranges(run_id), json.dumps(plan))
    return lease


def failure(client, run_id: str, root: int, round_no: int, attempt: int, dead: bool = False) -> None:
    rec = FailedTuple(id=root + 1, roots=[root], component="out", task=1, src_component="events", values=["x"],
                      error=f"boom {attempt}", attempt=attempt, round=round_no, dead=dead, time=float(round_no))
    staged = queue.staged_writes([], [rec], round_no, 100)
    with client.pipeline(transaction=False) as pipe:
        queue.stage(pipe, run_id, round_no, f"t{round_no}", staged)
        pipe.execute()
    with client.pipeline() as pipe:
        queue.record_failures(pipe, run_id, [rec], history=True)
        pipe.execute()
    queue.apply_staged(client, run_id, round_no, f"t{round_no}", list(staged))


def test_a_message_id_names_its_root_and_a_root_finds_its_message_in_the_ranges_read(fake_redis):
    log_run(fake_redis)
    root = ids.root_id(ids.name_salt("events"), (1, 33))
    failure(fake_redis, "t1", root, 0, 1)
    failure(fake_redis, "t1", root, 1, 2, dead=True)
    by_root = trace.trace(fake_redis, "t1", str(root))
    assert by_root.message_id == "1:33"
    assert (by_root.state, by_root.reason) == ("dead", "retries exhausted")
    assert [(f.round, f.attempt, f.error) for f in by_root.failures] == [(0, 1, "boom 1"), (1, 2, "boom 2")]
    assert [(r.round, r.component, r.task) for r in by_root.replays] == [(1, "out", 1)]
    assert by_root.dead_letter is not None and by_root.dead_letter["key"] == f"out:1:{root + 1}"
    assert trace.trace(fake_redis, "t1", message="1:33") == by_root


def test_bad_input_is_one_line(fake_redis):
    log_run(fake_redis)
    for args, says in [((None, "33"), "invalid message id '33': run t1's spouts take PARTITION:OFFSET"),
                       (("-4", None), "invalid root '-4'"),
                       (("1" * 30, None), "invalid root"),
                       (("9", None), "run t1 holds nothing of root 9"),
                       ((None, "0:1"), "run t1 holds nothing of message '0:1' (root ")]:
        with pytest.raises(Exception) as err:
            trace.trace(fake_redis, "t1", *args)
        assert says in str(err.value) and "\n" not in str(err.value) and err.value.exit_code == 2, args
    with pytest.raises(BadRequest):
        trace.trace(fake_redis, "t1")


def test_message_ids_in_each_sources_terms():
    file_spout = Component(id="f", kind="spout", impl=SourceImpl(type="file", params=(("path", "x"),)),
                           streams=(StreamDef(id="default", fields=("line",)),))
    spark_spout = Component(id="s", kind="spout", impl=SourceImpl(type="spark", params=(("id-field", "k"),)),
                            streams=(StreamDef(id="default", fields=("k",)),))
    assert trace.message_candidates(file_spout, "data/cdn.log:120") == [("cdn.log", 120)]
    assert trace.message_candidates(file_spout, "cdn.log") == []
    assert trace.message_candidates(spark_spout, "42") == [42, "42"]
    assert trace.message_candidates(spark_spout, "a:b") == ["a:b"]
    assert trace.shown_message(("cdn.log", 120)) == "cdn.log:120" and trace.shown_message([3, 9]) == "3:9"


def test_a_file_sources_root_is_found_back_among_its_lines(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"first\n\nthird line\nlast")
    wf = Workflow(name="w", base_dir=str(tmp_path), components=(
        Component(id="lines", kind="spout", impl=SourceImpl(type="file", params=(("path", "in.txt"),)),
                  streams=(StreamDef(id="default", fields=("line",)),)),))
    rec = RunRecord.model_validate({"run_id": "w1", "xml": "", "workflow_json": wf.to_task_json(), "status": "completed"})
    root = ids.root_id(ids.name_salt("lines"), ("in.txt", 7))
    assert trace.search_message(None, wf, rec, root) == (("in.txt", 7), "lines")
    assert trace.search_message(None, wf, rec, 12345) is None


def test_a_root_replayed_under_a_new_id_is_one_story(fake_redis):
    """Root replay re-emits a message under its round's root id: the trace of either id gathers
    the message's failures under both."""
    lease = log_run(fake_redis)
    old = ids.root_id(ids.name_salt("events"), (0, 7))
    new = ids.root_id(ids.name_salt("events", "2"), (0, 7))
    failure(fake_redis, "t1", old, 0, 1)
    runs.update(fake_redis, "t1", lease.generation, root_epoch=2, root_epochs=[0])
    failure(fake_redis, "t1", new, 2, 2, dead=True)
    for asked in (str(old), str(new)):
        t = trace.trace(fake_redis, "t1", asked)
        assert [(f.round, f.attempt) for f in t.failures] == [(0, 1), (2, 2)] and t.state == "dead", asked
        assert t.message_id == "0:7"
    assert trace.trace(fake_redis, "t1", message="0:7").failures == t.failures
