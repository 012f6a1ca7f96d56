"""Components for tests: a spout fed from a list (with sentinels) and a sink bolt that keeps
what reaches it, per run, in the run's Redis."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import msgpack
from redis import Redis

from recovery.api.components import Bolt, Spout, Tuple
from recovery.model.graph import ComponentContext
from recovery.tracking import keys
from recovery.tracking.state import state_key

ITEMS_PROPERTY = "testing.items"   # a TestingSpout's items, JSON, in its component's config
_SENTINEL_KEY = "$recovery.testing"


class Sentinel:
    """A marker in a TestingSpout's items, not a tuple. See ABORT, CRASH and EOF."""

    def __init__(self, name: str, doc: str):
        self.name = name
        self.__doc__ = doc

    def __repr__(self) -> str:
        return f"recovery.testing.{self.name}"

    def to_json(self) -> dict[str, str]:
        return {_SENTINEL_KEY: self.name}


ABORT = Sentinel("ABORT", """The spout's task fails when it reaches this item, as a task that crashed
there would: it raises TaskAborted before emitting anything after it, nothing of the task is
committed, the round fails (run_local: `LocalRun.interrupted == "abort"`, run status
`error`) and the run is resumable: `recover_local` (or `recovery recover`) runs the round
again. It fires once per run, the first time its task reaches it (recorded in the run's Redis
keys): the resumed task passes it and goes on with the next items.""")

CRASH = Sentinel("CRASH", """The driver "dies" when the spout's task reaches this item: DriverCrash (a
BaseException, which nothing in the engine catches) leaves the round where it was, tasks that
committed before it committed, the rest not run, the run's lease released as a dead driver's
expires, so the run's status is `crashed`. run_local returns with `interrupted == "crash"`;
`recover_local` resumes that round (committed tasks replay their stored output). Fires once
per run, like ABORT. Under Spark (a real submit) a task cannot kill its driver: there it fails
the task as ABORT does.""")

EOF = Sentinel("EOF", """The spout ends here: no item after the first EOF is emitted, by any of
its tasks, in any round, even if more items follow. Every time, not once.""")

SENTINELS = {s.name: s for s in (ABORT, CRASH, EOF)}


class TaskAborted(Exception):
    """Raised by a TestingSpout at ABORT: its task fails."""


class DriverCrash(BaseException):
    """Raised by a TestingSpout at CRASH: not an Exception, so that it leaves the engine the
    way a dead driver would, through every `except Exception`."""


def encode_items(items: list[Any]) -> str:
    """A TestingSpout's items as the JSON its config property holds."""
    return json.dumps([i.to_json() if isinstance(i, Sentinel) else i for i in items])


def decode_items(text: str) -> list[Any]:
    out = []
    for item in json.loads(text):
        if isinstance(item, dict) and set(item) == {_SENTINEL_KEY}:
            out.append(SENTINELS[item[_SENTINEL_KEY]])
        else:
            out.append(item)
    return out


def fired_key(run_id: str) -> str:
    """The set of sentinels (`component:position`) that fired in a run (cleared with the run)."""
    return keys.fired_sentinels(run_id)


class TestingSpout(Spout):
    """A spout whose tuples are the items of a list, given in its component's config as
    `testing.items` (JSON; `recovery.testing.feed` sets it). An item that is a list is a
    tuple's values; anything else is the one value of a one-field tuple. Item `i` goes to task
    `i % parallelism`, with message id `i` (so ids are stable across runs and rounds).
    ABORT and CRASH act in the task they fall to; items after an EOF belong to no task.
    Sentinels are never emitted."""

    __test__ = False   # not a pytest test class, whatever its name

    def open(self, conf: dict, context: ComponentContext) -> None:
        text = conf.get(ITEMS_PROPERTY)
        if text is None:
            raise ValueError(f"TestingSpout {context.component_id!r} has no {ITEMS_PROPERTY!r} property "
                             "(see recovery.testing.feed)")
        items = decode_items(text)
        if EOF in items:
            items = items[:items.index(EOF)]
        tasks, index = len(context.component_tasks), context.task_index
        self._todo: Iterator[tuple[int, Any]] = iter(
            [(i, item) for i, item in enumerate(items) if i % tasks == index])
        self._where = context.component_id
        self._redis = context.redis
        self._run_id = context.run_id

    def _fires(self, position: int) -> bool:
        """A once-per-run sentinel fires unless it fired before (without Redis: every time)."""
        if self._redis is None:
            return True
        return bool(self._redis.sadd(fired_key(self._run_id), f"{self._where}:{position}"))

    def next_tuple(self) -> Any:
        for position, item in self._todo:
            if item is ABORT:
                if self._fires(position):
                    raise TaskAborted(f"ABORT: TestingSpout {self._where!r} reached its item {position}")
                continue
            if item is CRASH:
                if self._fires(position):
                    raise DriverCrash(f"CRASH: TestingSpout {self._where!r} reached its item {position}")
                continue
            self.emit(item if isinstance(item, list) else [item], tup_id=position)
            return True
        return False


def sink_key(run_id: str, component_id: str) -> str:
    """Where a ListSink keeps its records: its keyed state (see ListSink)."""
    return state_key(run_id, component_id)


class ListSink(Bolt):
    """A sink that keeps every tuple that reaches it: `read_list_sink(client, run_id, id)`
    (or `LocalRun.sinks`) gives them after the run, as lists of values.

    Each record is put in the bolt's keyed state under its tuple id, so it is written in the
    same transaction as its task's commit: a task that dies uncommitted wrote nothing, a task
    resumed or a tuple replayed by a recovery round writes the same entry again, never a second
    one, and records stay in the run's keys (the run's, not a class's: nothing is shared between
    runs or tests). Needs tracking (the default): without it, state is the task's memory."""

    def process(self, tup: Tuple) -> None:
        self.state.put(tup.id, list(tup.values))
        self.ack(tup)


def read_list_sink(client: Redis, run_id: str, component_id: str) -> list[list]:
    """A ListSink's records in a run, ordered by tuple id (an order of no meaning but stable)."""
    rows = [(msgpack.unpackb(cast(bytes, k), strict_map_key=False),
             msgpack.unpackb(cast(bytes, v), strict_map_key=False))
            for k, v in client.hgetall(sink_key(run_id, component_id)).items()]
    return [values for _, values in sorted(rows, key=lambda kv: kv[0])]
