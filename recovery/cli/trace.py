"""`recovery trace RUN ROOT`: one root of a run, followed through its failures and recovery."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.errors import BadRequest
from recovery.jobs.trace import trace_lines


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@click.argument("root", required=False)
@click.option("--message", default=None, metavar="VALUE",
              help="The root's message id instead, in its source's terms: FILE:OFFSET (a file source), "
                   "PARTITION:OFFSET (a Redis-stream or Kafka source), the id-field value (a spark source).")
@click.option("--tree", is_flag=True,
              help="Its tuple tree too: re-derived on Spark in a sandbox that writes nothing of the run, "
                   "each tuple checked against what the run recorded.")
@click.option("--master", default=None, help="With --tree: Spark master URL (default local[*]).")
@click.option("--conf", "spark_conf", multiple=True, metavar="K=V", help="With --tree: a Spark setting (repeatable).")
@common.properties_file_option
@redis_option
@json_option
def trace(run_id: str, root: str | None, message: str | None, tree: bool, master: str | None,
          spark_conf: tuple[str, ...], properties_file: str | None, redis_url: str | None, as_json: bool) -> None:
    """One root: its message id, its state (complete, pending or dead, and why), every failure
    of a tuple of its tree, the rounds that replayed them, its requeues and its dead letter.
    ROOT is a root id as `dead --json` shows them in `roots`."""
    if (root is None) == (message is None):
        raise BadRequest("give ROOT or --message VALUE (one of them)")
    spark_settings = common.spark_settings(spark_conf, properties_file)
    result = api.Run.get(run_id, redis=redis_url, master=master, spark_conf=spark_settings).trace(
        root, tree=tree, message=message)
    if as_json:
        echo_json(result.to_json())
        return
    for line in trace_lines(result):
        click.echo(plain(line))
