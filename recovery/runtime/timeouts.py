"""The message timeout (topology.message.timeout.secs): a cooperative deadline checked at every
collector call, and a watchdog thread that ends the worker as a last resort."""
from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from redis import Redis

from recovery.multilang.bolt import ShellBolt
from recovery.tracking import keys
from recovery.tracking.ledger import fenced_transaction

if TYPE_CHECKING:
    from recovery.model.run import RunSpec
    from recovery.model.workflow import Component
    from recovery.tracking.tracker import TaskTracker

log = logging.getLogger(__name__)
clock = time.monotonic   # the runtime's one clock: deadlines and their checks (tests move it)


FINISH = "finish"     # what a timed-out `finish()` is called in a task's timeout marks
KILLED_EXIT = 70      # the exit code of a worker the message-timeout watchdog ended


class TupleTimeout(Exception):
    """A tuple's execution passed `topology.message.timeout.secs`. Raised cooperatively, by
    the collector call the component makes after its deadline (never asynchronously), so it
    always lands where the runner's state is consistent."""


def _kill_armed() -> bool:
    """The last-resort kill ends the process, so it is armed only in a Spark Python worker
    (whose task Spark retries, or whose round `recover` resumes), never in a driver or a test."""
    try:
        from pyspark import TaskContext  # lazy: only a Spark worker has it loaded already
    except ImportError:
        return False
    return TaskContext.get() is not None


def _end_worker(message: str) -> None:
    """End this Python worker now: nothing of the task is committed, so nothing is lost."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(KILLED_EXIT)


class MessageTimeouts:
    """A task's message timeout: the deadline of the tuple (or finish()) running now, and the
    watchdog that ends a worker stuck past it (part of TaskRunner)."""

    # The runner's state this part reads and writes (TaskRunner.__init__ sets it all).
    spec: RunSpec
    comp: Component
    component_id: str
    index: int
    task_id: int
    client: Redis | None
    tracker: TaskTracker | None
    _timeout: float
    _timed: bool
    _running: tuple[int | str, float] | None
    _timed_out: set[int | str]
    _watchdog: threading.Thread | None
    _stop_watchdog: threading.Event

    # -- timeouts -------------------------------------------------------------------------
    # The message timeout is cooperative: an execution (a tuple's process(), or finish()) has
    # a deadline, checked at every collector call (emit, ack, fail, log) and when it returns;
    # past it, the collector call raises TupleTimeout before it changes anything, and the tuple
    # fails alone. Nothing is ever raised asynchronously, so no timeout can land between two
    # statements of the runner (e.g. in `_seal`, between taking a chunk out and storing it).
    # For code that never hands control back (stuck in C, or a loop without collector calls)
    # the last resort is `_watch`.
    def _timeout_text(self) -> str:
        return f"tuple timed out after {self._timeout:g}s in {self.component_id}"

    def _raise_timeout(self) -> None:
        raise TupleTimeout(self._timeout_text())

    def _start_timing(self, bolt: Any) -> None:
        if self._timeout <= 0 or isinstance(bolt, ShellBolt):
            return   # shell bolts bound every wait on their program themselves
        if self.comp.impl.kind == "sink":
            # The timeout bounds user code, and a built-in sink runs none: it buffers, writes
            # once in finish(), then acks. Refusing those acks because the write was slow
            # would fail records already durable, and recovery would write them again into
            # another part; and the last-resort kill would end every attempt of a large
            # output's write alike. Its writes are bounded as Spark's own writers' are: by
            # the filesystem, or the Redis client's socket timeout.
            return
        self._timed = True
        if self.tracker is not None:
            marks = self.tracker.client.smembers(self._marks_key())
            self._timed_out = {m.decode() if m == FINISH.encode() else int(m) for m in marks}
        if _kill_armed():
            self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                              name=f"timeout-{self.component_id}-{self.index}")
            self._watchdog.start()

    def _marks_key(self) -> str:
        return keys.timed_out(self.spec.run_id, self.spec.round, self.component_id, self.index)

    def _watch(self) -> None:
        """The last resort: an execution still running a whole timeout past its deadline will
        not hand control back. Record durably that it timed out here, then end the worker.

        Nothing is lost: the task has committed nothing (its outputs, ledger contributions and
        failures are committed together at its end, and a retry overwrites whatever in-flight
        chunks it stored). Nothing loops: the retry reads the mark and fails that tuple with the
        timeout error without running it (`_execute`), then goes on. Where Spark retries the
        task (`local[N,F]` with F > 1, a cluster), that happens within the round. Where it will
        not (plain `local[N]` allows one attempt), the round fails in Spark and the driver says
        so in one line (jobs.run_and_settle); `recovery recover RUN` resumes that round, its
        committed tasks replaying their stored output and this task reading the mark. With
        tracking off there is no mark: Spark's attempts run out and the round fails.

        Not covered: C code that holds the GIL while it is stuck (this thread cannot run then;
        waits, sleeps and I/O release the GIL)."""
        tick = min(1.0, self._timeout / 4)
        while not self._stop_watchdog.wait(tick):
            running = self._running
            if running is None or clock() <= running[1] + self._timeout:
                continue
            what = running[0]
            marked = False
            tracker = self.tracker
            if tracker is not None:
                mark = functools.partial(_add_mark, self._marks_key(), what)
                try:   # (fenced: a task of a driver taken over marks nothing for its successor)
                    marked = fenced_transaction(tracker.client, self.spec.run_id, tracker.generation, mark)
                except Exception:   # Redis down: end the worker anyway; Spark bounds the retries
                    log.exception("could not record the timeout of %s at %s task %d",
                                  what, self.component_id, self.task_id)
            if self._running is not running:
                # it returned while the mark was written: the runner fails it itself
                if marked and tracker is not None:
                    tracker.client.srem(self._marks_key(), what)
                continue
            _end_worker(f"recovery: {self._timeout_text()} and did not return: {what} at "
                        f"{self.component_id} task {self.task_id} marked timed out, worker ended")
            return

    def _stop(self) -> None:
        self._running = None
        if self._watchdog is not None:
            self._stop_watchdog.set()
            self._watchdog.join()
            self._watchdog = None


def _add_mark(key: str, what: int | str, pipe: Any) -> None:
    pipe.sadd(key, what)
