"""`recovery dead RUN`: the dead-letter queue, and requeueing from it."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.errors import RecoveryError
from recovery.jobs import dead_letters
from recovery.jobs.dead_letters import DeadReport
from recovery.jobs.reports import ShownTuple


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@click.option("--requeue", is_flag=True, help="Put dead tuples back for another recovery.")
@click.option("--component", default=None, help="Only this component's dead tuples.")
@click.option("--tuple", "tuple_keys", multiple=True, metavar="COMPONENT:TASK:ID",
              help="With --requeue: only this dead tuple (repeatable; the `key` of `dead --json`).")
@redis_option
@json_option
def dead(run_id: str, requeue: bool, component: str | None, tuple_keys: tuple[str, ...],
         redis_url: str | None, as_json: bool) -> None:
    """Tuples that exhausted their retries, with their errors."""
    if tuple_keys and not requeue:
        raise RecoveryError("--tuple selects tuples to requeue: give --requeue too")
    run = api.Run.get(run_id, redis=redis_url)
    if requeue:
        n = run.requeue(component, tuple_keys)
        if as_json:
            echo_json({"run_id": run_id, "requeued": n})
        else:
            click.echo(f"requeued {n} dead tuple{'s' if n != 1 else ''}; run `recovery recover {plain(run_id)}`")
        return
    letters = run.dead_letters(component)
    if as_json:
        echo_json(DeadReport(run_id=run_id, dead=[ShownTuple.of(r, dead_letters.dead_key(r))
                                                  for r in letters]).to_json())
        return
    if not letters:
        click.echo("no dead tuples")
    for r in letters:
        vals = r.values if r.values is not None else r.raw
        if isinstance(vals, bytes):
            vals = vals.decode("utf-8", "replace")
        if isinstance(vals, str):
            vals = vals.rstrip()
        # values as Python writes them (repr), the error as one line: both with escapes for
        # control characters, so a tuple cannot drive the terminal
        click.echo(f"{plain(r.component)} task {plain(r.task)}  attempts {plain(r.attempt)}  "
                   f"values {plain(repr(vals))}\n    error: {plain(r.error)}")
