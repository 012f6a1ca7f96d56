"""Storm-style component API: Tuple, Spout, Bolt, BasicBolt.

Components never talk to Spark or Redis themselves. The runtime that hosts a component binds a
collector to it (`bind(collector, conf, context)`, before calling `open`/`prepare`); every
emit, ack, fail and log goes through it (its protocol: recovery.api.collector).

`emit` returns the task ids the tuple was sent to, as Storm's does ([direct_task] for a
direct emit).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from recovery.api.collector import UNBOUND, OutputCollector

TICK_STREAM = "__tick"
SYSTEM_COMPONENT = "__system"
HEARTBEAT_STREAM = "__heartbeat"


_FIELD_INDEX: dict[tuple[str, ...], dict[str, int]] = {}   # fields -> name -> position


class Tuple:
    """A tuple as a bolt sees it. `task` is the global task id it was sent to (Storm's
    numbering); `source_task` the task that emitted it. `roots` are the root ids whose
    trees it belongs to; `attempt` counts recovery attempts (1 on the first run)."""

    __slots__ = ("id", "component", "stream", "task", "values", "fields", "roots",
                 "source_task", "attempt")

    def __init__(self, id: int, component: str, stream: str, task: int, values: Sequence[Any],
                 fields: Sequence[str] = (), roots: Iterable[int] = (), source_task: int = -1,
                 attempt: int = 1):
        self.id = id
        self.component = component
        self.stream = stream
        self.task = task
        self.values = values if type(values) is list else list(values)
        self.fields = fields if type(fields) is tuple else tuple(fields)
        self.roots = roots if type(roots) is tuple else tuple(roots)
        self.source_task = source_task
        self.attempt = attempt

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.values[self._index(key)]
        return self.values[key]

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except (KeyError, IndexError):
            return default

    def _index(self, name: str) -> int:
        positions = _FIELD_INDEX.get(self.fields)
        if positions is None:
            positions = _FIELD_INDEX[self.fields] = {f: i for i, f in enumerate(self.fields)}
        try:
            return positions[name]
        except KeyError:
            raise KeyError(f"tuple from {self.component!r} stream {self.stream!r} has no field "
                           f"{name!r} (fields: {', '.join(self.fields) or 'none'})") from None

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.fields, self.values))

    @property
    def is_tick(self) -> bool:
        return self.stream == TICK_STREAM and self.component == SYSTEM_COMPONENT

    def __repr__(self) -> str:
        return (f"Tuple(id={self.id:#x}, component={self.component!r}, stream={self.stream!r}, "
                f"task={self.task}, values={self.values!r})")


class Component:
    """What spouts and bolts share: the collector, config, context and keyed state."""

    _collector: OutputCollector = UNBOUND
    conf: dict = {}
    context: Any = None
    # Keyed state that outlives the Spark task and the run (a recovery.state.KeyedState);
    # installed by the runtime before prepare/open.
    state: Any = None

    def bind(self, collector: OutputCollector, conf: dict, context: Any) -> None:
        """Attach the collector this component's emits, acks, fails and logs go to, with
        its configuration and task context (the runtime calls it before open/prepare)."""
        self._collector = collector
        self.conf = conf
        self.context = context

    def log(self, message: str, level: str = "info") -> None:
        self._collector.log(str(message), level)


class Spout(Component):
    """A source of root tuples. In a bounded run the spout is exhausted when `next_tuple`
    returns without emitting (or returns False)."""

    def open(self, conf: dict, context: Any) -> None:
        pass

    def next_tuple(self) -> Any:
        raise NotImplementedError

    def ack(self, tup_id: Any) -> None:
        pass

    def fail(self, tup_id: Any) -> None:
        pass

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def close(self) -> None:
        pass

    def emit(self, values: Sequence[Any], stream: str = "default", tup_id: Any = None,
             direct_task: int | None = None) -> list[int]:
        """Emit a root tuple; `tup_id` is the message id (derived from the position in the
        source when omitted, so a replay yields the same root id)."""
        return self._collector.emit(self, values, stream, (), direct_task, tup_id)


class Bolt(Component):
    """Explicit anchoring, ack and fail, as Storm's IRichBolt. A tuple neither acked nor
    failed when the task's input ends fails as "not acked by <component>"."""

    auto_anchor = False
    auto_ack = False

    def prepare(self, conf: dict, context: Any) -> None:
        pass

    def process(self, tup: Tuple) -> None:
        raise NotImplementedError

    def process_tick(self, tup: Tuple) -> None:
        pass

    def finish(self) -> None:
        """Called once the task's input is exhausted (asynchronous bolts resolve what is
        outstanding here)."""

    def cleanup(self) -> None:
        pass

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Sequence[Tuple] | Tuple | None = None,
             direct_task: int | None = None) -> list[int]:
        if anchors is None:   # a BasicBolt's emit: the runtime anchors it to the current tuple
            anchors = ()
        elif isinstance(anchors, Tuple):
            anchors = (anchors,)
        else:
            anchors = tuple(anchors)
        return self._collector.emit(self, values, stream, anchors, direct_task, None)

    def ack(self, tup: Tuple) -> None:
        self._collector.ack(tup)

    def fail(self, tup: Tuple, error: str | None = None) -> None:
        self._collector.fail(tup, error)


class BasicBolt(Bolt):
    """Emits are anchored to the current input; the input is acked after process() returns
    and failed if it raises (Storm's BasicBolt)."""

    auto_anchor = True
    auto_ack = True
