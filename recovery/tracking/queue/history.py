"""What happened to a run's failed tuples, kept after they leave their queue: every failure
(its roots, round, attempt and error), every successful replay and every requeue, per failed
position. A queue entry goes once its replay is acked and a dead letter once it is requeued or
written to the dead-letter sink, so without this nothing would say, once a run completed, that
a root failed three times; `recovery trace` reads it.

It grows with failures only, never with data: nothing is written for a tuple that never failed
(a failure-free run writes no history key). It is stored with the queues (tracking/queue/store.py
`history_key`, in each position's queue's slot, so it spreads over a Redis Cluster's masters as
the queues do) and written in the steps that already write them: a commit's failures and
replays are staged with its queue writes and applied by the same script (capped there, at
`recovery.history.max.events` per position: the rest counted as dropped); a requeue writes its
event with the tuple's move back into its queue. The positions that have one are a set in the
run's home slot (`history_positions_key`), written at the commit point. `clear` removes it all
with the run's other keys.

Fields (each written once whatever retries or re-applies it, so an event is never doubled):
"f:<tuple id>:<round>:<attempt>" a failure, "r:<tuple id>:<round>" a successful replay,
"q:<tuple id>:<time it died>" a requeue of a dead letter, "dropped" the events the cap refused.
"""
from __future__ import annotations

from typing import Any, cast

import msgpack
from pydantic import BaseModel
from redis import Redis

from recovery.model.failed import FailedTuple
from recovery.tracking.queue.events import requeue_event, requeue_field
from recovery.tracking.queue.store import (
    Position,
    history_key,
    history_positions_key,
    parse_position,
)

FAILED, REPLAYED, REQUEUED = "failed", "replayed", "requeued"
_KINDS = {"f": FAILED, "r": REPLAYED, "q": REQUEUED}


class HistoryEvent(BaseModel):
    """One event of a position's history: a failure of tuple `tuple_id` there (with its roots,
    round, attempt and error), its successful replay in `round`, or its requeue at `time`."""
    kind: str
    component: str
    task: int
    tuple_id: int
    round: int | None = None
    attempt: int | None = None
    roots: list[int] = []
    error: str = ""
    time: float | None = None
    dead: bool = False
    gone: bool = False
    message_id: Any = None
    src_component: str = ""


def write_requeue(pipe: Any, run_id: str, rec: FailedTuple, when: float) -> None:
    """A dead letter's requeue into its position's history (in its queue's slot: written where
    the requeue writes the queue)."""
    pipe.hset(history_key(run_id, rec.component, rec.task), requeue_field(rec), requeue_event(when))


def positions(client: Redis, run_id: str) -> list[Position]:
    """The positions that have a history, sorted."""
    return sorted(parse_position(cast(bytes, p)) for p in client.smembers(history_positions_key(run_id)))


def _event(component: str, task: int, field: str, raw: bytes) -> HistoryEvent | None:
    kind, _, rest = field.partition(":")
    if kind not in _KINDS:
        return None
    tuple_id = int(rest.split(":", 1)[0])
    body = msgpack.unpackb(raw, strict_map_key=False)
    return HistoryEvent(kind=_KINDS[kind], component=component, task=task, tuple_id=tuple_id, **body)


class PositionHistory(BaseModel):
    """A position's events (in the order of their times) and how many the cap dropped."""
    component: str
    task: int
    events: list[HistoryEvent]
    dropped: int = 0


def read(client: Redis, run_id: str, component: str, task: int) -> PositionHistory:
    """Every event of one position's history."""
    events: list[HistoryEvent] = []
    dropped = 0
    for f, raw in client.hscan_iter(history_key(run_id, component, task), count=1000):
        field = f.decode()
        if field == "dropped":
            dropped = int(raw)
            continue
        event = _event(component, task, field, raw)
        if event is not None:
            events.append(event)
    events.sort(key=lambda e: (e.time or 0.0, e.round or 0, e.kind, e.tuple_id))
    return PositionHistory(component=component, task=task, events=events, dropped=dropped)


def of_root(client: Redis, run_id: str, root: int) -> list[PositionHistory]:
    """Each position's events that concern `root`: the failures of its tuples there, and the
    replays and requeues of those tuples. O(the run's recorded events): it grows with failures
    only, and only `trace` reads it."""
    out = []
    for component, task in positions(client, run_id):
        whole = read(client, run_id, component, task)
        mine = {e.tuple_id for e in whole.events if e.kind == FAILED and root in e.roots}
        if mine:
            out.append(PositionHistory(component=component, task=task, dropped=whole.dropped,
                                       events=[e for e in whole.events if e.tuple_id in mine]))
        elif whole.dropped:
            out.append(PositionHistory(component=component, task=task, events=[], dropped=whole.dropped))
    return out
