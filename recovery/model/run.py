"""A run's round as its Spark tasks receive it: plain data (the workflow as JSON, not data), and
what of it a run record keeps to resume the round (what a run id may be: tracking/keys.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskIdentity:
    """Which task this is: of which run and round, which component's task (its index among the
    component's tasks, and Storm's task id, unique in the workflow). The task runner makes it;
    the tracker, the collector and the message timeout all name their task by it."""
    run_id: str
    round: int
    component_id: str
    index: int
    task_id: int


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
    old_epochs: tuple[int, ...] = ()                # ... or by their ids of an older epoch (a
                                                    # dead letter requeued since)
    original_json: str | None = None                # the submitted workflow: task numbering
    source_json: str = "{}"                         # per-round source settings (e.g. offset ranges)
    generation: str | None = None                   # the run's record generation: commits check it
    spill_dir: str | None = None                    # the run's spill location (None: RECOVERY_HOME/spill)
    code: str | None = None                         # the workflow's code shipped with the job: the
                                                    # folder SparkFiles unpacks it into (None: its
                                                    # own folder, local mode)
    lineage_roots: tuple[int, ...] = ()             # a sandbox's tree of these roots: every bolt
                                                    # task records their tuples it receives
                                                    # (runtime/lineage.py)

    def round_json(self) -> str:
        """What resuming this round needs besides its workflows (the run record's
        `current_spec`): the root-replay settings and the sources' per-round settings."""
        return json.dumps({"root_replay": self.root_replay,
                           "root_epoch": self.root_epoch, "filter_epoch": self.filter_epoch,
                           "old_epochs": list(self.old_epochs), "source_json": self.source_json})

    @classmethod
    def from_round_json(cls, round_json: str | None, run_id: str, round: int, workflow_json: str,
                        redis_url: str | None, original_json: str | None = None,
                        generation: str | None = None, spill_dir: str | None = None) -> RunSpec:
        """The tracked round `round_json` (`round_json()`'s text, or None: a plain round) describes."""
        extra = json.loads(round_json or "{}")
        return cls(run_id, round, workflow_json, redis_url, True,
                   root_replay=bool(extra.get("root_replay")),
                   root_epoch=extra.get("root_epoch", 0), filter_epoch=extra.get("filter_epoch", 0),
                   old_epochs=tuple(extra.get("old_epochs") or ()),
                   original_json=original_json, source_json=extra.get("source_json") or "{}",
                   generation=generation, spill_dir=spill_dir)
