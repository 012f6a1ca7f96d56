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
