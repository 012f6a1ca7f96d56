"""The `recovery ui` command. The web stack (Starlette, uvicorn) is imported when the command
runs, so the rest of the CLI starts as fast without it."""
from __future__ import annotations

import logging
import socket

import click

from recovery.cli import redis_option
from recovery.errors import RecoveryError
from recovery.home import ensure_home
from recovery.ui.access import TOKEN_ENV, check_token, is_loopback, is_wildcard


def register(main: click.Group) -> None:
    @main.command("ui")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on. Anything but loopback needs the token on every "
                       "request (pages too), and the traffic is plain HTTP.")
    @click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
    @click.option("--token", envvar=TOKEN_ENV, default=None, metavar="TOKEN",
                  help=f"The server's secret (or {TOKEN_ENV}). Default: a new random one, printed "
                       "once at start in the URL to open (…/?token=…).")
    @click.option("--allow-host", "allowed_hosts", multiple=True, metavar="NAME",
                  help="Another Host name the server answers to (repeatable): the name a browser "
                       "reaches it by. Default: 127.0.0.1, localhost, [::1] and --host.")
    @redis_option
    def ui(host: str, port: int, token: str | None, allowed_hosts: tuple[str, ...], redis_url: str | None) -> None:
        """Serve the web view of runs, failures and recovery (Ctrl-C stops it).

        \b
        Security (see the README, "The web view"):
        - it answers only to the Host names 127.0.0.1, localhost, [::1], --host and
          --allow-host, with its port (421 otherwise: DNS rebinding);
        - recover, requeue and clear are POST or DELETE only and need the token (the
          pages' forms carry it; API clients send the X-Recovery-Token header, or
          Authorization: Bearer TOKEN); one sent from another site's page is refused;
        - on a non-loopback --host, every request needs the token: open the printed URL
          (a cookie keeps it), or send the header.
        """
        from recovery.controlplane import connection
        try:
            import uvicorn

            from recovery.ui.app import create_app
        except ImportError as err:
            raise RecoveryError(f"the web view needs its packages ({err.name} is missing): "
                                "pip install recovery (Starlette, Jinja2, uvicorn)") from None
        user_token = check_token(token) if token is not None else None
        url = connection.resolve_url(redis_url)
        client = connection.connect(url)
        shown = socket.gethostname() if is_wildcard(host) else host
        if is_wildcard(host):     # a browser reaches "every address" by the machine's name
            allowed_hosts += (socket.gethostname(), socket.getfqdn())
        if not is_loopback(host):
            click.secho(f"warning: listening on {host}: whoever reaches this port with the token can "
                        "recover, requeue and clear runs, and the traffic (token included) is plain HTTP",
                        fg="yellow", err=True)
        sock = _listen(host, port)     # bound here: a port in use is one line and exit 2
        port = sock.getsockname()[1]
        log_dir = ensure_home() / "ui"
        app = create_app(client, url, log_dir, host=host, port=port, token=user_token,
                         allowed_hosts=allowed_hosts)
        app.state.ui.processes.make_private()
        shown = f"[{shown}]" if ":" in shown else shown
        where = f"http://{shown}:{port}/"
        if user_token is None:
            where += f"?token={app.state.token}"
            how = "the token is in the URL; API clients send it as the X-Recovery-Token header"
        else:
            how = f"token from --token / {TOKEN_ENV}"
        click.echo(f"recovery ui: {where}   ({how}; Redis: {connection.describe(url)}; Ctrl-C stops)")
        ui_log = logging.getLogger("recovery.ui")   # the actions it starts, even without -v
        if not ui_log.isEnabledFor(logging.INFO):
            ui_log.setLevel(logging.INFO)
        # no proxy headers: nothing may tell the app it was reached another way
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, proxy_headers=False)
        uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as err:
        sock.close()
        raise RecoveryError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
