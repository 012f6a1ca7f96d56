"""The capture sink: `<sink type="capture">` writes nothing anywhere a user reads; each task
counts the records it would write and keeps the first few as a sample, and commits those two
into the run's Redis under its (round, task), so a replayed task overwrites its own entry.
`recovery preview` puts one in place of every sink of the round it runs in its sandbox, and
reads what each would have received (`captured`)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis import Redis

from recovery.api.tuples import Tuple
from recovery.connectors.sink_base import StreamingSink
from recovery.tracking import keys

#: Records a capture keeps per task (a sink's sample is the first of them, in task order).
SAMPLE = 5


def capture_key(run_id: str, component: str) -> str:
    """Hash: "<round>:<task index>" -> {"records": n, "sample": [...]} as JSON, in the run's home
    slot (cleared with the run)."""
    return keys.run_key(run_id, "capture", component)


@dataclass(frozen=True)
class Captured:
    """What one sink would have received in a round: how many records, and the first few."""
    component: str
    records: int
    sample: list[Any]


class CaptureSink(StreamingSink):
    """Counts its records and keeps the first SAMPLE of them (each as the jsonl sink writes it)."""

    def encode(self, tup: Tuple) -> Any:
        return StreamingSink.encode(self, tup)

    def open_part(self, chunk: Any) -> Any:
        return {"records": 0, "sample": []}

    def write_chunk(self, part: Any, chunk: Any) -> None:
        rows = list(chunk)
        part["records"] += len(rows)
        room = SAMPLE - len(part["sample"])
        if room > 0:
            part["sample"].extend(rows[:room])

    def commit_part(self, part: Any) -> None:
        client = self.context.redis
        if client is None:
            raise RuntimeError("the capture sink needs a Redis connection")
        if self.context.fence is not None:   # only while this task's driver owns the run
            self.context.fence()
        field = f"{self.context.round}:{self.context.task_index}"
        client.hset(capture_key(self.context.run_id, self.context.component_id), field,
                    json.dumps(part, ensure_ascii=False, sort_keys=True, default=str))


def captured(client: Redis, run_id: str, round_no: int, components: list[str]) -> list[Captured]:
    """What each of `components` (capture sinks) received in round `round_no`, its sample taken
    from its tasks in task order."""
    out = []
    prefix = f"{round_no}:"
    for comp in components:
        entries = cast(Mapping[bytes, bytes], client.hgetall(capture_key(run_id, comp)))
        parts = sorted((int(k.decode()[len(prefix):]), json.loads(v)) for k, v in entries.items()
                       if k.decode().startswith(prefix))
        sample: list[Any] = []
        for _, part in parts:
            sample.extend(part["sample"][:SAMPLE - len(sample)])
        out.append(Captured(comp, sum(p["records"] for _, p in parts), sample))
    return out
