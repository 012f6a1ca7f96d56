"""The Redis hash sink: `<sink type="redis" key="...">` sets one hash field per tuple, so a
replayed tuple overwrites its own field."""
from __future__ import annotations

import json
from typing import Any

from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import json_lines
from recovery.connectors.sink_base import BufferedSink
from recovery.tracking import keys


class RedisHashSink(BufferedSink):
    """HSET <key> <tuple[key-field]> <the tuple as JSON>: a replay overwrites the same field."""

    def encode(self, tup: Tuple) -> tuple[str, str]:
        obj = BufferedSink.encode(self, tup)
        field = self.impl.param("key-field") or (tup.fields[0] if tup.fields else None)
        key = tup[field] if field else tup.values[0]
        return str(key), json.dumps(obj, ensure_ascii=False, sort_keys=True)

    def write(self, encoded: list[tuple[str, str]]) -> None:
        client = self.context.redis
        if client is None:
            raise RuntimeError("the redis sink needs a Redis connection")
        key = self.impl.param("key") or keys.default_sink(self.context.component_id)
        mapping = dict(encoded)
        # right before the fields are set, as the other sinks before they publish: raises when
        # the task's driver lost the run, or a batch sink's write passed its message timeout
        if self.context.fence is not None:
            self.context.fence()
        client.hset(key, mapping=mapping)

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        field = self.impl.param("key-field") or (fields[0] if fields else None)
        if not fields or field not in fields:   # no such field: each row fails as in encode
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"")
        key_column = dict(zip(fields, batch.columns))[field]
        return [(str(k), v.decode()) for k, v in zip(key_column.to_pylist(), lines.to_pylist())
                if v is not None], errors
