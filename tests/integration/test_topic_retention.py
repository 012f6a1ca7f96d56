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
from recovery.model.failed import FailedTuple
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys

CHUNKS = 20
CHUNK = 300
PARTITIONS = 3

SOAK_XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="retention_soak">
  <config>
    <property name="topology.max.spout.pending" value="2000"/>
    <property name="recovery.auto" value="true"/>
    <property name="recovery.retry.delay.period.ms" value="0"/>
    <property name="recovery.inject.flaky.component" value="out"/>
    <property name="recovery.inject.flaky.rate" value="0.02"/>
  </config>
  <spout id="events" parallelism="3">
    <source type="redis-stream" topic="events" format="jsonl"/>
    <stream fields="id word pad"/>
  </spout>
  <bolt id="out" parallelism="2">
    <sink type="jsonl" path="out/copy"/>
    <input from="events" grouping="shuffle"/>
  </bolt>
</workflow>
"""


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
    for pos in client.smembers(keys.failed_set(run_id)):
        comp, task = pos.decode().rsplit(":", 1)
        out += [FailedTuple.unpack(raw) for raw in client.hvals(keys.queue(run_id, comp, int(task)))]
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

    def on_event(kind: str, info: dict) -> None:
        nonlocal produced
        if kind == "batch":
            # the batch committed: retention trimmed every message it read
            lens.append(sum(redis_client.xlen(k) for k in _stream_keys()))
            used.append(int(redis_client.info("memory")["used_memory"]))
            topic_bytes.append(_topic_bytes(redis_client))
            if info["pending"] and not queued_after_trim:
                queued_after_trim.extend(_queued(redis_client, info["run_id"]))
            if produced < CHUNKS:
                topics.produce(redis_client, "events",
                               [(r["word"], json.dumps(r).encode()) for r in _chunk(produced)])
                produced += 1
        if kind == "trimmed":
            trimmed_lines.append(info["line"])
        if kind in ("batch", "recovery"):
            if produced == CHUNKS and info["pending"] == 0 and _all_read():
                stop.request("done")

    def _all_read() -> bool:
        return all(r["lag"] == 0 for r in report.partition_report(redis_client, wf))

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
