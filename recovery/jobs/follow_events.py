"""What a follow run (`submit --follow`) tells its caller as it goes: one typed event per step,
given to the `on_event` callback (the CLI prints them on stderr; the metrics endpoint learns
the run's id from them)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from recovery.jobs.summary import RunSummary


@dataclass(frozen=True)
class Resumed:
    """A crashed run of the same consumer, resumed before reading on: its summary after."""
    kind: ClassVar[str] = "resumed"
    summary: RunSummary


@dataclass(frozen=True)
class Continued:
    """The consumer's follow run goes on after its last round."""
    kind: ClassVar[str] = "continue"
    run_id: str
    round: int


@dataclass(frozen=True)
class Started:
    """A new run, created when its first messages came."""
    kind: ClassVar[str] = "run"
    run_id: str


@dataclass(frozen=True)
class Batch:
    """A micro-batch that settled: the messages it read, the tuples that failed, the messages
    its spouts found trimmed and the roots they emitted, the run's pending and dead roots after
    it (None: not settled), the dead letters retention dropped, its time."""
    kind: ClassVar[str] = "batch"
    run_id: str
    round: int
    messages: int
    failed: int
    trimmed: int
    roots: int
    pending: int | None
    dead: int | None
    dead_dropped: int
    seconds: float


@dataclass(frozen=True)
class Recovered:
    """A recovery round between batches (`recovery.auto`): the rounds run, pending and dead after."""
    kind: ClassVar[str] = "recovery"
    run_id: str
    rounds: int | None
    pending: int | None
    dead: int | None


@dataclass(frozen=True)
class Trimmed:
    """Messages trimmed from a topic before they were read, said in one line."""
    kind: ClassVar[str] = "trimmed"
    run_id: str
    line: str


@dataclass(frozen=True)
class SourceWaiting:
    """A topic's server (a Kafka broker) did not answer within the source's timeout: the run
    waits for it, asking again, and says so once (`place`: the broker and the partition)."""
    kind: ClassVar[str] = "waiting"
    run_id: str | None
    place: str
    timeout: float
    error: str


@dataclass(frozen=True)
class SourceAnswered:
    """The server that did not answer does again, after `seconds`: the run reads on."""
    kind: ClassVar[str] = "answered"
    run_id: str | None
    place: str
    seconds: float


@dataclass(frozen=True)
class Stopping:
    """A stop was asked for (a signal): the run stops after the batch under way."""
    kind: ClassVar[str] = "stopping"
    signal: str


@dataclass(frozen=True)
class Retry:
    """A batch interrupted by the stop request, run again to finish it."""
    kind: ClassVar[str] = "retry"
    round: int
    error: str


FollowEvent = (Resumed | Continued | Started | Batch | Recovered | Trimmed | SourceWaiting | SourceAnswered
               | Stopping | Retry)
Event = Callable[[FollowEvent], None]
