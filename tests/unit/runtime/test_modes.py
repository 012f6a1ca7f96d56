"""Execution modes (runtime.modes): what each component's task runs by, decided once from the
component and its inputs, stored in the chain plan, and the one switch made in mid-task (the
chunk mode's rows run one at a time), counted in the component's stats."""
from __future__ import annotations

import json
from pathlib import Path

import fakeredis
import msgpack
import pytest

from recovery.model.graph import Mode
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.model.xml.parse import load
from recovery.runtime import chunks, modes
from recovery.testing import execute_round, feed
from recovery.testing.run import LIST_SINK
from recovery.tracking import keys

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
SHAPED = "tests.unit.chunk_components:Shaped"
SHAPED_BOLT = "tests.unit.chunk_components:ShapedBolt"


def example(name: str) -> Workflow:
    return load(str(WORKFLOWS / f"{name}.xml"), check_paths=False)


@pytest.mark.parametrize(("name", "expected"), [
    ("cdn_logs", {"logs": Mode.BLOCK_SOURCE, "split": Mode.CHUNK, "normalize": Mode.CHUNK,
                  "aggregate": Mode.CHUNK, "output": Mode.SINK}),
    ("cdn_logs_batch", {"logs": Mode.BATCH_SOURCE, "split": Mode.BATCH, "normalize": Mode.BATCH,
                        "aggregate": Mode.BATCH, "output": Mode.BATCH_SINK}),
    ("wordcount_shell", {"sentences": Mode.SPOUT, "split": Mode.ROW, "count": Mode.CHUNK, "out": Mode.SINK}),
    ("cdn_logs_stream", {"logs": Mode.SOURCE, "split": Mode.CHUNK, "normalize": Mode.CHUNK,
                         "aggregate": Mode.CHUNK, "output": Mode.SINK}),
])
def test_each_example_components_mode_is_decided_from_it_and_its_inputs(name, expected):
    wf = example(name)
    plan = modes.plan_of(wf)
    assert plan.modes == expected
    assert {c.id: plan.mode(c.id) for c in wf.components} == expected


def test_tick_tuples_keep_a_python_bolt_in_the_row_mode():
    wf = example("wordcount")
    ticking = wf.model_copy(update={"components": tuple(
        c.model_copy(update={"config": (("topology.tick.tuple.freq.secs", "5"),)}) if c.id == "count" else c
        for c in wf.components)})
    assert modes.decide(wf.component("count"), wf) is Mode.CHUNK
    assert modes.decide(ticking.component("count"), ticking) is Mode.ROW


def test_with_the_chunk_mode_off_python_bolts_run_by_rows_and_file_sources_by_records(monkeypatch):
    wf = example("cdn_logs")
    monkeypatch.setattr(chunks, "ENABLED", False)
    assert modes.plan_of(wf).modes == {"logs": Mode.SOURCE, "split": Mode.ROW, "normalize": Mode.ROW,
                                       "aggregate": Mode.ROW, "output": Mode.SINK}


def test_a_class_that_does_not_load_has_no_mode_to_show_and_a_run_refuses_it():
    wf = example("wordcount")
    broken = wf.model_copy(update={"components": tuple(
        c.model_copy(update={"impl": ClassImpl(ref="nowhere.at_all:Missing")}) if c.id == "split" else c
        for c in wf.components)})
    shown = modes.shown_modes(broken)
    assert shown["split"] is None and shown["count"] is Mode.CHUNK
    with pytest.raises(Exception, match="nowhere"):
        modes.plan_of(broken)


def _line(impl: str, shape: dict, n: int) -> Workflow:
    """A spout feeding `n` values to one bolt of `impl` shaped by `shape`, into a list sink."""
    shape = {"mod": 10, "fan": [1], "fail": [], "raise": [], "transient": False, "ack_early": [],
             "keep": [], "hold": [], "unanchored": [], **shape}
    wf = Workflow(name="modes", components=(
        Component(id="src", kind="spout", parallelism=1, impl=ClassImpl(ref="x:y"),
                  streams=(StreamDef(fields=("v", "k")),)),
        Component(id="b", kind="bolt", parallelism=1, impl=ClassImpl(ref=impl),
                  streams=(StreamDef(fields=("v", "k")), StreamDef(id="other", fields=("v", "k"))),
                  inputs=(Input(source="src"),), config=(("shape", json.dumps(shape)),)),
        Component(id="sink", kind="bolt", parallelism=1, impl=ClassImpl(ref=LIST_SINK),
                  inputs=(Input(source="b"), Input(source="b", stream="other")))))
    return feed(wf, "src", [[i, f"k{i % 7}"] for i in range(n)])


def _stats_of(wf: Workflow, component: str) -> dict:
    client = fakeredis.FakeRedis()
    execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), client)
    return msgpack.unpackb(client.hget(keys.task_done("r", 0), f"{component}:0"))


def test_a_chunk_that_runs_as_one_counts_no_row_run_one_at_a_time():
    stats = _stats_of(_line(SHAPED, {}, 40), "b")
    assert stats["executed"] == 40 and "per_tuple_rows" not in stats


def test_a_small_chunk_runs_its_rows_one_at_a_time_and_says_how_many():
    n = chunks.SMALL_CHUNK - 1
    stats = _stats_of(_line(SHAPED, {}, n), "b")
    assert stats["executed"] == n and stats["per_tuple_rows"] == n


def test_a_bolt_that_keeps_a_tuple_goes_on_by_rows_from_the_next_one_and_says_how_many():
    # v = 3 is held unacked past process(): rows 0..3 ran in the chunk, the 36 after it one at a time
    stats = _stats_of(_line(SHAPED_BOLT, {"hold": [3]}, 40), "b")
    assert stats["executed"] == 40 and stats["per_tuple_rows"] == 36
