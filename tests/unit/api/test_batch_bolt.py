"""recovery.BatchBolt: what the loader and validate accept, the row fallback, and a bolt's
mistakes (a missing column, a bad anchor, an undeclared stream) failing its rows with a clear
error instead of the task."""
from __future__ import annotations

import pyarrow as pa
import pytest

from recovery import BatchBolt, Bolt, testing
from recovery.api.components import Tuple
from recovery.api.loader import load_class
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow

HERE = __name__ + ":"


class Echo(BatchBolt):
    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([batch.column("n")], names=["n"]), anchors=list(range(batch.num_rows)))


class MissingColumn(BatchBolt):
    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([batch.column("n")], names=["m"]))


class BadAnchor(BatchBolt):
    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([batch.column("n")], names=["n"]), anchors=[batch.num_rows] * batch.num_rows)


class OtherStream(BatchBolt):
    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([batch.column("n")], names=["n"]), stream="nope")


def test_a_batch_bolt_is_a_bolt_to_the_loader():
    assert issubclass(load_class(HERE + "Echo", kind="bolt"), Bolt)


def test_a_row_runtime_runs_a_batch_bolt_a_tuple_at_a_time():
    emitted = []

    class Collector:
        def emit(self, component, values, stream, anchors, direct_task, message_id):
            emitted.append((values, stream, [a.id for a in anchors]))
            return []

    bolt = Echo()
    wf = _workflow("Echo")
    bolt.bind(Collector(), {}, type("Ctx", (), {"workflow": wf, "component_id": "b"})())
    bolt.process(Tuple(7, "src", "default", 1, [3], ("n",)))
    assert emitted == [([3], "default", [7])]


def _workflow(cls: str) -> Workflow:
    return Workflow(name="t", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT), streams=(StreamDef(fields=("n",)),)),
        Component(id="b", kind="bolt", impl=ClassImpl(ref=HERE + cls), streams=(StreamDef(fields=("n",)),),
                  inputs=(Input(source="src"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="b"),))))


@pytest.mark.parametrize(("cls", "error"), [
    ("MissingColumn", "ValueError: 'b': the batch emitted on stream 'default' has no column 'n' (fields: n)"),
    ("BadAnchor", "IndexError: 'b': an anchor is not a row of the input batch of 1 rows"),
    ("OtherStream", "ValueError: 'b' emitted on undeclared stream 'nope'"),
])
def test_a_bolt_mistake_fails_each_row_with_a_clear_error_and_the_run_goes_on(fake_redis, cls, error):
    run = testing.run_local(_workflow(cls), fake_redis, inputs={"src": [1, 2, 3]})
    assert run.interrupted is None and run.status == "pending"
    assert sorted((t.values, t.error) for t in run.failed_tuples()) == [([n], error) for n in (1, 2, 3)]


def test_echo_runs_clean(fake_redis):
    run = testing.run_local(_workflow("Echo"), fake_redis, inputs={"src": [1, 2, 3]})
    assert run.status == "completed" and sorted(run.sinks["out"]) == [[1], [2], [3]]
