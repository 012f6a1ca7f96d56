"""Continuous runs over topics: `recovery submit --follow`.

A follow run reads its topics in micro-batches. Each batch is one round of the submitted
workflow in the same run (its own round number, so a sink's part files are the batch's own),
planned by logsource.plan_ranges (at most topology.max.spout.pending messages per spout task),
run and settled by jobs.settle.run_and_settle, which commits the offsets. With recovery.auto=true a
recovery round (jobs.recover, max_rounds=1) runs between batches when failed tuples are due.

Ctrl-C / SIGTERM is a clean stop: the batch under way finishes and commits, then the loop
ends (a second signal aborts at once; the next start resumes that batch). After a kill -9 the
next `submit --follow` of the same workflow first resumes the crashed round of the consumer's
run (jobs.recover.resume_if_crashed: committed tasks replay their stored output, the rest run again on
exactly the same offset ranges) and then continues that run: every message's effect reaches
the sinks exactly once.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis import Redis

from recovery.api.runnable import check_runnable
from recovery.connectors import files, log_offsets, sinks
from recovery.connectors.redis_stream import report as stream_report
from recovery.errors import RecoveryError, RunBusy
from recovery.jobs import dead_sink, recover, settle, submit
from recovery.jobs import follow_events as events
from recovery.jobs import summary as jobs_summary
from recovery.jobs.follow_events import Event
from recovery.jobs.settle import Progress
from recovery.jobs.submit import SubmitPlan, check_classes
from recovery.jobs.summary import RunSummary
from recovery.model import code
from recovery.model.partition import PartitionRow
from recovery.model.record import ComponentStats, RunRecord
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow
from recovery.tracking import keys, runs, spill
from recovery.tracking import queue as failed_queue

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)



class Stopper:
    """SIGINT/SIGTERM -> a stop request (the first one); the second raises KeyboardInterrupt.
    Installed after the SparkContext exists (PySpark's own SIGINT handler cancels jobs)."""

    def __init__(self, on_request: Callable[[str], None] | None = None):
        self.event = threading.Event()
        self.signal: str | None = None
        self._old: dict[int, Any] = {}
        self._on_request = on_request

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def request(self, why: str = "requested") -> None:
        if not self.event.is_set():
            self.signal = why
            self.event.set()
            if self._on_request is not None:
                self._on_request(why)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.request(signal.Signals(signum).name)

    def __enter__(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def owner_runs(client: Redis, wf: Workflow) -> list[RunRecord]:
    """The run records that last read each of the workflow's consumers (distinct, existing)."""
    seen, out = set(), []
    for spout in log_offsets.log_spouts(wf):
        consumer, topic = log_offsets.consumer_of(wf, spout)
        owner = client.get(keys.consumer_owner(consumer, topic))
        if owner is None or owner in seen:
            continue
        seen.add(owner)
        try:
            out.append(runs.get(client, cast(bytes, owner).decode()))
        except RecoveryError:
            pass
    return out


def resume_crashed(spark: SparkSession, client: Redis, redis_url: str, wf: Workflow,
                   progress: Any = None) -> list[RunSummary]:
    """Resume every crashed run that owns one of the workflow's consumers (its round under way
    reads exactly its planned ranges again, then commits them). Returns their summaries."""
    out = []
    for rec in owner_runs(client, wf):
        if runs.status_of(rec) == runs.CRASHED:
            with runs.take_over(client, rec) as lease, settle.redis_lost_is_resumable(rec.run_id, redis_url):
                # read again: the record as the previous driver left it at the take-over
                summary = recover.resume_if_crashed(spark, client, redis_url, runs.get(client, rec.run_id),
                                                    progress, lease.generation)
            if summary is not None:
                out.append(summary)
    return out


def check_flags(wf: Workflow, follow: bool, tracking: bool = True) -> None:
    """`--follow` needs a spout reading a topic, and tracking."""
    if follow and not log_offsets.log_spouts(wf):
        raise RecoveryError(f"--follow needs a spout reading a topic (<source type=\"redis-stream\"> or "
                            f"<source type=\"kafka\">); "
                            f"workflow {wf.name!r} has none")
    if follow and not tracking:
        raise RecoveryError("--follow needs tracking (a crashed batch is resumed from it)")


@dataclass(frozen=True)
class FollowOutcome:
    """What `submit --follow` reports: the run's summary (None: no message came, so no run was
    started), the follow's own figures, and the topics' partitions and warnings."""
    summary: RunSummary | None
    follow: dict[str, Any]   # batches, messages, recovery_rounds, resumed (run ids), stopped (why)
    partitions: list[PartitionRow]
    warnings: list[str]

    def to_json(self) -> dict[str, Any]:
        """`submit --follow --json`: the run's summary with `follow`, or without a run its id None."""
        if self.summary is not None:
            return {**self.summary.to_json(), "follow": self.follow}
        return {"run_id": None, "batches": 0, "partitions": [p.to_json() for p in self.partitions],
                "warnings": self.warnings,
                "follow": self.follow}


@dataclass(frozen=True)
class FollowPlan:
    """A follow run that `prepare` checked: everything `run` needs but Spark."""
    workflow: Workflow
    xml: str
    file: str | None              # the workflow file, absolute; None: from code
    master: str
    run_id: str | None            # None: the consumer's run, or a new generated id
    code_digest: str = ""         # the workflow's code shipped with its tasks (model/code.py)
    reset: str | None = None      # --reset: where a consumer goes on below the log's start


def prepare(wf: Workflow, xml: str, file: str | None, master: str = "local[*]", run_id: str | None = None,
            tracking: bool = True, reset: str | None = None) -> FollowPlan:
    """Every refusal `submit --follow` makes from the workflow and its options alone (no Redis,
    no Spark): a `class=` that does not load (with `file` and a local master, a shell script that
    does not exist), a workflow without a topic, no tracking, a relative source or sink path
    with a master that is not local, a bad run id. Writes nothing."""
    if file is not None:
        check_runnable(file, wf, local=master.startswith("local"))
    else:
        check_classes(wf)
    check_flags(wf, True, tracking)
    files.check_paths_reach_executors(wf, master, file)   # a cluster's executors: no relative path
    spill.check_reaches_executors(None, wf.settings().spill_dir, master)
    if run_id is not None:
        keys.check_run_id(run_id)
    digest = code.bundle(wf, file).digest   # (what ships refused here, as at submit)
    return FollowPlan(wf, xml, os.path.abspath(file) if file is not None else None, master, run_id, digest, reset)


def check_redis(client: Redis, plan: FollowPlan) -> None:
    """The refusals that read Redis, still before Spark starts: a run id of its own that is taken
    (the consumer's run goes on only without one), a topic that does not exist."""
    if plan.run_id is not None:
        runs.check_absent(client, plan.run_id)
    log_offsets.check_plans(client, plan.workflow, plan.reset)


def _due(client: Redis, run_id: str) -> bool:
    """A queued tuple may be replayed now (from positions and their earliest times only)."""
    queued = any(n for _, _, n in failed_queue.counts(client, run_id))
    return queued and failed_queue.earliest_due(client, run_id) <= time.time()


def _round_stats(client: Redis, run_id: str, round_no: int) -> dict[str, ComponentStats]:
    for r in runs.get(client, run_id).rounds:
        if r.round == round_no:
            return r.components
    return {}


def _plan_waiting(client: Redis, wf: Workflow, run_id: str, reset: str | None, gen: str | None, poll: float,
                  stop: Stopper, emit: Event, known: str | None = None) -> str | None:
    """The next batch's ranges (log_offsets.plan_ranges). While a topic's server does not
    answer within its source's timeout (down, or hung), ask again every `poll` seconds until it
    does (`_Waiting` says so; `known`: the last plan). None: a stop was asked for meanwhile."""
    waiting: _Waiting | None = None
    while True:
        try:
            source_json = log_offsets.plan_ranges(client, wf, run_id, follow=True, reset=reset)
        except log_offsets.SourceUnanswered as err:
            if waiting is None:
                waiting = _Waiting(client, run_id, gen, emit)
                waiting.begin(err, known)
            if stop.event.wait(poll):
                return None
            continue
        if waiting is not None:
            waiting.over()
        return source_json


def _run_micro_batch(spark: SparkSession, client: Redis, wf: Workflow, spec: RunSpec, stop: Stopper,
                     emit: Event, poll: float = 0.5) -> RunSummary:
    waiting: _Waiting | None = None
    while True:
        try:
            summary = settle.run_and_settle(spark, client, wf, spec)
            if waiting is not None:
                waiting.over()
            return summary
        except Exception as err:
            # Ctrl-C in a terminal reaches Spark's Python workers too (same process group), which
            # fails the job. A clean stop finishes the batch: run the round again (committed tasks
            # replay their output, the rest run on the same ranges).
            if stop.requested:
                log.debug("run %s batch round %d failed under a stop request; running it again", spec.run_id,
                          spec.round, exc_info=err)
                emit(events.Retry(spec.round, type(err).__name__))
                return settle.run_and_settle(spark, client, wf, spec)
            # a task whose topic's server stopped answering mid-read: the same round again, the
            # same ranges, once it may answer (each try waits the source's timeout at most)
            unanswered = log_offsets.SourceUnanswered.raised_by(err)
            if unanswered is None:
                raise
            if waiting is None:
                waiting = _Waiting(client, spec.run_id, spec.generation, emit)
                waiting.begin(unanswered)
            if stop.event.wait(poll):
                emit(events.Retry(spec.round, type(err).__name__))
                return settle.run_and_settle(spark, client, wf, spec)


class _Waiting:
    """A wait for a topic's server that did not answer within its source's timeout: said once
    on the way in (a warning, the event, and on the run record when the run exists (`gen`):
    `status` shows it, the metrics count it) and once on the way out."""

    def __init__(self, client: Redis, run_id: str, gen: str | None, emit: Event):
        self.client, self.run_id, self.gen, self.emit = client, run_id, gen, emit
        self.since = 0.0
        self.place = ""

    def begin(self, err: log_offsets.SourceUnanswered, known: str | None = None) -> None:
        """`known`: the last plan (its topics' partition counts name what metadata covers)."""
        counts = {p.get("topic"): p.get("partitions") for p in (json.loads(known).values() if known else ())}
        self.since, self.place = time.time(), err.place(counts.get(err.topic))
        log.warning("run %s: %s has not answered within %g s; asking again until it does: %s",
                    self.run_id, self.place, err.timeout, err)
        self.emit(events.SourceWaiting(self.run_id if self.gen else None, self.place, err.timeout, str(err)))
        if self.gen is not None:
            runs.update(self.client, self.run_id, self.gen, source_waiting={
                "server": err.server, "topic": err.topic, "partition": err.partition, "place": self.place,
                "timeout": err.timeout, "since": self.since, "error": str(err)})
            runs.increment(self.client, self.run_id, self.gen, source_stalls=1)

    def over(self) -> None:
        waited = time.time() - self.since
        log.warning("run %s: %s answers again after %.0f s", self.run_id, self.place, waited)
        self.emit(events.SourceAnswered(self.run_id if self.gen else None, self.place, waited))
        if self.gen is not None:
            runs.update(self.client, self.run_id, self.gen, source_waiting=None)


def submit_bounded(spark: SparkSession, client: Redis, redis_url: str, plan: SubmitPlan,
                   progress: Progress | None = None,
                   on_resumed: Callable[[RunSummary], None] | None = None) -> RunSummary:
    """`recovery submit` without --follow: jobs.submit.run, and for a workflow that reads topics
    what goes around it: first every crashed run of the same consumer resumed (`on_resumed` is
    told each one's summary), so that no range is read twice; after it the topics' partitions,
    lag and warnings in the summary (`enrich`)."""
    wf = plan.workflow
    if wf.reads_topics:
        for resumed in resume_crashed(spark, client, redis_url, wf):
            if on_resumed is not None:
                on_resumed(resumed)
    summary = submit.run(spark, client, redis_url, plan, progress)
    if not wf.reads_topics:
        return summary
    return jobs_summary.with_topics(client, summary, runs.get(client, summary.run_id), wf)


def follow(spark: SparkSession, client: Redis, redis_url: str, wf: Workflow, xml: str, file: str | None,
           master: str = "local[*]", max_batches: int | None = None, idle_exit: float | None = None,
           poll: float = 0.5, on_event: Event | None = None, stop: Stopper | None = None,
           run_id: str | None = None) -> FollowOutcome:
    """`prepare`, `check_redis`, then `run`."""
    plan = prepare(wf, xml, file, master, run_id)
    check_redis(client, plan)
    return run(spark, client, redis_url, plan, max_batches, idle_exit, poll, on_event, stop)


def run(spark: SparkSession, client: Redis, redis_url: str, plan: FollowPlan, max_batches: int | None = None,
        idle_exit: float | None = None, poll: float = 0.5, on_event: Event | None = None,
        stop: Stopper | None = None) -> FollowOutcome:
    """Read the workflow's topics in micro-batches until stopped (signal, max_batches, or
    idle_exit seconds without a message); returns the run's summary."""
    emit: Event = on_event or (lambda event: None)
    wf, xml, file, master, run_id, reset = plan.workflow, plan.xml, plan.file, plan.master, plan.run_id, plan.reset
    wf_json = wf.to_task_json()
    spill_dir = spill.location(None, wf.settings().spill_dir)   # (no --spill-dir here)
    resumed = resume_crashed(spark, client, redis_url, wf)
    for s in resumed:
        emit(events.Resumed(s))
    # Continue the consumer's follow run when it ran this very workflow: its keyed state and
    # round numbers go on (sink part files are named by round, so nothing is overwritten).
    current = None
    for rec in owner_runs(client, wf):
        if runs.status_of(rec) == runs.RUNNING:
            raise RunBusy(f"run {rec.run_id} is reading this workflow's topics now (driver "
                          f"pid {rec.driver_pid} on {rec.driver_host}); stop it first")
        if rec.follow and rec.workflow_json == wf_json and run_id in (None, rec.run_id):
            current = rec
    created = current is not None
    run_id = current.run_id if current else (run_id or runs.new_run_id(wf.name))
    if current is None:   # a new run: mode="error" sinks refuse another run's output (connectors.sink_folders)
        sinks.check_folders(wf, run_id)
    held = contextlib.ExitStack()   # the run's lease, held from its creation (or take-over) to the end
    held.enter_context(settle.redis_lost_is_resumable(run_id, redis_url))
    lease: runs.Lease | None = None
    gen: str | None = None
    if current is not None:   # created
        lease = held.enter_context(runs.take_over(client, current))
        gen = lease.generation
        runs.claim(client, run_id, gen)
        emit(events.Continued(run_id, current.round))
    next_round = current.round + 1 if current else 0
    auto = wf.settings().auto
    batches = messages = recovery_rounds = 0
    reason = "signal"
    last_activity = time.monotonic()
    last_plan: str | None = None
    stop = stop or Stopper(lambda why: emit(events.Stopping(why)))
    with held, stop:
        while True:
            if stop.requested:
                reason = "signal"
                break
            if max_batches is not None and batches >= max_batches:
                reason = "max-batches"
                break
            source_json = _plan_waiting(client, wf, run_id, reset, gen if created else None, poll, stop, emit,
                                        last_plan)
            if source_json is None:   # stopped while the topic's server did not answer
                reason = "signal"
                break
            last_plan = source_json
            planned, trimmed = log_offsets.planned_messages(source_json)
            for line in log_offsets.trimmed_lines(source_json):
                log.info("run %s: %s", run_id, line)
                emit(events.Trimmed(run_id, line))
            active = False
            if planned or trimmed:
                if not created:
                    lease = held.enter_context(runs.create(client, run_id, xml, wf_json, file, master, True))
                    gen = lease.generation
                    runs.update(client, run_id, gen, follow=True, follow_batches=0, follow_messages=0,
                                spill_dir=spill_dir, code_digest=plan.code_digest)
                    created = True
                    emit(events.Started(run_id))
                spec = RunSpec(run_id, next_round, wf_json, redis_url, True, source_json=source_json,
                               generation=gen, spill_dir=spill_dir)
                runs.claim(client, run_id, gen, round=next_round, current_workflow=wf_json,
                           current_spec=spec.round_json(), status=runs.RUNNING)
                # counted when the batch starts: a resumed batch is not counted twice
                runs.increment(client, run_id, gen, follow_batches=1, follow_messages=planned)
                started = time.time()
                summary = _run_micro_batch(spark, client, wf, spec, stop, emit, poll)
                failed_queue.prune_empty(client, run_id, gen)
                dropped = dead_sink.enforce_retention(client, wf, run_id, gen)
                stats = _round_stats(client, run_id, next_round)
                spouts = {s.id for s in log_offsets.log_spouts(wf)}
                emit(events.Batch(run_id=run_id, round=next_round, messages=planned,
                                  failed=sum(s.failed for s in stats.values()),
                                  trimmed=sum(stats[s].trimmed for s in spouts if s in stats),
                                  roots=sum(stats[s].roots for s in spouts if s in stats),
                                  pending=summary.pending, dead=summary.dead, dead_dropped=dropped,
                                  seconds=round(time.time() - started, 3)))
                batches += 1
                messages += planned
                next_round += 1
                active = True
            if auto and created and not stop.requested and _due(client, run_id):
                try:
                    rs = recover.recover(spark, client, redis_url, run_id, max_rounds=1, lease=lease)
                except Exception as err:
                    if not stop.requested:
                        raise
                    # interrupted by Ctrl-C (it reaches Spark's workers too): what was not
                    # acked is still queued; the next recovery round replays it
                    log.debug("run %s: recovery round interrupted by a stop request", run_id, exc_info=err)
                    reason = "signal"
                    break
                recovery_rounds += rs.rounds or 0
                dead_sink.enforce_retention(client, wf, run_id, gen)
                next_round = runs.get(client, run_id).round + 1
                emit(events.Recovered(run_id, rs.rounds, rs.pending, rs.dead))
                active = active or bool(rs.rounds)
            if active:
                last_activity = time.monotonic()
                continue
            if idle_exit is not None and time.monotonic() - last_activity >= idle_exit:
                reason = "idle"
                break
            stop.event.wait(poll)
    follow = {"batches": batches, "messages": messages, "recovery_rounds": recovery_rounds,
              "resumed": [s.run_id for s in resumed], "stopped": reason}
    if not created:
        return FollowOutcome(None, follow, stream_report.partition_report(client, wf),
                             stream_report.warnings_for(wf, client))
    rec = runs.get(client, run_id)
    summary = jobs_summary.with_topics(client, jobs_summary.summarize(client, rec), rec, wf)
    runs.update(client, run_id, gen, follow_stopped=time.time(),
                summary={k: v for k, v in summary.to_json().items() if k != "partitions"})
    return FollowOutcome(summary, follow, summary.partitions or [], summary.warnings or [])

