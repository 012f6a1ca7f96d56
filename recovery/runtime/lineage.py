"""A sandbox's record of a root's tuple tree (`recovery trace --tree`): in a round whose spec
names `lineage_roots`, every bolt task writes each tuple of those roots it receives (its id, who
sent it, its stream, values and roots) into the round's run, which is a scratch run that nothing
else reads (jobs/trace_tree.py). Only for those roots, so it costs nothing in any other round."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
from redis import Redis

from recovery.model.run import RunSpec
from recovery.runtime import wire
from recovery.tracking import keys


def lineage_key(run_id: str) -> str:
    """Hash: "component:task id:tuple id" -> [source component, source task, stream, values, roots]."""
    return keys.run_key(run_id, "lineage")


def recording(client: Redis, spec: RunSpec, component: str, task_id: int, records: Any) -> Iterator[Any]:
    """`records` (a bolt task's input chunks) as they are, each tuple of the spec's
    `lineage_roots` among them written down on the way, in the round's run."""
    wanted, run_id = set(spec.lineage_roots), spec.run_id
    for item in records:
        _, blob = item
        if not wire.is_arrow(blob):
            src, src_task, recs = wire.unpack_rows(blob)
            mine: dict[Any, Any] = {
                f"{component}:{task_id}:{rec[0]}": msgpack.packb([src, src_task, rec[2], rec[3], rec[1]], default=repr)
                for rec in recs if wanted.intersection(rec[1])}
            if mine:
                client.hset(lineage_key(run_id), mapping=mine)
        yield item
