"""What a built-in source needs of the task that runs it (runtime.task.TaskRunner is the one;
connectors sit below the runtime, so they name it by this protocol)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
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
                     replayed: bool = False, root: int | None = None) -> None: ...

    def message_gone(self, message_id: Any, reason: str, stream: str = "default", fmt: str = "",
                     attempt: int = 1, replayed: bool = False, root: int | None = None) -> None:
        """A message the source was to read again can no longer be read: a replay (root replay,
        or a queued record of the spout) found it gone from the source (trimmed by retention,
        deleted). `reason` is the one line a user reads in its dead letter: what is gone and
        where (topic, partition, offset or id). When the round re-emits that message (a failed
        root of a root replay; every queued record), its root is dead at once, never counted
        complete; other messages are ignored. A message that was gone before it was ever read
        made no root: the source counts it (stats["trimmed"]) instead of calling this. `root`:
        the root id a queued record was made with (spout_record's too), kept by its replay
        whatever root ids the run's rounds derive since (a root replay's)."""
        ...

    def spout_block(self, name: str, offsets: list[int], raws: list[bytes], decode: Callable[[bytes], list],
                    stream: str = "default", fmt: str = "") -> None:
        """Lines of file `name` at byte `offsets`: what spout_record((name, offset), ...) does for
        each, in one go."""
        ...

    def replay_to(self, component: str, task: int, rec: FailedTuple, attempt: int) -> None: ...

    def log(self, message: str, level: str = "info") -> None: ...


class BatchSourceRunner(SourceRunner, Protocol):
    """A source that emits a block of records at a time (connectors.file_blocks) gets this
    runner (runtime.batch.runner.BatchTaskRunner): its blocks go to batch components."""

    batch_size: int   # records per block, at most

    def select_roots(self, hashes: np.ndarray) -> np.ndarray | None:
        """Which of the records whose message ids hash to `hashes` (ids.position_hashes) a
        root-replay round re-emits (a bool mask); None when every one is emitted."""
        ...

    def emit_roots(self, hashes: np.ndarray, values: Any, stream: str) -> None:
        """Root tuples, one per row of `values` (a pyarrow record batch of `stream`'s
        fields), row i's message id hashing to hashes[i]: the root ids, tuple ids, routes and
        ledger contributions `spout_record` would give each row, counted as its roots."""
        ...
