"""The Redis-stream log source without Spark (fakeredis): KafkaSpout's partition assignment,
producing with a stable key hash, range planning and committing, reading a task's ranges."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from recovery.connectors import log_offsets
from recovery.connectors.redis_stream import offsets, topics
from recovery.connectors.redis_stream import reader as stream_reader
from recovery.connectors.redis_stream import report as stream_report
from recovery.connectors.redis_stream.offsets import assign_partitions
from recovery.connectors.redis_stream.topics import TopicError
from recovery.errors import RecoveryError
from recovery.model.run import RunSpec
from recovery.model.workflow import Component, SourceImpl, StreamDef, Workflow
from recovery.tracking import keys, runs


# --- partition assignment (KafkaUtils.calculatePartitionsForTask) -----------------------------
def _assignment(partitions: int, tasks: int) -> list[list[int]]:
    return [assign_partitions(partitions, tasks, i) for i in range(tasks)]


def test_fewer_tasks_than_partitions_each_task_takes_every_tasks_th_partition():
    assert _assignment(5, 2) == [[0, 2, 4], [1, 3]]
    assert _assignment(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]


def test_as_many_tasks_as_partitions_one_partition_each():
    assert _assignment(4, 4) == [[0], [1], [2], [3]]


def test_more_tasks_than_partitions_leaves_tasks_idle():
    assert _assignment(3, 5) == [[0], [1], [2], [], []]


@pytest.mark.parametrize("partitions,tasks", [(1, 1), (1, 4), (8, 3), (16, 16), (5, 11)])
def test_every_partition_goes_to_exactly_one_task(partitions, tasks):
    got = sorted(p for ps in _assignment(partitions, tasks) for p in ps)
    assert got == list(range(partitions))


def test_task_index_out_of_range_is_rejected():
    with pytest.raises(ValueError):
        assign_partitions(4, 2, 2)


# --- producing ----------------------------------------------------------------------------------
def _offsets(client, topic, p):
    return [topics.entry_offset(eid) for eid, _ in client.xrange(keys.topic_partition(topic, p))]


def test_produce_creates_the_topic_and_gives_consecutive_integer_offsets(fake_redis):
    counts = topics.produce(fake_redis, "t", [(f"k{i}", f"m{i}".encode()) for i in range(300)], 3)
    assert sum(counts.values()) == 300 and set(counts) == {0, 1, 2}
    assert topics.topic_partitions(fake_redis, "t") == 3
    for p in range(3):
        assert _offsets(fake_redis, "t", p) == list(range(counts[p]))
    # appending continues after the last offset, even when the stream was trimmed to nothing
    fake_redis.xtrim(keys.topic_partition("t", 0), maxlen=0, approximate=False)
    more = topics.produce(fake_redis, "t", [(f"k{i}", b"x") for i in range(300)])
    assert _offsets(fake_redis, "t", 0) == list(range(counts[0], counts[0] + more[0]))


def test_producer_hash_is_stable_and_keeps_a_key_in_one_partition_in_order(fake_redis):
    recs = [(f"user{i % 7}", json.dumps({"user": f"user{i % 7}", "n": i}).encode()) for i in range(200)]
    topics.produce(fake_redis, "t", recs, 4)
    seen: dict[str, set[int]] = {}
    for p in range(4):
        ns_by_user: dict[str, list[int]] = {}
        for _, fields in fake_redis.xrange(keys.topic_partition("t", p)):
            obj = json.loads(fields[b"v"])
            seen.setdefault(obj["user"], set()).add(p)
            ns_by_user.setdefault(obj["user"], []).append(obj["n"])
            assert topics.partition_of(obj["user"], 4) == p
        for ns in ns_by_user.values():
            assert ns == sorted(ns)           # a key's records keep their order
    assert all(len(ps) == 1 for ps in seen.values())


def test_producer_hash_is_the_same_in_another_process():
    keys_ = ["a", "user42", "ünïcode", "61.135.2.17 - - [x]"]
    here = [topics.partition_of(k, 7) for k in keys_]
    code = ("import json,sys; from recovery.connectors.redis_stream.topics import partition_of; "
            f"print(json.dumps([partition_of(k, 7) for k in {keys_!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == here


def test_producer_spreads_keys_over_partitions(fake_redis):
    counts = topics.produce(fake_redis, "t", [(f"key-{i}", b"x") for i in range(4000)], 4)
    assert min(counts.values()) > 4000 / 4 * 0.8


def test_partition_count_is_fixed_at_creation(fake_redis):
    topics.create_topic(fake_redis, "t", 4)
    assert topics.create_topic(fake_redis, "t", 4) == 4
    assert topics.create_topic(fake_redis, "t", None) == 4
    with pytest.raises(TopicError, match="has 4 partitions"):
        topics.produce(fake_redis, "t", [("k", b"x")], 3)
    with pytest.raises(TopicError, match="does not exist"):
        topics.produce(fake_redis, "nope", [("k", b"x")])


def test_produce_command(fake_redis, monkeypatch, tmp_path):
    from recovery.cli import main
    from recovery.controlplane import connection
    monkeypatch.setattr(connection, "connect", lambda *a, **k: fake_redis)
    monkeypatch.setattr(connection, "resolve_url", lambda url=None: "redis://fake")
    data = tmp_path / "recs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "user": f"u{i % 3}"}) + "\n" for i in range(30)) + "\n")
    runner = CliRunner()
    r = runner.invoke(main, ["produce", "t", str(data), "--partitions", "2", "--format", "jsonl",
                             "--key-field", "user", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["produced"] == 30
    for p in range(2):
        for _, fields in fake_redis.xrange(keys.topic_partition("t", p)):
            assert topics.partition_of(json.loads(fields[b"v"])["user"], 2) == p
    r = runner.invoke(main, ["produce", "t", str(data), "--partitions", "3"])
    assert r.exit_code == 2 and "has 2 partitions" in r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a"}\n{not json\n')
    before = fake_redis.xlen(keys.topic_partition("t", 0)) + fake_redis.xlen(keys.topic_partition("t", 1))
    r = runner.invoke(main, ["produce", "t", str(bad), "--format", "jsonl"])
    assert r.exit_code == 2 and f"{bad}:2: not JSON" in r.output
    after = fake_redis.xlen(keys.topic_partition("t", 0)) + fake_redis.xlen(keys.topic_partition("t", 1))
    assert after == before                      # nothing written from a file with a bad line
    r = runner.invoke(main, ["produce", "new", str(data)])
    assert r.exit_code == 2 and "give --partitions" in r.output


# --- planning and committing ---------------------------------------------------------------------
def _wf(parallelism: int = 2, topic: str = "t", pending: int = 1000, fmt: str = "text") -> Workflow:
    spout = Component(id="src", kind="spout", parallelism=parallelism,
                      impl=SourceImpl(type="redis-stream", params=(("topic", topic), ("format", fmt))),
                      streams=(StreamDef(fields=("line",)),))
    return Workflow(name="wf", components=(spout,),
                    config=(("topology.max.spout.pending", str(pending)),))


def _ranges(source_json: str) -> dict[int, list[int]]:
    return {int(p): r for p, r in json.loads(source_json)["src"]["ranges"].items()}


def _fill(client, topic: str, partitions: int, per_partition: list[int]) -> None:
    topics.create_topic(client, topic, partitions)
    script = client.register_script(topics._APPEND)
    for p, n in enumerate(per_partition):
        if n:
            script(keys=[keys.topic_meta(topic), keys.topic_partition(topic, p), keys.topic_times(topic, p)],
                   args=[p, "0", *[f"p{p}-m{i}".encode() for i in range(n)]])


def test_bounded_plan_reads_from_committed_to_the_end_and_commit_moves_on(fake_redis):
    wf = _wf()
    _fill(fake_redis, "t", 3, [5, 0, 7])
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    assert _ranges(plan) == {0: [0, 5, 0], 1: [0, 0, 0], 2: [0, 7, 0]}
    assert json.loads(plan)["src"]["consumer"] == "wf:src"
    # nothing is committed before the round settles: planning again gives the same ranges
    assert _ranges(offsets.plan_ranges(fake_redis, wf, "run-1")) == _ranges(plan)
    offsets.commit_ranges(fake_redis, wf, plan)
    assert offsets.committed_offsets(fake_redis, "wf:src", "t") == {0: 5, 1: 0, 2: 7}
    _fill(fake_redis, "t", 3, [2, 3, 0])
    nxt = offsets.plan_ranges(fake_redis, wf, "run-1")
    assert _ranges(nxt) == {0: [5, 7, 0], 1: [0, 3, 0], 2: [7, 7, 0]}
    # an older plan committed late never moves an offset back
    offsets.commit_ranges(fake_redis, wf, nxt)
    offsets.commit_ranges(fake_redis, wf, plan)
    assert offsets.committed_offsets(fake_redis, "wf:src", "t") == {0: 7, 1: 3, 2: 7}
    assert offsets.planned_messages(nxt) == (5, 0)


def test_consumers_are_per_workflow_and_spout(fake_redis):
    _fill(fake_redis, "t", 1, [4])
    a, b = _wf(), _wf().model_copy(update={"name": "other"})
    offsets.commit_ranges(fake_redis, a, offsets.plan_ranges(fake_redis, a, "run-a"))
    assert _ranges(offsets.plan_ranges(fake_redis, b, "run-b")) == {0: [0, 4, 0]}
    assert _ranges(offsets.plan_ranges(fake_redis, a, "run-a")) == {0: [4, 4, 0]}


def test_follow_plan_is_bounded_by_max_spout_pending_per_task_shared_fairly(fake_redis):
    wf = _wf(parallelism=2, pending=10)
    _fill(fake_redis, "t", 4, [100, 3, 100, 100])   # task 0: partitions 0, 2; task 1: 1, 3
    r = _ranges(offsets.plan_ranges(fake_redis, wf, "run-1", follow=True))
    assert {p: r[p][1] - r[p][0] for p in r} == {0: 5, 2: 5, 1: 3, 3: 7}
    assert sum(v[1] - v[0] for v in r.values()) <= 10 * 2
    bounded = _ranges(offsets.plan_ranges(fake_redis, wf, "run-1"))
    assert {p: v[1] for p, v in bounded.items()} == {0: 100, 1: 3, 2: 100, 3: 100}


def test_share_is_fair_and_never_exceeds_budget_or_lag():
    assert log_offsets.share_budget(10, [100, 100]) == [5, 5]
    assert log_offsets.share_budget(10, [2, 100]) == [2, 8]
    assert log_offsets.share_budget(7, [3, 3, 3]) == [3, 2, 2]
    assert log_offsets.share_budget(10, [0, 0]) == [0, 0]
    assert log_offsets.share_budget(0, [5]) == [0]


def test_messages_trimmed_below_the_committed_offset_are_reported_not_waited_for(fake_redis):
    wf = _wf()
    _fill(fake_redis, "t", 2, [10, 10])
    offsets.commit_ranges(fake_redis, wf, json.dumps(
        {"src": {"topic": "t", "consumer": "wf:src", "ranges": {"0": [0, 2, 0], "1": [0, 0, 0]}}}))
    fake_redis.xtrim(keys.topic_partition("t", 0), minid="6-0", approximate=False)     # offsets 0..5 gone
    fake_redis.xtrim(keys.topic_partition("t", 1), maxlen=0, approximate=False)        # everything gone
    r = _ranges(offsets.plan_ranges(fake_redis, wf, "run-1"))
    assert r == {0: [6, 10, 4], 1: [10, 10, 10]}
    assert offsets.planned_messages(offsets.plan_ranges(fake_redis, wf, "run-1")) == (4, 14)
    rows = stream_report.partition_report(fake_redis, wf)
    assert [(x.committed, x.end, x.lag, x.trimmed) for x in rows] == [(2, 10, 8, 4), (0, 10, 10, 10)]
    # its JSON (`status --json`'s partitions): the fields of a stream's row, `first` None when empty
    assert rows[1].to_json() == {"spout": "src", "topic": "t", "consumer": "wf:src", "partition": 1,
                                 "task_index": 1, "committed": 0, "first": None, "end": 10, "lag": 10, "trimmed": 10}


def test_a_topic_that_does_not_exist_is_a_one_line_error_naming_it(fake_redis):
    with pytest.raises(TopicError) as err:
        offsets.plan_ranges(fake_redis, _wf(topic="missing"), "run-1")
    assert "'missing'" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2
    with pytest.raises(TopicError):
        topics.check_topics(fake_redis, _wf(topic="missing"))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_one_reader_per_consumer(fake_redis):
    wf = _wf()
    _fill(fake_redis, "t", 1, [3])
    offsets.plan_ranges(fake_redis, wf, "run-a")
    runs.create(fake_redis, "run-a", "<xml/>", "{}", None, "local", True)   # alive: this process
    with pytest.raises(RecoveryError, match="being read by run run-a"):
        offsets.plan_ranges(fake_redis, wf, "run-b")
    fake_redis.delete(runs.lease_key("run-a"))                                    # crashed mid-round
    with pytest.raises(RecoveryError, match="crashed mid-round"):
        offsets.plan_ranges(fake_redis, wf, "run-b")
    runs.update(fake_redis, "run-a", status=runs.COMPLETED)
    assert _ranges(offsets.plan_ranges(fake_redis, wf, "run-b")) == {0: [0, 3, 0]}


def test_two_racing_claims_exactly_one_wins(fake_redis, monkeypatch):
    """The second claim lands between the first one's check of the old owner (a finished run)
    and its write: the first must see it (WATCH) and be refused, not overwrite it."""
    wf = _wf()
    _fill(fake_redis, "t", 1, [3])
    offsets.plan_ranges(fake_redis, wf, "run-old")
    runs.create(fake_redis, "run-old", "<xml/>", "{}", None, "local", True)
    runs.update(fake_redis, "run-old", status=runs.COMPLETED)
    real_get, raced = runs.get, []

    def get_while_another_claims(client, run_id):
        if not raced:
            raced.append(True)
            offsets.plan_ranges(fake_redis, wf, "run-b")     # wins: run-old is finished
        return real_get(client, run_id)

    monkeypatch.setattr(runs, "get", get_while_another_claims)
    with pytest.raises(RecoveryError, match="being claimed by run run-b"):
        offsets.plan_ranges(fake_redis, wf, "run-a")
    assert raced and fake_redis.get(keys.consumer_owner("wf:src", "t")) == b"run-b"


def test_a_claim_without_a_run_record_yet_holds_while_its_driver_lives(fake_redis):
    wf = _wf()
    _fill(fake_redis, "t", 1, [3])
    offsets.plan_ranges(fake_redis, wf, "run-a")      # submit plans before it records the run
    with pytest.raises(RecoveryError, match="being claimed by run run-a"):
        offsets.plan_ranges(fake_redis, wf, "run-b")
    host = fake_redis.get(keys.consumer_claimer("wf:src", "t")).decode().split()[0]
    fake_redis.set(keys.consumer_claimer("wf:src", "t"), f"{host} {_dead_pid()}")
    assert _ranges(offsets.plan_ranges(fake_redis, wf, "run-b")) == {0: [0, 3, 0]}  # cleared


# --- reading inside a task (a stub runner, no Spark) ---------------------------------------------
class StubRunner:
    def __init__(self, client, wf: Workflow, index: int, source_json: str, replay=None, run_id="run-1"):
        self.client = client
        self.wf = wf
        self.comp = wf.component("src")
        self.component_id = "src"
        self.index = index
        self.spec = RunSpec(run_id, 0, "{}", None, source_json=source_json,
                            root_replay=replay is not None)
        self.stats: dict = {}
        self.logs: list[tuple[str, str]] = []
        self.records: list[tuple] = []
        self.gone: list[tuple] = []

    def log(self, message: str, level: str = "info") -> None:
        self.logs.append((level, message))

    def spout_record(self, mid, decode, raw, stream="default", fmt=""):
        self.records.append((mid, decode(), raw, stream, fmt))

    def message_gone(self, mid, reason, stream="default", fmt=""):
        self.gone.append((mid, reason, stream, fmt))


def _read(runner) -> StubRunner:
    for _ in stream_reader.stream_source(runner):
        pass
    return runner


def test_a_task_reads_its_partitions_ranges_with_partition_offset_ids(fake_redis, monkeypatch):
    monkeypatch.setattr(stream_reader, "READ_BATCH", 3)   # several XRANGE pages
    wf = _wf(parallelism=2)
    _fill(fake_redis, "t", 3, [8, 4, 5])
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    got = [_read(StubRunner(fake_redis, wf, i, plan)) for i in range(2)]
    assert [m for m, *_ in got[0].records] == [(0, o) for o in range(8)] + [(2, o) for o in range(5)]
    assert [m for m, *_ in got[1].records] == [(1, o) for o in range(4)]
    assert got[0].records[0][1] == ["p0-m0"] and got[0].records[0][4] == "text"
    assert not got[0].logs and not got[0].stats


def test_an_idle_task_warns(fake_redis):
    wf = _wf(parallelism=3)
    _fill(fake_redis, "t", 2, [2, 2])
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    idle = _read(StubRunner(fake_redis, wf, 2, plan))
    assert idle.records == [] and idle.stats == {"idle_tasks": 1}
    assert idle.logs[0][0] == "warning" and "more tasks than partitions" in idle.logs[0][1]
    assert "1 tasks are idle" in stream_report.warnings_for(wf, fake_redis)[0]


def test_a_resumed_round_does_not_read_what_was_already_committed(fake_redis):
    wf = _wf(parallelism=1)
    _fill(fake_redis, "t", 1, [6])
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    offsets.commit_ranges(fake_redis, wf, plan)
    assert _read(StubRunner(fake_redis, wf, 0, plan)).records == []


def test_messages_trimmed_after_planning_are_counted(fake_redis):
    wf = _wf(parallelism=1)
    _fill(fake_redis, "t", 1, [10])
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    fake_redis.xtrim(keys.topic_partition("t", 0), minid="4-0", approximate=False)
    r = _read(StubRunner(fake_redis, wf, 0, plan))
    assert [m for m, *_ in r.records] == [(0, o) for o in range(4, 10)]
    assert r.stats == {"trimmed": 4} and r.logs[0][0] == "warning"


def test_root_replay_rereads_every_range_the_run_read(fake_redis):
    wf = _wf(parallelism=1)
    _fill(fake_redis, "t", 1, [3])
    offsets.commit_ranges(fake_redis, wf, offsets.plan_ranges(fake_redis, wf, "run-1"))
    _fill(fake_redis, "t", 1, [2])
    offsets.commit_ranges(fake_redis, wf, offsets.plan_ranges(fake_redis, wf, "run-1"))
    r = _read(StubRunner(fake_redis, wf, 0, "{}", replay=frozenset({1})))
    assert [m for m, *_ in r.records] == [(0, o) for o in range(5)]


def test_root_replay_reports_each_message_of_its_ranges_that_is_gone_trimmed_or_deleted(fake_redis):
    """The run read offsets 0..7; since then 0..2 were trimmed (XTRIM MINID, as retention does)
    and 5 was deleted: each is reported gone (SourceRunner.message_gone) with a reason naming
    topic, partition and offset, and the rest is read as before."""
    wf = _wf(parallelism=1)
    _fill(fake_redis, "t", 1, [8])
    offsets.commit_ranges(fake_redis, wf, offsets.plan_ranges(fake_redis, wf, "run-1"))
    part = keys.topic_partition("t", 0)
    fake_redis.xtrim(part, minid="3-0", approximate=False)
    fake_redis.xdel(part, "5-1")
    r = _read(StubRunner(fake_redis, wf, 0, "{}", replay=frozenset({1})))
    assert [m for m, *_ in r.records] == [(0, o) for o in (3, 4, 6, 7)]
    assert [(m, stream, fmt) for m, _, stream, fmt in r.gone] == [((0, o), "default", "text") for o in (0, 1, 2, 5)]
    reasons = {m[1]: reason for m, reason, *_ in r.gone}
    assert reasons[0] == ("message gone: topic 't' partition 0 offset 0 (entry id 0-1) was trimmed from the "
                          "stream (its retention, or XTRIM) before root replay read it again; it cannot be "
                          "replayed")
    assert "offset 5 (entry id 5-1) was deleted from the stream" in reasons[5]
    assert not r.stats   # (gone on replay: reported per message, not counted as trimmed)


def test_records_written_by_others_are_read_as_json_objects(fake_redis):
    wf = _wf(parallelism=1, fmt="jsonl")
    wf = wf.model_copy(update={"components": (wf.components[0].model_copy(
        update={"streams": (StreamDef(fields=("user", "n")),)}),)})
    topics.create_topic(fake_redis, "t", 1)
    fake_redis.xadd(keys.topic_partition("t", 0), {"user": "ann", "n": "1"}, id="0-1")
    plan = offsets.plan_ranges(fake_redis, wf, "run-1")
    r = _read(StubRunner(fake_redis, wf, 0, plan))
    assert r.records[0][0] == (0, 0) and r.records[0][1] == ["ann", "1"]


def test_an_unknown_format_is_an_error_before_anything_runs(fake_redis):
    _fill(fake_redis, "t", 1, [1])
    with pytest.raises(TopicError, match="format must be one of text, jsonl, got 'csv'"):
        topics.check_topics(fake_redis, _wf(fmt="csv"))


@pytest.mark.parametrize("topic", ["a:1", "a/b", "{t}", "*", "", ".."])
def test_a_topic_name_outside_kafka_s_alphabet_is_refused_and_nothing_is_written(fake_redis, topic):
    """Topics name keys: "a:1" would be topic "a"'s partition 1."""
    with pytest.raises(RecoveryError, match="(invalid|bad) topic name"):
        topics.produce(fake_redis, topic, [("k", b"x")], 2)
    with pytest.raises(RecoveryError, match="invalid topic name"):
        topics.topic_partitions(fake_redis, topic)
    assert fake_redis.keys("*") == []


def test_produce_refuses_a_bad_topic_name_in_one_line(fake_redis, monkeypatch, tmp_path):
    from recovery.cli import main
    from recovery.controlplane import connection
    monkeypatch.setattr(connection, "connect", lambda *a, **k: fake_redis)
    monkeypatch.setattr(connection, "resolve_url", lambda url=None: "redis://fake")
    data = tmp_path / "lines.txt"
    data.write_text("a\nb\n")
    r = CliRunner().invoke(main, ["produce", "a:1", str(data), "--partitions", "2"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: invalid topic name 'a:1': use 1 to 249 letters, digits, '.', '_' "
                                     "or '-' (as Kafka's), other than '.' and '..'"]
    assert fake_redis.keys("*") == []
