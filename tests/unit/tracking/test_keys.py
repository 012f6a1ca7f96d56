"""recovery.tracking.keys: every key is built here, so what goes into a key is checked here
(issue 17, 2.2): run ids and topic names that could escape a folder, collide with another key
or make a SCAN pattern match other runs' keys are refused."""
from __future__ import annotations

import pytest

from recovery.errors import RecoveryError
from recovery.model.run import RunIdError
from recovery.tracking import keys


@pytest.mark.parametrize("build", [keys.run_record, keys.run_prefix, keys.lease, keys.failed_set, keys.dead,
                                   lambda r: keys.queue(r, "c", 1), lambda r: keys.task_done(r, 0)])
@pytest.mark.parametrize("run_id", ["a/../../b", "*", "a:b", "x{y}", "", ".x"])
def test_run_keys_refuse_an_unsafe_run_id(build, run_id):
    with pytest.raises(RunIdError):
        build(run_id)


def test_a_run_s_keys_start_with_its_record_key():
    assert keys.run_prefix("r-1").startswith(keys.run_record("r-1") + ":")
    assert keys.run_record("r-1") == keys.runs_base() + "r-1"
    assert keys.runs_pattern() == keys.runs_base() + "*"


@pytest.mark.parametrize("topic", ["a:1", "a/b", "{t}", "*", "", ".", "..", "a b", "t" * 250])
def test_topic_keys_refuse_an_unsafe_topic(topic):
    # "a:1" would be both topic "a:1"'s metadata and partition 1 of topic "a"
    for build in (keys.topic_meta, lambda t: keys.topic_partition(t, 0), lambda t: keys.offsets("wf:s", t)):
        with pytest.raises(RecoveryError, match="invalid topic name"):
            build(topic)


@pytest.mark.parametrize("topic", ["events", "cdn_logs", "a.b-c_1", ".x", "t" * 249])
def test_kafka_topic_names_are_accepted(topic):
    assert keys.topic_meta(topic).endswith(f"topic:{topic}")
    assert keys.topic_meta(topic) != keys.topic_partition(topic, 0)
