"""recovery.jobs.follow without Spark: the checks made before Spark starts, and the stop request
that ends a followed run after its batch."""
from __future__ import annotations

import pytest

from recovery.errors import RecoveryError
from recovery.jobs import follow, submit
from recovery.model.workflow import Component, Input, SinkImpl, SourceImpl, StreamDef, Workflow


def _workflow(source: SourceImpl) -> Workflow:
    return Workflow(name="wf", components=(
        Component(id="src", kind="spout", impl=source, streams=(StreamDef(fields=("line",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
                  inputs=(Input(source="src"),))))


def test_follow_needs_a_topic_and_tracking():
    files = _workflow(SourceImpl(type="file", params=(("path", "x"),)))
    with pytest.raises(RecoveryError, match="--follow needs a spout reading a topic"):
        follow.prepare(files, "<xml/>", None)
    stream = _workflow(SourceImpl(type="redis-stream", params=(("topic", "t"),)))
    with pytest.raises(RecoveryError, match="--follow needs tracking"):
        follow.prepare(stream, "<xml/>", None, tracking=False)
    with pytest.raises(RecoveryError, match="invalid run id"):
        follow.prepare(stream, "<xml/>", None, run_id="../x")
    assert follow.prepare(stream, "<xml/>", None, run_id="x").run_id == "x"


def test_a_topic_that_does_not_exist_is_refused_before_spark_starts(fake_redis):
    stream = _workflow(SourceImpl(type="redis-stream", params=(("topic", "absent"),)))
    with pytest.raises(RecoveryError, match="absent"):
        follow.check_redis(fake_redis, follow.prepare(stream, "<xml/>", None))
    with pytest.raises(RecoveryError, match="absent"):   # a bounded submit of it too
        submit.check_redis(fake_redis, submit.prepare(stream, "<xml/>", None))


def test_the_first_stop_request_is_kept_and_reported_once():
    heard = []
    stopper = follow.Stopper(on_request=heard.append)
    assert not stopper.requested
    stopper.request("SIGTERM")
    stopper.request("SIGINT")
    assert stopper.requested and stopper.signal == "SIGTERM" and heard == ["SIGTERM"]


def test_a_round_whose_task_found_its_broker_unanswering_runs_again_once_it_answers(monkeypatch):
    from recovery.connectors.log_offsets import SourceUnanswered
    from recovery.jobs import follow_events, settle
    # what crosses from a Spark task: the worker's traceback, as text
    spark_error = RuntimeError(
        "Job aborted due to stage failure: ... Traceback (most recent call last):\n  File ...\n"
        "recovery.connectors.log_offsets.SourceUnanswered: kafka topic 'cdn' at 127.0.0.1:9092 (spout 'logs'): "
        "partition 2 stopped answering at offset 17 (planned up to 40)\n")
    found = SourceUnanswered.raised_by(spark_error)
    assert found is not None and (found.server, found.topic, found.partition) == ("127.0.0.1:9092", "cdn", 2)
    assert found.place() == "broker 127.0.0.1:9092 (topic 'cdn' partition 2)"
    assert SourceUnanswered.raised_by(RuntimeError("a bolt raised ValueError")) is None

    tries: list[int] = []

    def round_that_fails_twice(spark, client, wf, spec):
        tries.append(spec.round)
        if len(tries) < 3:
            raise spark_error
        return "settled"

    monkeypatch.setattr(settle, "run_and_settle", round_that_fails_twice)
    said: list = []
    spec = type("Spec", (), {"run_id": "r", "round": 4, "generation": None})()
    got = follow._run_micro_batch(None, None, None, spec, follow.Stopper(), said.append, poll=0)
    assert got == "settled" and tries == [4, 4, 4]
    assert [type(e) for e in said] == [follow_events.SourceWaiting, follow_events.SourceAnswered]
    assert said[0].place == "broker 127.0.0.1:9092 (topic 'cdn' partition 2)"
    # anything else still ends the run
    monkeypatch.setattr(settle, "run_and_settle", lambda *a: (_ for _ in ()).throw(ValueError("no")))
    with pytest.raises(ValueError):
        follow._run_micro_batch(None, None, None, spec, follow.Stopper(), said.append, poll=0)
