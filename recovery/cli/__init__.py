"""The `recovery` command line: `main` and what its commands share. Each command is a
module-level click command in its own module of this package, added to `main` at the end of
this file; the commands that act on runs are thin shells over the run API (recovery/run.py)."""
from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click
import redis

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


class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each record (click's test runner swaps it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr


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


def redis_option(f):
    """--redis URL (or RECOVERY_REDIS_URL); the embedded server when neither is given."""
    return click.option("--redis", "redis_url", envvar="RECOVERY_REDIS_URL", default=None,
                        metavar="URL", help="Redis URL (redis://, rediss://, unix://). "
                        "Default: the embedded server under RECOVERY_HOME (.recovery/).")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(f)


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


# The commands (imported last: their modules import the helpers above).
from recovery.cli.clear import clear  # noqa: E402
from recovery.cli.dead import dead  # noqa: E402
from recovery.cli.launcher import launcher  # noqa: E402
from recovery.cli.plan import plan  # noqa: E402
from recovery.cli.produce import produce  # noqa: E402
from recovery.cli.recover import recover  # noqa: E402
from recovery.cli.runs import runs_cmd  # noqa: E402
from recovery.cli.server import server  # noqa: E402
from recovery.cli.status import status  # noqa: E402
from recovery.cli.submit import submit  # noqa: E402
from recovery.cli.topics import topics  # noqa: E402
from recovery.cli.ui import ui  # noqa: E402
from recovery.cli.validate import graph, properties, validate  # noqa: E402

for _command in (validate, graph, properties, submit, runs_cmd, status, plan, recover, dead, clear, produce,
                 topics, server, ui, launcher):
    main.add_command(_command)
