"""What a built-in source needs of the task that runs it (runtime.task.TaskRunner is the one;
connectors sit below the runtime, so they name it by this protocol)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from redis import Redis

from recovery.model.failed import FailedTuple
from recovery.model.run import RunSpec
from recovery.model.workflow import Component, Workflow


class SourceRunner(Protocol):
    spec: RunSpec
    wf: Workflow
    comp: Component
    component_id: str
    index: int
    task_id: int
    client: Redis | None
    stats: dict[str, float]

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False) -> None: ...

    def replay_to(self, component: str, task: int, rec: FailedTuple, attempt: int) -> None: ...

    def log(self, message: str, level: str = "info") -> None: ...
