"""The tuple a bolt gets (Tuple), and the system's component and stream names (ticks,
heartbeats). Its own module: both the collector protocol (recovery.api.collector) and the
components (recovery.api.components) name it."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

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
        if key.__class__ is str:
            # the common case, a field name, in one dict lookup (a bolt reads fields per tuple)
            positions = _FIELD_INDEX.get(self.fields)
            if positions is not None and key in positions:
                return self.values[positions[key]]
            return self.values[self._index(key)]
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
