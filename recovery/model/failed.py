"""The failed-tuple record: what a queue or dead-letter entry holds (msgpack'd map in Redis)."""
from __future__ import annotations

import json
from typing import Any

import msgpack
from pydantic import BaseModel, ConfigDict

#: The columns of a dead-letter sink's rows (FailedTuple.dead_letter_row), in order.
DEAD_LETTER_FIELDS = ("component", "task", "id", "roots", "stream", "values", "raw", "error", "traceback",
                      "attempt", "round", "time")


class FailedTuple(BaseModel):
    """A tuple that failed at a task, as recovery replays it. Stored as a msgpack map of the
    fields that were set (`pack`), so the bytes are those the dicts made before this model."""

    # extra="allow": a record written by another version keeps the fields this one does not know
    model_config = ConfigDict(extra="allow")

    # Only the id is required: records written by hand (tests, older tools) are read as before.
    id: int
    roots: list[int] = []
    src_component: str = ""
    src_task: int = 0
    stream: str = "default"
    values: Any = None              # the tuple's values; None for a spout record that did not decode
    attempt: int = 1
    error: str = ""
    traceback: str = ""
    # a spout record that failed to decode: replayed by decoding the raw record again
    raw: Any = None
    message_id: Any = None
    format: str | None = None
    # set by the task that stores it (TaskTracker.failure): where it failed, where a replay goes
    component: str = ""
    task: int = 0
    round: int | None = None
    time: float | None = None
    dead: bool = False              # out of attempts: a dead letter
    # its message was gone from the source when a replay re-read it (trimmed by retention,
    # deleted): dead at once, since no attempt can read it back; `error` names the message
    gone: bool = False
    not_before: float | None = None  # backoff: no replay before this time

    def pack(self) -> bytes:
        # values the user emitted may not be msgpack types: stored as their repr, as before
        return msgpack.packb(self.model_dump(exclude_unset=True), default=repr)

    def requeued(self) -> FailedTuple:
        """This dead letter back in its queue (`recovery dead --requeue`): not dead, replayable
        at once, and its next replay attempt 1 of a fresh allowance."""
        fields = self.model_dump(exclude_unset=True, exclude={"dead"})
        return FailedTuple.model_validate({**fields, "attempt": 0, "not_before": 0.0})

    def dead_letter_row(self) -> list[Any]:
        """The dead letter as a dead-letter sink writes it (DEAD_LETTER_FIELDS): ids as text (a
        64-bit id does not fit a signed column), the values as JSON text (any shape fits one
        column), the roots space-separated, a record that did not decode as its text (`raw`)."""
        raw = self.raw.decode("utf-8", "replace") if isinstance(self.raw, bytes) else \
            ("" if self.raw is None else str(self.raw))
        return [self.component, self.task, str(self.id), " ".join(str(r) for r in self.roots), self.stream,
                json.dumps(self.values, ensure_ascii=False, sort_keys=True, default=repr), raw, self.error,
                self.traceback, self.attempt, self.round or 0, self.time or 0.0]

    @classmethod
    def unpack(cls, raw: bytes) -> FailedTuple:
        return cls.model_validate(msgpack.unpackb(raw, strict_map_key=False))
