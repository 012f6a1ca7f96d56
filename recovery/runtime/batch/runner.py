"""The task runner of a batch component: a TaskRunner whose collector is a BatchCollector, and
whose bolt task is driven a batch at a time (runtime.batch.bolt, or runtime.batch.sink for a
built-in sink), whose BatchSpout emits a batch at a time (next_batch). It also runs the batched
text file source (connectors.file_blocks), as its connectors.runner.BatchSourceRunner."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from recovery.api.batch import BatchSpout
from recovery.model import config as config_decl
from recovery.model.graph import Mode
from recovery.model.run import RunSpec
from recovery.runtime.batch import bolt as batch_bolt
from recovery.runtime.batch import sink as batch_sink
from recovery.runtime.batch.collector import BatchCollector
from recovery.runtime.batch.rows import pieces
from recovery.runtime.collector import Output
from recovery.runtime.task import Records, TaskRunner


class BatchTaskRunner(TaskRunner):
    """TaskRunner for a BatchBolt, a BatchSpout, a batch sink or a batched file source."""

    collector: BatchCollector

    def __init__(self, spec: RunSpec, component_id: str, index: int):
        super().__init__(spec, component_id, index)
        self.batch_size = config_decl.settings(self.conf).batch_size
        self.stats["bisect_runs"] = 0
        self.stats["bisect_isolated"] = 0
        self.stats["bisect_rows"] = 0      # rows run again by bisection

    def _make_collector(self) -> BatchCollector:
        # consumers that are batch components get Arrow chunks (runtime.wire)
        arrow_to = {r.consumer for routes in self.router.routes.values() for r in routes
                    if self.plan.mode(r.consumer).is_batch}
        return BatchCollector(self.task, self.tm, self.comp.is_spout,
                              self.router, self.tracker, self.timeouts, self.roots, self.stats,
                              arrow_to=arrow_to, fields=self.fields)

    # -- what the batched file source calls (connectors.runner.BatchSourceRunner) ---------------
    def select_roots(self, hashes: np.ndarray) -> np.ndarray | None:
        return self.roots.selected_many(hashes)

    def emit_roots(self, hashes: np.ndarray, values: Any, stream: str) -> None:
        self.collector.emit_roots(hashes, values, stream)

    def spout_step(self, spout: Any) -> Callable[[], Any]:
        return spout.next_batch if isinstance(spout, BatchSpout) else spout.next_tuple

    def run_bolt(self, records: Records) -> Iterator[Output]:
        if not self.in_chain and self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        if self.mode is Mode.BATCH_SINK:
            yield from batch_sink.run(self, records)
        else:
            yield from batch_bolt.run(self, records)

    def fail_input(self, records: Records, error: str, tb: str) -> Iterator[Output]:
        for rows in pieces(records):
            self.stats["executed"] += len(rows)
            for i in range(len(rows)):
                self.collector.fail_row(rows, i, error, tb)
        return iter(())
