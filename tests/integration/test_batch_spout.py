"""A BatchSpout, given in XML by class=, chained to a BatchBolt on a real local Spark and a
real Redis: its rows are root tuples told their fates by message id; a process_batch call that
overruns the message timeout fails its batch's rows at that task, queued, and `recover`
completes them with the sink written once."""
from __future__ import annotations

import json
from pathlib import Path

from recovery.jobs import recover
from recovery.tracking import ledger
from tests.integration.conftest import sink_records, submit

COMPONENTS = '''
import os

import pyarrow as pa

from recovery import BatchBolt, BatchSpout
from recovery.runtime import timeouts


class Numbers(BatchSpout):
    """0..numbers.count-1, task i taking n % parallelism == i, 50 rows a batch, message id "n<n>";
    each fate is appended to a file of fates.folder."""

    def open(self, conf, context):
        p, i = len(context.component_tasks), context.task_index
        self.todo = [n for n in range(int(conf["numbers.count"])) if n % p == i]

    def next_batch(self):
        part, self.todo = self.todo[:50], self.todo[50:]
        if part:
            self.emit_batch(pa.record_batch([pa.array(part)], names=["n"]),
                            message_ids=[f"n{n}" for n in part])

    def _fate(self, kind, msg_id):
        with open(os.path.join(self.conf["fates.folder"], f"{kind}-{os.getpid()}"), "a") as fh:
            fh.write(msg_id + "\\n")

    def ack(self, msg_id):
        self._fate("ack", msg_id)

    def fail(self, msg_id):
        self._fate("fail", msg_id)


class SlowOnce(BatchBolt):
    """[n] -> [n, n * n]; the first batch holding n == 77 takes slow.secs, past the message
    timeout: the runtime's clock is moved forward by that much while it runs, rather than
    waited out (slow.marker records that it did, so the rows' replay is not slow). Moved back
    at the task's end: the worker process runs later tasks."""

    moved = None

    def process_batch(self, batch):
        n = batch.column("n").to_pylist()
        marker = self.conf["slow.marker"]
        if 77 in n and not os.path.exists(marker):
            open(marker, "a").close()
            real, ahead = timeouts.clock, float(self.conf["slow.secs"])
            self.moved = real
            timeouts.clock = lambda: real() + ahead
        self.emit_batch(pa.record_batch([pa.array(n), pa.array([v * v for v in n])], names=["n", "square"]))

    def cleanup(self):
        if self.moved is not None:
            timeouts.clock = self.moved
'''

XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="bspout">
  <config>
    <property name="topology.message.timeout.secs" value="1"/>
    <property name="recovery.batch.size" value="16"/>
    <property name="recovery.retry.delay.period.ms" value="10"/>
    <property name="numbers.count" value="{count}"/>
    <property name="slow.secs" value="1.5"/>
    <property name="slow.marker" value="{marker}"/>
    <property name="fates.folder" value="{fates}"/>
  </config>
  <spout id="numbers" parallelism="2" class="bspout_components:Numbers">
    <stream fields="n"/>
  </spout>
  <bolt id="slow" parallelism="2" class="bspout_components:SlowOnce">
    <input from="numbers" grouping="local_or_shuffle"/>
    <stream fields="n square"/>
  </bolt>
  <bolt id="out" parallelism="2">
    <input from="slow" grouping="fields" fields="n"/>
    <sink type="jsonl" path="out/bspout"/>
  </bolt>
</workflow>
"""

COUNT = 400


def _fates(folder: Path, kind: str) -> list[str]:
    return sorted(line for f in folder.glob(f"{kind}-*") for line in f.read_text().split())


def test_a_batch_spout_feeds_a_batch_bolt_whose_late_batch_fails_alone_and_recovers(spark, redis_url, redis_client,
                                                                                       tmp_path):
    (tmp_path / "bspout_components.py").write_text(COMPONENTS)
    fates = tmp_path / "fates"
    fates.mkdir()
    xml = tmp_path / "bspout.xml"
    xml.write_text(XML.format(count=COUNT, marker=tmp_path / "slowed", fates=fates))

    s = submit(spark, redis_url, redis_client, xml)
    assert (tmp_path / "slowed").exists()                  # the batch holding 77 overran
    assert s.roots == COUNT and s.status == "pending"
    [pos] = s.failed_positions
    # the batch holding 77 failed whole at its task, with the row path's timeout error
    assert pos.component == "slow" and 1 <= pos.count <= 16
    assert pos.sample_error.startswith("TupleTimeout: tuple timed out after 1s in slow")
    assert s.complete == COUNT - pos.count and s.components["slow"].bisect_runs == 0
    written = [json.loads(r)["n"] for r in sink_records(tmp_path / "out" / "bspout")]
    assert 77 not in written and len(written) == COUNT - pos.count
    # the spout was told the fates known: every complete root acked, by its message id
    acked = _fates(fates, "ack")
    assert len(acked) == COUNT - pos.count and "n77" not in acked and _fates(fates, "fail") == []

    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "completed" and r.pending == 0
    assert ledger.pending_roots(redis_client, s.run_id) == set()
    records = sink_records(tmp_path / "out" / "bspout")
    assert sorted(json.loads(r)["n"] for r in records) == list(range(COUNT))     # every row once
    assert _fates(fates, "ack") == sorted(f"n{n}" for n in range(COUNT))
