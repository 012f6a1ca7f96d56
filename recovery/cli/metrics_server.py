"""`submit --follow --metrics-port PORT`: the run's Prometheus metrics on its own port
(recovery/jobs/metrics.py), loopback unless a token file is given."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from redis import Redis

from recovery.errors import RecoveryError
from recovery.jobs import metrics
from recovery.ui.access import HostRule, is_loopback, read_token_file


def options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--metrics-port, --metrics-host, --metrics-allow-host, --metrics-token-file."""
    f = click.option("--metrics-allow-host", "metrics_allow_hosts", multiple=True, metavar="NAME",
                     help="With --metrics-port: a host name scrapers reach it by, besides loopback's and "
                     "--metrics-host (repeatable); requests naming another host get 421, against DNS rebinding.")(f)
    f = click.option("--metrics-token-file", default=None, metavar="FILE",
                     help="With --metrics-port: a file (mode 0600) holding the token scrapers send as "
                     "`Authorization: Bearer TOKEN`; required off loopback.")(f)
    f = click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="ADDR",
                     help="With --metrics-port: the address to listen on.")(f)
    return click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
                        help="With --follow: serve the run's Prometheus metrics on http://ADDR:PORT/metrics.")(f)


def check(follow: bool, port: int | None, host: str, token_file: str | None,
          allow_hosts: tuple[str, ...] = ()) -> str | None:
    """Every refusal of the options, one line each, before anything runs; the token."""
    if port is None:
        if token_file is not None or host != "127.0.0.1" or allow_hosts:
            raise RecoveryError("--metrics-host, --metrics-allow-host and --metrics-token-file need --metrics-port")
        return None
    if not follow:
        raise RecoveryError("--metrics-port needs --follow (`recovery ui` serves /metrics of every run)")
    if token_file is None and not is_loopback(host):
        raise RecoveryError(f"--metrics-host {host} is not loopback: give --metrics-token-file FILE (mode 0600) "
                            "so that scrapers need its token")
    return read_token_file(Path(token_file), "--metrics-token-file") if token_file is not None else None


def start(client: Redis, port: int | None, host: str, token: str | None, allow_hosts: tuple[str, ...] = ()
          ) -> tuple[metrics.MetricsServer, metrics.RunWatch] | None:
    """The follow run's metrics server (checked options), or None without --metrics-port. It
    answers to the Host headers the web view would (HostRule): loopback's names, --metrics-host
    and --metrics-allow-host, with its port."""
    if port is None:
        return None
    watch = metrics.RunWatch()
    server = metrics.MetricsServer(metrics.registry_for(client, watch.ids), host, port, token,
                                   hosts=lambda bound: HostRule.of(host, bound, allow_hosts))
    click.echo(f"metrics: http://{host}:{server.port}/metrics"
               + (" (bearer token from --metrics-token-file)" if token else ""), err=True)
    return server, watch
