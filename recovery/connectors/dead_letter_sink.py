"""A run's dead-letter sink (`<dead-letters><sink .../></dead-letters>`): dead letters written by
the sink classes every bolt sink uses, on the driver, one part per flush.

The sink is the workflow's bolt `dead-letters` (Workflow.with_dead_letter_sink) and a flush is
its part of round = the flush's number, task = its one task: a jsonl or parquet part file
named by (run, flush, sink, task), a PostgreSQL transaction with its commit row, a Delta commit
with the application transaction (run, sink, task) at version = flush. So a flush written again
(a driver that died before Redis heard of the part) writes nothing twice, as a replayed part
of any sink does. The rows' columns are model/failed.py's DEAD_LETTER_FIELDS."""
from __future__ import annotations

from typing import Any, cast

from redis import Redis

from recovery.api.tuples import Tuple
from recovery.connectors.sink_base import BufferedSink
from recovery.connectors.sinks import make_sink
from recovery.model.failed import DEAD_LETTER_FIELDS, FailedTuple
from recovery.model.graph import ComponentContext, TaskMap
from recovery.model.run import TaskIdentity
from recovery.model.workflow import DEAD_LETTER_SINK_ID, Workflow
from recovery.tracking.tracker import TaskTracker


class _NoCollector:
    """A driver-side sink has nobody to ack to: its part is written or it raises."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def write_part(client: Redis, wf: Workflow, run_id: str, generation: str | None, flush: int,
               records: list[FailedTuple]) -> None:
    """The dead letters of one flush, as part `flush` of the workflow's dead-letter sink (module
    doc), published only while the run holds `generation` (a driver taken over writes nothing)."""
    if wf.dead_letters is None:
        raise ValueError(f"workflow {wf.name!r} has no dead-letter sink")
    full = wf.with_dead_letter_sink()
    task_map = TaskMap.of(full)
    task_id = task_map.task_id(DEAD_LETTER_SINK_ID, 0)
    conf = full.conf(DEAD_LETTER_SINK_ID)
    fence = TaskTracker(client, TaskIdentity(run_id, flush, DEAD_LETTER_SINK_ID, 0, task_id), conf, generation)
    context = ComponentContext(full, DEAD_LETTER_SINK_ID, task_id, task_map, run_id=run_id, round=flush, redis=client,
                          fence=fence.check_fence)
    sink = cast(BufferedSink, make_sink(wf.dead_letters, full.base_dir or "."))   # (every built-in sink is one)
    sink.bind(_NoCollector(), conf, context)
    sink.prepare(conf, context)
    try:
        sink.write([sink.encode(Tuple(rec.id, DEAD_LETTER_SINK_ID, "default", task_id, rec.dead_letter_row(),
                                      DEAD_LETTER_FIELDS, rec.roots)) for rec in records])
    finally:
        sink.cleanup()
