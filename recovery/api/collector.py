"""The collector: what a component calls to emit, ack, fail and log.

Components never talk to Spark or Redis themselves. The runtime that hosts a component (the
task runner's runtime.collector.TaskCollector, the engine's fate-telling spout, or a test
harness) binds a collector to it with `component.bind(collector, conf, context)` before
calling `open`/`prepare`, and every emit, ack, fail and log goes through that collector.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from recovery.api.tuples import Tuple


class OutputCollector(Protocol):
    """What Spout, Bolt (and the multilang ShellSpout, ShellBolt) call."""

    def emit(self, component: Any, values: Sequence[Any], stream: str, anchors: tuple[Tuple, ...],
             direct_task: int | None, message_id: Any) -> Sequence[int]:
        """Emit `values` on `stream` and return the task ids it was sent to (Storm's emit;
        [direct_task] for a direct emit). A spout's emit names its `message_id` (None: an
        unreliable tuple) and no anchors; a bolt's names its `anchors` (none: a BasicBolt's
        emit, anchored to the tuple being processed) and no message id."""
        ...

    def ack(self, tup: Tuple) -> None:
        """`tup` is done (a second ack or fail of it is ignored, as in Storm)."""
        ...

    def fail(self, tup: Tuple, error: str | None = None) -> None:
        """`tup` failed, with `error` saying why: its position is recorded for recovery."""
        ...

    def log(self, message: str, level: str = "info") -> None:
        ...

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False, root: int | None = None) -> None:
        """One record of a spout: a root tuple of `decode()`'s values, or, when `decode`
        raises, a failure at the spout's position that keeps the raw record (a built-in
        source's undecodable line, a shell spout's refused emit)."""
        ...


class BatchOutputCollector(OutputCollector, Protocol):
    """What a BatchBolt and a BatchSpout call besides (recovery.api.batch says what they mean)."""

    def emit_batch(self, batch: Any, anchors: Any, stream: str) -> None: ...

    def fail_rows(self, rows: Any, errors: Sequence[str] | str) -> None: ...

    def emit_root_batch(self, batch: Any, message_ids: Any, stream: str) -> None: ...


class UnboundCollector:
    """The collector of a component not bound yet: every call says what is missing."""

    def _unbound(self) -> RuntimeError:
        return RuntimeError("the component has no collector: the runtime calls "
                            "bind(collector, conf, context) before open/prepare")

    def emit(self, component: Any, values: Sequence[Any], stream: str, anchors: tuple[Tuple, ...],
             direct_task: int | None, message_id: Any) -> Sequence[int]:
        raise self._unbound()

    def ack(self, tup: Tuple) -> None:
        raise self._unbound()

    def fail(self, tup: Tuple, error: str | None = None) -> None:
        raise self._unbound()

    def log(self, message: str, level: str = "info") -> None:
        raise self._unbound()

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False, root: int | None = None) -> None:
        raise self._unbound()


UNBOUND = UnboundCollector()
