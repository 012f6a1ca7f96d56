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

from recovery.multilang.bolt import ShellBolt
from recovery.tracking import keys
from recovery.tracking.ledger import fenced_transaction

if TYPE_CHECKING:
    from recovery.model.run import TaskIdentity
    from recovery.tracking.tracker import TaskTracker

log = logging.getLogger(__name__)
clock = time.monotonic   # the runtime's one clock: deadlines and their checks (tests move it)


FINISH = "finish"     # what a timed-out `finish()` is called in a task's timeout marks
KILLED_EXIT = 70      # the exit code of a worker the message-timeout watchdog ended

# What an execution under the deadline runs: one tuple's id, FINISH, or the ids of the tuples
# of a BatchBolt's process_batch call (a batch is timed as one execution: runtime.batch.bolt)
Running = int | str | tuple[int, ...]


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
    """A task's message timeout: the deadline of the execution running now (a tuple's
    process(), or finish()), the marks a killed earlier attempt left, and the watchdog that
    ends a worker stuck past its deadline.

    The message timeout is cooperative: an execution has a deadline, checked at every
    collector call (emit, ack, fail, log) and when it returns; past it, the collector call
    raises TupleTimeout before it changes anything, and the tuple fails alone. Nothing is ever
    raised asynchronously, so no timeout can land between two statements of the runner (e.g.
    in the collector's `_seal`, between taking a chunk out and storing it). For code that never
    hands control back (stuck in C, or a loop without collector calls) the last resort is
    `_watch`.

    The task runner sets `running` around each execution and the collector reads it at each
    call: one attribute each, on the hot path."""

    def __init__(self, task: TaskIdentity, timeout: float, tracker: TaskTracker | None, builtin_sink: bool):
        self.task = task
        self.timeout = timeout
        self.tracker = tracker
        self.builtin_sink = builtin_sink
        self.timed = False                 # this task's executions have a deadline
        # (what runs: a tuple id, FINISH, or the ids of a batch's tuples, its deadline): one
        # object, so that the watchdog thread reads both at once; None between executions
        self.running: tuple[Running, float] | None = None
        self.timed_out: set[int | str] = set()   # marks left by a killed earlier attempt
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = threading.Event()

    def text(self) -> str:
        return f"tuple timed out after {self.timeout:g}s in {self.task.component_id}"

    def expired(self) -> TupleTimeout:
        """The error a collector call past the deadline raises."""
        return TupleTimeout(self.text())

    def start(self, bolt: Any) -> None:
        """Time `bolt`'s executions from now on (when they are timed at all), reading the marks
        of an earlier attempt, and start the watchdog in a Spark worker."""
        if self.timeout <= 0 or isinstance(bolt, ShellBolt):
            return   # shell bolts bound every wait on their program themselves
        if self.builtin_sink:
            # The timeout bounds user code, and a built-in sink runs none: it buffers, writes
            # once in finish(), then acks. Refusing those acks because the write was slow
            # would fail records already durable, and recovery would write them again into
            # another part; and the last-resort kill would end every attempt of a large
            # output's write alike. Its writes are bounded as Spark's own writers' are: by
            # the filesystem, or the Redis client's socket timeout. (A batch sink checks the
            # deadline at its write's publish point instead, before anything is durable:
            # runtime.batch.sink.)
            return
        self.timed = True
        if self.tracker is not None:
            marks = self.tracker.client.smembers(self.marks_key())
            self.timed_out = {m.decode() if m == FINISH.encode() else int(m) for m in marks}
        if _kill_armed():
            self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                              name=f"timeout-{self.task.component_id}-{self.task.index}")
            self._watchdog.start()

    def marks_key(self) -> str:
        return keys.timed_out(self.task.run_id, self.task.round, self.task.component_id, self.task.index)

    def _watch(self) -> None:
        """The last resort: an execution still running a whole timeout past its deadline will
        not hand control back. Record durably that it timed out here, then end the worker.

        Nothing is lost: the task has committed nothing (its outputs, ledger contributions and
        failures are committed together at its end, and a retry overwrites whatever in-flight
        chunks it stored). Nothing loops: the retry reads the mark and fails that tuple with the
        timeout error without running it (the task runner's execution of a tuple), then goes
        on. Where Spark retries the task (`local[N,F]` with F > 1, a cluster), that happens
        within the round. Where it will not (plain `local[N]` allows one attempt), the round
        fails in Spark and the driver says so in one line (jobs.settle.run_and_settle); `recovery
        recover RUN` resumes that round, its committed tasks replaying their stored output and
        this task reading the mark. With tracking off there is no mark: Spark's attempts run
        out and the round fails.

        Not covered: C code that holds the GIL while it is stuck (this thread cannot run then;
        waits, sleeps and I/O release the GIL)."""
        tick = min(1.0, self.timeout / 4)
        while not self._stop_watchdog.wait(tick):
            running = self.running
            if running is None or clock() <= running[1] + self.timeout:
                continue
            what = running[0]
            marked = False
            tracker = self.tracker
            if tracker is not None:
                mark = functools.partial(_add_marks, self.marks_key(), _marks_of(what))
                try:   # (fenced: a task of a driver taken over marks nothing for its successor)
                    marked = fenced_transaction(tracker.client, self.task.run_id, tracker.generation, mark)
                except Exception:   # Redis down: end the worker anyway; Spark bounds the retries
                    log.exception("could not record the timeout of %s at %s task %d",
                                  what, self.task.component_id, self.task.task_id)
            if self.running is not running:
                # it returned while the mark was written: the runner fails it itself
                if marked and tracker is not None:
                    tracker.client.srem(self.marks_key(), *_marks_of(what))
                continue
            stuck = f"a batch of {len(what)} tuples" if isinstance(what, tuple) else what
            _end_worker(f"recovery: {self.text()} and did not return: {stuck} at "
                        f"{self.task.component_id} task {self.task.task_id} marked timed out, worker ended")
            return

    def stop(self) -> None:
        self.running = None
        if self._watchdog is not None:
            self._stop_watchdog.set()
            self._watchdog.join()
            self._watchdog = None


def _marks_of(what: Running) -> tuple[int | str, ...]:
    """The marks of an execution: its tuple's id, FINISH, or each id of its batch (a retry
    fails each of them without running it)."""
    return what if isinstance(what, tuple) else (what,)


def _add_marks(key: str, marks: tuple[int | str, ...], pipe: Any) -> None:
    pipe.sadd(key, *marks)
