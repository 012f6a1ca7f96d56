"""Storm-style component API: Spout, Bolt, BasicBolt (and Tuple, from recovery.api.tuples).

Components never talk to Spark or Redis themselves. The runtime that hosts a component binds a
collector to it (`bind(collector, conf, context)`, before calling `open`/`prepare`); every
emit, ack, fail and log goes through it (its protocol: recovery.api.collector).

`emit` returns the task ids the tuple was sent to, as Storm's does ([direct_task] for a
direct emit).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recovery.api.collector import UNBOUND, OutputCollector
from recovery.api.tuples import HEARTBEAT_STREAM, SYSTEM_COMPONENT, TICK_STREAM, Tuple
from recovery.model.graph import ComponentContext

# Tuple and the system streams live in recovery.api.tuples (the collector protocol needs Tuple,
# and this module needs the protocol); they stay importable from here, the API users write to.
__all__ = ["HEARTBEAT_STREAM", "SYSTEM_COMPONENT", "TICK_STREAM", "BasicBolt", "Bolt", "Component",
           "ComponentContext", "Spout", "Tuple"]

class Component:
    """What spouts and bolts share: the collector, config, context and keyed state."""

    _collector: OutputCollector = UNBOUND
    conf: dict = {}
    # where this task sits in the run (set by bind, before open/prepare; None until then)
    context: ComponentContext = None  # type: ignore[assignment]
    # Keyed state that outlives the Spark task and the run (a recovery.state.KeyedState);
    # installed by the runtime before prepare/open.
    state: Any = None

    def bind(self, collector: OutputCollector, conf: dict, context: ComponentContext) -> None:
        """Attach the collector this component's emits, acks, fails and logs go to, with
        its configuration and its ComponentContext (the runtime calls it before open/prepare)."""
        self._collector = collector
        self.conf = conf
        self.context = context

    def log(self, message: str, level: str = "info") -> None:
        self._collector.log(str(message), level)


class Spout(Component):
    """A source of root tuples. In a bounded run the spout is exhausted when `next_tuple`
    returns without emitting (or returns False)."""

    def open(self, conf: dict, context: ComponentContext) -> None:
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
             direct_task: int | None = None) -> Sequence[int]:
        """Emit a root tuple; `tup_id` is the message id (derived from the position in the
        source when omitted, so a replay yields the same root id)."""
        return self._collector.emit(self, values, stream, (), direct_task, tup_id)


class Bolt(Component):
    """Explicit anchoring, ack and fail, as Storm's IRichBolt. A tuple neither acked nor
    failed when the task's input ends fails as "not acked by <component>"."""

    auto_anchor = False
    auto_ack = False

    def prepare(self, conf: dict, context: ComponentContext) -> None:
        pass

    def process(self, tup: Tuple) -> None:
        raise NotImplementedError

    def process_tick(self, tup: Tuple) -> None:
        pass

    def finish(self) -> None:
        """Called once the task's input is exhausted (asynchronous bolts resolve what is
        outstanding here), under the message timeout. If it raises or runs past the timeout,
        every tuple still outstanding fails with that error (with none outstanding, as for a
        BatchBolt, whose rows are settled by their calls, the error is logged)."""

    def cleanup(self) -> None:
        pass

    def emit(self, values: Sequence[Any], stream: str = "default",
             anchors: Sequence[Tuple] | Tuple | None = None,
             direct_task: int | None = None) -> Sequence[int]:
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
