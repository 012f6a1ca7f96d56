"""`recovery submit`: run a workflow on Spark, every tuple tracked (or, with --follow, keep
reading its topics in micro-batches)."""
from __future__ import annotations

import sys

import click

from recovery import run as api
from recovery.cli import common, metrics_server
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.errors import RecoveryError
from recovery.jobs import follow_events as events
from recovery.jobs import summary as jobs_summary
from recovery.jobs.summary import RunSummary


def echo_events(as_json: bool, also: events.Event | None = None) -> events.Event:
    """`submit --follow`'s events (jobs.follow_events) printed to stderr (none with --json), and
    given to `also`."""

    def echo(event: events.FollowEvent) -> None:
        if also is not None:
            also(event)
        if as_json:
            return
        if isinstance(event, events.Resumed):
            s = event.summary
            line = (f"resumed crashed run {s.run_id} (round {s.resumed_round}): "
                    f"pending {s.pending}, dead {s.dead}")
        elif isinstance(event, events.Continued):
            line = f"continuing run {event.run_id} after round {event.round}"
        elif isinstance(event, events.Started):
            line = f"run {event.run_id}"
        elif isinstance(event, events.Batch):
            extra = f", trimmed {event.trimmed}" if event.trimmed else ""
            line = (f"batch round {event.round}: {event.messages} messages, failed {event.failed}{extra}; "
                    f"run pending {event.pending}, dead {event.dead} ({event.seconds:.1f}s)")
        elif isinstance(event, events.Recovered):
            line = f"recovery: {event.rounds} round(s); pending {event.pending}, dead {event.dead}"
        elif isinstance(event, events.Trimmed):
            line = f"warning: {event.line}"
        elif isinstance(event, events.SourceWaiting):
            line = (f"waiting: {event.place} has not answered within {event.timeout:g} s; asking again until it "
                    f"does ({event.error})")
        elif isinstance(event, events.SourceAnswered):
            line = f"{event.place} answers again after {event.seconds:.0f} s: reading on"
        elif isinstance(event, events.Stopping):
            line = f"{event.signal}: stopping after this batch (again to abort)"
        else:
            line = f"round {event.round} was interrupted ({event.error}): finishing it"
        click.echo(plain(line), err=True)
        sys.stderr.flush()

    return echo


@click.command()
@click.argument("file")
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
@common.remote_option
@click.option("--conf", "spark_conf", multiple=True, metavar="K=V", help="A Spark setting (repeatable).")
@click.option("--property", "-p", "props", multiple=True, metavar="K=V",
              help="Set a workflow config property (repeatable; `recovery properties` "
              "lists them), checked before anything runs.")
@click.option("--no-tracking", is_flag=True, help="Run without tracking (no recovery possible).")
@click.option("--run-id", default=None, callback=common.run_id_arg,
              help="Use this run id instead of a generated one (1 to 128 letters, digits, '.', "
              "'_' or '-', not starting with '.').")
@click.option("--spill-dir", default=None, metavar="DIR|URI",
              help="Where tasks spill in-flight outputs: a folder the driver and every executor "
              "reach, or a file://, hdfs:// or s3:// URI (default: recovery.spill.dir, else "
              "RECOVERY_HOME/spill). Kept in the run: recover and clear find it.")
# --- log source (recovery/jobs/follow.py): continuous runs over redis-stream topics ---
@click.option("--follow", is_flag=True, help="Keep reading the workflow's topics in micro-batches "
              "until Ctrl-C/SIGTERM (finishes and commits the batch under way).")
@click.option("--max-batches", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --follow: stop after N batches.")
@click.option("--idle-exit", type=click.FloatRange(min=0), default=None, metavar="SECS",
              help="With --follow: stop after SECS seconds without a new message.")
@click.option("--reset", type=click.Choice(["earliest", "latest"]), default=None,
              help="A kafka consumer whose committed offset is below its partition's log start "
              "(records removed by retention before they were read) goes on from the log start "
              "(earliest) or the end (latest); without it such a submit is refused.")
@metrics_server.options
# --- end log source ---
@common.properties_file_option
@redis_option
@json_option
def submit(file: str, master: str | None, remote: str | None, spark_conf: tuple[str, ...], props: tuple[str, ...],
           no_tracking: bool, run_id: str | None, spill_dir: str | None, follow: bool,
           max_batches: int | None, idle_exit: float | None, reset: str | None, metrics_port: int | None,
           metrics_host: str, metrics_allow_hosts: tuple[str, ...], metrics_token_file: str | None,
           properties_file: str | None, redis_url: str | None, as_json: bool) -> None:
    """Run the workflow FILE on Spark with every tuple tracked; prints a summary."""
    spark_conf_kv = common.spark_settings(spark_conf, properties_file)
    metrics_token = metrics_server.check(follow, metrics_port, metrics_host, metrics_token_file,
                                         metrics_allow_hosts)
    if follow:   # --- log source (recovery/jobs/follow.py): continuous runs over topics ---
        if spill_dir is not None:
            raise RecoveryError("--spill-dir does not apply to --follow runs: set the workflow "
                                "property recovery.spill.dir instead")
        served = (metrics_server.start(api.client_for(redis_url)[0], metrics_port, metrics_host, metrics_token,
                                     metrics_allow_hosts)
                  if metrics_port is not None else None)
        try:
            run = api.submit(file, redis=redis_url, config=props, config_option="-p", follow=True, master=master,
                             remote=remote,
                             spark_conf=spark_conf_kv, run_id=run_id, tracking=not no_tracking,
                             max_batches=max_batches, idle_exit=idle_exit, reset=reset,
                             on_event=echo_events(as_json, served[1].on_event if served else None))
        finally:
            if served:
                served[0].close()
        outcome = run.follow_outcome
        assert outcome is not None
        if as_json:
            echo_json(outcome.to_json())
        elif outcome.summary is not None:
            common.print_summary(outcome.summary)
            for line in jobs_summary.report_lines(outcome):
                click.echo(plain(line))
        else:
            click.echo("no messages to read: no run was started")
        return

    def resumed(summary: RunSummary) -> None:
        if not as_json:
            click.echo(f"resumed crashed run {plain(summary.run_id)} of the same consumer first", err=True)
    with common.RoundProgress(not as_json) as progress:
        run = api.submit(file, redis=redis_url, config=props, config_option="-p", master=master, remote=remote,
                         spark_conf=spark_conf_kv, run_id=run_id, tracking=not no_tracking, spill_dir=spill_dir,
                         progress=progress, on_resumed=resumed, reset=reset)
    summary = run.summary
    assert summary is not None
    common.show(summary, as_json)
    if not as_json and summary.failed_positions:
        rid = plain(summary.run_id)
        click.echo(f"next: recovery plan {rid}   then: recovery recover {rid}")
