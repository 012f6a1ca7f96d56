"""The dead-letter sink and the retention cap, on fakeredis with the test kit's in-process
engine: a run's dead letters leave Redis for its jsonl dead-letter sink once each, a flush whose
driver died before Redis heard of its part is written again without a duplicate, and
recovery.dead.retention drops the oldest of those Redis holds and says so in the summary."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery import BasicBolt, testing
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import dead_letters, dead_sink, summary
from recovery.model.config import PropertyError, check_property
from recovery.model.failed import DEAD_LETTER_FIELDS
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs

POISON = [f"w1{i}" for i in range(6)]     # the words the injection fails for good
WORDS = [f"w{i}" for i in range(20, 40)] + POISON
# every poison word dies at its first failure
DIES = {"recovery.inject.p.component": "upper", "recovery.inject.p.mode": "permanent",
        "recovery.inject.p.match": "w1", "recovery.max.attempts": "1", "recovery.retry.delay.period.ms": "0"}


def workflow(tmp_path: Path, dead: SinkImpl | None) -> Workflow:
    return Workflow(name="dl", base_dir=str(tmp_path), dead_letters=dead, components=(
        Component(id="words", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("word",)),)),
        Component(id="upper", kind="bolt", parallelism=2, impl=ClassImpl(ref="tests.unit.jobs.test_dead_sink:Upper"),
                  streams=(StreamDef(fields=("word",)),), inputs=(Input(source="words"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="upper"),))))


class Upper(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"].upper()])


JSONL = SinkImpl(type="jsonl", params=(("path", "dead"),))


def dead_words(rows: list[dict]) -> list[str]:
    return sorted(json.loads(r["values"])[0] for r in rows)


def test_dead_letters_leave_redis_for_the_sink_each_written_once(fake_redis, tmp_path):
    run = testing.run_local(workflow(tmp_path, JSONL), fake_redis, run_id="d", config=DIES,
                            inputs={"words": WORDS})
    rows = read_jsonl_dir(str(tmp_path / "dead"))
    assert dead_words(rows) == sorted(POISON) and set(rows[0]) == set(DEAD_LETTER_FIELDS)
    assert {r["component"] for r in rows} == {"upper"} and all(r["error"] and r["attempt"] == 1 for r in rows)
    assert failed_queue.dead_count(fake_redis, "d") == 0 and dead_letters.dead_letters(fake_redis, "d") == []
    s = summary.summarize(fake_redis, runs.get(fake_redis, "d"))
    assert s.dead_written == len(POISON) and s.dead == len(POISON) and s.dead_dropped is None
    assert sorted(v[0] for v in run.sinks["out"]) == sorted(w.upper() for w in WORDS if w not in POISON)
    # a flush has nothing left to write: the sink is unchanged
    assert dead_sink.flush(fake_redis, run.workflow, "d", None) == 0
    assert dead_words(read_jsonl_dir(str(tmp_path / "dead"))) == sorted(POISON)


def test_a_flush_whose_driver_died_after_the_write_is_written_again_once(fake_redis, tmp_path, monkeypatch):
    # the part is written, then the driver dies before Redis hears of it
    monkeypatch.setattr(failed_queue, "flush_done", lambda *a, **k: False)
    run = testing.run_local(workflow(tmp_path, JSONL), fake_redis, run_id="d", config=DIES,
                            inputs={"words": WORDS})
    assert dead_words(read_jsonl_dir(str(tmp_path / "dead"))) == sorted(POISON)
    # still in Redis, and listed: nothing is lost while the sink's part is unconfirmed
    assert failed_queue.pending_flushes(fake_redis, "d") == [1]
    assert sorted(d.values[0] for d in dead_letters.dead_letters(fake_redis, "d")) == sorted(POISON)
    monkeypatch.undo()
    assert dead_sink.flush(fake_redis, run.workflow, "d", None) == len(POISON)
    assert dead_words(read_jsonl_dir(str(tmp_path / "dead"))) == sorted(POISON)
    assert failed_queue.pending_flushes(fake_redis, "d") == [] and failed_queue.dead_count(fake_redis, "d") == 0
    assert failed_queue.dead_totals(fake_redis, "d") == (len(POISON), 0)


def test_the_retention_cap_drops_the_oldest_and_the_summary_says_how_many(fake_redis, tmp_path):
    wf = workflow(tmp_path, None)
    testing.run_local(wf, fake_redis, run_id="r", config=DIES, inputs={"words": WORDS})
    held = dead_letters.dead_letters(fake_redis, "r")
    assert len(held) == len(POISON)
    newest = sorted(held, key=lambda d: (d.time or 0.0, failed_queue.dead_key(d)))[-2:]
    assert dead_sink.enforce_retention(fake_redis, wf.with_config({"recovery.dead.retention": "2"}), "r", None) == 4
    assert dead_letters.dead_letters(fake_redis, "r") == sorted(newest, key=failed_queue.dead_key)
    s = summary.summarize(fake_redis, runs.get(fake_redis, "r"))
    assert s.dead_dropped == 4 and s.dead_tuples == 2 and s.dead == len(POISON)   # the roots stay dead
    assert any("4 dead letters were dropped" in w for w in s.warnings or [])
    # an age: everything that died more than a day before `now` goes
    later = max(d.time or 0.0 for d in held) + 86400 + 1
    assert dead_sink.enforce_retention(fake_redis, wf.with_config({"recovery.dead.retention": "1d"}), "r", None,
                                       now=later) == 2
    assert summary.summarize(fake_redis, runs.get(fake_redis, "r")).dead_dropped == len(POISON)


def test_requeue_works_on_what_redis_holds_after_a_cap(fake_redis, tmp_path):
    wf = workflow(tmp_path, None)
    testing.run_local(wf, fake_redis, run_id="q", config=DIES, inputs={"words": WORDS})
    dead_sink.enforce_retention(fake_redis, wf.with_config({"recovery.dead.retention": "3"}), "q", None)
    assert dead_letters.requeue_dead(fake_redis, "q") == 3
    assert sum(n for _, _, n in failed_queue.counts(fake_redis, "q")) == 3


@pytest.mark.parametrize("value, parsed", [("1000", (1000, None)), ("0", (0, None)), ("90s", (None, 90.0)),
                                           ("30m", (None, 1800.0)), ("12h", (None, 43200.0)),
                                           ("7d", (None, 604800.0))])
def test_the_retention_property_takes_a_count_or_an_age(value, parsed):
    from recovery.model.config import settings
    assert settings({"recovery.dead.retention": value}).dead_retention_limit() == parsed


@pytest.mark.parametrize("value", ["", "7w", "d", "-3", "1.5", "0s", "infd"])
def test_a_retention_that_is_neither_is_refused_naming_the_property(value):
    with pytest.raises(PropertyError, match=r"recovery.dead.retention must be a count \(1000\) or an age"):
        check_property("recovery.dead.retention", value)


def test_a_sink_that_refuses_leaves_them_in_redis_and_takes_no_new_flush_until_it_takes_them(fake_redis, tmp_path,
                                                                                             monkeypatch):
    from recovery.connectors import dead_letter_sink
    from recovery.connectors.sink_base import SinkTableError
    from recovery.errors import RunError

    def refuse(*args, **kwargs):
        raise SinkTableError("sink 'dead-letters' (postgres): the database is down")
    monkeypatch.setattr(dead_letter_sink, "write_part", refuse)
    run = testing.run_local(workflow(tmp_path, JSONL), fake_redis, run_id="f", config=DIES,
                            inputs={"words": WORDS})
    assert failed_queue.pending_flushes(fake_redis, "f") == [1] and failed_queue.dead_count(fake_redis, "f") == 6
    held = dead_letters.dead_letters(fake_redis, "f")
    with pytest.raises(RunError, match="being written to the run's dead-letter sink"):
        dead_letters.requeue_dead(fake_redis, "f", tuple_keys=[failed_queue.dead_key(held[0])])
    # more dead letters meanwhile: they wait outside the flush, where the cap and requeue reach them
    late = held[0].model_copy(update={"id": 99, "roots": [99]})
    with fake_redis.pipeline() as pipe:
        failed_queue.record_failures(pipe, "f", [late])
        pipe.execute()
    assert dead_sink.flush(fake_redis, run.workflow, "f", None) == 0
    assert failed_queue.pending_flushes(fake_redis, "f") == [1]
    monkeypatch.undo()
    assert dead_sink.flush(fake_redis, run.workflow, "f", None) == len(POISON) + 1
    assert len(read_jsonl_dir(str(tmp_path / "dead"))) == len(POISON) + 1
    assert failed_queue.dead_count(fake_redis, "f") == 0 and failed_queue.pending_flushes(fake_redis, "f") == []
