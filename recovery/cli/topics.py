"""`recovery topics [TOPIC]`: the topics in Redis, their partitions, retention and consumers."""
from __future__ import annotations

import click

from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.connectors.redis_stream import report, retention
from recovery.connectors.redis_stream.topics import TopicError
from recovery.controlplane import connection


@click.command()
@click.argument("topic", required=False)
@click.option("--drop-consumer", default=None, metavar="NAME",
              help="Forget consumer NAME of TOPIC (a workflow no longer run): trimming stops "
              "waiting for it. Its committed offsets stay.")
@redis_option
@json_option
def topics(topic: str | None, drop_consumer: str | None, redis_url: str | None, as_json: bool) -> None:
    """List the topics (or TOPIC): partitions, stored messages, retention, consumers and lag."""
    client = connection.connect(connection.resolve_url(redis_url))
    names = [topic] if topic else report.topic_names(client)
    if drop_consumer is not None:
        if not topic:
            raise TopicError("--drop-consumer needs a TOPIC")
        if report.topic_report(client, topic) is None:
            raise TopicError(f"topic {topic!r} does not exist")
        if not retention.drop_consumer(client, topic, drop_consumer):
            raise TopicError(f"topic {topic!r} has no consumer {drop_consumer!r} (`recovery topics "
                             f"{topic}` lists them)")
    shown = []
    for name in names:
        got = report.topic_report(client, name)
        if got is None:
            raise TopicError(f"topic {name!r} does not exist")
        shown.append(got)
    if as_json:
        echo_json(shown)
        return
    if not shown:
        click.echo("no topics (create one with `recovery produce TOPIC FILE --partitions N`)")
    for t in shown:
        for line in report.format_topic(t):
            click.echo(plain(line))     # topic and consumer names read back from Redis
