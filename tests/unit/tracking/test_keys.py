"""recovery.tracking.keys: every key is built here, so what goes into a key is checked here:
run ids and topic names that could escape a folder, collide with another key
or make a SCAN pattern match other runs' keys are refused."""
from __future__ import annotations

import fnmatch

import pytest
from redis.crc import key_slot

from recovery.errors import RecoveryError
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import bucket_key
from recovery.tracking.state import state_key


@pytest.mark.parametrize("build", [runs.record_key, keys.run_prefix, runs.lease_key, failed_queue.failed_key, failed_queue.dead_letters_key,
                                   lambda r: failed_queue.queue_key(r, "c", 1), lambda r: keys.task_done(r, 0)])
@pytest.mark.parametrize("run_id", ["a/../../b", "*", "a:b", "x{y}", "", ".x"])
def test_run_keys_refuse_an_unsafe_run_id(build, run_id):
    with pytest.raises(keys.RunIdError):
        build(run_id)


def test_a_run_s_keys_start_with_its_record_key():
    assert keys.run_prefix("r-1").startswith(runs.record_key("r-1") + ":")
    assert runs.record_key("r-1") == keys.runs_base() + "{r-1}"
    assert keys.runs_pattern() == keys.runs_base() + "*"


def every_key_of(run_id: str) -> list[str]:
    return ([runs.record_key(run_id), runs.lease_key(run_id), failed_queue.failed_key(run_id), failed_queue.dead_letters_key(run_id),
             failed_queue.dead_roots_key(run_id), failed_queue.due_key(run_id), keys.task_done(run_id, 3),
             keys.task_commits(run_id, 3), keys.task_spill(run_id, 3), state_key(run_id, "count"),
             keys.log(run_id), failed_queue.queue_key(run_id, "split", 2), failed_queue.staged_key(run_id, "split", 2, 3, "ab12"),
             keys.root_replay_set(run_id, 1), keys.timed_out(run_id, 0, "c", 1)]
            + [bucket_key(run_id, b) for b in range(keys.LEDGER_BUCKETS)])


def test_one_pattern_finds_every_key_of_a_run_and_none_of_another():
    # Redis's glob and fnmatchcase agree on the pattern's characters (*, [...])
    for key in every_key_of("r-1"):
        assert fnmatch.fnmatchcase(key, keys.run_pattern("r-1")), key
        assert keys.run_of_key(key) == "r-1", key
        assert fnmatch.fnmatchcase(key, keys.runs_pattern())
    for other in ("r-10", "r", "r-1.x"):
        assert not any(fnmatch.fnmatchcase(k, keys.run_pattern("r-1")) for k in every_key_of(other))
    assert keys.run_of_key(keys.runs_base() + "legacy:done:0") == "legacy"
    assert keys.run_of_key(runs.index_key()) is None


def test_transactions_keys_share_a_slot_and_a_run_spreads_over_the_slot_range():
    home = keys.hash_slot(runs.record_key("r-1"))
    for key in (runs.lease_key("r-1"), keys.task_done("r-1", 0), keys.task_commits("r-1", 0), failed_queue.failed_key("r-1"),
                failed_queue.due_key("r-1"), failed_queue.dead_letters_key("r-1"), failed_queue.dead_roots_key("r-1"), keys.task_spill("r-1", 0),
                state_key("r-1", "c"), keys.spout_messages("r-1", "s"), keys.log("r-1")):
        assert keys.hash_slot(key) == home, key
    assert keys.hash_slot(failed_queue.staged_key("r-1", "c", 1, 0, "t")) == keys.hash_slot(failed_queue.queue_key("r-1", "c", 1))
    assert keys.hash_slot(keys.topic_meta("ev")) == keys.hash_slot(keys.topic_partition("ev", 3))
    assert keys.hash_slot(keys.consumer_owner("wf:s", "ev")) == keys.hash_slot(keys.offsets("wf:s", "ev"))
    for run_id in ("r-1", "wordcount-20261125-101010-ab12", "x"):
        # bucket b on the b-th eighth of the slot range from the run's origin: three masters with
        # equal contiguous ranges get 3, 3 and 2 buckets
        slots = [keys.hash_slot(bucket_key(run_id, b)) for b in range(keys.LEDGER_BUCKETS)]
        width = keys.SLOTS // keys.LEDGER_BUCKETS
        gaps = [(slots[(b + 1) % 8] - slots[b]) % keys.SLOTS for b in range(keys.LEDGER_BUCKETS)]
        assert all(width * 3 // 4 <= g <= width * 5 // 4 for g in gaps), (run_id, slots)
        masters = [0, 0, 0]
        for s in slots:
            masters[s * 3 // keys.SLOTS] += 1
        assert sorted(masters) == [2, 3, 3], (run_id, slots)


def test_hash_slot_is_redis_cluster_s():
    # CLUSTER KEYSLOT answers from the Redis Cluster specification's examples
    assert keys.hash_slot("foo") == 12182 and keys.hash_slot("{user1000}.following") == keys.hash_slot("user1000")
    for key in ("foo{}{bar}", "foo{{bar}}zap", "{a}{b}", bucket_key("r-1", 3), failed_queue.queue_key("r-1", "c", 2)):
        assert keys.hash_slot(key) == key_slot(key.encode()), key


@pytest.mark.parametrize("topic", ["a:1", "a/b", "{t}", "*", "", ".", "..", "a b", "t" * 250])
def test_topic_keys_refuse_an_unsafe_topic(topic):
    # "a:1" would be both topic "a:1"'s metadata and partition 1 of topic "a"
    for build in (keys.topic_meta, lambda t: keys.topic_partition(t, 0), lambda t: keys.offsets("wf:s", t)):
        with pytest.raises(RecoveryError, match="invalid topic name"):
            build(topic)


@pytest.mark.parametrize("topic", ["events", "cdn_logs", "a.b-c_1", ".x", "t" * 249])
def test_kafka_topic_names_are_accepted(topic):
    assert keys.topic_meta(topic).endswith(f"topic:{{{topic}}}")
    assert keys.topic_meta(topic) != keys.topic_partition(topic, 0)


def test_the_keys_of_a_run_stay_as_stored_runs_have_them():
    # (runs stored before stay readable: a key's string never changes when its builder moves)
    base = keys.prefix() + "run:"
    assert runs.index_key() == keys.prefix() + "runs"
    assert [runs.record_key("r-1"), runs.lease_key("r-1")] == [base + "{r-1}", base + "{r-1}:lease"]
    assert [failed_queue.failed_key("r-1"), failed_queue.due_key("r-1"), failed_queue.dead_letters_key("r-1"),
            failed_queue.dead_roots_key("r-1"), failed_queue.flush_key("r-1", 4), failed_queue.flushes_key("r-1"),
            failed_queue.gone_key("r-1")] == [
        base + "{r-1}:failed", base + "{r-1}:due", base + "{r-1}:dead", base + "{r-1}:deadroots",
        base + "{r-1}:deadflush:4", base + "{r-1}:deadflushes", base + "{r-1}:gone"]
    assert failed_queue.queue_key("r-1", "c", 2) == base + "{r-1:queue:c:2}"
    assert failed_queue.staged_key("r-1", "c", 2, 3, "t") == base + "{r-1:queue:c:2}:staged:3:t"
    assert state_key("r-1", "count") == base + "{r-1}:state:count"
    assert [bucket_key("r-1", b) for b in (0, 7)] == [base + "{r-1:ledger:0:3}", base + "{r-1:ledger:7:49}"]
