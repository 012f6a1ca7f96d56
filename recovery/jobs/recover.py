"""Recovering a run: rounds that replay its failed positions (or its failed roots, root replay)
until nothing is pending, resuming a crashed round first. Each round is run and settled by
jobs/settle.py; the run record, the queue and the spill files are read and written through
tracking/ (runs, queue, tracker, spill), each call doing its whole step."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis import Redis

from recovery.connectors import table_sinks
from recovery.errors import RunBusy, RunError
from recovery.jobs.settle import Progress, redis_lost_is_resumable, run_and_settle
from recovery.jobs.summary import RunSummary, summarize, with_own_rounds
from recovery.model import code
from recovery.model.record import RunRecord
from recovery.model.run import RunSpec
from recovery.model.synthesis import synthesize
from recovery.model.workflow import Workflow
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs, spill, tracker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)


def reconfigure(client: Redis, run_id: str, overrides: dict[str, str]) -> None:
    """Set workflow properties of a stored run (`recover -p`, values already checked): the
    next rounds, and a resumed round, read the stored workflows."""
    rec = runs.get(client, run_id)
    if runs.status_of(rec) == runs.RUNNING:
        raise RunBusy(f"run {run_id} is still running (driver pid {rec.driver_pid} on "
                       f"{rec.driver_host}): its configuration cannot change now")
    fields = {"workflow_json": rec.original_workflow().with_config(overrides).to_task_json()}
    if rec.current_workflow:
        current = Workflow.from_task_json(rec.current_workflow)
        fields["current_workflow"] = current.with_config(overrides).to_task_json()
    runs.update(client, run_id, **fields)


def resume_if_crashed(spark: SparkSession, client: Redis, redis_url: str, rec: RunRecord,
                      progress: Progress | None = None, generation: str | None = None
                      ) -> RunSummary | None:
    """A run whose driver died (or was taken over, --force) mid-round, or whose round failed:
    run that round again, or only settle it when its driver got that far. Committed tasks
    replay their stored output instead of executing, so only what was in flight is processed.
    The caller holds the run's lease (runs.take_over) under `generation`, and `rec` is the
    record read after the take-over: what the previous driver did up to then is in it (it may
    have settled the round meanwhile), and nothing of it writes from then on. Returns the
    resumed round's summary, or None when no round was under way."""
    # (stored `running`: the previous driver was in a round or between two; its lease is ours now)
    if rec.status not in (runs.RUNNING, runs.ERROR):
        return None
    run_id = rec.run_id
    generation = generation or rec.generation
    runs.claim(client, run_id, generation)
    wf = Workflow.from_task_json(rec.current_workflow or rec.workflow_json)
    round_no = rec.round
    spec = RunSpec.from_round_json(rec.current_spec, run_id, round_no, wf.to_task_json(), redis_url,
                                   original_json=rec.workflow_json if round_no else None,
                                   generation=generation, spill_dir=rec.spill_dir or None)
    settled = rec.settled_round == round_no
    summary = run_and_settle(spark, client, wf, spec, progress, execute=not settled)
    failed_queue.prune_empty(client, run_id, generation)
    summary.resumed_round = round_no
    return summary


@dataclass(frozen=True)
class RecoveryRound:
    """A recovery round that ended: its number, the queued tuples it replayed, and the run's
    summary after it (what `recover` shows as each round ends)."""
    round: int
    replayed: int
    summary: RunSummary


@dataclass(frozen=True)
class RecoverPlan:
    """A recover that `prepare` checked: the run as read then, and what `run` does with it."""
    record: RunRecord
    force: bool                          # take the run over from a live driver
    spill_location: str | None = None    # --spill-dir: where the run's spill files are now
    new_code_digest: str | None = None   # --code-changed: the digest of the code shipped now

    @property
    def driver_alive(self) -> bool:
        """The run's driver held its lease when checked (`force` takes the run over from it)."""
        return runs.status_of(self.record) == runs.RUNNING


def prepare(client: Redis, run_id: str, force: bool = False, spill_dir: str | None = None,
            code_changed: bool = False) -> RecoverPlan:
    """Every refusal a recover makes before it needs Spark: no such run, a run whose driver is
    alive (unless `force` takes it over), a run that ran without tracking, a spill file missing
    that the round to resume replays, a workflow whose code changed since the submit (unless
    `code_changed` says it is meant). Writes nothing."""
    rec = runs.get(client, run_id)
    if not force:
        runs.check_not_running(rec)
    if not rec.tracking:
        raise RunError(f"run {run_id} ran with tracking off: there is nothing to recover from")
    location = spill.location(spill_dir) if spill_dir is not None else None
    if rec.status in (runs.RUNNING, runs.ERROR) and rec.settled_round != rec.round:   # a round to resume
        tracker.check_spill_files(client, spill.SpillStore.at(location or spill.run_location(rec)), run_id, rec.round)
    new_digest = check_code(rec, code_changed)
    return RecoverPlan(rec, force, location, new_digest)


def check_code(rec: RunRecord, code_changed: bool) -> str | None:
    """The digest of the run's workflow code as it is now when it differs from the one its
    submit shipped and `code_changed` allows it; None when it is the same (or the run kept
    none). Otherwise RunError: a recovery replays failed tuples through the code that failed
    them, unless the change is what the user meant (a bug fixed)."""
    if not rec.code_digest:
        return None
    wf = rec.original_workflow()
    now = code.bundle(wf, rec.file).digest
    if now == rec.code_digest:
        return None
    if not code_changed:
        raise RunError(f"run {rec.run_id}: the workflow's code in {wf.base_dir} changed since it was submitted "
                       f"(sha256 {rec.code_digest[:12]} then, {now[:12]} now); restore it, or recover with the "
                       f"new code: `recovery recover {rec.run_id} --code-changed`")
    return now


def run(spark: SparkSession, client: Redis, redis_url: str, plan: RecoverPlan, max_rounds: int | None = None,
        strategy: str = "localized", progress: Progress | None = None,
        on_round: Callable[[RecoveryRound], None] | None = None) -> RunSummary:
    """Run a prepared recover: take the run over (atomically: a driver that took it meanwhile
    refuses this one), resume a crashed round, then rounds until nothing is pending."""
    rec, run_id = plan.record, plan.record.run_id
    if plan.spill_location is not None:
        rec.spill_dir = plan.spill_location
        spill.SpillStore.at(plan.spill_location).ensure_run_dir(run_id)
    lease = runs.take_over(client, rec, force=plan.force)
    with lease, redis_lost_is_resumable(run_id, redis_url):
        moved: dict[str, str] = {}
        if plan.spill_location is not None:
            moved["spill_dir"] = plan.spill_location
        if plan.new_code_digest is not None:
            moved["code_digest"] = plan.new_code_digest
            log.warning("run %s: the workflow's code changed since it was submitted (sha256 %s then); "
                        "recovering with the new code (sha256 %s)", run_id, (rec.code_digest or "")[:12],
                        plan.new_code_digest[:12])
        if moved:
            runs.update(client, run_id, lease.generation, **moved)
        # read again: the record as the previous driver left it at the take-over
        rec = runs.get(client, run_id)
        return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                        progress, on_round, resume=True)


def recover(spark: SparkSession, client: Redis, redis_url: str, run_id: str, max_rounds: int | None = None,
            strategy: str = "localized", progress: Progress | None = None,
            on_round: Callable[[RecoveryRound], None] | None = None, force: bool = False,
            lease: runs.Lease | None = None, spill_dir: str | None = None) -> RunSummary:
    """Rounds until the failed set is empty (or max_rounds): each synthesizes a recovery
    workflow from the failed positions and runs it with the same tracking. A run whose driver
    is alive (its lease valid) is refused unless `force` takes it over; `lease`: this process
    drives the run already (a follow run between batches). `spill_dir` (--spill-dir): where the
    run's spill files are now; kept in the run record for later rounds and `clear`. (`prepare`,
    then `run`, unless `lease` is given.)"""
    if lease is None:
        plan = prepare(client, run_id, force, spill_dir)
        return run(spark, client, redis_url, plan, max_rounds, strategy, progress, on_round)
    # this process drives the run already: no round of another to resume
    rec = runs.get(client, run_id)
    if spill_dir is not None:
        rec.spill_dir = spill.location(spill_dir)
        spill.SpillStore.at(rec.spill_dir).ensure_run_dir(run_id)
    with redis_lost_is_resumable(run_id, redis_url):
        return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                        progress, on_round, resume=False)


def _recover(spark: SparkSession, client: Redis, redis_url: str, rec: RunRecord, gen: str | None,
             max_rounds: int | None, strategy: str, progress: Progress | None,
             on_round: Callable[[RecoveryRound], None] | None, resume: bool) -> RunSummary:
    run_id = rec.run_id
    started = time.time()
    resumed = resume_if_crashed(spark, client, redis_url, rec, progress, gen) if resume else None
    # the rounds this recover ran: a resumed one too (its tuples were replayed by this driver)
    ran = [resumed.resumed_round] if resumed is not None and resumed.resumed_round is not None else []
    runs.claim(client, run_id, gen, status=runs.RUNNING)
    original = rec.original_workflow()
    rounds_run = 0
    while True:
        # only positions, their counts and their earliest times: the queue sources (Spark
        # tasks) read the queued tuples
        failed_queue.prune_empty(client, run_id, gen)
        counts = failed_queue.counts(client, run_id)
        queued = sum(n for _, _, n in counts)
        if not queued or (max_rounds is not None and rounds_run >= max_rounds):
            break
        wait = failed_queue.earliest_due(client, run_id) - time.time()
        if wait > 0:   # every queued tuple is still backing off
            log.info("run %s: every queued tuple is backing off; waiting up to %.1fs", run_id, wait)
            time.sleep(min(wait, original.settings().retry_max_delay_ms / 1000))
        current = runs.get(client, run_id)
        round_no = current.round + 1
        if strategy == "root-replay":
            # Storm's behaviour, for comparison: replay every failed root from its spout, under
            # a new root id (as Storm's acker would see a re-emitted message); the old roots are
            # superseded and their queues dropped when the round starts (run_and_settle:
            # engine.rounds.prepare_root_replay) (a root queued under an older epoch's id, a
            # dead letter requeued since, is selected by that id: old_epochs)
            wf = original
            spec = RunSpec(run_id, round_no, original.to_task_json(), redis_url, True, root_replay=True,
                           root_epoch=round_no, filter_epoch=current.root_epoch,
                           old_epochs=tuple(current.root_epochs), generation=gen,
                           spill_dir=rec.spill_dir or None)
        else:
            failed: dict[str, list[int]] = {}
            for comp, task, n in counts:
                if n:
                    failed.setdefault(comp, []).append(task)
            wf = synthesize(original, failed)
            log.info("run %s round %d: recovery workflow of %d components replaying %d failed tuples (%s)",
                     run_id, round_no, len(wf.components), queued,
                     ", ".join(f"{c} tasks {sorted(t)}" for c, t in sorted(failed.items())))
            # (root_epoch: a queued spout record's root id is derived again, under the ids its
            # round gave it: after a root replay, that round's)
            spec = RunSpec(run_id, round_no, wf.to_task_json(), redis_url, True,
                           original_json=rec.workflow_json, generation=gen,
                           spill_dir=rec.spill_dir or None, root_epoch=current.root_epoch)
        runs.update(client, run_id, gen, round=round_no, current_workflow=wf.to_task_json(),
                    current_spec=spec.round_json(), status=runs.RUNNING,
                    **({"root_epoch": round_no, "root_epochs": [*current.root_epochs, current.root_epoch]}
                       if spec.root_replay else {}))
        summary = run_and_settle(spark, client, wf, spec, progress)
        failed_queue.prune_empty(client, run_id, gen)
        rounds_run += 1
        ran.append(round_no)
        if on_round is not None:
            on_round(RecoveryRound(round_no, queued, summary))
    # (a round that raised left the run in `error` or, killed, `running`: the next recover
    # resumes exactly that round, so the status is only settled here, after a clean loop)
    # no task of the run writes now: the Delta data files its killed attempts left go
    table_sinks.remove_uncommitted_data(original.with_dead_letter_sink(), run_id)
    settled = runs.get(client, run_id)
    final = summarize(client, settled, settled=True)
    runs.update(client, run_id, gen, status=final.status, summary=final.to_json(), ended=time.time())
    for warning in final.warnings or []:
        log.warning("run %s: %s", run_id, warning)
    # what this recover's rounds did (a resumed round's included), as their round records say
    final = with_own_rounds(final, [r for r in settled.rounds if r.round in ran], original)
    final.rounds, final.resumed = len(ran), resumed is not None
    final.duration, final.strategy = round(time.time() - started, 3), strategy
    return final
