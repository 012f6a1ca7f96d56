"""`recovery runs`: the runs this Redis knows."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain


@click.command("runs")
@redis_option
@json_option
def runs_cmd(redis_url: str | None, as_json: bool) -> None:
    """The runs this Redis knows."""
    rows = api.runs_list(redis=redis_url)
    if as_json:
        echo_json({"runs": [r.model_dump() for r in rows]})
        return
    if not rows:
        click.echo("no runs")
    for r in rows:
        counts = (f"roots {r.roots}  pending {r.pending}  dead {r.dead}" if r.counts_known
                  else f"roots unknown (round {r.unsettled_round} not settled)")
        click.echo(f"{plain(r.run_id)}  {plain(r.status):<9}  round {plain(r.round)}  "
                   f"started {plain(r.started)}  {plain(counts)}")
