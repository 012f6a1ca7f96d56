"""Runs a workflow's tasks one after another in this process, with the same TaskRunner the
Spark engine uses, against a given Redis client (fakeredis in unit tests). No Spark."""
from __future__ import annotations

import collections
from typing import Any

from recovery.runtime import task
from recovery.connectors import files
from recovery.model.graph import topological_order
from recovery.model.workflow import Workflow
from recovery.runtime.task import RunSpec


def execute(wf: Workflow, spec: RunSpec, client: Any) -> dict[tuple[str, int], list[bytes]]:
    """One round; returns what reached each (component, task index) — the leaves' too."""
    task._clients[spec.redis_url or ""] = client
    inbox: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
    for cid in topological_order(wf):
        comp = wf.component(cid)
        for i in range(comp.parallelism):
            runner = task.TaskRunner(spec, cid, i)
            if comp.is_spout:
                impl = comp.impl
                driver = None
                if impl.kind == "source":
                    driver = {"file": files.file_source, "queue": files.queue_source}[impl.type]
                out = runner.run_spout(driver)
            else:
                out = runner.run_bolt([((cid, i), b) for b in inbox[(cid, i)]])
            for key, blob in out:
                inbox[tuple(key)].append(blob)
    return inbox
