"""`recovery dead RUN`: the dead-letter queue, and requeueing from it."""
from __future__ import annotations

import click

from recovery.cli import common, echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.errors import RecoveryError
from recovery.jobs import dead_letters


def register(main: click.Group) -> None:
    @main.command()
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
        client, _ = common.client_for(redis_url)
        if requeue:
            result = dead_letters.requeue(client, run_id, component, list(tuple_keys) or None)
            n = result["requeued"]
            if as_json:
                echo_json(result)
            else:
                click.echo(f"requeued {n} dead tuple{'s' if n != 1 else ''}; run `recovery recover {plain(run_id)}`")
            return
        result = dead_letters.dead(client, run_id, component)
        rows = result["dead"]
        if as_json:
            echo_json(result)
            return
        if not rows:
            click.echo("no dead tuples")
        for r in rows:
            vals = r.get("values") if r.get("values") is not None else r.get("raw")
            if isinstance(vals, str):
                vals = vals.rstrip()
            # values as Python writes them (repr), the error as one line: both with escapes for
            # control characters, so a tuple cannot drive the terminal
            click.echo(f"{plain(r['component'])} task {plain(r['task'])}  attempts {plain(r.get('attempt'))}  "
                       f"values {plain(repr(vals))}\n    error: {plain(r.get('error'))}")
