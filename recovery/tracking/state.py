"""Keyed state for aggregating bolts: lives in Redis, outlives the Spark task and the run.

Reads go to a task-local cache backed by one HGET per key on first use; writes stay in the task
until its commit, where they are written in the same transaction as the task's done marker.
So a Spark task that dies before committing leaves the state untouched, and a task that
committed is never executed again (its stored output is replayed instead): no double counting.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.tracking import keys

_MISSING = object()


def state_key(run_id: str, component: str) -> str:
    """Hash: a component's keyed state (packed key -> packed value), in the run's home slot: a
    task's state writes go in the transaction of its done marker."""
    return keys.run_key(run_id, "state", component)


class KeyedState:
    def __init__(self, client: Redis, key: str):
        self._client = client
        self.key = key
        self._cache: dict[Any, Any] = {}
        self._dirty: set = set()

    @staticmethod
    def _field(key: Any) -> bytes:
        return msgpack.packb(key)

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:
            raw = self._client.hget(self.key, self._field(key))
            value = msgpack.unpackb(cast(bytes, raw), strict_map_key=False) if raw is not None else _MISSING
            self._cache[key] = value
        return default if value is _MISSING else value

    def put(self, key: Any, value: Any) -> None:
        msgpack.packb(value)  # fail at the put, in the bolt, when a value cannot be stored
        self._cache[key] = value
        self._dirty.add(key)

    def delete(self, key: Any) -> None:
        self._cache[key] = _MISSING
        self._dirty.add(key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Everything stored plus this task's uncommitted writes."""
        seen = set()
        for k, v in self._cache.items():
            if k in self._dirty:
                seen.add(k)
                if v is not _MISSING:
                    yield k, v
        for raw_k, raw_v in self._client.hscan_iter(self.key):
            k = msgpack.unpackb(raw_k, strict_map_key=False)
            if k not in seen:
                yield k, msgpack.unpackb(raw_v, strict_map_key=False)

    def snapshot(self) -> Any:
        """What this task has read and written so far, to go back to with `restore` (a batch
        call that raised is discarded, its state writes with it)."""
        return dict(self._cache), set(self._dirty)

    def restore(self, snapshot: Any) -> None:
        """Back to what `snapshot()` returned: writes since then are forgotten."""
        cache, dirty = snapshot
        self._cache, self._dirty = dict(cache), set(dirty)

    def write_to(self, pipe: Any) -> None:
        """Add this task's writes to the commit transaction."""
        sets = {}
        for k in self._dirty:
            v = self._cache[k]
            if v is _MISSING:
                pipe.hdel(self.key, self._field(k))
            else:
                sets[self._field(k)] = msgpack.packb(v)
        if sets:
            pipe.hset(self.key, mapping=sets)


class LocalState(KeyedState):
    """The same API in memory, for runs with tracking off and for unit tests."""

    def __init__(self) -> None:   # no client: every method that reads one is overridden
        self.key = "local"
        self._store: dict = {}

    def get(self, key: Any, default: Any = None) -> Any:
        return self._store.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self._store[key] = value

    def delete(self, key: Any) -> None:
        self._store.pop(key, None)

    def items(self):
        return iter(list(self._store.items()))

    def snapshot(self) -> Any:
        return dict(self._store)

    def restore(self, snapshot: Any) -> None:
        self._store = dict(snapshot)

    def write_to(self, pipe: Any) -> None:
        pass
