"""`recovery preview RUN`: what the next recovery round would do, run in a sandbox that writes
nothing of the run."""
from __future__ import annotations

import json

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain


def _tuples(n: int) -> str:
    return f"{n} tuple" if n == 1 else f"{n} tuples"


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@click.option("--dead", is_flag=True, help="Preview the dead letters, as if requeued (`dead --requeue`).")
@click.option("--component", default=None, metavar="C", help="Only the failed positions of component C.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="At most N tuples per position (the first by id).")
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
@common.remote_option
@click.option("--conf", "spark_conf", multiple=True, metavar="K=V", help="A Spark setting (repeatable).")
@common.properties_file_option
@redis_option
@json_option
def preview(run_id: str, dead: bool, component: str | None, limit: int | None, master: str | None,
            remote: str | None, spark_conf: tuple[str, ...], properties_file: str | None, redis_url: str | None,
            as_json: bool) -> None:
    """What the next `recover` round would do, with the code as it is now.

    The round runs on Spark in a sandbox: its sinks receive nothing, keyed state is read but
    not written, and the run's ledger, queues, dead letters, offsets and record stay as they
    were. Per failed position: how many queued tuples would succeed and how many fail again,
    with their errors; per sink: how many records it would get, with a sample. A code change
    since the submit needs no --code-changed here: the preview says so and runs the new code."""
    spark_settings = common.spark_settings(spark_conf, properties_file)
    run = api.Run.get(run_id, redis=redis_url, master=master, spark_conf=spark_settings, remote=remote)
    api.refuse_embedded_redis_on_cluster(redis_url, run.spark_choice.effective_master)
    with common.RoundProgress(not as_json) as progress:
        p = run.preview(dead=dead, component=component, limit=limit, progress=progress)
    if as_json:
        echo_json(p.to_json())
        return
    if p.code_changed:
        click.echo(f"note: the workflow's code changed since run {run_id} was submitted: previewing the new code")
    if p.message:
        click.echo(plain(p.message))
        return
    what = "dead letters, as if requeued" if p.dead else "queued tuples"
    click.echo(f"preview of run {run_id} round {p.round}: {p.tuples} {what}; nothing of the run was written")
    for pos in p.positions:
        click.echo(plain(f"{pos.component} task {pos.task}: {_tuples(pos.tuples)}, would succeed {pos.would_succeed}, "
                         f"would fail {pos.would_fail}"))
        for err in pos.errors:
            click.echo(plain(f"    {err.count} x {err.error[:300]}"))
            click.echo(plain(f"        e.g. {json.dumps(err.sample, ensure_ascii=False, default=str)[:300]}"))
    for sink in p.sinks:
        click.echo(plain(f"sink {sink.component}: {sink.records} records"))
        for rec in sink.sample:
            click.echo(plain(f"    {json.dumps(rec, ensure_ascii=False, sort_keys=True, default=str)[:300]}"))
    click.echo(f"not promised: {p.caveat}")
