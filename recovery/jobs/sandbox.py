"""The sandbox: the next recovery round of a run, run as `recover` would run it (the same
synthesized workflow, the same engine, the code as it is now), under a scratch run
(tracking/scratch.py) so that nothing the run owns is written.

- Every sink, the dead-letter sink too, is a capture sink (connectors/capture_sink.py): it counts
  what it would write and keeps a sample, in the scratch run's keys.
- The tuples replayed are the run's queued ones (or its dead letters, as if requeued), copied into
  the scratch run's queues; keyed state and the spouts' waiting ids are copies too, so a bolt
  reads the run's state and writes only the copy.
- The round is an ordinary tracked round of the scratch run: what fails again is in its queues
  and dead letters afterwards, with its error; the rest succeeded.
- The scratch run is cleared at the end (its keys and spill files: jobs/clear.py), whatever
  happened; one a killed process left is cleared by the next sandbox of the run, or `clear`.

`run_sandboxed` is the one entry point (`recovery preview`, jobs/preview.py, calls it)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from redis import Redis, RedisError

from recovery.connectors.capture_sink import Captured, captured
from recovery.engine import rounds as engine_rounds
from recovery.errors import BadRequest, RecoveryError, RunError
from recovery.jobs import clear as clear_job
from recovery.jobs.settle import Progress, is_spark_failure, spark_failure_reason
from recovery.model import code
from recovery.model.failed import FailedTuple
from recovery.model.record import RunRecord
from recovery.model.run import RunSpec
from recovery.model.synthesis import synthesize
from recovery.model.workflow import SinkImpl, Workflow
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs, scratch, tracker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)

CAPTURE = SinkImpl(type="capture")


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed round did. `replayed`: the tuples it replayed, in position order;
    `failures`: every failure of the round (queued again or dead, at the replayed positions or
    downstream of them), with its error; `sinks`: what each sink would have received. No round
    ran when nothing was queued (`scratch_id` None)."""
    run_id: str
    round: int
    code_changed: bool
    replayed: list[FailedTuple] = field(default_factory=list)
    failures: list[FailedTuple] = field(default_factory=list)
    sinks: list[Captured] = field(default_factory=list)
    scratch_id: str | None = None
    workflow: Workflow | None = None

    def failed_again(self, tup: FailedTuple) -> list[FailedTuple]:
        """The round's failures of a replayed tuple: its own (the same id at the same position),
        or one downstream of it (a failure sharing one of its roots elsewhere)."""
        roots = set(tup.roots)
        return [f for f in self.failures
                if (f.component, f.task, f.id) == (tup.component, tup.task, tup.id)
                or (f.component, f.task) != (tup.component, tup.task) and roots & set(f.roots)]


def sandboxed(wf: Workflow) -> Workflow:
    """`wf` with every sink a capture sink and no dead-letter sink (task numbering unchanged)."""
    comps = tuple(c.model_copy(update={"impl": CAPTURE}) if isinstance(c.impl, SinkImpl) else c
                  for c in wf.components)
    return wf.model_copy(update={"components": comps, "dead_letters": None})


def code_changed(rec: RunRecord) -> bool:
    """The workflow's code differs from what the run's submit shipped (as `recover` checks it)."""
    if not rec.code_digest:
        return False
    return code.bundle(rec.original_workflow(), rec.file).digest != rec.code_digest


def pick(client: Redis, rec: RunRecord, dead: bool = False, component: str | None = None,
         limit: int | None = None, select: Callable[[FailedTuple], bool] | None = None) -> list[FailedTuple]:
    """The tuples a sandbox replays: each failed position's queue (`dead`: the dead letters, as
    `dead --requeue` puts them back), of `component` only, those `select` accepts, at most `limit`
    per position (the first by id), ready now. BadRequest for a component the run does not have."""
    if component is not None and component not in {c.id for c in rec.original_workflow().components}:
        raise BadRequest(f"run {rec.run_id} has no component {component!r}")
    by_position: dict[tuple[str, int], list[FailedTuple]] = {}
    if dead:
        for tup in failed_queue.dead_letters(client, rec.run_id, component):
            by_position.setdefault((tup.component, tup.task), []).append(tup.requeued())
    else:
        for comp, task in failed_queue.positions(client, rec.run_id):
            if component in (None, comp):
                by_position[(comp, task)] = failed_queue.read(client, rec.run_id, comp, task)
    out = []
    for pos in sorted(by_position):
        tuples = sorted((t for t in by_position[pos] if select is None or select(t)), key=lambda t: t.id)
        out += [t.model_copy(update={"not_before": 0.0}) for t in tuples[:limit]]
    return out


def remove_stale(client: Redis, run_id: str) -> list[str]:
    """Clear the scratch runs of `run_id` no live process works on. Returns their ids."""
    gone = [sid for sid in scratch.scratch_ids(client, run_id) if scratch.stale(client, sid)]
    for sid in gone:
        clear_job.clear(client, sid, force=True, code_archives=False)
        log.info("run %s: cleared scratch run %s, left by a preview that did not end", run_id, sid)
    return gone


def run_sandboxed(spark: SparkSession | Callable[[], SparkSession], client: Redis, redis_url: str, run_id: str,
                  *, dead: bool = False, component: str | None = None, limit: int | None = None,
                  select: Callable[[FailedTuple], bool] | None = None,
                  progress: Progress | None = None) -> SandboxResult:
    """Run the run's next recovery round in a sandbox (module doc) and say what it did. Writes
    nothing of the run; the scratch run it makes is gone when this returns or raises. `spark`
    may be a function that starts the session: a run with nothing to replay needs none."""
    rec = runs.get(client, run_id)
    if not rec.tracking:
        raise RunError(f"run {run_id} ran with tracking off: there is nothing to preview")
    if rec.status in (runs.RUNNING, runs.ERROR) and rec.settled_round != rec.round:
        # `recover` would resume that round first, and its queues are in flux until it settles
        raise RunError(f"run {run_id} has round {rec.round} under way or to resume: `recovery recover {run_id}` "
                       "resumes it; preview the round after it once it settled")
    changed = code_changed(rec)
    remove_stale(client, run_id)
    replay = pick(client, rec, dead, component, limit, select)
    round_no = rec.round + 1
    if not replay:
        return SandboxResult(run_id, round_no, changed)
    original = sandboxed(rec.original_workflow())
    failed: dict[str, list[int]] = {}
    for tup in replay:
        if tup.task not in failed.setdefault(tup.component, []):
            failed[tup.component].append(tup.task)
    wf = synthesize(original, failed)
    scratch_id = scratch.new_id(run_id)
    lease = scratch.create(client, rec, scratch_id, original.to_task_json(), round_no)
    try:
        with lease:
            scratch.copy_keys(client, run_id, scratch_id)
            failed_queue.enqueue(client, scratch_id, replay)
            spec = RunSpec(scratch_id, round_no, wf.to_task_json(), redis_url, True,
                           original_json=original.to_task_json(), generation=lease.generation,
                           spill_dir=rec.spill_dir or None, root_epoch=rec.root_epoch)
            log.info("run %s: previewing round %d in scratch run %s (%d tuples at %d positions)", run_id,
                     round_no, scratch_id, len(replay), sum(len(t) for t in failed.values()))
            try:
                session = spark() if callable(spark) else spark
                engine_rounds.run_round(session, wf, spec,
                                        (lambda d, t: progress("preview", d, t)) if progress else None)
            except Exception as err:
                if not is_spark_failure(err):
                    raise
                raise RunError(f"preview of run {run_id} failed in Spark: {spark_failure_reason(err)} "
                               "(nothing of the run was written)") from None
            tracker.apply_round(client, scratch_id, round_no, lease.generation)
            failures = [t for comp, task in failed_queue.positions(client, scratch_id)
                        for t in failed_queue.read(client, scratch_id, comp, task)]
            failures += failed_queue.dead_letters(client, scratch_id)
            sinks = captured(client, scratch_id, round_no,
                             [c.id for c in wf.components if isinstance(c.impl, SinkImpl)])
        return SandboxResult(run_id, round_no, changed, replay, failures, sinks, scratch_id, wf)
    finally:
        try:
            clear_job.clear(client, scratch_id, force=True, code_archives=False)
        except (RedisError, RecoveryError) as err:   # (Redis lost: what raised before this is the story)
            log.warning("run %s: scratch run %s could not be cleared (%s); the next preview of the run, or "
                        "`recovery clear %s`, removes it", run_id, scratch_id, err, run_id)
