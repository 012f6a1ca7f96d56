"""The one guarded call of user code (runtime.guard): the same finish() in every mode — raising,
or running past the message timeout, fails what is still outstanding; with nothing outstanding
(a batch bolt's rows are settled by their calls) a raise is logged, and a finish an earlier
attempt was killed in is not run again."""
from __future__ import annotations

import fakeredis
import msgpack
import pyarrow as pa
import pytest

from recovery import BatchBolt, Bolt, testing
from recovery.model.graph import Mode
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.runtime import modes, timeouts
from recovery.tracking import keys, ledger
from recovery.tracking import queue as failed_queue

HERE = __name__ + ":"
FINISHED: list = []


class HoldsAndBreaksInFinish(Bolt):
    """Emits [n] anchored to each tuple and holds them all; its finish() raises."""

    def prepare(self, conf, context):
        self.held = []

    def process(self, tup):
        self.emit([tup["n"]], anchors=[tup])
        self.held.append(tup)

    def finish(self):
        raise ValueError("finish broke")


class BatchBreaksInFinish(BatchBolt):
    """[n] -> [n]; its finish() raises (and says it ran)."""

    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([batch.column("n")], names=["n"]))

    def finish(self):
        FINISHED.append(self.context.task_id)
        raise ValueError("finish broke")


def line(bolt: str, **conf: str) -> Workflow:
    """src (8 numbers) -> b (`bolt`) -> out (a ListSink)."""
    return testing.feed(Workflow(name="guard", config=(
        ("topology.message.timeout.secs", "30"), ("recovery.retry.delay.period.ms", "0"), *conf.items()),
        components=(
            Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                      streams=(StreamDef(fields=("n",)),)),
            Component(id="b", kind="bolt", impl=ClassImpl(ref=HERE + bolt), streams=(StreamDef(fields=("n",)),),
                      inputs=(Input(source="src"),)),
            Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="b"),)))),
        "src", list(range(8)))


def _round(wf: Workflow, client: fakeredis.FakeRedis) -> list[dict]:
    """One round's tasks; the queue entries it left."""
    testing.execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), client)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(client, "r", b)
    return [msgpack.unpackb(v, strict_map_key=False)
            for pos in client.smembers(failed_queue.failed_key("r"))
            for v in client.hvals(failed_queue.queue_key("r", *pos.decode().rsplit(":", 1)))]


def _logs(client: fakeredis.FakeRedis) -> list[str]:
    return [msgpack.unpackb(e)[4] for e in client.lrange(keys.log("r"), 0, -1)]


@pytest.mark.parametrize(("mode", "conf"), [(Mode.CHUNK, {}), (Mode.ROW, {"topology.tick.tuple.freq.secs": "60"})])
def test_a_finish_that_raises_fails_what_is_outstanding_in_the_row_and_chunk_modes(mode, conf):
    wf = line("HoldsAndBreaksInFinish", **conf)
    assert modes.decide(wf.component("b"), wf) is mode
    queued = _round(wf, fakeredis.FakeRedis())
    assert sorted(q["values"][0] for q in queued) == list(range(8))
    assert {q["error"] for q in queued} == {"b.finish raised ValueError: finish broke"}
    assert all("finish broke" in q["traceback"] for q in queued)


def test_a_batch_bolts_finish_that_raises_fails_nothing_outstanding_and_is_logged():
    wf = line("BatchBreaksInFinish")
    assert modes.decide(wf.component("b"), wf) is Mode.BATCH
    client = fakeredis.FakeRedis()
    FINISHED.clear()
    assert _round(wf, client) == []   # every row was acked by its call
    assert FINISHED and "b.finish raised ValueError: finish broke" in _logs(client)


def test_a_batch_bolts_finish_an_earlier_attempt_was_killed_in_is_not_run_again():
    wf = line("BatchBreaksInFinish")
    client = fakeredis.FakeRedis()
    client.sadd(keys.timed_out("r", 0, "b", 0), timeouts.FINISH)   # an attempt killed in it
    FINISHED.clear()
    assert _round(wf, client) == []
    assert FINISHED == []
    assert not client.exists(keys.timed_out("r", 0, "b", 0))   # the task committed: its marks are done
