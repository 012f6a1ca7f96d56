"""The built-in sinks besides jsonl: a Redis hash and a Parquet directory."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors.sink_folders import part_files
from recovery.errors import RunError
from recovery.jobs import clear, recover
from tests.integration.conftest import copy_workflow, sink_records, submit
from tests.integration.test_engine import wordcount_reference


def test_redis_hash_and_parquet_sinks_hold_every_tuple_once(spark, redis_url, redis_client, tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"k": f"key{i}", "v": i}) + "\n" for i in range(200)))
    xml = tmp_path / "s.xml"
    xml.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="sinks">
      <spout id="src" parallelism="2"><source type="file" path="in.jsonl" format="jsonl"/><stream fields="k v"/></spout>
      <bolt id="hash" parallelism="2"><sink type="redis" key="test:sink" key-field="k"/><input from="src" grouping="fields" fields="k"/></bolt>
      <bolt id="pq" parallelism="2"><sink type="parquet" path="out/pq"/><input from="src"/></bolt>
    </workflow>''')
    s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed" and s.roots == 200
    got = {k.decode(): json.loads(v) for k, v in redis_client.hgetall("test:sink").items()}
    assert got == {f"key{i}": {"k": f"key{i}", "v": i} for i in range(200)}
    import pyarrow.parquet as pq
    table = pq.read_table(str(tmp_path / "out" / "pq"))
    assert sorted(table.column("v").to_pylist()) == list(range(200))


# --- writer modes: what a folder holds after several runs --------------------
TRANSIENT_COUNT = {"recovery.inject.c.component": "count", "recovery.inject.c.rate": "0.05",
                   "recovery.retry.delay.period.ms": "10"}
BROKEN_SPOUT = '''
from recovery import Spout

class CannotOpen(Spout):
    def open(self, conf, context):
        raise RuntimeError("cannot open the source")
'''


def set_mode(xml: Path, mode: str) -> Path:
    xml.write_text(xml.read_text().replace('<sink type="jsonl" path="out/wordcount"/>',
                                           f'<sink type="jsonl" path="out/wordcount" mode="{mode}"/>'))
    assert f'mode="{mode}"' in xml.read_text()
    return xml


def runs_of(folder: Path) -> set[str]:
    """The run ids whose part files a folder holds."""
    return {name.split("-r0", 1)[0][len("part-"):] for name in part_files(str(folder))}


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_a_second_submit_into_the_same_folder_is_refused_in_error_mode(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    folder = tmp_path / "out" / "wordcount"
    first = submit(spark, redis_url, redis_client, xml)
    assert first.status == "completed"
    parts = sorted(os.listdir(folder))
    redis_before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    for attempt in ("again", "after clear"):
        if attempt == "after clear":
            clear.clear(redis_client, first.run_id)
            redis_before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
        code, out, err = cli(redis_url, "submit", str(xml))
        assert code == 2, (attempt, out, err)
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"error: sink 'out' (jsonl): folder {folder} already holds another run's "
                              "output"), err
        # nothing stored, nothing written
        assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == redis_before, attempt
        assert sorted(os.listdir(folder)) == parts
    assert sink_records(folder) == wordcount_reference(tmp_path / "data" / "sentences.txt")


def test_recovery_rounds_of_a_run_in_error_mode_write_its_own_parts(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    folder = tmp_path / "out" / "wordcount"
    s = submit(spark, redis_url, redis_client, xml, TRANSIENT_COUNT)
    assert s.status == "pending"
    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "completed" and r.rounds >= 1
    assert any("-r0001-out-" in n for n in part_files(str(folder)))
    assert runs_of(folder) == {s.run_id}
    assert sink_records(folder) == wordcount_reference(tmp_path / "data" / "sentences.txt")


def test_overwrite_replaces_other_runs_parts_only_when_the_run_completes(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    folder = tmp_path / "out" / "wordcount"
    want = wordcount_reference(tmp_path / "data" / "sentences.txt")
    a = submit(spark, redis_url, redis_client, xml)
    assert a.status == "completed"
    set_mode(xml, "overwrite")

    # a run that fails in Spark (its spout cannot open) destroys nothing
    (tmp_path / "brokencomps.py").write_text(BROKEN_SPOUT)
    broken = tmp_path / "broken.xml"
    broken.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="broken">
      <spout id="sentences" class="brokencomps:CannotOpen"><stream fields="word count"/></spout>
      <bolt id="out"><sink type="jsonl" path="out/wordcount" mode="overwrite"/><input from="sentences"/></bolt>
    </workflow>''')
    with pytest.raises(RunError, match="cannot open the source"):
        submit(spark, redis_url, redis_client, broken)
    assert runs_of(folder) == {a.run_id} and sink_records(folder) == want

    # a run with failures pending keeps the previous output beside its own until it completes
    b = submit(spark, redis_url, redis_client, xml, TRANSIENT_COUNT)
    assert b.status == "pending"
    assert runs_of(folder) == {a.run_id, b.run_id}
    r = recover.recover(spark, redis_client, redis_url, b.run_id)
    assert r.status == "completed"
    assert runs_of(folder) == {b.run_id}
    assert sink_records(folder) == want                   # exactly one run's records


def test_append_keeps_every_runs_parts(spark, redis_url, redis_client, tmp_path):
    xml = set_mode(copy_workflow("wordcount", tmp_path), "append")
    folder = tmp_path / "out" / "wordcount"
    a = submit(spark, redis_url, redis_client, xml)
    b = submit(spark, redis_url, redis_client, xml)
    assert a.status == b.status == "completed"
    assert runs_of(folder) == {a.run_id, b.run_id}
    want = wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert sink_records(folder) == sorted(want + want)


# --- exactness of the examples ------------------------------------------------
def test_cdn_logs_recovered_output_equals_a_failure_free_runs_record_for_record(spark, redis_url, redis_client, tmp_path):
    """What `make demo` checks (recovery/demo.py): every sink record, as a multiset, and the
    final aggregates in keyed state, after transient failures at two stages and recovery. The
    failure-free run is the test kit's, in this process (no Spark job: it writes what a Spark
    run writes, tests/integration/test_testing_kit.py)."""
    import fakeredis

    from recovery import demo, testing
    from recovery.model.xml import parse as workflow_xml
    fast = {"recovery.retry.delay.period.ms": "10"}
    inject = {"recovery.inject.a.component": "aggregate", "recovery.inject.a.rate": "0.05",
              "recovery.inject.n.component": "normalize", "recovery.inject.n.rate": "0.03", **fast}
    clean_client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    clean = testing.run_local(workflow_xml.load(copy_workflow("cdn_logs", tmp_path / "clean")), clean_client,
                              config=fast, recover=True, list_sinks=False)
    assert clean.status == "dead" and len(clean.dead_tuples()) == 20      # the data's poison lines
    want = demo.sink_records(tmp_path / "clean" / "out" / "cdn_logs")
    want_state = demo.keyed_state(clean_client, clean.run_id, "aggregate")
    s = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path / "failing"), inject)
    assert {p.component for p in s.failed_positions} == {"split", "normalize", "aggregate"}
    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "dead" and r.dead_tuples == 20
    got = demo.sink_records(tmp_path / "failing" / "out" / "cdn_logs")
    result = demo.compare(got, want, demo.keyed_state(redis_client, s.run_id, "aggregate"), want_state)
    assert result.records == result.want_records == 980
    assert result.missing == result.extra == 0
    assert result.same_state and result.same and result.keys > 0
