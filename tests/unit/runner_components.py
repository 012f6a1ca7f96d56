"""Small components for the task runner's unit tests."""
from __future__ import annotations

import time

from recovery import BasicBolt, Bolt, Spout


class Numbers(Spout):
    def open(self, conf, context):
        self.i = context.task_index
        self.step = len(context.component_tasks)

    def next_tuple(self):
        if self.i >= 6:
            return False
        self.emit([self.i], tup_id=self.i)
        self.i += self.step


class SlowOnThree(BasicBolt):
    def process(self, tup):
        if tup["n"] == 3:
            time.sleep(5)
        self.emit([tup["n"]])


class DirectToLast(Bolt):
    def process(self, tup):
        tasks = self.context.task_map.task_ids("sink")
        self.emit([tup["n"]], stream="direct", anchors=[tup], direct_task=tasks[-1])
        self.ack(tup)


class Collect(Bolt):
    SEEN: list = []

    def process(self, tup):
        Collect.SEEN.append((tup.task, tup["n"]))
        self.ack(tup)
        self.ack(tup)          # a second ack is ignored, as in Storm
        self.fail(tup)         # and so is a fail after the ack


class Unmsgpackable(BasicBolt):
    def process(self, tup):
        self.state.put("k", object())   # cannot be stored: fails this tuple, not the task


class TickCounter(Bolt):
    """Counts its tuples; on a tick, emits the count so far (unanchored)."""

    def prepare(self, conf, context):
        self.n = 0
        self.ticks = 0

    def process(self, tup):
        self.n += 1
        self.ack(tup)

    def process_tick(self, tup):
        assert tup.is_tick and tup.task == -1
        self.ticks += 1
        self.emit([self.n])
