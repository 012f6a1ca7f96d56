"""The Redis hash sink: `<sink type="redis" key="...">` sets one hash field per tuple, so a
replayed tuple overwrites its own field.

A task sets its fields a chunk at a time (one HSET each, after checking that its driver still
owns the run), as its tuples come: a hash has no staging place a part could be renamed from.
So, unlike the other sinks, a part's fields can be seen before the task commits, and a part
that fails after some chunks leaves them set: its tuples are queued, and `recover` sets the
same fields to the same values again (a field is written once per key, whatever the replays)."""
from __future__ import annotations

import json
from typing import Any

from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import json_lines
from recovery.connectors.sink_base import StreamingSink
from recovery.tracking import keys


class RedisHashSink(StreamingSink):
    """HSET <key> <tuple[key-field]> <the tuple as JSON>: a replay overwrites the same field."""

    def encode(self, tup: Tuple) -> tuple[str, str]:
        obj = StreamingSink.encode(self, tup)
        field = self.impl.param("key-field") or (tup.fields[0] if tup.fields else None)
        key = tup[field] if field else tup.values[0]
        return str(key), json.dumps(obj, ensure_ascii=False, sort_keys=True)

    def size_of(self, encoded: tuple[str, str]) -> int:
        return len(encoded[0]) + len(encoded[1])

    def open_part(self, chunk: Any) -> Any:
        client = self.context.redis
        if client is None:
            raise RuntimeError("the redis sink needs a Redis connection")
        return client

    def write_chunk(self, part: Any, chunk: list[tuple[str, str]]) -> None:
        key = self.impl.param("key") or keys.default_sink(self.context.component_id)
        # right before the fields are set, as the other sinks before they publish: raises when
        # the task's driver lost the run, or a batch sink's commit passed its message timeout
        if self.context.fence is not None:
            self.context.fence()
        part.hset(key, mapping=dict(chunk))

    def commit_part(self, part: Any) -> None:
        """Every chunk is set already: what is left is the check that the run is still ours."""
        if self.context.fence is not None:
            self.context.fence()

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        field = self.impl.param("key-field") or (fields[0] if fields else None)
        if not fields or field not in fields:   # no such field: each row fails as in encode
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"")
        key_column = dict(zip(fields, batch.columns))[field]
        return [(str(k), v.decode()) for k, v in zip(key_column.to_pylist(), lines.to_pylist())
                if v is not None], errors
