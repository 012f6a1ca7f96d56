"""The options and output the commands share: --redis, --json and the JSON they print."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

Command = TypeVar("Command", bound=Callable[..., Any])


def redis_option(f: Command) -> Command:
    """--redis URL (or RECOVERY_REDIS_URL); the embedded server when neither is given."""
    return click.option("--redis", "redis_url", envvar="RECOVERY_REDIS_URL", default=None,
                        metavar="URL", help="Redis URL (redis://, rediss://, unix://). "
                        "Default: the embedded server under RECOVERY_HOME (.recovery/).")(f)


def json_option(f: Command) -> Command:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(f)


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))
