"""The one guarded call of user code. Every loop that runs a component's code calls it through
a task's UserCode: the row mode's tuple (runtime.task), the chunk mode's rows (runtime.chunks),
a BatchBolt's process_batch (runtime.batch.bolt) and every bolt's finish(). It does, once for
all of them:

- the deadline: the message timeout's `running` set around the call (the collector's calls
  check it, the watchdog reads it) and cleared after, whatever happened;
- fault injection (recovery.faults) before the call, on each tuple it runs;
- error capture: what user code raises (any Exception, SystemExit too) is kept, never let out:
  a component's bug fails its tuples, never the task;
- the late return: a call that returned past its deadline without a collector call to raise at;
- what an earlier attempt was killed in (the watchdog's marks): the error it fails with, unrun.

What the outcome means for a tuple is said here too (`settle_row`: a row of the row or chunk
mode; a batch bolt bisects a raising call instead), and what it means for finish(): raising,
or running past its deadline, fails every tuple still outstanding, in every mode; with none
outstanding, a raise is logged.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from recovery.runtime import timeouts
from recovery.runtime.collector import format_error
from recovery.runtime.timeouts import FINISH, MessageTimeouts, Running

if TYPE_CHECKING:
    from recovery.api.tuples import Tuple
    from recovery.runtime.collector import TaskCollector

# a call's outcome
OK, RAISED, LATE = 0, 1, 2
_NO_TUPLES: tuple = ()


class UserCode:
    """A task's calls of its component's code (one per task: what it reads of the task is read
    once here)."""

    __slots__ = ("component_id", "limits", "injections", "error", "late")

    def __init__(self, component_id: str, limits: MessageTimeouts, injections: list[Any]):
        self.component_id = component_id
        self.limits = limits
        self.injections = injections
        self.error: BaseException | None = None   # what the last call that raised raised
        self.late = False                         # the last call ended past its deadline

    def call(self, running: Running, fn: Callable[[Any], Any], arg: Any,
             tuples: Iterable[Tuple] = _NO_TUPLES) -> int:
        """`fn(arg)` under the deadline of the execution `running` (a tuple's id, FINISH, a
        batch's ids), after the injected faults for each of `tuples`: OK, RAISED (`error`
        says what) or LATE (it returned past its deadline)."""
        limits = self.limits
        deadline = limits.running = (running, timeouts.clock() + limits.timeout) if limits.timed else None
        try:
            if self.injections:
                for tup in tuples:
                    for inj in self.injections:
                        inj.before_process(tup)
            fn(arg)
        # user code can raise anything: it fails what it ran, never the task
        except (Exception, SystemExit) as err:  # broad-except: user code
            limits.running = None
            self.error = err
            self.late = deadline is not None and timeouts.clock() > deadline[1]
            return RAISED
        limits.running = None
        self.late = deadline is not None and timeouts.clock() > deadline[1]
        return LATE if self.late else OK

    def take_error(self) -> tuple[str, str]:
        """The last raise's message and traceback; the error itself is let go (its frames
        hold the tuple it ran, which the chunk mode would otherwise take for one kept)."""
        err, self.error = self.error, None
        assert err is not None
        return format_error(err)

    def stuck(self, running: Running) -> bool:
        """An earlier attempt of this task was killed running it (the watchdog's marks): it
        fails with stuck_error() and is not run again."""
        timed_out = self.limits.timed_out
        return bool(timed_out) and running in timed_out

    def stuck_error(self) -> str:
        return f"TupleTimeout: {self.limits.text()} (stuck: its worker was ended)"

    def timeout_error(self) -> str:
        return f"TupleTimeout: {self.limits.text()}"

    def settle_row(self, outcome: int, tup: Tuple, is_open: bool, collector: TaskCollector) -> None:
        """A row's call that RAISED or was LATE: the row fails while it is open (neither acked
        nor failed); acked or failed in time, that stands, as in Storm, and is warned of."""
        tid = tup.id
        if outcome == RAISED:
            msg, tb = self.take_error()
            if is_open:
                collector.fail(tup, msg, tb)
            else:
                collector.log(f"{self.component_id}.process raised {msg} after tuple {tid:#x} was "
                              "acked or failed", "warn")
        elif is_open:
            collector.fail(tup, self.timeout_error())
        else:
            collector.log(f"tuple {tid:#x} was acked, then {self.component_id}.process ran past the "
                          f"{self.limits.timeout:g}s timeout", "warn")

    def finish(self, bolt: Any, collector: TaskCollector) -> None:
        """`bolt.finish()` under the message timeout: raising, or running past its deadline
        (or an earlier attempt killed in it: not run again), fails every tuple still
        outstanding with what happened; a raise with nothing outstanding is logged."""
        error, tb = f"{self.component_id}.finish raised {self.timeout_error()}", ""
        if not self.stuck(FINISH):
            outcome = self.call(FINISH, _finish, bolt)
            if outcome == OK:
                return
            if outcome == RAISED:
                msg, tb = self.take_error()
                error = f"{self.component_id}.finish raised {msg}"
        if not collector.outstanding:
            if tb:
                collector.log(error, "error")
            return
        for tup in list(collector.outstanding.values()):
            collector.fail(tup, error, tb)


def _finish(bolt: Any) -> None:
    bolt.finish()
