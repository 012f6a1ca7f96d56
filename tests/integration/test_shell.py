"""Storm multilang components (pystorm 3.1.4 programs) inside real runs: results, failure
localization in a shell bolt, and its recovery into a fresh process of the same program."""
from __future__ import annotations

import shutil
from pathlib import Path

import msgpack

from recovery.jobs import dead_letters
from recovery.jobs import recover as jobs_recover
from recovery.tracking import keys
from tests.integration.conftest import WORKFLOWS, copy_workflow, sink_records, submit
from tests.integration.test_engine import wordcount_reference


def shell_workflow(tmp_path):
    xml = copy_workflow("wordcount_shell", tmp_path)
    shutil.copytree(WORKFLOWS / "wordcount", tmp_path / "wordcount", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return xml


def test_pystorm_spout_and_bolt_give_the_python_result(spark, redis_url, redis_client, tmp_path):
    xml = shell_workflow(tmp_path)
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.roots == s.complete > 0
    assert sink_records(tmp_path / "out" / "wordcount_shell") == wordcount_reference(tmp_path / "data" / "sentences.txt")


def test_a_tuple_failed_in_a_shell_bolt_is_recovered_by_a_fresh_process(spark, redis_url, redis_client, tmp_path):
    xml = shell_workflow(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    fates = tmp_path / "fates.txt"
    s = submit(spark, redis_url, redis_client, xml, {
        "wordcount_shell.fail.word": "acker", "wordcount_shell.fail.markers": str(markers),
        "wordcount_shell.fates": str(fates), "recovery.retry.delay.period.ms": "10"})
    assert {p.component for p in s.failed_positions} == {"split"}
    n = sum(p.count for p in s.failed_positions)
    assert n == len(list(markers.iterdir())) > 0
    assert all("transient failure" in p.sample_error for p in s.failed_positions)
    # the spout heard "ack" for every complete root, and nothing yet for the pending ones
    lines = [l.split() for l in fates.read_text().splitlines()]
    assert all(what == "ack" for what, _ in lines) and len(lines) == s.complete
    r = jobs_recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "completed" and r.rounds == 1 and r.recovered == n
    # once recovered, their roots complete and the spout hears of them too: every line once
    acked = [int(i) for what, i in (l.split() for l in fates.read_text().splitlines()) if what == "ack"]
    assert len(acked) == len(set(acked)) == s.roots
    assert sink_records(tmp_path / "out" / "wordcount_shell") == wordcount_reference(tmp_path / "data" / "sentences.txt")


PROGRAMS = Path(__file__).resolve().parents[1] / "multilang_programs"
BAD_STREAM_XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="shell_bad_stream">
  <spout id="numbers" parallelism="1">
    <shell command="python" script="raw_spout.py" args="badstream"/>
    <stream fields="n"/>
  </spout>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/numbers"/>
    <input from="numbers" grouping="shuffle"/>
  </bolt>
</workflow>
"""


def test_a_shell_spout_emit_the_host_refuses_ends_dead_never_complete(spark, redis_url, redis_client, tmp_path):
    # raw_spout.py "badstream" emits message 2 on a stream the XML does not declare: its
    # root is dead (not counted complete, not acked), its emit and error are in the dead
    # letters, the program heard `fail 2`, and the other four records reach the sink
    for program in ("raw_spout.py", "raw_protocol.py"):   # (the spout imports the protocol's helpers)
        shutil.copy(PROGRAMS / program, tmp_path / program)
    xml = tmp_path / "shell_bad_stream.xml"
    xml.write_text(BAD_STREAM_XML)
    s = submit(spark, redis_url, redis_client, xml)
    assert (s.roots, s.complete, s.pending, s.dead) == (5, 4, 0, 1)
    assert s.status == "dead"
    assert sink_records(tmp_path / "out" / "numbers") == sink_records_of([0, 1, 3, 4])
    [dead] = dead_letters.dead_letters(redis_client, s.run_id)
    assert dead.component == "numbers" and dead.message_id == 2
    assert "undeclared stream 'nowhere'" in dead.error
    assert b'"stream": "nowhere"' in dead.raw
    logs = [msgpack.unpackb(r)[4] for r in redis_client.lrange(keys.log(s.run_id), 0, -1)]
    assert logs.count("fail 2") == 1
    r = jobs_recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.rounds == 0 and r.dead == 1          # nothing to replay: it is settled


def sink_records_of(numbers):
    import json
    return sorted(json.dumps({"n": n}, sort_keys=True) for n in numbers)
