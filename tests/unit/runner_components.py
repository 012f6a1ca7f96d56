"""Small components for the task runner's unit tests."""
from __future__ import annotations

import threading
import time

from recovery import BasicBolt, Bolt, Spout

SLOW = 0.75   # seconds a slow component takes: past the 0.5 s message timeout of the tests


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
            time.sleep(SLOW)
        self.emit([tup["n"]])


class SlowAt(Bolt):
    """Emits [n] and [n + 100] anchored to each tuple, acks it, logs; on n == 3 it is slow
    (past the message timeout) at the point that the conf property `test.slow.at` names."""

    def prepare(self, conf, context):
        self.at = conf["test.slow.at"]

    def _slow(self, point, tup):
        if self.at == point and tup["n"] == 3:
            time.sleep(SLOW)

    def process(self, tup):
        self._slow("before its first emit", tup)
        self.emit([tup["n"]], anchors=[tup])
        self._slow("between emits", tup)
        self.emit([tup["n"] + 100], anchors=[tup])
        self._slow("between emit and ack", tup)
        self.ack(tup)
        self._slow("after ack", tup)
        self.log(f"processed {tup['n']}")

    def ack(self, tup):
        self._slow("inside ack", tup)
        super().ack(tup)


class SlowItems(dict):
    """A mapping msgpack reads through items() (a dict subclass): slow to serialize."""

    def items(self):
        time.sleep(SLOW)
        return super().items()


class SlowToSeal(Bolt):
    """Emits [n, a mapping] anchored, then acks. Tuple 3's mapping is slow to serialize, so
    with a small CHUNK the runner's `_seal` of the chunk holding it, inside ack, is slow."""

    def process(self, tup):
        self.emit([tup["n"], SlowItems() if tup["n"] == 3 else {}], anchors=[tup])
        self.ack(tup)


class WorkerEnded(BaseException):
    """Stands, in unit tests, for the end of the worker process: nothing after it runs."""


class StuckOnThree(Bolt):
    """On n == 3, waits for an event only the test's stand-in for the worker's end sets (a
    wait that never returns by itself, as in C), then ends as the process would."""

    KILLED = threading.Event()
    RAN: list = []

    def process(self, tup):
        StuckOnThree.RAN.append(tup["n"])
        if tup["n"] == 3:
            StuckOnThree.KILLED.wait()
            raise WorkerEnded
        self.emit([tup["n"]], anchors=[tup])
        self.ack(tup)


class StuckInC(BasicBolt):
    """On n == 3, blocks for ever in a C-level wait that never calls the collector."""

    def process(self, tup):
        if tup["n"] == 3:
            threading.Event().wait()
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


class AcksInFinish(Bolt):
    """Emits anchored to each tuple and acks them all in finish(), which is slow (past the
    message timeout) when the conf property `test.slow.finish` is set."""

    FINISHED: list = []

    def prepare(self, conf, context):
        self.slow = bool(conf.get("test.slow.finish"))
        self.held = []

    def process(self, tup):
        self.emit([tup["n"]], anchors=[tup])
        self.held.append(tup)

    def finish(self):
        AcksInFinish.FINISHED.append(self.context.task_id)
        if self.slow:
            time.sleep(SLOW)
        for tup in self.held:
            self.ack(tup)


class AnchorsTwice(Bolt):
    """Emits [n] anchored to the same input twice (`anchors=[tup, tup]`), then acks."""

    def process(self, tup):
        self.emit([tup["n"]], anchors=[tup, tup])
        self.ack(tup)


class FailsAll(Bolt):
    def process(self, tup):
        self.fail(tup)


class SameMessageIdTwice(Spout):
    """Emits message id 7 twice in one task: a spout bug the runtime must refuse, not merge."""

    def open(self, conf, context):
        self.sent = 0

    def next_tuple(self):
        if self.sent >= 2:
            return False
        self.emit([self.sent], tup_id=7)
        self.sent += 1


class PassOn(BasicBolt):
    def process(self, tup):
        self.emit([tup["n"]])
