"""`recovery server start | status | stop | ping`: the embedded Redis under RECOVERY_HOME."""
from __future__ import annotations

from typing import Any

import click
import redis

from recovery.cli.options import Command, echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.controlplane import connection, embedded


def _home_option(f: Command) -> Command:
    return click.option("--home", "home", default=None, metavar="DIR",
                        help="State folder (default: $RECOVERY_HOME, else .recovery/ here).")(f)


def _print_status(st: dict[str, Any]) -> None:
    if not st["running"]:
        extra = f" (pid {st['pid']} is alive but does not answer)" if st.get("pid") else ""
        click.echo(f"embedded Redis: not running{extra}")
        click.echo(f"  dir     {plain(st['dir'])}")
        return
    click.echo(f"embedded Redis: running (pid {st['pid']})")
    click.echo(f"  url     {plain(st['url'])}")
    click.echo(f"  dir     {plain(st['dir'])}")
    click.echo(f"  keys    {plain(st['keys'])}")
    click.echo(f"  memory  {plain(st['used_memory_human'])}")
    click.echo(f"  version {plain(st['version'])}")


@click.group("server")
def server() -> None:
    """The embedded Redis server (state under $RECOVERY_HOME, default .recovery/)."""

@server.command("status")
@_home_option
@json_option
def status(home: str | None, as_json: bool) -> None:
    """Whether the embedded Redis runs, its pid, socket, memory and key count."""
    st = embedded.EmbeddedServer(home).status()
    if as_json:
        echo_json(st)
    else:
        _print_status(st)

@server.command("start")
@_home_option
@json_option
def start(home: str | None, as_json: bool) -> None:
    """Start the embedded Redis (does nothing when it already runs)."""
    srv = embedded.EmbeddedServer(home)
    started = srv.start()
    st = srv.status()
    st["started"] = started
    if as_json:
        echo_json(st)
    else:
        verb = "started" if started else "already running"
        click.echo(f"embedded Redis {verb} (pid {st['pid']}) at {plain(st['url'])}")

@server.command("stop")
@_home_option
@json_option
def stop(home: str | None, as_json: bool) -> None:
    """Shut the embedded Redis down (its data stays in the append-only file)."""
    srv = embedded.EmbeddedServer(home)
    pid = srv.status()["pid"]
    stopped = srv.stop()
    if as_json:
        echo_json({"stopped": stopped, "pid": pid if stopped else None, "dir": str(srv.dir)})
    elif stopped:
        click.echo(f"embedded Redis stopped (pid {pid})")
    else:
        click.echo("embedded Redis: not running")

@server.command("ping")
@redis_option
@_home_option
@json_option
def ping(redis_url: str | None, home: str | None, as_json: bool) -> None:
    """Check that Redis answers (--redis URL, else the embedded server; never starts it)."""
    client = connection.connect(redis_url, home=home, start=False)
    try:
        version = client.info("server").get("redis_version")
    except redis.RedisError:  # INFO may be disabled on managed servers; PING answered
        version = None
    finally:
        client.close()
    where = connection.describe(redis_url) if redis_url else embedded.EmbeddedServer(home).url
    if as_json:
        echo_json({"ok": True, "url": where, "version": version})
    else:
        click.echo(f"PONG from {plain(where)} (Redis {plain(version or '?')})")
