"""Topic retention on a real Redis with a follow run (recovery/connectors/redis_stream/retention.py):
a topic fed chunk after chunk keeps Redis memory flat, and the output is exact though failed
tuples are recovered after their messages were trimmed (their queues hold the values); on a
Redis Cluster, trimming and the topic listing reach every master."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors.redis_stream import report, retention, topics
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import follow
from recovery.jobs import follow_events as events
from recovery.model.failed import FailedTuple
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys
from recovery.tracking import queue as failed_queue
from tests.integration.conftest import topic_copy_xml

CHUNKS = 20
CHUNK = 300
PARTITIONS = 3

SOAK_XML = topic_copy_xml("retention_soak", spouts=3, fields="id word pad", config={
    "topology.max.spout.pending": "2000", "recovery.auto": "true", "recovery.retry.delay.period.ms": "0",
    "recovery.inject.flaky.component": "out", "recovery.inject.flaky.rate": "0.02"})


def _chunk(n: int) -> list[dict]:
    return [{"id": n * CHUNK + i, "word": f"w{i % 17}", "pad": "x" * 200} for i in range(CHUNK)]


def _stream_keys() -> list[str]:
    return [keys.topic_partition("events", p) for p in range(PARTITIONS)]


def _stream_bytes(client) -> int:
    return sum(client.memory_usage(k, samples=0) or 0 for k in _stream_keys())


def _topic_bytes(client) -> int:
    """Every key of the topic: its metadata, partitions, batch times and consumers."""
    return sum(client.memory_usage(k, samples=0) or 0 for k in client.keys(keys.topic_meta("events") + "*"))


def _queued(client, run_id: str) -> list[FailedTuple]:
    out = []
    for pos in client.smembers(failed_queue.failed_key(run_id)):
        comp, task = pos.decode().rsplit(":", 1)
        out += [FailedTuple.unpack(raw) for raw in client.hvals(failed_queue.queue_key(run_id, comp, int(task)))]
    return out


def test_a_topic_fed_without_end_keeps_redis_memory_flat_and_the_output_exact(spark, redis_url, redis_client,
                                                                              tmp_path):
    xml = tmp_path / "soak.xml"
    xml.write_text(SOAK_XML)
    first = tmp_path / "chunk0.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in _chunk(0)))
    res = CliRunner().invoke(main, ["produce", "events", str(first), "--partitions", str(PARTITIONS),
                                    "--format", "jsonl", "--key-field", "word", "--retention", "committed",
                                    "--redis", redis_url])
    assert res.exit_code == 0, res.output
    chunk_bytes = _stream_bytes(redis_client)   # what one chunk costs while it is stored
    assert chunk_bytes > 0
    # 5 messages trimmed by hand before the consumer read them: its run says so, in one line
    head = keys.topic_partition("events", 0)
    lost = [json.loads(fields[b"v"]) for _, fields in redis_client.xrange(head, count=5)]
    assert redis_client.xtrim(head, minid="5-0", approximate=False) == 5

    wf = workflow_xml.load(xml)
    stop = follow.Stopper()
    topic_bytes: list[int] = []
    produced = 1
    used: list[int] = []
    lens: list[int] = []
    queued_after_trim: list[FailedTuple] = []
    trimmed_lines: list[str] = []

    def on_event(event: events.FollowEvent) -> None:
        nonlocal produced
        if isinstance(event, events.Batch):
            # the batch committed: retention trimmed every message it read
            lens.append(sum(redis_client.xlen(k) for k in _stream_keys()))
            used.append(int(redis_client.info("memory")["used_memory"]))
            topic_bytes.append(_topic_bytes(redis_client))
            if event.pending and not queued_after_trim:
                queued_after_trim.extend(_queued(redis_client, event.run_id))
            if produced < CHUNKS:
                topics.produce(redis_client, "events",
                               [(r["word"], json.dumps(r).encode()) for r in _chunk(produced)])
                produced += 1
        if isinstance(event, events.Trimmed):
            trimmed_lines.append(event.line)
        if isinstance(event, events.Batch | events.Recovered):
            if produced == CHUNKS and event.pending == 0 and _all_read():
                stop.request("done")

    def _all_read() -> bool:
        return all(r.lag == 0 for r in report.partition_report(redis_client, wf))

    outcome = follow.follow(spark, redis_client, redis_url, wf, SOAK_XML, str(xml), on_event=on_event, stop=stop)

    assert outcome.follow["batches"] == CHUNKS and outcome.follow["stopped"] == "signal"
    assert outcome.summary is not None and outcome.summary.pending == 0 and outcome.summary.dead == 0
    # exactly once: every record of every chunk, though failed ones were recovered from their
    # queues after the stream had dropped their messages
    want = [r for n in range(CHUNKS) for r in _chunk(n) if r not in lost]
    assert trimmed_lines == ["topic 'events' partition 0: consumer 'retention_soak:events' committed offset 0, "
                             "but the stream now starts at 5: 5 messages were trimmed before they were read"]
    got = read_jsonl_dir(str(tmp_path / "out" / "copy"))
    assert sorted(json.dumps(r, sort_keys=True) for r in got) == sorted(json.dumps(r, sort_keys=True) for r in want)
    assert queued_after_trim and all(t.values is not None for t in queued_after_trim)
    # after every batch the topic held nothing: everything read was committed and trimmed
    assert lens == [0] * CHUNKS
    # memory flat: from the fifth batch on, used_memory moves by less than 3 chunks' worth of
    # stored messages (keeping the topic would add a chunk per batch: 15 chunks by the end)
    # memory flat: the topic's keys hold no message after a batch, and Redis as a whole grows by
    # less than 4 chunks from the first half of the run to the second (keeping the topic would
    # add a chunk per batch: 10 and more). What still grows is the run's own record (its rounds'
    # stats) and its list of read ranges, a few hundred bytes a batch.
    assert max(topic_bytes) < chunk_bytes / 4, (topic_bytes, chunk_bytes)
    half = CHUNKS // 2
    assert max(used[half:]) - min(used[:half]) < 4 * chunk_bytes, (used, chunk_bytes)
    t = report.topic_report(redis_client, "events")
    assert t["retention"] == "committed" and t["messages"] == 0
    assert [c["consumer"] for c in t["consumers"]] == ["retention_soak:events"]
    assert sum(p["end"] for p in t["partition_offsets"]) == CHUNKS * CHUNK
    assert len(want) == CHUNKS * CHUNK - 5


@pytest.mark.parametrize("redis_cluster", [3], indirect=True)
def test_retention_and_the_topic_listing_on_a_redis_cluster(redis_cluster, tmp_path):
    """Every key of a topic is in its slot, consumers' offsets in theirs: trimming reads both,
    and the listing finds topics and consumers on every master."""
    from recovery.connectors.redis_stream import offsets
    from recovery.controlplane import connection

    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(60)))
    runner = CliRunner()
    res = runner.invoke(main, ["produce", "events", str(lines), "--partitions", "3", "--retention", "committed",
                               "--redis", redis_cluster.url], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    client = connection.connect(redis_cluster.url)
    try:
        xml = tmp_path / "soak.xml"
        xml.write_text(SOAK_XML)
        wf = workflow_xml.load(xml)
        client.hset(keys.offsets("other:events", "events"), mapping={"0": 1, "1": 1, "2": 1})
        retention.set_retention(client, "events", retention.parse_retention("committed"))   # finds `other`
        offsets.commit_ranges(client, wf, offsets.plan_ranges(client, wf, "run-1"))
        # `other` committed 1 per partition: trimmed to it, not to where retention_soak is
        assert [p["first"] for p in report.topic_report(client, "events")["partition_offsets"]] == [1, 1, 1]
        client.hset(keys.offsets("other:events", "events"), mapping={"0": 100, "1": 100, "2": 100})
        assert retention.apply_retention(client, "events") == 60 - 3
    finally:
        client.close()
    res = runner.invoke(main, ["topics", "--json", "--redis", redis_cluster.url], catch_exceptions=False)
    [t] = json.loads(res.stdout)
    assert t["topic"] == "events" and t["messages"] == 0 and t["retention"] == "committed"
    assert [c["consumer"] for c in t["consumers"]] == ["other:events", "retention_soak:events"]
    assert all(c["lag"] == 0 for c in t["consumers"])


# --- root replay of a run whose topic was trimmed since it read it ------------------------------
COPY_FAILING_ONCE = '''
import os
from recovery import BasicBolt


class CopyFailingOnce(BasicBolt):
    """Copies each record; fails each id of `test.fail.ids` the first time it sees it."""

    def prepare(self, conf, context):
        self.fail_on = {int(n) for n in conf["test.fail.ids"].split(",")}
        self.markers = conf["test.fail.markers"]

    def process(self, tup):
        n = tup["id"]
        marker = os.path.join(self.markers, str(n))
        if n in self.fail_on and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(f"transient failure of {n}")
        self.emit([n, tup["word"]])
'''


def _reader_xml(name: str, bolt: str, config: str = "") -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="{name}">
  <config>{config}</config>
  <spout id="events" parallelism="2">
    <source type="redis-stream" topic="events" format="jsonl"/>
    <stream fields="id word"/>
  </spout>
  {bolt}
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/{name}"/>
    <input from="{'copy' if 'copy' in bolt else 'events'}" grouping="global"/>
  </bolt>
</workflow>
"""


def _cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_root_replay_after_another_consumer_trimmed_the_topic_makes_the_gone_roots_dead_and_says_so(
        spark, redis_url, redis_client, tmp_path):
    """Two consumers of a topic kept to its last 10 messages per partition: `slow` has failed
    roots pending when `fast`'s run commits, and the topic trims. Root replay of `slow` re-reads
    what is left: the failed roots whose messages are gone are dead letters naming the message
    (topic, partition, offset), never counted complete; `status` warns of them; the sink holds
    every record but theirs, each once."""
    (tmp_path / "copy_once.py").write_text(COPY_FAILING_ONCE)
    markers = tmp_path / "markers"
    markers.mkdir()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = _cli(redis_url, "produce", "events", str(empty), "--partitions", "2", "--format", "jsonl")
    assert code == 0, err
    fast = tmp_path / "fast.xml"
    fast.write_text(_reader_xml("fast", ""))
    # `fast` reads the empty topic first: a known consumer from then on, its offsets at 0
    code, out, err = _cli(redis_url, "submit", str(fast), "--json")
    assert code == 0, err
    records = [{"id": i, "word": f"w{i}"} for i in range(40)]
    data = tmp_path / "events.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, err = _cli(redis_url, "produce", "events", str(data), "--format", "jsonl", "--key-field", "word",
                        "--retention", "10")
    assert code == 0, err
    # where each record is: (partition, offset); nothing trimmed yet (`fast` has read nothing)
    where = {}
    for p in range(2):
        for eid, fields in redis_client.xrange(keys.topic_partition("events", p)):
            where[json.loads(fields[b"v"])["id"]] = (p, int(eid.split(b"-")[0]))
    assert len(where) == 40
    # `slow` fails, once each, the first two and the last record of each partition
    by_partition = {p: sorted(o for q, o in where.values() if q == p) for p in range(2)}
    assert all(len(offs) > 12 for offs in by_partition.values())
    chosen = {(p, o) for p, offs in by_partition.items() for o in (offs[0], offs[1], offs[-1])}
    failing = sorted(i for i, pos in where.items() if pos in chosen)
    slow = tmp_path / "slow.xml"
    slow.write_text(_reader_xml(
        "slow", """<bolt id="copy" parallelism="2" class="copy_once:CopyFailingOnce">
    <input from="events" grouping="shuffle"/>
    <stream fields="id word"/>
  </bolt>""", f"""<property name="test.fail.ids" value="{','.join(map(str, failing))}"/>
    <property name="test.fail.markers" value="{markers}"/>"""))
    code, out, err = _cli(redis_url, "submit", str(slow), "--json")
    assert code == 0, err
    submitted = json.loads(out)
    run_id = submitted["run_id"]
    assert submitted["status"] == "pending" and submitted["failed"] == len(failing) == 6
    assert sum(redis_client.xlen(keys.topic_partition("events", p)) for p in range(2)) == 40   # `fast` holds it
    # `fast` reads and commits: the topic is trimmed to its last 10 messages per partition
    code, out, err = _cli(redis_url, "submit", str(fast), "--json")
    assert code == 0, err
    kept = {(p, int(eid.split(b"-")[0])) for p in range(2)
            for eid, _ in redis_client.xrange(keys.topic_partition("events", p))}
    assert len(kept) == 20
    gone = sorted(i for i in failing if where[i] not in kept)
    assert len(gone) == 4   # the first two of each partition; the last ones are kept

    code, out, err = _cli(redis_url, "recover", run_id, "--strategy", "root-replay", "--json")
    assert code == 0, err
    r = json.loads(out)
    # never counted complete: dead, each with its message named
    assert (r["status"], r["roots"], r["complete"], r["dead"], r["pending"]) == ("dead", 40, 36, 4, 0)
    code, out, err = _cli(redis_url, "dead", run_id, "--json")
    assert code == 0, err
    letters = json.loads(out)["dead"]
    assert sorted(tuple(d["message_id"]) for d in letters) == sorted(where[i] for i in gone)
    for d in letters:
        p, o = d["message_id"]
        assert d["kind"] == "message gone" and d["component"] == "events"
        assert d["error"] == (f"message gone: topic 'events' partition {p} offset {o} (entry id {o}-1) was "
                              "trimmed from the stream (its retention, or XTRIM) before root replay read it "
                              "again; it cannot be replayed")
    # the sink: every record but the gone ones, each once
    got = sorted(json.dumps(x, sort_keys=True) for x in read_jsonl_dir(str(tmp_path / "out" / "slow")))
    assert got == sorted(json.dumps(x, sort_keys=True) for x in records if x["id"] not in gone)
    # status says so, human and JSON
    warning = ("4 roots are dead because their messages were gone from the source when root replay read "
               "them again")
    code, out, err = _cli(redis_url, "status", run_id, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["status"] == "dead" and s["complete"] == 36 and s["dead"] == 4
    assert any(w.startswith(warning) and f"`recovery dead {run_id}`" in w for w in s["warnings"])
    code, out, err = _cli(redis_url, "status", run_id)
    assert code == 0, err
    assert f"warning: {warning}" in out
    # requeued, a gone message is still gone: the replay of its queued record makes it dead again
    code, out, err = _cli(redis_url, "dead", run_id, "--requeue", "--json")
    assert code == 0 and json.loads(out)["requeued"] == 4, err
    code, out, err = _cli(redis_url, "recover", run_id, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert (again["status"], again["complete"], again["dead"]) == ("dead", 36, 4)
    code, out, err = _cli(redis_url, "dead", run_id, "--json")
    assert sorted(d["error"] for d in json.loads(out)["dead"]) == sorted(d["error"] for d in letters)
    assert sum(w.startswith(warning) for w in again["warnings"]) == 1
    assert sorted(json.dumps(x, sort_keys=True) for x in read_jsonl_dir(str(tmp_path / "out" / "slow"))) == got
