"""The capture sink in a run (the test kit's engine, fakeredis): each task commits its count and
first records under its (round, task); read back, a sink's count is every record, its sample
the first 5 in task order, and a round's capture is apart from another's."""
from __future__ import annotations

from recovery.connectors.capture_sink import SAMPLE, captured
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.testing import TESTING_SPOUT, feed, run_local


def capture_workflow() -> Workflow:
    return Workflow(name="cap", components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=TESTING_SPOUT),
                  streams=(StreamDef(fields=("n", "word")),)),
        Component(id="out", kind="bolt", parallelism=2, impl=SinkImpl(type="capture"),
                  inputs=(Input(source="src", grouping="shuffle"),)),
    ))


def test_a_capture_sink_counts_every_record_and_keeps_the_first_few(fake_redis):
    items = [[i, f"w{i}"] for i in range(23)]
    run = run_local(feed(capture_workflow(), "src", items), fake_redis, list_sinks=False)
    assert run.summary.status == "completed"
    [got] = captured(fake_redis, run.run_id, 0, ["out"])
    assert got.component == "out" and got.records == len(items)
    assert len(got.sample) == SAMPLE
    assert all(r in [{"n": i, "word": w} for i, w in items] for r in got.sample)
    assert captured(fake_redis, run.run_id, 1, ["out"])[0].records == 0   # another round's: nothing
