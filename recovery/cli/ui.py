"""The `recovery ui` command. The web stack (Starlette, uvicorn) is imported when the command
runs, so the rest of the CLI starts as fast without it."""
from __future__ import annotations

import logging
import socket
from pathlib import Path

import click

from recovery.cli.options import redis_option
from recovery.cli.safe_text import plain
from recovery.errors import RecoveryError
from recovery.home import ensure_home
from recovery.ui.access import TOKEN_ENV, check_token, is_loopback, is_wildcard, read_token_file


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback is reached by other machines, "
                   "and the traffic (token included) is plain HTTP.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--token", envvar=TOKEN_ENV, default=None, metavar="TOKEN",
              help=f"The server's secret (or {TOKEN_ENV}; an argument shows in `ps`: prefer "
                   "--token-file). Default: a new random one, printed once at start in the URL "
                   "to open (…/?token=…).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="PATH", help="Read the token from PATH, a file only its owner may read "
                                   "(mode 0600 or stricter): a script's API client reads it too.")
@click.option("--no-token", is_flag=True,
              help="Serve without the token: every local account can read and act. Loopback only.")
@click.option("--allow-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Another Host name the server answers to (repeatable): the name a browser "
                   "reaches it by. Default: 127.0.0.1, localhost, [::1] and --host.")
@redis_option
def ui(host: str, port: int, token: str | None, token_file: Path | None, no_token: bool,
       allowed_hosts: tuple[str, ...], redis_url: str | None) -> None:
    """Serve the web view of runs, failures and recovery (Ctrl-C stops it).

    \b
    Security (see the README, "The web view"):
    - every request needs the token, on loopback too: open the printed URL (a session
      cookie keeps the browser logged in) or type the token into the login page; API
      clients send the X-Recovery-Token header, or Authorization: Bearer TOKEN;
    - it answers only to the Host names 127.0.0.1, localhost, [::1], --host and
      --allow-host, with its port (421 otherwise: DNS rebinding);
    - recover, requeue and clear are POST or DELETE only and need the token header or
      a form of the web view's own pages (their CSRF value); one sent from another
      site's page is refused;
    - --no-token (loopback only) lets every local account in.
    """
    from recovery.controlplane import connection
    try:
        import uvicorn

        from recovery.ui.app import create_app
    except ImportError as err:
        raise RecoveryError(f"the web view needs its packages ({err.name} is missing): "
                            "pip install recovery (Starlette, Jinja2, uvicorn)") from None
    if token_file is not None and token is not None:
        raise RecoveryError(f"give --token-file or --token / {TOKEN_ENV}, not both")
    if no_token and (token is not None or token_file is not None):
        raise RecoveryError("--no-token serves without a token: give no --token, --token-file or "
                            f"{TOKEN_ENV} with it")
    if no_token and not is_loopback(host):
        raise RecoveryError(f"--no-token is for loopback only: --host {host} would let anyone who "
                            "reaches the port read and act")
    user_token = read_token_file(token_file) if token_file is not None else \
        check_token(token) if token is not None else None
    url = connection.resolve_url(redis_url)
    client = connection.connect(url)
    shown = socket.gethostname() if is_wildcard(host) else host
    if is_wildcard(host):     # a browser reaches "every address" by the machine's name
        allowed_hosts += (socket.gethostname(), socket.getfqdn())
    if no_token:
        click.secho("warning: --no-token: every local account (and any process on this machine) can "
                    "read the runs and recover, requeue and clear them through this web view",
                    fg="yellow", err=True)
    if not is_loopback(host):
        click.secho(f"warning: listening on {plain(host)}: whoever reaches this port with the token can "
                    "recover, requeue and clear runs, and the traffic (token included) is plain HTTP",
                    fg="yellow", err=True)
    sock = _listen(host, port)     # bound here: a port in use is one line and exit 2
    port = sock.getsockname()[1]
    log_dir = ensure_home() / "ui"
    app = create_app(client, url, log_dir, host=host, port=port, token=user_token,
                     allowed_hosts=allowed_hosts, no_token=no_token)
    app.state.ui.processes.make_private()
    shown = f"[{shown}]" if ":" in shown else shown
    where = f"http://{shown}:{port}/"
    if no_token:
        how = "no token"
    elif user_token is None:
        where += f"?token={app.state.token}"
        how = "the token is in the URL; API clients send it as the X-Recovery-Token header"
    elif token_file is not None:
        how = f"token from {token_file}"
    else:
        how = f"token from --token / {TOKEN_ENV}"
    click.echo(plain(f"recovery ui: {where}   ({how}; Redis: {connection.describe(url)}; Ctrl-C stops)"))
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
