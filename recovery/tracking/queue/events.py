"""How a history event is named and packed (tracking/queue/history.py says what they are):
the commit's staged writes (store.staged_writes) and a requeue build them here."""
from __future__ import annotations

import time
from typing import Any

import msgpack

from recovery.model.failed import FailedTuple

#: The most of a failure's error text an event keeps (its traceback stays with the queue entry).
ERROR_MAX = 1000


def failure_field(rec: FailedTuple) -> str:
    return f"f:{rec.id}:{rec.round or 0}:{rec.attempt}"


def failure_event(rec: FailedTuple) -> bytes:
    event: dict[str, Any] = {"roots": rec.roots, "round": rec.round or 0, "attempt": rec.attempt,
                             "error": rec.error[:ERROR_MAX], "time": rec.time}
    if rec.dead:
        event["dead"] = True
    if rec.gone:
        event["gone"] = True
    if rec.src_component:   # who sent it (trace --tree names a sender whose tuples differ)
        event["src_component"] = rec.src_component
    if rec.message_id is not None:   # a source's record that failed: its message id is known here
        event["message_id"] = rec.message_id
    return msgpack.packb(event, default=repr)


def replay_field(tuple_id: int, round_no: int) -> str:
    return f"r:{tuple_id}:{round_no}"


def replay_event(round_no: int) -> bytes:
    return msgpack.packb({"round": round_no, "time": time.time()})


def requeue_field(rec: FailedTuple) -> str:
    """The requeue of this dead letter: named by the time it died, so a requeue done again
    (interrupted, or on a Redis Cluster where the queue is written apart) is one event."""
    return f"q:{rec.id}:{rec.time or 0.0!r}"


def requeue_event(when: float) -> bytes:
    return msgpack.packb({"time": when})
