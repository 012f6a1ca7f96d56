"""A run's round as its Spark tasks receive it: plain data (the workflow as JSON, not data)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSpec:
    """Everything a task needs, shipped with the closure (small: the workflow, not data)."""
    run_id: str
    round: int
    workflow_json: str
    redis_url: str | None
    tracking: bool = True
    root_replay: bool = False                       # root replay: spouts emit only the roots of
                                                    # the round's replay set (in Redis, not here)
    root_epoch: int = 0                             # root-replay gives replayed roots new ids
    filter_epoch: int = 0                           # ... and selects them by their old ids
    original_json: str | None = None                # the submitted workflow: task numbering
    source_json: str = "{}"                         # per-round source settings (e.g. offset ranges)
    generation: str | None = None                   # the run's record generation: commits check it
    spill_dir: str | None = None                    # the run's spill location (None: RECOVERY_HOME/spill)
