"""`recovery clear RUN | --all`: remove a run's cached state."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.errors import RecoveryError
from recovery.jobs import clear as jobs_clear


@click.command()
@click.argument("run_id", required=False, callback=common.run_id_arg)
@click.option("--all", "all_runs", is_flag=True, help="Every run this Redis knows.")
@click.option("--force", is_flag=True, help="Clear a run even if it is still running.")
@redis_option
@json_option
def clear(run_id: str | None, all_runs: bool, force: bool, redis_url: str | None, as_json: bool) -> None:
    """Remove a run's cached state (every key of the run and nothing else)."""
    if bool(run_id) == all_runs:
        raise RecoveryError("give a RUN id or --all (not both)")
    if run_id is None:
        cleared = api.clear_all(redis=redis_url, force=force)
    else:   # (keys a run left without its record are cleared too)
        cleared = {run_id: api.Run.get(run_id, redis=redis_url, must_exist=False).clear(force)}
    if as_json:
        echo_json(jobs_clear.report(cleared))
        return
    for rid, c in cleared.items():
        click.echo(f"cleared {plain(rid)}: {len(c.keys)} keys")
        for table in c.tables:   # a table sink's rows are never cleared
            click.echo(f"  sink {plain(table.component)} ({plain(table.type)}): {plain(table.note)}")
