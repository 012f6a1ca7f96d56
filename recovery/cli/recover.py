"""`recovery recover RUN`: recovery rounds until the failed set is empty."""
from __future__ import annotations

import click

from recovery.cli import common, echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.connectors import files
from recovery.environment import environment
from recovery.jobs import recover as jobs_recover
from recovery.jobs import summary as jobs_summary
from recovery.jobs.summary import RunSummary
from recovery.model import config
from recovery.tracking import runs, spill


def register(main: click.Group) -> None:
    @main.command()
    @click.argument("run_id", callback=common.run_id_arg)
    @click.option("--max-rounds", type=click.IntRange(min=1), default=None)
    @click.option("--strategy", type=click.Choice(["localized", "root-replay"]), default="localized",
                  show_default=True, help="root-replay replays failed roots from their spout (Storm).")
    @click.option("--master", default=None, help="Spark master URL (default local[*]).")
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
    def recover(run_id: str, max_rounds: int | None, strategy: str, master: str | None,
                spark_conf: tuple[str, ...], properties_file: str | None, props: tuple[str, ...], force: bool,
                spill_dir: str | None, code_changed: bool, redis_url: str | None, as_json: bool) -> None:
        """Run recovery rounds until the failed set is empty.

        With -p KEY=VALUE (repeatable), first change the run's configuration: each value is
        checked as at submit, stored in the run record, and used by this and every later
        round (a crashed round that resumes too). Use it to mend a bad value a run was
        submitted with, or to allow more attempts before `recovery dead --requeue`."""
        spark_settings = common.spark_settings(spark_conf, properties_file)
        common.refuse_embedded_redis_on_cluster(redis_url, master)
        client, url = common.client_for(redis_url)
        # every refusal, before Spark starts
        plan = jobs_recover.prepare(client, run_id, force, spill_dir, code_changed)
        # a run submitted locally, recovered on a cluster: its relative paths are the driver's
        files.check_paths_reach_executors(jobs_summary.original_workflow(plan.record),
                                          master or environment().spark_master, plan.record.file)
        # and its spill folder: under RECOVERY_HOME on this host, unless --spill-dir moves it
        spill.check_reaches_executors(spill_dir, plan.record.spill_dir, master or environment().spark_master)
        if plan.driver_alive:   # (force)
            click.echo(f"warning: taking over run {run_id} from its {plain(runs.describe_driver(plan.record))}; if "
                       "that driver is still working, it stops at its next write", err=True)
        if plan.new_code_digest is not None:
            click.echo(f"note: the workflow's code changed since run {run_id} was submitted: recovering with "
                       "the new code (--code-changed)", err=True)
        if props:
            original = jobs_summary.original_workflow(plan.record)
            jobs_recover.reconfigure(client, run_id, config.parse_assignments(
                props, "-p", dict(original.config), [c.id for c in original.components]))
        spark = common.spark_for(master, spark_settings)

        with common.RoundProgress(not as_json) as progress:
            def on_round(r: dict) -> None:
                s: RunSummary = r["summary"]
                progress.note(f"round {r['round']}: replayed {r['replayed']} tuples; "
                              f"roots pending {s.pending}, dead {s.dead}")
            summary = jobs_recover.run(spark, client, url, plan, max_rounds, strategy, progress, on_round)
        if as_json:
            echo_json(summary.to_json())
        else:
            common.show(summary, as_json=False)   # (with its warnings: roots no task will run)
            click.echo(f"rounds {summary.rounds}, recovered {summary.recovered} tuples, "
                       f"dead {summary.dead_tuples} tuples, {summary.duration or 0:.1f}s"
                       + (" (resumed a crashed round first)" if summary.resumed else ""))
