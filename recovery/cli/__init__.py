"""The `recovery` command line: `main` and what its commands share. Each command is a
module-level click command in its own module of this package, added to `main` at the end of
this file; the commands that act on runs are thin shells over the run API (recovery/run.py)."""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import click
import redis

from recovery.cli.clear import clear
from recovery.cli.dead import dead
from recovery.cli.launcher import launcher
from recovery.cli.plan import plan
from recovery.cli.preview import preview
from recovery.cli.produce import produce
from recovery.cli.recover import recover
from recovery.cli.runs import runs_cmd
from recovery.cli.server import server
from recovery.cli.status import status
from recovery.cli.submit import submit
from recovery.cli.topics import topics
from recovery.cli.trace import trace
from recovery.cli.ui import ui
from recovery.cli.validate import graph, properties, validate
from recovery.errors import RecoveryError
from recovery.visible import visible

log = logging.getLogger(__name__)


class _Group(click.Group):
    """Turns every RecoveryError into one line on stderr and its exit code, never a traceback;
    a Redis error nothing expected (a server that refuses a command: read-only replica, out
    of memory, ACL) into one line too, exit 2, its traceback in the log (-vv)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RecoveryError as err:
            click.echo(f"error: {visible(err)}", err=True)   # messages quote data: escaped
            sys.exit(err.exit_code)
        except redis.RedisError as err:
            log.debug("Redis error", exc_info=err)
            reason = visible(" ".join(str(err).split()) or type(err).__name__)
            click.echo(f"error: Redis: {type(err).__name__}: {reason} (`recovery -vv` logs its traceback)",
                       err=True)
            sys.exit(RecoveryError.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recovery")
@click.option("-v", "--verbose", count=True,
              help="Log what the driver does on stderr: -v runs, rounds, Redis, Spark; -vv debug.")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Failure-localizing recovery for Storm-style stream workflows on Apache Spark."""
    ctx.call_on_close(log_to_stderr(verbose))


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to sys.stderr as it is at each record (click's test runner swaps it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """(Always sys.stderr as it is at each record, whatever stream is set.)"""


class _VisibleFormatter(logging.Formatter):
    """Log lines quote data (errors, values): control characters shown as escapes; a
    traceback keeps its lines."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), multiline=True)


def log_to_stderr(verbose: int) -> Callable[[], None]:
    """The `recovery` logger on stderr (stdout stays for --json): WARNING, -v INFO, -vv DEBUG.
    Only ours: Spark's log4j and py4j are configured apart (engine/session.py). Returns the undo
    (the command has ended; a test process goes on)."""
    logger = logging.getLogger("recovery")
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = _StderrHandler()
    handler.setFormatter(_VisibleFormatter("%(levelname)s %(name)s: %(message)s"))
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)   # a command may lower one of its own loggers' (`recovery ui`)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return undo


# The commands, each a module-level click command of its own module.
for _command in (validate, graph, properties, submit, runs_cmd, status, plan, preview, recover, dead, trace,
                 clear, produce, topics, server, ui, launcher):
    main.add_command(_command)
