"""recovery.jobs.follow without Spark: the checks made before Spark starts, and the stop request
that ends a followed run after its batch."""
from __future__ import annotations

import pytest

from recovery.errors import RecoveryError
from recovery.jobs import follow
from recovery.model.workflow import Component, Input, SinkImpl, SourceImpl, StreamDef, Workflow


def _workflow(source: SourceImpl) -> Workflow:
    return Workflow(name="wf", components=(
        Component(id="src", kind="spout", impl=source, streams=(StreamDef(fields=("line",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
                  inputs=(Input(source="src"),))))


def test_follow_needs_a_topic_and_tracking(fake_redis):
    files = _workflow(SourceImpl(type="file", params=(("path", "x"),)))
    with pytest.raises(RecoveryError, match="--follow needs a spout reading a topic"):
        follow.check(fake_redis, files, follow=True)
    stream = _workflow(SourceImpl(type="redis-stream", params=(("topic", "t"),)))
    with pytest.raises(RecoveryError, match="--follow needs tracking"):
        follow.check(fake_redis, stream, follow=True, tracking=False)


def test_a_topic_that_does_not_exist_is_refused_before_spark_starts(fake_redis):
    stream = _workflow(SourceImpl(type="redis-stream", params=(("topic", "absent"),)))
    with pytest.raises(RecoveryError, match="absent"):
        follow.check(fake_redis, stream, follow=False)


def test_the_first_stop_request_is_kept_and_reported_once():
    heard = []
    stopper = follow.Stopper(on_request=heard.append)
    assert not stopper.requested
    stopper.request("SIGTERM")
    stopper.request("SIGINT")
    assert stopper.requested and stopper.signal == "SIGTERM" and heard == ["SIGTERM"]
