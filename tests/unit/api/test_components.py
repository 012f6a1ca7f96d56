"""recovery.api: a component's calls go to the collector bound to it (Component.bind)."""
from __future__ import annotations

import pytest

from recovery import BasicBolt, BatchBolt, Bolt, Spout
from recovery.api.components import Tuple


class Recorder:
    """An OutputCollector (recovery.api.collector) that records every call."""

    def __init__(self):
        self.calls = []

    def emit(self, component, values, stream, anchors, direct_task, message_id):
        self.calls.append(("emit", component, list(values), stream, tuple(a.id for a in anchors), direct_task,
                           message_id))
        return [7]

    def ack(self, tup):
        self.calls.append(("ack", tup.id))

    def fail(self, tup, error=None):
        self.calls.append(("fail", tup.id, error))

    def log(self, message, level="info"):
        self.calls.append(("log", message, level))

    def spout_record(self, message_id, decode, raw, stream="default", fmt="", attempt=1, replayed=False):
        self.calls.append(("record", message_id))


def _tuple(tid: int) -> Tuple:
    return Tuple(tid, "src", "default", 1, [tid], ("n",), (100 + tid,))


@pytest.mark.parametrize("cls", [Bolt, BasicBolt, BatchBolt])
def test_a_bound_bolt_emits_acks_fails_and_logs_through_its_collector(cls):
    collector, conf, context = Recorder(), {"k": "v"}, object()
    bolt = cls()
    bolt.bind(collector, conf, context)
    assert (bolt.conf, bolt.context) == (conf, context)
    a, b = _tuple(1), _tuple(2)
    assert bolt.emit([1, 2], anchors=a) == [7]
    bolt.emit([3], stream="s", anchors=[a, b], direct_task=4)
    bolt.emit([5])                 # a BasicBolt's emit: the runtime anchors it
    bolt.ack(a)
    bolt.fail(b, "bad")
    bolt.log(42, "warn")
    assert collector.calls == [
        ("emit", bolt, [1, 2], "default", (1,), None, None),
        ("emit", bolt, [3], "s", (1, 2), 4, None),
        ("emit", bolt, [5], "default", (), None, None),
        ("ack", 1), ("fail", 2, "bad"), ("log", "42", "warn")]


def test_a_bound_spout_emits_root_tuples_with_their_message_ids():
    collector = Recorder()
    spout = Spout()
    spout.bind(collector, {}, None)
    assert spout.emit(["x"], tup_id="m1") == [7]
    spout.emit(["y"], stream="s", direct_task=3)
    assert collector.calls == [("emit", spout, ["x"], "default", (), None, "m1"),
                               ("emit", spout, ["y"], "s", (), 3, None)]


def test_binding_again_replaces_the_collector():
    first, second = Recorder(), Recorder()
    bolt = Bolt()
    bolt.bind(first, {}, None)
    bolt.bind(second, {}, None)
    bolt.log("hello")
    assert first.calls == [] and second.calls == [("log", "hello", "info")]


@pytest.mark.parametrize("call", [lambda c: c.emit([1]), lambda c: c.log("x"), lambda c: c.ack(_tuple(1))])
def test_an_unbound_component_says_it_must_be_bound_first(call):
    with pytest.raises(RuntimeError, match=r"bind\(collector, conf, context\)"):
        call(Bolt())
