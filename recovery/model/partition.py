"""One partition of a topic a run reads, as `status`, the web view and the metrics report it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class PartitionRow(BaseModel):
    """A log spout's partition: its consumer's committed offset, the first offset still stored
    (None: the partition is empty), the end, the lag (end - committed) and the messages trimmed
    before they were read; a kafka spout's also the offset read to (`read`). A topic that does
    not exist is one row with `missing` (and, for kafka, the `error` saying why). Its JSON holds
    the fields given, so each kind of row keeps its shape."""

    spout: str
    topic: str
    missing: bool = False
    error: str | None = None
    consumer: str | None = None
    partition: int = 0
    task_index: int = 0
    committed: int = 0
    read: int | None = None
    first: int | None = None
    end: int = 0
    lag: int = 0
    trimmed: int = 0

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PartitionRow:
        return cls.model_validate(obj)
