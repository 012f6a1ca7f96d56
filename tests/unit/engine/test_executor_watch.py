"""engine/executor_watch.py without Spark: the executors a round sees, the line said when none is
left, the line cleared when one joins, and the round stopped after recovery.executors.wait.secs."""
from __future__ import annotations

import logging

from recovery.engine import executor_watch
from recovery.engine.executor_watch import ExecutorWatch


class Cluster:
    """The executor ids a fake context has, a clock, and what the watch did."""

    def __init__(self) -> None:
        self.ids: set[str] = {"0"}
        self.now = 100.0
        self.cancelled = 0
        self.states: list[str | None] = []

    def watch(self, wait: float = 10) -> ExecutorWatch:
        return ExecutorWatch("run r round 0", wait, lambda: set(self.ids), self._cancel, self.states.append,
                             clock=lambda: self.now)

    def _cancel(self) -> None:
        self.cancelled += 1


def test_a_round_without_executors_is_said_after_a_few_seconds_then_stopped_after_the_wait(caplog):
    c = Cluster()
    w = c.watch(wait=10)
    caplog.set_level(logging.WARNING, logger="recovery.engine.executor_watch")
    w.poll()                      # executor 0 runs the round
    c.ids = set()                 # its worker is killed
    c.now += 1
    w.poll()
    c.now += executor_watch.NOTICE_SECS - 0.5
    w.poll()
    assert c.states == [] and not caplog.records   # not yet: a worker may restart it at once
    c.now += 1
    w.poll()
    line = ("run r round 0 is waiting with no executor to run its tasks (lost executor 0): start a worker, or "
            "it fails after 10 s without one (recovery.executors.wait.secs)")
    assert c.states == [line] and [r.getMessage() for r in caplog.records] == [line]
    c.now += 1
    w.poll()                      # said once
    assert c.states == [line] and c.cancelled == 0
    c.now += 10
    w.poll()
    w.poll()
    assert c.cancelled == 1 and w.failure == ("no executor for 10 s (lost executor 0); the round was stopped "
                                              "(recovery.executors.wait.secs)")


def test_an_executor_that_joins_clears_the_line_and_the_round_goes_on(caplog):
    c = Cluster()
    c.ids = {"0", "1"}
    w = c.watch(wait=10)
    w.poll()
    c.ids = set()
    w.poll()
    c.now += executor_watch.NOTICE_SECS + 1
    w.poll()
    assert "(lost executors 0, 1)" in c.states[0]
    c.ids = {"2"}
    caplog.set_level(logging.WARNING, logger="recovery.engine.executor_watch")
    w.poll()
    assert c.states[1:] == [None] and caplog.records[-1].getMessage() == "run r round 0: executor 2 joined; the round goes on"
    c.now += 60                   # the wait counts from the last time none was left
    c.ids = set()
    w.poll()
    assert c.cancelled == 0 and w.failure is None


def test_a_round_whose_executors_never_registered_says_so():
    c = Cluster()
    c.ids = set()
    w = c.watch(wait=5)
    w.poll()
    c.now += 5
    w.poll()
    assert w.failure is not None and "(no executor registered)" in w.failure and c.cancelled == 1
