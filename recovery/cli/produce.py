"""`recovery produce TOPIC FILE`: load lines or JSON records into a Redis-stream topic."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click

from recovery.cli.options import echo_json, json_option, redis_option
from recovery.cli.safe_text import plain
from recovery.connectors.redis_stream import retention
from recovery.connectors.redis_stream import topics as stream_reader
from recovery.controlplane import connection
from recovery.errors import RecoveryError


def _records(fh: Any, fmt: str, key_field: str | None, source: str) -> Iterator[tuple[Any, bytes]]:
    """(key, payload) per non-blank line; a jsonl line must be a JSON object (with the key
    field when one is given). Errors name the line."""
    for n, line in enumerate(fh, 1):
        payload = line.rstrip(b"\r\n")
        if not payload.strip():
            continue
        if fmt == "text":
            yield payload.decode("utf-8", "replace"), payload
            continue
        try:
            obj = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise RecoveryError(f"{source}:{n}: not JSON ({err})") from None
        if not isinstance(obj, dict):
            raise RecoveryError(f"{source}:{n}: expected a JSON object, got {type(obj).__name__}")
        if key_field is not None:
            if key_field not in obj:
                raise RecoveryError(f"{source}:{n}: record has no field {key_field!r} (--key-field)")
            key = obj[key_field]
        else:
            key = payload.decode("utf-8")
        yield key, payload


@click.command()
@click.argument("topic")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--partitions", "-n", type=click.IntRange(min=1), default=None,
              help="Partition count; required to create the topic, fixed from then on.")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text",
              show_default=True, help="One record per line: text, or a JSON object per line.")
@click.option("--key-field", default=None, metavar="F",
              help="jsonl: partition by this field's value (default: by the whole record).")
@click.option("--retention", "retention_text", default=None, metavar="POLICY",
              help="What the topic keeps: 'committed' (what some consumer has not committed), a "
              "count per partition (1000000) or an age (30m, 12h, 7d); trimmed as runs commit. "
              "Never past a consumer's committed offset. Default: every message (or as set).")
@redis_option
@json_option
def produce(topic: str, file: str, partitions: int | None, fmt: str, key_field: str | None,
            retention_text: str | None, redis_url: str | None, as_json: bool) -> None:
    """Load FILE ('-' for stdin) into TOPIC, one message per non-blank line, each key-hashed
    to a partition; creates the topic when --partitions is given and it does not exist."""
    if key_field is not None and fmt != "jsonl":
        raise RecoveryError("--key-field needs --format jsonl")
    policy = retention.parse_retention(retention_text) if retention_text is not None else None
    client = connection.connect(connection.resolve_url(redis_url))
    if partitions is None and stream_reader.topic_partitions(client, topic) is None:
        raise RecoveryError(f"topic {topic!r} does not exist: give --partitions N to create it")
    if partitions is not None:   # a different count for an existing topic: fail before reading
        existing = stream_reader.topic_partitions(client, topic)
        if existing is not None and existing != partitions:
            stream_reader.create_topic(client, topic, partitions, fmt)
    if file != "-":   # check the whole file before writing anything
        try:
            with open(file, "rb") as fh:
                for _ in _records(fh, fmt, key_field, file):
                    pass
        except OSError as err:
            raise RecoveryError(f"cannot read {file}: {err.strerror}") from None
    if policy is not None:
        stream_reader.create_topic(client, topic, partitions, fmt)
        retention.set_retention(client, topic, policy)
    with click.open_file(file, "rb") as source:
        counts = stream_reader.produce(client, topic, _records(source, fmt, key_field, file), partitions, fmt)
    trimmed = retention.apply_retention(client, topic)
    kept = retention.topic_retention(client, topic)
    total = sum(counts.values())
    n = len(counts)
    if as_json:
        echo_json({"topic": topic, "partitions": n, "produced": total, "trimmed": trimmed,
                   "retention": kept.text if kept else None,
                   "per_partition": {str(p): c for p, c in counts.items()}})
        return
    per = ", ".join(f"{p}: +{c}" for p, c in counts.items())
    extra = f"; retention {kept.text}, trimmed {trimmed}" if kept else ""
    click.echo(f"produced {total} message{'s' if total != 1 else ''} to topic {plain(topic)} "
               f"({n} partition{'s' if n != 1 else ''}; {per}{extra})")
