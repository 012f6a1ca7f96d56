"""`recovery status RUN`: a run's root counts, per-component counters and failed positions."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import json_option, redis_option


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@redis_option
@json_option
def status(run_id: str, redis_url: str | None, as_json: bool) -> None:
    """Roots complete / pending / failed / dead, and the failed positions."""
    common.show(api.Run.get(run_id, redis=redis_url).status(), as_json)
