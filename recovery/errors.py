"""Errors the CLI turns into one line and a non-zero exit code (2 for bad input), and the web
view into a refusal: by type, never by text. What each kind means to a caller:

- BadRequest: the input itself is malformed (a run id outside its alphabet): 400 in the web view;
- NotFound: it names something that does not exist (a run, a component of a run): 404;
- any other RecoveryError: a state the request cannot act on (a run still running, one that
  exists already, a run without tracking): 409.

Every one of them is exit code 2 on the command line (`exit_code`).
"""
from __future__ import annotations


class RecoveryError(Exception):
    """Base for errors a user can act on. str(err) is the one line the CLI prints."""
    exit_code = 2


class BadRequest(RecoveryError):
    """The request is malformed in itself (an id outside its alphabet), whatever is stored."""


class NotFound(RecoveryError):
    """The request names something that does not exist."""


class WorkflowError(RecoveryError):
    """A workflow file is wrong: names the file, the line (when known) and what is wrong.
    `component`: the id of the component at fault, when there is one (a workflow built in
    Python places such an error at the line that added that component)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None, *,
                 component: str | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.component = component
        where = file or "<workflow>"
        if line:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class RedisUnavailable(RecoveryError):
    """Redis cannot be reached; names the URL (without its password)."""


class RunError(RecoveryError):
    """A run id that does not exist, or a run in a state the command cannot act on."""


class RunNotFound(RunError, NotFound):
    """No run of that id in this Redis."""


class RunExists(RunError):
    """A run of that id exists already (submit --run-id)."""


class RunBusy(RunError):
    """The run's driver is alive (it holds the run's lease), or a recover of it was started
    already: the command would race it (recover, requeue, clear, a configuration change)."""


class NoSuchComponent(NotFound):
    """A run's workflow has no component of that id."""


class JobFailed(Exception):
    """A job's task failed for good (what Spark raises as its own errors); raised by engines
    other than Spark, e.g. the test kit's local one. Not a RecoveryError: the driver words it."""


class RunFenced(RunError):
    """The run's generation moved on while this process worked on it (cleared, created anew,
    or taken over by another driver): it stopped without writing into it."""


class RunCleared(RunFenced):
    """The run was cleared (or created anew under the same id) while this process worked on it:
    it stopped without writing into it."""


class RunTakenOver(RunFenced):
    """Another driver took the run over (`recover --force`, or a resume after this driver's
    lease expired) while this process worked on it: it stopped without writing into it."""


class SpillError(RunError):
    """A committed task's spill file is missing, truncated or corrupt, or the spill location
    cannot be written: one line naming the file (or location) and the task. A run stopped by it
    is in `error`, and resumable once the file is back (a RunError: it stops the run, as a
    failed round does)."""


class ExecutorsLost(RecoveryError):
    """A round on a cluster had no executor for `recovery.executors.wait.secs` (its workers
    lost): its jobs were cancelled (engine/executor_watch.py). The run is resumable."""
