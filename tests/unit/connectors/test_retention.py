"""Topic retention (recovery/connectors/redis_stream/retention.py): the policies, the points
they trim to (never past a known consumer's committed offset), trimming at commit and at
produce, the topic listing."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from recovery.connectors import log_offsets
from recovery.connectors.redis_stream import offsets, report, retention, topics
from recovery.connectors.redis_stream.retention import AGE, COMMITTED, COUNT, Retention
from recovery.connectors.redis_stream.topics import TopicError
from recovery.model.workflow import Component, SourceImpl, StreamDef, Workflow
from recovery.tracking import keys


def _wf(name: str = "wf", topic: str = "t") -> Workflow:
    spout = Component(id="src", kind="spout", parallelism=1,
                      impl=SourceImpl(type="redis-stream", params=(("topic", topic),)),
                      streams=(StreamDef(fields=("line",)),))
    return Workflow(name=name, components=(spout,), config=())


def _produce(client, n: int, partitions: int | None = None, topic: str = "t") -> None:
    topics.produce(client, topic, [(f"k{i}", f"m{i}".encode()) for i in range(n)], partitions)


def _stored(client, topic: str = "t", p: int = 0) -> list[int]:
    return [topics.entry_offset(eid) for eid, _ in client.xrange(keys.topic_partition(topic, p))]


def _consume(client, wf: Workflow, run_id: str = "run-1") -> None:
    """One bounded round's plan and commit: the consumer commits to the end."""
    offsets.commit_ranges(client, wf, offsets.plan_ranges(client, wf, run_id))


# --- parsing ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "want"), [
    ("committed", Retention(COMMITTED, 0, "committed")),
    ("1000000", Retention(COUNT, 1000000, "1000000")),
    ("7d", Retention(AGE, 7 * 86400, "7d")),
    ("12h", Retention(AGE, 12 * 3600, "12h")),
    ("30m", Retention(AGE, 1800, "30m")),
    ("90s", Retention(AGE, 90, "90s")),
    ("2w", Retention(AGE, 14 * 86400, "2w")),
])
def test_a_policy_is_committed_a_count_or_an_age(text, want):
    assert retention.parse_retention(text) == want


@pytest.mark.parametrize("text", ["", "0", "-5", "7x", "d7", "1.5h", "0m", "committed!", "7 d d"])
def test_a_bad_policy_is_one_line_naming_the_option(text):
    with pytest.raises(TopicError) as err:
        retention.parse_retention(text)
    assert str(err.value).startswith("--retention: expected 'committed'") and "\n" not in str(err.value)


def test_a_bad_policy_is_refused_by_produce_with_exit_2_and_nothing_written(fake_redis, cli_redis, tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("a\nb\n")
    r = CliRunner().invoke(cli_redis, ["produce", "t", str(data), "--partitions", "2", "--retention", "7 days"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--retention" in r.output
    assert fake_redis.keys("*") == []


# --- trim points --------------------------------------------------------------------------------
def test_keep_from_lowers_every_policy_to_the_slowest_consumer():
    committed, count, age = (retention.parse_retention(x) for x in ("committed", "10", "1h"))
    assert retention.keep_from(committed, 100, None, 0) == 0       # nobody known: keep all
    assert retention.keep_from(committed, 100, 40, 0) == 40
    assert retention.keep_from(count, 100, None, 0) == 90
    assert retention.keep_from(count, 100, 95, 0) == 90
    assert retention.keep_from(count, 100, 30, 0) == 30            # a lagging consumer holds it
    assert retention.keep_from(count, 5, None, 0) == 0
    assert retention.keep_from(age, 100, None, 70) == 70
    assert retention.keep_from(age, 100, 50, 70) == 50


def test_committed_trims_what_every_known_consumer_has_committed(fake_redis):
    _produce(fake_redis, 50, 1)
    retention.set_retention(fake_redis, "t", retention.parse_retention("committed"))
    assert retention.apply_retention(fake_redis, "t") == 0          # no consumer yet: all kept
    slow, fast = _wf("slow"), _wf("fast")
    offsets.plan_ranges(fake_redis, slow, "run-slow")               # known, nothing committed
    _consume(fake_redis, fast, "run-fast")
    assert _stored(fake_redis) == list(range(50))                   # the slow one holds all
    _consume(fake_redis, slow, "run-slow")                          # commit -> trimmed
    assert _stored(fake_redis) == []
    assert fake_redis.xlen(keys.topic_partition("t", 0)) == 0
    _produce(fake_redis, 10)
    _consume(fake_redis, fast, "run-fast")
    assert _stored(fake_redis) == list(range(50, 60))
    # a forgotten consumer no longer holds the topic
    assert retention.drop_consumer(fake_redis, "t", "slow:src")
    _consume(fake_redis, fast, "run-fast")
    assert _stored(fake_redis) == []


def test_count_keeps_that_many_per_partition_but_never_past_a_consumer(fake_redis):
    _produce(fake_redis, 100, 1)
    wf = _wf()
    offsets.plan_ranges(fake_redis, wf, "run-1")                    # a consumer at 0
    retention.set_retention(fake_redis, "t", retention.parse_retention("30"))
    assert retention.apply_retention(fake_redis, "t") == 0
    _consume(fake_redis, wf)
    assert _stored(fake_redis) == list(range(70, 100))
    _produce(fake_redis, 50)
    assert retention.apply_retention(fake_redis, "t") == 30         # to 100, where the consumer is
    assert _stored(fake_redis) == list(range(100, 150))
    _consume(fake_redis, wf)
    assert _stored(fake_redis) == list(range(120, 150))


def test_a_consumer_that_committed_before_the_policy_is_found_when_it_is_set(fake_redis):
    _produce(fake_redis, 20, 1)
    fake_redis.hset(keys.offsets("old:src", "t"), "0", 5)
    retention.set_retention(fake_redis, "t", retention.parse_retention("committed"))
    assert retention.known_consumers(fake_redis, "t") == ["old:src"]
    assert retention.apply_retention(fake_redis, "t") == 5
    assert _stored(fake_redis)[0] == 5


def test_age_trims_batches_produced_before_the_cutoff(fake_redis, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(topics.time, "time", lambda: clock[0])
    _produce(fake_redis, 10, 1)                                    # offsets 0..9 at t=1000
    clock[0] = 2000.0
    _produce(fake_redis, 10)                                       # 10..19 at t=2000
    clock[0] = 3000.0
    _produce(fake_redis, 10)                                       # 20..29 at t=3000
    retention.set_retention(fake_redis, "t", retention.parse_retention("20m"))
    assert retention.apply_retention(fake_redis, "t", now=2100.0) == 0   # the oldest batch is 1100 s old: within 20m
    assert retention.apply_retention(fake_redis, "t", now=2500.0) == 10
    assert _stored(fake_redis) == list(range(10, 30))
    assert retention.apply_retention(fake_redis, "t", now=3300.0) == 10
    assert _stored(fake_redis) == list(range(20, 30))
    assert retention.apply_retention(fake_redis, "t", now=9000.0) == 10   # all older: all go
    assert _stored(fake_redis) == []
    # the batch times of what was trimmed go too (the last batch's stays: its messages' time)
    assert fake_redis.zrange(keys.topic_times("t", 0), 0, -1) == [b"20"]


def test_age_never_trims_messages_without_batch_times(fake_redis):
    topics.create_topic(fake_redis, "t", 1)
    fake_redis.xadd(keys.topic_partition("t", 0), {"v": b"x"}, id="0-1")   # another producer
    retention.set_retention(fake_redis, "t", retention.parse_retention("1s"))
    assert retention.apply_retention(fake_redis, "t", now=1e12) == 0


def test_a_trimmed_committed_offset_is_one_line_in_the_plan(fake_redis):
    _produce(fake_redis, 30, 1)
    wf = _wf()
    fake_redis.xtrim(keys.topic_partition("t", 0), minid="12-0", approximate=False)
    lines = offsets.trimmed_lines(offsets.plan_ranges(fake_redis, wf, "run-1"))
    assert lines == ["topic 't' partition 0: consumer 'wf:src' committed offset 0, but the stream now "
                     "starts at 12: 12 messages were trimmed before they were read"]


# --- the command line ---------------------------------------------------------------------------
@pytest.fixture
def cli_redis(fake_redis, monkeypatch):
    from recovery.cli import main
    from recovery.controlplane import connection
    monkeypatch.setattr(connection, "connect", lambda *a, **k: fake_redis)
    monkeypatch.setattr(connection, "resolve_url", lambda url=None: "redis://fake")
    return main


def test_produce_stores_the_policy_and_topics_lists_it(fake_redis, cli_redis, tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line {i}\n" for i in range(40)))
    runner = CliRunner()
    r = runner.invoke(cli_redis, ["produce", "t", str(data), "--partitions", "2", "--retention", "15", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["retention"] == "15" and out["trimmed"] == 40 - 30   # applied at produce
    r = runner.invoke(cli_redis, ["topics", "--json"])
    assert r.exit_code == 0, r.output
    [t] = json.loads(r.output)
    assert t["topic"] == "t" and t["retention"] == "15" and t["partitions"] == 2 and t["messages"] == 30
    assert all(p["length"] == 15 and p["end"] - p["first"] == 15 for p in t["partition_offsets"])
    _consume(fake_redis, _wf())
    r = runner.invoke(cli_redis, ["topics", "t"])
    assert r.exit_code == 0 and "retention: 15" in r.output
    assert "consumer wf:src: committed {0: " in r.output and "lag 0" in r.output
    r = runner.invoke(cli_redis, ["produce", "t", str(data), "--retention", "committed"])
    assert r.exit_code == 0 and "retention committed" in r.output
    assert report.topic_report(fake_redis, "t")["retention"] == "committed"
    r = runner.invoke(cli_redis, ["topics", "t", "--drop-consumer", "nobody"])
    assert r.exit_code == 2 and "has no consumer 'nobody'" in r.output
    r = runner.invoke(cli_redis, ["topics", "nope"])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_topics_without_any(fake_redis, cli_redis):
    r = CliRunner().invoke(cli_redis, ["topics"])
    assert r.exit_code == 0 and r.output.startswith("no topics")


def test_a_follow_runs_read_ranges_stay_one_entry_while_batches_read_on(fake_redis):
    """Root replay re-reads what a run read: contiguous batches are kept as one range per
    partition, not one list entry per batch; a gap (trimmed before it was read) starts a new one."""

    wf = _wf()
    _produce(fake_redis, 10, 2)
    for _ in range(5):
        offsets.commit_ranges(fake_redis, wf, offsets.plan_ranges(fake_redis, wf, "run-1", follow=True))
        _produce(fake_redis, 10)
    assert fake_redis.llen(keys.replay_ranges("run-1")) == 1
    ends = {p: e for p, (_, e) in enumerate(topics.partition_bounds(fake_redis, "t", 2))}
    read = offsets.committed_offsets(fake_redis, "wf:src", "t")
    spans = log_offsets.replay_plan(fake_redis, "run-1", "src")["spans"]
    assert spans == {str(p): [[0, read[p]]] for p in range(2) if read[p]}
    assert sum(read.values()) == 50 and sum(ends.values()) == 60
    # a gap: the next batch starts above where the last one ended
    fake_redis.hset(keys.offsets("wf:src", "t"), mapping={str(p): ends[p] - 1 for p in range(2)})
    offsets.plan_ranges(fake_redis, wf, "run-1", follow=True)
    assert fake_redis.llen(keys.replay_ranges("run-1")) == 2
    spans = log_offsets.replay_plan(fake_redis, "run-1", "src")["spans"]
    assert spans == {str(p): [[0, read[p]], [ends[p] - 1, ends[p]]] for p in range(2)}


def test_a_policy_that_does_not_parse_never_fails_a_commit(fake_redis, caplog):
    _produce(fake_redis, 10, 1)
    fake_redis.hset(keys.topic_meta("t"), "retention", "forever")      # stored by hand
    wf = _wf()
    _consume(fake_redis, wf)                                            # commits all the same
    assert offsets.committed_offsets(fake_redis, "wf:src", "t") == {0: 10}
    assert "was not trimmed by its retention" in caplog.text and f"(key {keys.topic_meta('t')}, field retention)" in caplog.text
    assert _stored(fake_redis) == list(range(10))
