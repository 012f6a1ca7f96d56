"""What the batch task loops (bolt.py, sink.py) use of the task runner that runs them: a
BatchTaskRunner (runner.py) is one. The runner imports the loops and the loops import only
this protocol, so the dependency goes one way."""
from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, Protocol

from recovery.faults import Injection
from recovery.model.workflow import Component
from recovery.runtime.batch.collector import BatchCollector
from recovery.runtime.collector import Output
from recovery.runtime.guard import UserCode
from recovery.runtime.routing import Router
from recovery.runtime.task import Records
from recovery.runtime.timeouts import MessageTimeouts
from recovery.tracking.state import KeyedState


class BatchHost(Protocol):
    """A batch component's task, as its task loop sees it."""

    @property
    def comp(self) -> Component: ...

    @property
    def component_id(self) -> str: ...

    @property
    def task_id(self) -> int: ...

    @property
    def router(self) -> Router: ...

    @property
    def collector(self) -> BatchCollector: ...

    @property
    def injections(self) -> list[Injection]: ...

    @property
    def timeouts(self) -> MessageTimeouts: ...

    @property
    def user_code(self) -> UserCode: ...

    @property
    def stats(self) -> dict[str, float]: ...

    @property
    def state(self) -> KeyedState | None: ...

    @property
    def batch_size(self) -> int: ...

    def fields(self, src: str, stream: str) -> tuple[str, ...]:
        """The declared fields of `src`'s `stream`."""
        ...

    def start_bolt(self, records: Records, started: float) -> Generator[Output, None, Any]:
        """The prepared bolt; None when its __init__ or prepare raised (its tuples failed)."""
        ...

    def finish(self, started: float) -> Iterator[Output]:
        """The task's end: its last chunks sealed and, tracked, everything it did committed."""
        ...
