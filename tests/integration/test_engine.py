"""The engine on a real local Spark and a real Redis: results, tracking, localization."""
from __future__ import annotations

import collections
import json
import textwrap
from pathlib import Path

import msgpack

from recovery.controlplane.connection import scan_keys
from recovery.tracking import keys, ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key
from tests.integration.conftest import copy_workflow, sink_records, submit


def wordcount_reference(sentences: Path) -> list[str]:
    """Plain Python: the running counts the wordcount topology writes, as a multiset."""
    counts: collections.Counter = collections.Counter()
    for line in sentences.read_text().splitlines():
        if line.strip():
            counts.update(line.split())
    return sorted(json.dumps({"word": w, "count": k}, sort_keys=True)
                  for w, n in counts.items() for k in range(1, n + 1))


def fanout_reference(numbers: Path) -> tuple[list[str], list[str]]:
    """Plain Python: what the fanout topology writes to its `archive` and `joined` sinks, as
    multisets."""
    lines = numbers.read_text().splitlines()
    return (sorted(json.dumps({"line": line}) for line in lines),
            sorted(json.dumps({"n": int(line), "square": int(line) ** 2, "cube": int(line) ** 3}, sort_keys=True)
                   for line in lines))


def run_keys(client, run_id: str) -> set[str]:
    """Every key of the run but its record, on every master of a Redis Cluster."""
    return {k.decode() for k in scan_keys(client, keys.run_pattern(run_id))} - {runs.record_key(run_id)}


def tracking_keys(client, run_id: str) -> set[str]:
    """`run_keys` but the history of the run's failures (what `recovery trace` reads, kept until
    `clear`): what a run recovered to the end may hold besides its keyed state."""
    from recovery.tracking import queue as failed_queue
    from recovery.tracking.queue import history
    kept = {failed_queue.history_positions_key(run_id),
            *(failed_queue.history_key(run_id, c, t) for c, t in history.positions(client, run_id))}
    return run_keys(client, run_id) - kept


def test_failure_free_wordcount_equals_plain_python_and_leaves_no_tracking_keys(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    summary = submit(spark, redis_url, redis_client, xml)
    assert summary.status == "completed"
    assert summary.roots == summary.complete > 0
    assert summary.pending == summary.dead == 0
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    # only the run record, the runs index and the bolt's keyed state remain: no tracking keys
    left = run_keys(redis_client, summary.run_id)
    assert left == {state_key(summary.run_id, "count")}
    assert redis_client.exists(runs.record_key(summary.run_id))


def test_tracking_off_gives_the_same_sink(spark, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    summary = submit(spark, redis_url, redis_client, xml, tracking=False)
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")
    assert run_keys(redis_client, summary.run_id) == set()


COMPONENTS = textwrap.dedent('''
    from recovery import Bolt, BasicBolt

    class ForgetsToAck(Bolt):
        """The stalled CDN-log topology's bolt (docs/references.md): skips invalid records without acking them."""
        def process(self, tup):
            if tup.values[0].startswith("bad"):
                return
            self.emit([tup.values[0].upper()], anchors=[tup])
            self.ack(tup)

    class Explodes(BasicBolt):
        def process(self, tup):
            if tup["word"] == "boom":
                self.emit(["half-emitted"])   # must not flow: the tuple fails
                raise RuntimeError("boom at explodes")
            self.emit([tup["word"]])
''')


def write_workflow(tmp_path: Path, body: str, lines: list[str], name: str = "t") -> Path:
    (tmp_path / "tcomps.py").write_text(COMPONENTS)
    (tmp_path / "input.txt").write_text("".join(l + "\n" for l in lines))
    xml = tmp_path / f"{name}.xml"
    xml.write_text(f'<workflow xmlns="urn:recovery:workflow:1" name="{name}">{body}</workflow>')
    return xml


def test_not_acked_tuples_fail_at_their_task(spark, redis_url, redis_client, tmp_path):
    xml = write_workflow(tmp_path, '''
      <spout id="src" parallelism="2"><source type="file" path="input.txt"/><stream fields="word"/></spout>
      <bolt id="check" parallelism="2" class="tcomps:ForgetsToAck">
        <input from="src"/><stream fields="word"/></bolt>
      <bolt id="out"><sink type="jsonl" path="out"/><input from="check"/></bolt>''',
        ["good1", "bad1", "good2", "bad2", "good3"])
    s = submit(spark, redis_url, redis_client, xml)
    assert s.roots == 5 and s.complete == 3 and s.failed == 2
    assert {p.component for p in s.failed_positions} == {"check"}
    assert all(p.sample_error == "not acked by check" for p in s.failed_positions)
    assert sorted(r["word"] for r in json.loads("[" + ",".join(sink_records(tmp_path / "out")) + "]")) == ["GOOD1", "GOOD2", "GOOD3"]
    queued = []
    for p in s.failed_positions:
        for raw in redis_client.hvals(failed_queue.queue_key(s.run_id, p.component, p.task)):
            queued.append(msgpack.unpackb(raw))
    assert sorted(q["values"][0] for q in queued) == ["bad1", "bad2"]
    assert all(q["src_component"] == "src" and q["attempt"] == 1 for q in queued)


def test_a_failed_tuple_emits_nothing_downstream_and_the_run_goes_on(spark, redis_url, redis_client, tmp_path):
    xml = write_workflow(tmp_path, '''
      <spout id="src"><source type="file" path="input.txt"/><stream fields="word"/></spout>
      <bolt id="explodes" parallelism="2" class="tcomps:Explodes">
        <input from="src"/><stream fields="word"/></bolt>
      <bolt id="out"><sink type="jsonl" path="out"/><input from="explodes"/></bolt>''',
        ["a", "boom", "b", "c"])
    s = submit(spark, redis_url, redis_client, xml)
    words = sorted(json.loads(r)["word"] for r in sink_records(tmp_path / "out"))
    assert words == ["a", "b", "c"]          # no "half-emitted"
    assert s.failed == 1 and s.complete == 3
    [pos] = s.failed_positions
    [raw] = redis_client.hvals(failed_queue.queue_key(s.run_id, "explodes", pos.task))
    rec = msgpack.unpackb(raw)
    assert rec["values"] == ["boom"] and "RuntimeError: boom at explodes" in rec["error"]
    assert "Traceback" in rec["traceback"] and rec["task"] == pos.task
    # the root stays pending in the acker's ledger (exactly one root)
    assert len(ledger.pending_roots(redis_client, s.run_id)) == 1


def test_undecodable_records_fail_at_the_spout_with_the_raw_record(spark, redis_url, redis_client, tmp_path):
    (tmp_path / "in.jsonl").write_bytes(b'{"word": "ok1"}\nnot json\n{"word": "ok2"}\n\xff\xfe\n[1, 2]\n{"other": 1}\n')
    (tmp_path / "tcomps.py").write_text(COMPONENTS)
    xml = tmp_path / "j.xml"
    xml.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="j">
      <spout id="src" parallelism="2"><source type="file" path="in.jsonl" format="jsonl"/><stream fields="word"/></spout>
      <bolt id="out"><sink type="jsonl" path="out"/><input from="src"/></bolt></workflow>''')
    s = submit(spark, redis_url, redis_client, xml)
    assert s.roots == 6 and s.complete == 2 and s.failed == 4
    raws = []
    for p in s.failed_positions:
        assert p.component == "src"
        raws += [msgpack.unpackb(r)["raw"] for r in redis_client.hvals(failed_queue.queue_key(s.run_id, "src", p.task))]
    assert sorted(raws) == sorted([b"not json\n", b"\xff\xfe\n", b"[1, 2]\n", b'{"other": 1}\n'])
    assert sorted(json.loads(r)["word"] for r in sink_records(tmp_path / "out")) == ["ok1", "ok2"]


def test_spark_task_retries_change_no_result_and_no_ledger(spark, redis_url, redis_client, tmp_path):
    """local[2,3]: the Python worker running task 2 of `count` dies mid-task on Spark's first
    attempt; Spark re-runs the task. Sink, state and ledger equal a run without the crash."""
    xml = copy_workflow("wordcount", tmp_path / "a")
    base = submit(spark, redis_url, redis_client, xml, {
        "recovery.inject.t.component": "count", "recovery.inject.t.rate": "0.05"})
    xml2 = copy_workflow("wordcount", tmp_path / "b")
    from recovery.model.graph import TaskMap
    from recovery.model.xml import parse as workflow_xml
    task = TaskMap.of(workflow_xml.load(xml2)).task_ids("count")[1]
    crashed = submit(spark, redis_url, redis_client, xml2, {
        "recovery.inject.t.component": "count", "recovery.inject.t.rate": "0.05",
        "recovery.inject.c.component": "count", "recovery.inject.c.mode": "crash",
        "recovery.inject.c.task": str(task), "recovery.inject.c.after": "50",
        "recovery.inject.c.marker": str(tmp_path / "crashed")})
    assert (tmp_path / "crashed").exists()      # the first attempt really died
    assert sink_records(tmp_path / "a" / "out" / "wordcount") == sink_records(tmp_path / "b" / "out" / "wordcount")
    for k in ("roots", "complete", "pending", "failed"):
        assert getattr(base, k) == getattr(crashed, k)
    assert ledger.pending_roots(redis_client, base.run_id) == ledger.pending_roots(redis_client, crashed.run_id)
    state = lambda rid: redis_client.hgetall(state_key(rid, "count"))
    assert state(base.run_id) == state(crashed.run_id)
    assert base.components["count"].executed == crashed.components["count"].executed


def test_every_task_of_a_wide_stage_runs_with_adaptive_execution_coalescing(spark, redis_url, redis_client,
                                                                           tmp_path):
    """A stage's repartition names its number of tasks: adaptive query execution, told to
    coalesce small partitions, leaves it, so each key reaches the task the router picks and
    every one of the eight tasks runs."""
    from recovery.connectors.sink_folders import read_jsonl_dir
    from recovery.connectors.spark_source import session_settings
    from tests.integration.conftest import assert_router_tasks, where_workflow
    xml, words = where_workflow(tmp_path / "wf", 8, n=200)
    with session_settings(spark, {"spark.sql.adaptive.enabled": "true",
                                  "spark.sql.adaptive.coalescePartitions.enabled": "true",
                                  "spark.sql.adaptive.advisoryPartitionSizeInBytes": "256m",
                                  "spark.sql.adaptive.coalescePartitions.minPartitionSize": "64m"}):
        s = submit(spark, redis_url, redis_client, xml)
    assert s.status == "completed"
    records = list(read_jsonl_dir(str(tmp_path / "wf" / "out")))
    assert sorted(r["word"] for r in records) == sorted(words)
    assert_router_tasks(xml, records, 8)
