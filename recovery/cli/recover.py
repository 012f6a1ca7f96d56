"""`recovery recover RUN`: recovery rounds until the failed set is empty."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.jobs.recover import RecoverPlan, RecoveryRound
from recovery.tracking import runs


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@click.option("--max-rounds", type=click.IntRange(min=1), default=None)
@click.option("--strategy", type=click.Choice(["localized", "root-replay"]), default="localized",
              show_default=True, help="root-replay replays failed roots from their spout (Storm).")
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
@common.remote_option
@click.option("--conf", "spark_conf", multiple=True, metavar="K=V", help="A Spark setting (repeatable).")
@common.properties_file_option
@click.option("--property", "-p", "props", multiple=True, metavar="K=V",
              help="Set a workflow config property of the run (repeatable); stored in "
              "the run, used by this and later rounds.")
@click.option("--force", is_flag=True, help="Take over a run whose driver still holds its lease "
              "(a driver that hangs, or died on another host less than a lease ago).")
@click.option("--spill-dir", default=None, metavar="DIR|URI",
              help="Where the run's spill files are now (default: where its submit put them); "
              "kept in the run for later rounds and clear.")
@click.option("--code-changed", is_flag=True,
              help="Recover with the workflow's code as it is now, though it changed since the run was "
              "submitted (a bug fixed); without it such a recover is refused.")
@redis_option
@json_option
def recover(run_id: str, max_rounds: int | None, strategy: str, master: str | None, remote: str | None,
            spark_conf: tuple[str, ...], properties_file: str | None, props: tuple[str, ...], force: bool,
            spill_dir: str | None,
            code_changed: bool, redis_url: str | None, as_json: bool) -> None:
    """Run recovery rounds until the failed set is empty.

    With -p KEY=VALUE (repeatable), first change the run's configuration: each value is
    checked as at submit, stored in the run record, and used by this and every later
    round (a crashed round that resumes too). Use it to mend a bad value a run was
    submitted with, or to allow more attempts before `recovery dead --requeue`."""
    spark_settings = common.spark_settings(spark_conf, properties_file)
    run = api.Run.get(run_id, redis=redis_url, master=master, spark_conf=spark_settings, remote=remote)
    api.refuse_embedded_redis_on_cluster(redis_url, run.spark_choice.effective_master)

    def prepared(plan: RecoverPlan) -> None:   # checked; Spark not started yet
        if plan.driver_alive:   # (force)
            click.echo(f"warning: taking over run {run_id} from its {plain(runs.describe_driver(plan.record))}; if "
                       "that driver is still working, it stops at its next write", err=True)
        if plan.new_code_digest is not None:
            click.echo(f"note: the workflow's code changed since run {run_id} was submitted: recovering with "
                       "the new code (--code-changed)", err=True)

    with common.RoundProgress(not as_json) as progress:
        def on_round(r: RecoveryRound) -> None:
            progress.note(f"round {r.round}: replayed {r.replayed} tuples; "
                          f"roots pending {r.summary.pending}, dead {r.summary.dead}")
        summary = run.recover(max_rounds=max_rounds, strategy=strategy, config=props, config_option="-p",
                              force=force, spill_dir=spill_dir, code_changed=code_changed, progress=progress,
                              on_round=on_round, on_prepared=prepared)
    if as_json:
        echo_json(summary.to_json())
    else:
        common.show(summary, as_json=False)   # (with its warnings: roots no task will run)
        click.echo(f"rounds {summary.rounds}, recovered {summary.recovered} tuples, "
                   f"dead {summary.dead_tuples} tuples, {summary.duration or 0:.1f}s"
                   + (" (resumed a crashed round first)" if summary.resumed else ""))
