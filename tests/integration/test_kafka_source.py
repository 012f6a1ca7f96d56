"""The kafka source against a real Kafka-protocol broker (the kafka_broker fixture: Tansu, see
tests/kafka.py for where it differs from Kafka) with a real Redis and a real local Spark:
bounded submits with failures then recover, exact into jsonl and PostgreSQL sinks; the group's
committed offsets as lag tools read them; a follow run fed while it runs, its driver killed
with SIGKILL at two moments and restarted, exact; a follow run whose broker hangs (SIGSTOP),
said on stderr, in `status` and in the metrics, exact once it answers; and every bad input, one
line, exit 2.

Every test has topics and groups of its own (the broker lives for the whole test process)."""
from __future__ import annotations

import collections
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from recovery.connectors import log_offsets
from recovery.connectors.kafka import client as kafka_client
from recovery.connectors.kafka.settings import KafkaSource
from recovery.connectors.kafka.transport import group_key
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import follow, recover, submit
from recovery.jobs import summary as jobs_summary
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys, runs
from tests.helpers import wait_for
from tests.integration.conftest import valid_cdn_lines
from tests.kafka import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
LINES = [x for x in (WORKFLOWS / "data" / "cdn.log").read_text().splitlines() if x.strip()]
FAST = {"recovery.retry.delay.period.ms": "0"}
TRANSIENT = {"recovery.inject.t.component": "normalize", "recovery.inject.t.rate": "0.05", **FAST}


def _names() -> tuple[str, str]:
    tag = secrets.token_hex(4)
    return f"cdn_logs_{tag}", f"cdn_logs_kafka_{tag}"


def _expected(lines: list[str]) -> collections.Counter:
    """The aggregate bolt emits each accepted line's share [key, 1, bytes]: each line's effect
    exactly once is exactly these records (a multiset)."""
    return collections.Counter((v[0], 1, v[4]) for v in valid_cdn_lines(lines))


def _got(records) -> collections.Counter:
    return collections.Counter((r["key"], r["requests"], r["bytes"]) for r in records)


def _workflow(dest: Path, bootstrap: str, topic: str, group: str, sink: str | None = None, **attrs: str) -> Path:
    """workflows/cdn_logs_kafka.xml pointed at the broker, topic and group (and another sink)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(WORKFLOWS / "cdn_logs", dest / "cdn_logs", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    xml = (WORKFLOWS / "cdn_logs_kafka.xml").read_text()
    if "start" in attrs:
        xml = xml.replace(' start="earliest"', "")
    xml = xml.replace('bootstrap="127.0.0.1:9092" topic="cdn_logs" group="cdn_logs_kafka"',
                      f'bootstrap="{bootstrap}" topic="{topic}" group="{group}"'
                      + "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items()))
    if sink is not None:
        xml = xml.replace('<sink type="jsonl" path="out/cdn_logs_kafka"/>', sink)
    path = dest / "cdn_logs_kafka.xml"
    path.write_text(xml)
    return path


def _load(xml: Path, config: dict[str, str] | None = None):
    return workflow_xml.load(xml).with_config(config or {})


def _feed(broker, topic: str, lines: list[str], partitions: int = 4) -> dict[int, int]:
    return broker.produce(topic, [(i % partitions, x.encode()) for i, x in enumerate(lines)])


def _ends(broker, topic: str, partitions: int = 4) -> dict[int, int]:
    return {p: broker.end(topic, p) for p in range(partitions)}


# --- bounded, with failures, then recover --------------------------------------------------------
def test_a_bounded_submit_with_failures_then_recover_is_exact_and_the_group_shows_the_true_lag(
        spark, redis_url, redis_client, kafka_broker, tmp_path):
    topic, group = _names()
    kafka_broker.create_topic(topic, 4)
    lines = LINES[:400]
    _feed(kafka_broker, topic, lines)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    wf = _load(xml, TRANSIENT)
    s = submit.submit(spark, redis_client, redis_url, wf, xml.read_text(), str(xml))
    assert s.roots == 400 and s.failed_positions
    ends = _ends(kafka_broker, topic)
    # Redis holds the read position: every partition read to its end
    assert log_offsets.committed_offsets(redis_client, group, f"kafka.{topic}") == ends
    # the group: the prefix of complete or dead roots, below the first queued root's offset
    held = kafka_broker.committed(group, topic, 4)
    assert all(0 <= held[p] <= ends[p] for p in ends) and held != ends
    rs = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert rs.pending == 0 and rs.dead == len(lines) - len(valid_cdn_lines(lines))
    assert _got(read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_kafka"))) == _expected(lines)
    # every root complete or dead: the group's lag is 0, as kcat or Burrow would read it
    assert kafka_broker.committed(group, topic, 4) == ends
    stored = {int(k): int(v) for k, v in redis_client.hgetall(group_key(group, topic)).items()}
    assert stored == ends

    # a second bounded submit reads only what came since, and the lag shows it first
    more = LINES[400:480]
    _feed(kafka_broker, topic, more)
    parts = jobs_summary.with_topics(redis_client, s, runs.get(redis_client, s.run_id)).partitions or []
    assert sum(p.lag for p in parts) == 80 and all(p.topic == topic for p in parts)
    again = tmp_path / "again"
    xml2 = _workflow(again, kafka_broker.bootstrap, topic, group)
    s2 = submit.submit(spark, redis_client, redis_url, _load(xml2, FAST), xml2.read_text(), str(xml2))
    assert s2.roots == 80
    recover.recover(spark, redis_client, redis_url, s2.run_id)
    assert _got(read_jsonl_dir(str(again / "out" / "cdn_logs_kafka"))) == _expected(more)
    assert kafka_broker.committed(group, topic, 4) == _ends(kafka_broker, topic)


def test_a_bounded_submit_into_postgresql_then_recover_writes_each_row_once(
        spark, redis_url, redis_client, kafka_broker, postgres_url, tmp_path):
    topic, group = _names()
    kafka_broker.create_topic(topic, 3)
    lines = LINES[:300]
    _feed(kafka_broker, topic, lines, 3)
    sink = f'<sink type="postgres" url="{postgres_url}" table="cdn"/>'
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group, sink)
    wf = _load(xml, TRANSIENT)
    s = submit.submit(spark, redis_client, redis_url, wf, xml.read_text(), str(xml))
    assert s.failed_positions
    recover.recover(spark, redis_client, redis_url, s.run_id)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT key, requests, bytes FROM cdn").fetchall()
    assert collections.Counter(tuple(r) for r in rows) == _expected(lines)
    assert kafka_broker.committed(group, topic, 3) == _ends(kafka_broker, topic, 3)


# --- a follow run fed while it runs, its driver killed twice, restarted ---------------------------
def _cli_env(redis_url: str, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"RECOVERY_REDIS_URL": redis_url, "RECOVERY_HOME": str(home),
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    return env


def _kill_follow_when(xml: Path, redis_url: str, redis_client, home: Path, err: Path, what: str, reached) -> tuple:
    """Start `submit --follow` of `xml` in a process of its own, SIGKILL it once `reached(record,
    done markers)` holds for its run, and return (run id, round) then."""
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--follow", "--json",
           "-p", "topology.max.spout.pending=40", "-p", "recovery.auto=false"]
    with open(err, "wb") as fh:
        proc = subprocess.Popen(cmd, env=_cli_env(redis_url, home), stdout=subprocess.DEVNULL, stderr=fh,
                                start_new_session=True)
    killed = None

    def point():
        assert proc.poll() is None, "the follow driver ended before " + what + ": " + err.read_text()[-2000:]
        for rid in runs.list_ids(redis_client):
            rec = runs.get(redis_client, rid)
            if rec.status == runs.RUNNING and reached(rec, redis_client.hlen(keys.task_done(rid, rec.round))):
                return rid, rec.round
        return None

    try:
        killed = wait_for(point, 240, what)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None and not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert runs.status_of(runs.get(redis_client, killed[0])) == runs.CRASHED
    return killed


def test_a_follow_run_fed_while_running_killed_twice_then_restarted_is_exact(
        spark, redis_url, redis_client, kafka_broker, tmp_path):
    topic, group = _names()
    kafka_broker.create_topic(topic, 4)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    fed = LINES[:200]
    _feed(kafka_broker, topic, fed)
    # 1: mid-batch, a batch after the first, some of its tasks committed
    run_id, first = _kill_follow_when(xml, redis_url, redis_client, tmp_path / "home", tmp_path / "1.err",
                                      "a batch after the first with a task committed",
                                      lambda rec, done: rec.round >= 1 and done > 0)
    more = LINES[200:400]
    _feed(kafka_broker, topic, more)
    fed += more
    # 2: the restarted driver resumed the crashed batch and went on: killed in a later batch
    # before any of its tasks committed
    again, second = _kill_follow_when(xml, redis_url, redis_client, tmp_path / "home", tmp_path / "2.err",
                                      "a later batch before its first task commits",
                                      lambda rec, done: rec.round > first + 1 and done == 0)
    assert again == run_id
    last = LINES[400:480]
    _feed(kafka_broker, topic, last)
    fed += last
    wf = _load(xml, {"topology.max.spout.pending": "40", "recovery.auto": "false"})
    out = follow.follow(spark, redis_client, redis_url, wf, xml.read_text(), str(xml), idle_exit=2)
    summary = out.to_json()
    assert summary["run_id"] == run_id and summary["follow"]["resumed"] == [run_id]
    assert summary["round"] > second
    ends = _ends(kafka_broker, topic)
    assert log_offsets.committed_offsets(redis_client, group, f"kafka.{topic}") == ends
    assert summary["roots"] == len(fed)
    rs = recover.recover(spark, redis_client, redis_url, run_id)
    assert rs.pending == 0 and rs.dead == len(fed) - len(valid_cdn_lines(fed))
    assert _got(read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_kafka"))) == _expected(fed)
    assert kafka_broker.committed(group, topic, 4) == ends


# --- a broker that hangs under a follow run ------------------------------------------------------
def test_a_hung_broker_is_said_on_stderr_in_status_and_the_metrics_and_the_run_reads_on_exact(
        spark, redis_url, redis_client, tmp_path):
    from click.testing import CliRunner
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from recovery.cli import main
    from recovery.jobs import metrics
    from tests.kafka import Broker

    broker = Broker()   # its own: the broker the other tests share is never stopped
    broker.start()
    topic, group = _names()
    broker.create_topic(topic, 4)
    xml = _workflow(tmp_path, broker.bootstrap, topic, group, timeout="3")
    fed = LINES[:120]
    _feed(broker, topic, fed)
    err = tmp_path / "follow.err"
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--follow", "-p", "recovery.auto=false"]
    with open(err, "wb") as fh:
        proc = subprocess.Popen(cmd, env=_cli_env(redis_url, tmp_path / "home"), stdout=subprocess.DEVNULL,
                                stderr=fh, start_new_session=True)

    def said(text: str):
        def seen():
            assert proc.poll() is None, f"the follow driver ended: {err.read_text()[-2000:]}"
            return [x for x in err.read_text().splitlines() if text in x]
        return seen

    place = f"broker {broker.bootstrap} (topic {topic!r} partition"
    stopped = False
    try:
        wait_for(said("batch round 0:"), 240, "the follow run's first batch")
        run_id = next(x.split()[1] for x in err.read_text().splitlines() if x.startswith("run "))
        os.kill(broker.proc.pid, signal.SIGSTOP)
        stopped = True
        line = wait_for(said("waiting: "), 240, "the follow run to say it waits for the broker")[0]
        assert place in line and "has not answered within 3 s" in line
        status = CliRunner().invoke(main, ["status", run_id], env={"RECOVERY_REDIS_URL": redis_url})
        assert status.exit_code == 0, status.output
        assert any(x.startswith("warning: waiting: ") and place in x for x in status.output.splitlines())
        scraped = {(s.name, s.labels.get("partition")): s.value for f in text_string_to_metric_families(
            generate_latest(metrics.registry_for(redis_client, lambda: [run_id])).decode()) for s in f.samples
            if s.name.startswith("recovery_source_")}
        assert scraped[("recovery_source_stalls_total", None)] == 1
        assert [k for k, v in scraped.items() if k[0] == "recovery_source_waiting" and v == 1]
        os.kill(broker.proc.pid, signal.SIGCONT)
        stopped = False
        wait_for(said("answers again"), 240, "the follow run to say the broker answers again")
        more = LINES[120:240]
        _feed(broker, topic, more)
        fed += more
        ends = _ends(broker, topic)
        wait_for(lambda: said("batch round")() and
                 log_offsets.committed_offsets(redis_client, group, f"kafka.{topic}") == ends,
                 240, "the follow run to read on to the topic's end")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=240) == 0, err.read_text()[-2000:]
        assert runs.get(redis_client, run_id).source_waiting is None
        rs = recover.recover(spark, redis_client, redis_url, run_id)
        assert rs.pending == 0
        assert _got(read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_kafka"))) == _expected(fed)
    finally:
        if stopped:
            os.kill(broker.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        broker.stop()


# --- bad input: one line, exit 2, nothing stored --------------------------------------------------
def _refused(xml: Path, redis_url: str, home: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), *args],
                         env={**_cli_env(redis_url, home), **(env or {})}, capture_output=True, text=True,
                         timeout=300)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr)
    assert not (xml.parent / "out").exists()
    return lines[0]


def test_an_unreachable_cluster_is_one_line_exit_2(redis_url, redis_client, tmp_path):
    bootstrap = f"127.0.0.1:{free_port()}"
    xml = _workflow(tmp_path, bootstrap, "cdn_logs", "g-unreachable", timeout="2")
    for extra in ([], ["--follow"]):
        line = _refused(xml, redis_url, tmp_path / "home", *extra)
        assert "cannot reach the cluster" in line and bootstrap in line and "'cdn_logs'" in line
    assert runs.list_ids(redis_client) == []


def test_a_missing_topic_is_one_line_exit_2_and_is_not_created(redis_url, redis_client, kafka_broker, tmp_path):
    topic, group = _names()
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    for extra in ([], ["--follow"]):
        line = _refused(xml, redis_url, tmp_path / "home", *extra)
        assert f"kafka topic {topic!r}" in line and "does not exist" in line
    assert runs.list_ids(redis_client) == []


def test_an_unknown_partition_is_one_line_exit_2(redis_url, redis_client, kafka_broker, tmp_path):
    topic, group = _names()
    kafka_broker.create_topic(topic, 2)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    redis_client.hset(keys.offsets(group, f"kafka.{topic}"), mapping={0: 0, 1: 0, 5: 3})
    line = _refused(xml, redis_url, tmp_path / "home")
    assert "has 2 partitions" in line and "partition 5" in line and repr(group) in line


def test_an_authentication_failure_is_one_line_exit_2_and_the_secret_never_shows(
        redis_url, redis_client, kafka_broker, tmp_path):
    """Tansu, started as here, has no SASL users: a SASL client is refused at the handshake
    (with Kafka, a wrong password is refused the same way: one line, exit 2)."""
    topic, group = _names()
    kafka_broker.create_topic(topic, 1)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group, timeout="3")
    xml.write_text(xml.read_text().replace(
        'decode="utf8"/>', 'decode="utf8">\n      <param name="kafka.security.protocol" value="SASL_PLAINTEXT"/>\n'
        '      <param name="kafka.sasl.mechanism" value="PLAIN"/>\n      <param name="kafka.sasl.username" value="u"/>\n'
        '      <param name="kafka.sasl.password" env="KAFKA_TEST_PASSWORD"/>\n    </source>'))
    secret = "s3cr3t-" + secrets.token_hex(4)
    out = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), "-v"],
                         env={**_cli_env(redis_url, tmp_path / "home"), "KAFKA_TEST_PASSWORD": secret},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and secret not in out.stdout + out.stderr
    line = _refused(xml, redis_url, tmp_path / "home", env={"KAFKA_TEST_PASSWORD": secret})
    assert kafka_broker.bootstrap in line and "authentication failed" in line and secret not in line
    # unset: the setting's variable is named, and nothing connects
    line = _refused(xml, redis_url, tmp_path / "home")
    assert "KAFKA_TEST_PASSWORD" in line and "not set" in line


def test_a_committed_offset_the_log_no_longer_holds_is_refused_unless_reset_says_where_to_go(
        redis_url, redis_client, kafka_broker, tmp_path):
    """Tansu never removes records (no retention in memory storage, no DeleteRecords): the
    committed offset is moved past the log's end here, as after a topic was deleted and created
    again; one below the log's start takes the same path (unit: tests/unit/connectors/test_kafka.py)."""
    topic, group = _names()
    kafka_broker.create_topic(topic, 2)
    _feed(kafka_broker, topic, LINES[:10], 2)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    redis_client.hset(keys.offsets(group, f"kafka.{topic}"), mapping={0: 50, 1: 5})
    line = _refused(xml, redis_url, tmp_path / "home")
    assert f"kafka topic {topic!r} partition 0" in line and "committed offset 50" in line
    assert "--reset earliest" in line and "--reset latest" in line
    wf = _load(xml)
    plan = json.loads(log_offsets.plan_ranges(redis_client, wf, "run-reset", reset="earliest"))["logs"]
    assert plan["ranges"] == {"0": [0, 5, 0], "1": [5, 5, 0]}
    plan = json.loads(log_offsets.plan_ranges(redis_client, wf, "run-reset", reset="latest"))["logs"]
    assert plan["ranges"] == {"0": [5, 5, 0], "1": [5, 5, 0]}


# --- records that cannot be decoded: failed tuples, never a crash --------------------------------
RECORDS_XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="kafka_records">
  <config><property name="recovery.retry.delay.period.ms" value="0"/></config>
  <spout id="events" parallelism="2">
    <source type="kafka" bootstrap="{bootstrap}" topic="{topic}" group="{group}" decode="json" max-bytes="200"/>
    <stream fields="id word"/>
  </spout>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/records"/>
    <input from="events" grouping="shuffle"/>
  </bolt>
</workflow>
"""


def test_undecodable_and_oversized_records_are_failed_tuples_then_dead_letters(
        spark, redis_url, redis_client, kafka_broker, tmp_path):
    topic, group = _names()
    kafka_broker.create_topic(topic, 2)
    good = [{"id": i, "word": f"w{i}"} for i in range(40)]
    bad = [b"\xff\xfe not utf-8", b"not json", json.dumps({"id": 99, "word": "x" * 300}).encode(), b"[1, 2]"]
    kafka_broker.produce(topic, [(i % 2, json.dumps(r).encode()) for i, r in enumerate(good)]
                         + [(i % 2, b) for i, b in enumerate(bad)])
    xml = tmp_path / "records.xml"
    xml.write_text(RECORDS_XML.format(bootstrap=kafka_broker.bootstrap, topic=topic, group=group))
    s = submit.submit(spark, redis_client, redis_url, _load(xml), xml.read_text(), str(xml))
    assert s.roots == 44 and s.status != "crashed"
    assert sum(p.count for p in s.failed_positions if p.component == "events") == 4
    rs = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert rs.pending == 0 and rs.dead == 4
    from recovery.jobs.dead_letters import dead_letters
    errors = sorted(d.error for d in dead_letters(redis_client, s.run_id))
    assert any("max-bytes" in e for e in errors), errors
    assert any("utf-8" in e.lower() for e in errors) and any("JSON object" in e for e in errors)
    got = sorted(json.dumps(r, sort_keys=True) for r in read_jsonl_dir(str(tmp_path / "out" / "records")))
    assert got == sorted(json.dumps(r, sort_keys=True) for r in good)
    assert kafka_broker.committed(group, topic, 2) == _ends(kafka_broker, topic, 2)


# --- root replay: the failed roots re-read by offset ---------------------------------------------
def test_root_replay_re_reads_the_failed_roots_by_offset(spark, redis_url, redis_client, kafka_broker, tmp_path):
    """Transient failures only: a replayed root gets new ids, so the lines that never parse
    are left to the localized strategy's dead-letter path."""
    topic, group = _names()
    kafka_broker.create_topic(topic, 2)
    lines = [x for x in LINES if valid_cdn_lines([x])][:200]
    _feed(kafka_broker, topic, lines, 2)
    xml = _workflow(tmp_path, kafka_broker.bootstrap, topic, group)
    # (the rate chooses among the new ids again: enough attempts that no root is chosen every time)
    wf = _load(xml, {**TRANSIENT, "recovery.max.attempts": "8"})
    s = submit.submit(spark, redis_client, redis_url, wf, xml.read_text(), str(xml))
    assert s.failed_positions
    rs = recover.recover(spark, redis_client, redis_url, s.run_id, strategy="root-replay", max_rounds=6)
    assert rs.pending == 0 and rs.dead == 0
    assert _got(read_jsonl_dir(str(tmp_path / "out" / "cdn_logs_kafka"))) == _expected(lines)
    assert kafka_broker.committed(group, topic, 2) == _ends(kafka_broker, topic, 2)


# --- where a new group starts ----------------------------------------------------------------------
def test_a_new_group_starts_where_start_says(redis_client, kafka_broker, tmp_path):
    """The plan a new group gets from start= (no Spark: the driver plans a round's ranges)."""
    topic, _ = _names()
    kafka_broker.create_topic(topic, 2)
    _feed(kafka_broker, topic, LINES[:10], 2)

    def ranges(start: str) -> dict[str, list[int]]:
        xml = _workflow(tmp_path / start.replace(":", "-"), kafka_broker.bootstrap, topic, "g-" + secrets.token_hex(4),
                        start=start)
        return json.loads(log_offsets.plan_ranges(redis_client, _load(xml), "run-" + secrets.token_hex(4)))["logs"]["ranges"]

    assert ranges("earliest") == {"0": [0, 5, 0], "1": [0, 5, 0]}
    assert ranges("latest") == {"0": [5, 5, 0], "1": [5, 5, 0]}
    assert ranges("3") == {"0": [3, 5, 0], "1": [3, 5, 0]}
    assert ranges("2000-01-01T00:00:00") == {"0": [0, 5, 0], "1": [0, 5, 0]}
    # (a time after the last record: Kafka answers "none" and the group starts at the end;
    # Tansu answers offset 0, so that case is not checked here: tests/kafka.py)


# --- where each partition ends -------------------------------------------------------------------
class _HintPastTheEnd:
    """A consumer whose cached high watermark says a partition ends later than it does (what a
    stale fetch response can say): the source must still find the true end by partition EOF."""

    def __init__(self, consumer, extra: int):
        self._consumer, self._extra = consumer, extra

    def get_watermark_offsets(self, tp, cached=False):
        low, high = self._consumer.get_watermark_offsets(tp, cached=cached)
        return low, high + self._extra

    def __getattr__(self, name):
        return getattr(self._consumer, name)


@pytest.mark.parametrize("extra", [0, 50])
def test_every_partition_s_first_offset_and_end_are_found_together(kafka_broker, extra):
    """Partitions of different lengths and an empty one, read at once to their ends; a high
    watermark past a partition's end (50) only makes the source read on from its first record
    (Kafka answers a fetch there with an offset out of range; Tansu answers nothing, and the
    source reads on once its timeout, 3 s here, has passed)."""
    topic, group = _names()
    kafka_broker.create_topic(topic, 5)
    counts = {0: 30, 1: 1, 2: 200, 3: 0, 4: 7}
    kafka_broker.produce(topic, [(p, f"{p}-{i}".encode()) for p, n in counts.items() for i in range(n)])
    src = KafkaSource(spout="logs", bootstrap=kafka_broker.bootstrap, topic=topic, group=group, start="earliest",
                      decode="utf8", max_bytes=1 << 20, timeout=3.0, settings=())
    consumer = kafka_client.consumer(src, **{"auto.offset.reset": "error"})
    try:
        got = kafka_client.bounds(src, _HintPastTheEnd(consumer, extra), 5)
    finally:
        kafka_client.close(consumer)
    assert got == [(0 if n else None, n) for n in counts.values()]
