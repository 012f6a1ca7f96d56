"""recovery.BatchSpout: exported beside BatchBolt, a spout to the loader (and not a bolt), and
its row fallback: under a row runtime, next_tuple emits each row of next_batch's batches with
its message id, or (task index, position) without one."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import recovery
from recovery import BatchSpout, Spout
from recovery.api.batch import message_ids_as_list
from recovery.api.loader import ClassLoadError, load_class
from recovery.model.graph import ComponentContext, TaskMap
from recovery.model.workflow import ClassImpl, Component, StreamDef, Workflow

HERE = __name__ + ":"


class Pairs(BatchSpout):
    """Two batches of two rows (n, word); message ids given for the first only."""

    def open(self, conf, context):
        self.batches = [([1, 2], ["a", "b"], ["x", "y"]), ([3, 4], ["c", "d"], None)]

    def next_batch(self):
        if self.batches:
            n, words, mids = self.batches.pop(0)
            self.emit_batch(pa.record_batch([pa.array(words), pa.array(n)], names=["word", "n"]), message_ids=mids)


def test_a_batch_spout_is_exported_and_is_a_spout_to_the_loader():
    assert "BatchSpout" in recovery.__all__ and recovery.BatchSpout is BatchSpout
    assert issubclass(load_class(HERE + "Pairs", kind="spout"), Spout)
    with pytest.raises(ClassLoadError, match="is a Spout, but the component is a <bolt>"):
        load_class(HERE + "Pairs", kind="bolt")


def test_a_row_runtime_emits_a_batch_spouts_rows_one_by_one():
    emitted = []

    class Collector:
        def emit(self, component, values, stream, anchors, direct_task, message_id):
            emitted.append((values, stream, message_id))
            return []

    wf = Workflow(name="t", components=(
        Component(id="s", kind="spout", parallelism=2, impl=ClassImpl(ref=HERE + "Pairs"),
                  streams=(StreamDef(fields=("n", "word")),)),))
    tm = TaskMap.of(wf)
    spout = Pairs()
    spout.bind(Collector(), {}, ComponentContext(wf, "s", tm.task_ids("s")[1], tm))
    spout.open({}, spout.context)
    while True:
        before = len(emitted)
        spout.next_tuple()
        if len(emitted) == before:
            break
    # the declared fields' order, by column name; the default message id is (task index, position)
    assert emitted == [([1, "a"], "default", "x"), ([2, "b"], "default", "y"),
                       ([3, "c"], "default", (1, 2)), ([4, "d"], "default", (1, 3))]


@pytest.mark.parametrize("ids", [pa.array([5, 6]), np.array([5, 6], dtype=np.int64), (5, 6), [5, 6]])
def test_message_ids_become_python_values_whatever_holds_them(ids):
    got = message_ids_as_list(ids)
    assert got == [5, 6] and all(type(m) is int for m in got)
