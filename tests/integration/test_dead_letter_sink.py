"""Dead letters out of Redis, on real servers: a follow run fed poison records writes each of its
dead letters to its jsonl dead-letter sink exactly once and keeps none in Redis; without a sink,
recovery.dead.retention caps what Redis keeps and `recovery status` says what was dropped; a
PostgreSQL dead-letter sink gets each dead letter once, a flush written again included.

The follow runs use the real local Spark session (the `spark` fixture) and the real Redis."""
from __future__ import annotations

import json
from pathlib import Path

import psycopg
from click.testing import CliRunner

from recovery import BasicBolt, testing
from recovery.cli import main
from recovery.connectors.redis_stream import topics
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import dead_sink, follow
from recovery.jobs import follow_events as events
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import queue as failed_queue
from tests.integration.conftest import topic_copy_xml


def _workflow(tmp_path: Path, name: str, attempts: int, dead: str = "",
              extra: dict[str, str] | None = None) -> tuple[Path, Workflow]:
    xml = tmp_path / f"{name}.xml"
    xml.write_text(topic_copy_xml(name, topic=name, dead=dead, config={
        "topology.max.spout.pending": "1000", "recovery.auto": "true", "recovery.max.attempts": str(attempts),
        "recovery.retry.delay.period.ms": "0", **(extra or {})}))
    return xml, workflow_xml.load(xml)


def _produce(client, topic: str, good: range, poison: list[str], partitions: int | None = 2) -> None:
    records = [(f"k{i}", json.dumps({"id": i, "word": f"w{i % 7}"}).encode()) for i in good]
    records += [(p, p.encode()) for p in poison]    # not JSON: the spout cannot decode them
    topics.produce(client, topic, records, partitions)


def _poison(batch: int) -> list[str]:
    return [f"poison {batch}-{i} is not json" for i in range(4)]


def test_a_follow_run_writes_each_poison_record_to_its_dead_letter_sink_once(spark, redis_url, redis_client,
                                                                             tmp_path):
    xml, wf = _workflow(tmp_path, "dlq_jsonl", attempts=2,
                        dead='<dead-letters><sink type="jsonl" path="out/dead"/></dead-letters>')
    _produce(redis_client, "dlq_jsonl", range(0, 50), _poison(0))

    def on_event(event: events.FollowEvent) -> None:
        if isinstance(event, events.Batch) and event.round == 0:   # a second batch, with poison of its own
            _produce(redis_client, "dlq_jsonl", range(50, 80), _poison(1), partitions=None)

    outcome = follow.follow(spark, redis_client, redis_url, wf, xml.read_text(), str(xml), max_batches=2,
                            on_event=on_event)
    s = outcome.summary
    assert s is not None and s.dead == 8 and s.pending == 0 and s.dead_written == 8 and s.dead_tuples == 0
    assert outcome.follow["recovery_rounds"] >= 1     # each poison record was retried once, then died
    dead = read_jsonl_dir(str(tmp_path / "out" / "dead"))
    assert sorted(r["raw"] for r in dead) == sorted(_poison(0) + _poison(1))
    assert {r["component"] for r in dead} == {"events"} and {r["attempt"] for r in dead} == {2}
    assert sorted(r["id"] for r in read_jsonl_dir(str(tmp_path / "out" / "copy"))) == list(range(80))
    # Redis keeps nothing of them: no dead letter, no flush under way
    assert failed_queue.dead_count(redis_client, s.run_id) == 0
    assert failed_queue.pending_flushes(redis_client, s.run_id) == []
    res = CliRunner().invoke(main, ["status", s.run_id, "--redis", redis_url])
    assert res.exit_code == 0 and "dead letters: 0 in Redis, 8 written to the dead-letter sink" in res.output


def test_a_follow_run_caps_the_dead_letters_redis_keeps_and_status_says_what_was_dropped(spark, redis_url,
                                                                                         redis_client, tmp_path):
    xml, wf = _workflow(tmp_path, "dlq_cap", attempts=1,
                        extra={"recovery.dead.retention": "3"})
    _produce(redis_client, "dlq_cap", range(0, 40), _poison(0) + _poison(1))
    outcome = follow.follow(spark, redis_client, redis_url, wf, xml.read_text(), str(xml), max_batches=1)
    s = outcome.summary
    assert s is not None and s.dead == 8 and s.dead_tuples == 3 and s.dead_dropped == 5
    run_id = s.run_id
    res = CliRunner().invoke(main, ["status", run_id, "--redis", redis_url])
    assert res.exit_code == 0, res.output
    assert "5 dead letters were dropped from Redis by recovery.dead.retention" in res.output
    assert "3 in Redis, 0 written to the dead-letter sink, 5 dropped" in res.output
    res = CliRunner().invoke(main, ["status", run_id, "--json", "--redis", redis_url])
    assert json.loads(res.output)["dead_dropped"] == 5
    # `dead` and requeue work on what Redis holds
    res = CliRunner().invoke(main, ["dead", run_id, "--json", "--redis", redis_url])
    kept = json.loads(res.output)["dead"]
    assert len(kept) == 3 and all(d["raw"].startswith("poison") for d in kept)
    res = CliRunner().invoke(main, ["dead", run_id, "--requeue", "--json", "--redis", redis_url])
    assert res.exit_code == 0 and json.loads(res.output)["requeued"] == 3
    assert sum(n for _, _, n in failed_queue.counts(redis_client, run_id)) == 3


# --- PostgreSQL, through the test kit's in-process engine on the real Redis --------------------------
class Upper(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"].upper()])


POISON = [f"w1{i}" for i in range(5)]
DIES = {"recovery.inject.p.component": "upper", "recovery.inject.p.mode": "permanent",
        "recovery.inject.p.match": "w1", "recovery.max.attempts": "1", "recovery.retry.delay.period.ms": "0"}


def _pg_workflow(tmp_path: Path, url: str) -> Workflow:
    return Workflow(name="dlpg", base_dir=str(tmp_path),
                    dead_letters=SinkImpl(type="postgres", params=(("url", url), ("table", "dead_letters"))),
                    components=(
        Component(id="words", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("word",)),)),
        Component(id="upper", kind="bolt", impl=ClassImpl(ref="tests.integration.test_dead_letter_sink:Upper"),
                  streams=(StreamDef(fields=("word",)),), inputs=(Input(source="words"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="upper"),))))


def _pg_dead(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT component, \"values\", attempt FROM dead_letters ORDER BY 2").fetchall()


def test_a_postgres_dead_letter_sink_gets_each_dead_letter_once_a_rewritten_flush_included(
        postgres_url, redis_client, tmp_path, monkeypatch):
    monkeypatch.setattr(failed_queue, "flush_done", lambda *a, **k: False)   # dies after the part's commit
    wf = _pg_workflow(tmp_path, postgres_url)
    run = testing.run_local(wf, redis_client, run_id="dlpg", config=DIES,
                            inputs={"words": [f"w{i}" for i in range(20, 40)] + POISON})
    expected = [("upper", json.dumps([w]), 1) for w in sorted(POISON)]
    assert _pg_dead(postgres_url) == expected
    assert failed_queue.dead_count(redis_client, "dlpg") == len(POISON)   # not confirmed: still in Redis
    monkeypatch.undo()
    assert dead_sink.flush(redis_client, run.workflow, "dlpg", None) == len(POISON)
    assert _pg_dead(postgres_url) == expected
    assert failed_queue.dead_count(redis_client, "dlpg") == 0
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT sink, round FROM recovery_commits WHERE run_id = 'dlpg'").fetchall() == \
            [("dead-letters", 1)]
