"""Built-in sinks: bolts that make their input durable, then ack it (commit, then ack).

All are idempotent: a task writes one part per (round, task) under a deterministic name, so a
re-executed task overwrites its own part instead of appending, and a Redis hash sink sets
fields. A tuple that fails in a sink is never counted as written.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from recovery.components import Bolt, Tuple
from recovery.model import SinkImpl
from recovery.sources import resolve


def _part_name(context: Any, ext: str) -> str:
    """One part per (run, round, task): a re-executed task overwrites its own part; another
    run of the same workflow writes beside it."""
    run = getattr(context, "run_id", "run")
    return f"part-{run}-r{getattr(context, 'round', 0):04d}-{context.component_id}-t{context.task_id:04d}.{ext}"


def _atomic_write(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _BufferedSink(Bolt):
    """Buffers the task's tuples, writes them once at the end of the input, then acks them."""

    def __init__(self, impl: SinkImpl, base_dir: str):
        self.impl = impl
        self.base_dir = base_dir
        self.pending: list[Tuple] = []
        self.encoded: list[Any] = []

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            return
        self.encoded.append(self.encode(tup))   # an unencodable tuple fails here, alone
        self.pending.append(tup)

    def encode(self, tup: Tuple) -> Any:
        return tup.as_dict() if tup.fields else {"values": tup.values}

    def finish(self) -> None:
        if self.pending:
            self.write(self.encoded)
        for tup in self.pending:
            self.ack(tup)
        self.pending, self.encoded = [], []

    def write(self, encoded: list[Any]) -> None:
        """Make the task's encoded tuples durable (before they are acked)."""
        raise NotImplementedError


class JsonlSink(_BufferedSink):
    def encode(self, tup: Tuple) -> bytes:
        return json.dumps(super().encode(tup), ensure_ascii=False, sort_keys=True).encode() + b"\n"

    def write(self, encoded: list[bytes]) -> None:
        folder = resolve(self.impl.param("path") or "out", self.base_dir)
        _atomic_write(os.path.join(folder, _part_name(self.context, "jsonl")), b"".join(encoded))


class ParquetSink(_BufferedSink):
    def write(self, encoded: list[dict]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        folder = resolve(self.impl.param("path") or "out", self.base_dir)
        table = pa.Table.from_pylist(encoded)
        path = os.path.join(folder, _part_name(self.context, "parquet"))
        os.makedirs(folder, exist_ok=True)
        tmp = path + ".tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, path)


class RedisHashSink(_BufferedSink):
    """HSET <key> <tuple[key-field]> <the tuple as JSON>: a replay overwrites the same field."""

    def encode(self, tup: Tuple) -> tuple[str, str]:
        obj = _BufferedSink.encode(self, tup)
        field = self.impl.param("key-field") or (tup.fields[0] if tup.fields else None)
        key = tup[field] if field else tup.values[0]
        return str(key), json.dumps(obj, ensure_ascii=False, sort_keys=True)

    def write(self, encoded: list[tuple[str, str]]) -> None:
        client = self.context.redis
        if client is None:
            raise RuntimeError("the redis sink needs a Redis connection")
        key = self.impl.param("key") or f"recovery:sink:{self.context.component_id}"
        mapping = dict(encoded)
        client.hset(key, mapping=mapping)


SINKS = {"jsonl": JsonlSink, "parquet": ParquetSink, "redis": RedisHashSink}


def make_sink(impl: SinkImpl, base_dir: str) -> Bolt:
    try:
        return SINKS[impl.type](impl, base_dir)
    except KeyError:
        raise ValueError(f"unknown sink type {impl.type!r} (known: {', '.join(SINKS)})") from None


def read_jsonl_dir(path: str) -> list[dict]:
    """A jsonl sink's contents: every record of every part file under `path`."""
    out = []
    if not os.path.isdir(path):
        return out
    for name in sorted(os.listdir(path)):
        if name.endswith(".jsonl") and not name.startswith("."):
            with open(os.path.join(path, name), encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh if line.strip())
    return out
