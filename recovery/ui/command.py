"""The `recovery ui` command. The web stack (Starlette, uvicorn) is imported when the command
runs, so the rest of the CLI starts as fast without it."""
from __future__ import annotations

import ipaddress
import logging
import socket

import click

from recovery.errors import RecoveryError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(main: click.Group) -> None:
    from recovery.cli import redis_option

    @main.command("ui")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on. Anything but loopback exposes the runs (and their "
                       "recover/requeue/clear actions) to the network without authentication.")
    @click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
    @redis_option
    def ui(host: str, port: int, redis_url: str | None) -> None:
        """Serve the web view of runs, failures and recovery (Ctrl-C stops it)."""
        from recovery.redis import connection, embedded
        try:
            import uvicorn

            from recovery.ui.app import create_app
        except ImportError as err:
            raise RecoveryError(f"the web view needs its packages ({err.name} is missing): "
                                "pip install recovery (Starlette, Jinja2, uvicorn)") from None
        url = connection.resolve_url(redis_url)
        client = connection.connect(url)
        if not is_loopback(host):
            click.secho(f"warning: listening on {host}: the web view has no authentication; anyone "
                        "who reaches this port can recover, requeue and clear runs", fg="yellow", err=True)
        app = create_app(client, url, embedded.state_home() / "ui")
        sock = _listen(host, port)     # bound here: a port in use is one line and exit 2
        port = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"recovery ui: http://{shown}:{port}/   (Redis: {connection.describe(url)}; Ctrl-C stops)")
        ui_log = logging.getLogger("recovery.ui")   # the actions it starts, even without -v
        if not ui_log.isEnabledFor(logging.INFO):
            ui_log.setLevel(logging.INFO)
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise RecoveryError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
