"""Errors the CLI turns into one line and a non-zero exit code (2 for bad input)."""
from __future__ import annotations


class RecoveryError(Exception):
    """Base for errors a user can act on. str(err) is the one line the CLI prints."""
    exit_code = 2


class WorkflowError(RecoveryError):
    """A workflow file is wrong: names the file, the line (when known) and what is wrong."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        self.message = message
        self.file = file
        self.line = line
        where = file or "<workflow>"
        if line:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class RedisUnavailable(RecoveryError):
    """Redis cannot be reached; names the URL (without its password)."""


class RunError(RecoveryError):
    """A run id that does not exist, or a run in a state the command cannot act on."""


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
