"""The kafka source's pure parts: where a group goes on from its committed offset, the acked
prefix a group is committed (root ids bit-identical to the spout tasks'), its settings and
secrets, the `<source type="kafka">` XML both ways, and the decoders of its records. The source
against a real broker: tests/integration/test_kafka_source.py."""
from __future__ import annotations

import numpy as np
import pytest

from recovery.connectors import files, log_offsets
from recovery.connectors.kafka.settings import source_of
from recovery.connectors.kafka.transport import resume_at
from recovery.connectors.log_offsets import TopicError
from recovery.model.failed import FailedTuple
from recovery.model.kafka_source import settings_problem
from recovery.model.run import RunSpec
from recovery.model.xml import parse as workflow_xml
from recovery.model.xml.write import to_xml
from recovery.runtime.roots import SpoutRoots
from recovery.tracking import queue as failed_queue

XML = """<workflow xmlns="urn:recovery:workflow:1" name="k">
  <spout id="logs" parallelism="2">
    <source type="kafka" bootstrap="b1:9092,b2:9092" topic="cdn-logs" decode="json" start="2026-11-28T10:00:00">
      <param name="kafka.security.protocol" value="SASL_SSL"/>
      <param name="kafka.sasl.password" env="KAFKA_PW"/>
      <param name="kafka.ssl.key.password" file="secrets/key.txt"/>
    </source>
    <stream fields="a b"/>
  </spout>
  <bolt id="out"><sink type="jsonl" path="out"/><input from="logs"/></bolt>
</workflow>
"""


# --- where a committed group goes on -------------------------------------------------------------
def test_a_committed_offset_the_log_holds_is_where_the_group_goes_on():
    assert resume_at("t", "g", 0, 5, 2, 9, None) == (5, 0)
    assert resume_at("t", "g", 0, 9, 2, 9, None) == (9, 0)
    assert resume_at("t", "g", 0, 7, None, 7, None) == (7, 0)   # empty: first is None, at its end


def test_a_committed_offset_below_the_log_start_is_refused_unless_reset_decides():
    with pytest.raises(TopicError, match=r"committed offset 3, but the log now starts at 10.*--reset earliest"):
        resume_at("t", "g", 1, 3, 10, 20, None)
    assert resume_at("t", "g", 1, 3, 10, 20, "earliest") == (10, 7)
    assert resume_at("t", "g", 1, 3, 10, 20, "latest") == (20, 17)


def test_a_committed_offset_past_the_end_is_refused_unless_reset_decides():
    with pytest.raises(TopicError, match=r"partition ends at 4 \(was the topic deleted"):
        resume_at("t", "g", 0, 50, 0, 4, None)
    assert resume_at("t", "g", 0, 50, 0, 4, "earliest") == (0, 0)
    assert resume_at("t", "g", 0, 50, 0, 4, "latest") == (4, 0)


# --- the acked prefix ------------------------------------------------------------------------------
def _queue(client, run_id: str, roots: list[int]) -> None:
    client.sadd(failed_queue.failed_key(run_id), "split:3")
    for i, r in enumerate(roots):
        client.hset(failed_queue.queue_key(run_id, "split", 3), str(i), FailedTuple(id=100 + i, roots=[r]).pack())


@pytest.mark.parametrize("epoch", [0, 4])
def test_the_prefix_stops_at_the_first_queued_root_and_uses_the_spout_tasks_root_ids(fake_redis, epoch):
    spec = RunSpec("run-1", 0, "{}", None, True, root_epoch=epoch)
    tasks_ids = SpoutRoots(spec, "logs", {}, lambda: fake_redis)
    assert [int(x) for x in log_offsets.root_ids("logs", epoch, 1, np.arange(3, dtype=np.uint64))] == \
        [tasks_ids.root_id((1, o)) for o in range(3)]
    _queue(fake_redis, "run-1", [tasks_ids.root_id((1, 70_000)), tasks_ids.root_id((0, 12)),
                                 tasks_ids.root_id((0, 40))])
    prefix = log_offsets.acked_prefix(fake_redis, "run-1", "logs", [0, epoch], {0: 100, 1: 80_000, 2: 9}, {})
    assert prefix == {0: 12, 1: 70_000, 2: 9}
    # from a prefix already known, the scan starts there
    assert log_offsets.acked_prefix(fake_redis, "run-1", "logs", [epoch], {0: 100}, {0: 13}) == {0: 40}


def test_with_nothing_queued_the_prefix_is_where_the_group_read_to(fake_redis):
    assert log_offsets.acked_prefix(fake_redis, "run-1", "logs", [0], {0: 5, 3: 0}, {}) == {0: 5, 3: 0}


# --- settings and secrets --------------------------------------------------------------------------
def test_the_xml_reads_and_writes_back_the_same_source(tmp_path):
    path = tmp_path / "k.xml"
    path.write_text(XML)
    wf = workflow_xml.load(path)
    again = workflow_xml.parse_string(to_xml(wf), base_dir=wf.base_dir)
    assert again.component("logs") == wf.component("logs")
    assert '<param name="kafka.sasl.password" env="KAFKA_PW"/>' in to_xml(wf)


def test_secrets_come_from_the_environment_or_a_file_and_are_masked(tmp_path, monkeypatch):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("key-secret-1\n")
    path = tmp_path / "k.xml"
    path.write_text(XML)
    wf = workflow_xml.load(path)
    src = source_of(wf, wf.component("logs"))
    assert src.group == "k:logs" and src.decode == "json" and src.bootstrap == "b1:9092,b2:9092"
    with pytest.raises(TopicError, match=r"kafka setting sasl.password comes from \$KAFKA_PW, which is not set"):
        src.config()
    monkeypatch.setenv("KAFKA_PW", "pw-from-env")
    conf = src.config()
    assert conf["sasl.password"] == "pw-from-env" and conf["ssl.key.password"] == "key-secret-1"
    assert conf["enable.auto.commit"] is False and conf["enable.partition.eof"] is True
    assert src.mask("login pw-from-env key-secret-1 failed") == "login *** *** failed"


@pytest.mark.parametrize("attrs,params,problem", [
    ({"bootstrap": "h:1", "topic": "t"}, [], None),
    ({"bootstrap": "h:1", "topic": "t", "start": "latest", "decode": "bytes", "max-bytes": "10"}, [], None),
    ({"bootstrap": "h", "topic": "t"}, [], "bootstrap= must be HOST:PORT"),
    ({"bootstrap": "h:1", "topic": "a b"}, [], "invalid topic name"),
    ({"bootstrap": "h:1", "topic": "t", "start": "soon"}, [], "start= must be"),
    ({"bootstrap": "h:1", "topic": "t", "decode": "avro"}, [], "decode= must be one of"),
    ({"bootstrap": "h:1", "topic": "t", "max-bytes": "0"}, [], "max-bytes= must be a positive"),
    ({"bootstrap": "h:1", "topic": "t", "partitions": "2"}, [], "has no partitions= attribute"),
    ({"bootstrap": "h:1", "topic": "t"}, [("sasl.username", {"value": "u"})], "named kafka.<setting>"),
    ({"bootstrap": "h:1", "topic": "t"}, [("kafka.sasl.password", {"value": "pw"})], "is a secret"),
    ({"bootstrap": "h:1", "topic": "t"}, [("kafka.x", {"value": "1", "env": "X"})], "exactly one of"),
    ({"bootstrap": "h:1", "topic": "t"}, [("kafka.enable.auto.commit", {"value": "true"})], "sets enable.auto.commit"),
])
def test_a_kafka_source_s_settings_are_checked(attrs, params, problem):
    got = settings_problem(attrs, params)
    assert (got is None) if problem is None else (problem in (got or ""))


def test_a_bad_param_is_refused_with_its_line(tmp_path):
    path = tmp_path / "k.xml"
    path.write_text(XML.replace('value="SASL_SSL"', 'value="SASL_SSL" env="X"'))
    with pytest.raises(Exception, match=r"k.xml:4: .*exactly one of value=, file= and env="):
        workflow_xml.load(path)


# --- decoding -----------------------------------------------------------------------------------
def test_the_record_decoders():
    assert files.decoder("utf8", ("line",))(b"caf\xc3\xa9\n") == ["café\n"]
    assert files.decoder("bytes", ("v",))(b"\xff\x00") == [b"\xff\x00"]
    with pytest.raises(UnicodeDecodeError):
        files.decoder("utf8", ("line",))(b"\xff")
    with pytest.raises(ValueError, match="larger than its source's max-bytes"):
        files.decoder("oversized", ("v",))(b"abc")
    assert files.decoder("jsonl", ("a", "b"))(b'{"b": 2, "a": 1}') == [1, 2]
