"""Components whose behaviour is a pure function of the tuple id: they emit, multi-anchor,
ack, fail, raise, forget to ack or hold tuples, and record what they did for the reference."""
from __future__ import annotations

from recovery import Bolt, Spout

OUTCOMES: list[tuple[str, str, int, tuple[int, ...]]] = []   # (component, outcome, task, roots)
SEED = [0]


class CountingSpout(Spout):
    N = 12

    def open(self, conf, context):
        self.i = context.task_index
        self.step = len(context.component_tasks)

    def next_tuple(self):
        if self.i >= self.N:
            return False
        self.emit([self.i], tup_id=("m", self.i))
        self.i += self.step


class RandomBolt(Bolt):
    def prepare(self, conf, context):
        self.held = None
        self.name = context.component_id

    def _record(self, outcome, tup):
        OUTCOMES.append((self.name, outcome, tup.task, tuple(tup.roots)))

    def process(self, tup):
        d = hash((tup.id, SEED[0], self.name)) % 11
        if d <= 4:
            anchors = [tup] + ([self.held] if self.held is not None else [])
            for k in range(d % 3):
                self.emit([tup.values[0] * 10 + k], anchors=anchors)
            for a in anchors:
                self.ack(a)
                self._record("ack", a)
            self.held = None
        elif d == 5:
            self.emit([tup.values[0]])          # unanchored: not part of any tree
            self.ack(tup)
            self._record("ack", tup)
        elif d == 6:
            self.fail(tup)
            self._record("fail", tup)
        elif d == 7:
            self._record("fail", tup)
            raise ValueError("random failure")
        elif d == 8:
            self._record("fail", tup)           # never acked: "not acked by <component>"
        else:
            if self.held is not None:
                self.ack(self.held)
                self._record("ack", self.held)
            self.held = tup

    def finish(self):
        if self.held is not None:
            self.ack(self.held)
            self._record("ack", self.held)
            self.held = None
