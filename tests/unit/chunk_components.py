"""A bolt whose behaviour its configuration draws (`shape`, JSON), for the tests that run random
workflows through the chunk path and the per-tuple path and compare what they leave."""
from __future__ import annotations

import json

from recovery import BasicBolt, Bolt


class Shaped(BasicBolt):
    """Per input [v, k], by r = v % mod: emits fan[r % len(fan)] tuples [3v + j, key] on the
    default stream; on the `other` stream, the sum of the task ids its first emit went to (what
    emit returned); fails r in `fail`, raises for r in `raise` (on a first attempt only when
    `transient`), acks early for r in `ack_early` and emits once more after that (which raises),
    keeps the tuple for r in `keep` (its values are emitted, unanchored, at finish)."""

    def prepare(self, conf, context):
        shape = json.loads(conf["shape"])
        self.mod = shape["mod"]
        self.fan = shape["fan"]
        self.fail_on = set(shape["fail"])
        self.raise_on = set(shape["raise"])
        self.transient = shape["transient"]
        self.ack_early = set(shape["ack_early"])
        self.keep_on = set(shape["keep"])
        self.kept = []

    def process(self, tup):
        v = tup["v"]
        r = v % self.mod
        if r in self.keep_on:
            self.kept.append(tup)
        sent = None
        for j in range(self.fan[r % len(self.fan)]):
            targets = self.emit([3 * v + j, f"k{(v + j) % 7}"])
            sent = sent if sent is not None else sum(targets)
        if sent is not None and v % 3 == 0:
            self.emit([v, str(sent)], stream="other")
        if r in self.fail_on:
            self.fail(tup, f"failed on purpose at {v}")
            return
        if r in self.raise_on and (tup.attempt == 1 or not self.transient):
            raise ValueError(f"bad value {v}")
        if r in self.ack_early:
            self.ack(tup)
            self.emit([v, "late"])

    def finish(self):
        if self.kept:
            self.emit([sum(t["v"] for t in self.kept), ",".join(str(t.id) for t in self.kept)], stream="other")


class ShapedBolt(Bolt):
    """Shaped's behaviour as a Bolt that anchors its emits to its input and acks it itself;
    besides, it holds the tuples of r in `hold` unacked until finish (acked there), and emits
    unanchored for r in `unanchored`."""

    prepare = Shaped.prepare

    def process(self, tup):
        shape = json.loads(self.conf["shape"])
        v = tup["v"]
        r = v % self.mod
        if r in self.keep_on:
            self.kept.append(tup)
        for j in range(self.fan[r % len(self.fan)]):
            self.emit([3 * v + j, f"k{(v + j) % 7}"], anchors=[tup])
        if r in shape["unanchored"]:
            self.emit([v, "free"], stream="other")
        if r in self.fail_on:
            self.fail(tup, f"failed on purpose at {v}")
            return
        if r in self.raise_on and (tup.attempt == 1 or not self.transient):
            raise ValueError(f"bad value {v}")
        if r in shape["hold"]:
            self.held.append(tup)
            return
        self.ack(tup)
        if r in self.ack_early:
            self.emit([v, "late"], anchors=tup)

    def finish(self):
        for tup in getattr(self, "held", []):
            self.emit([tup["v"], "held"], anchors=[tup])
            self.ack(tup)
        Shaped.finish(self)


def _prepare_bolt(self, conf, context):
    Shaped.prepare(self, conf, context)
    self.held = []


ShapedBolt.prepare = _prepare_bolt
