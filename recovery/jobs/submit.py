"""Submitting a workflow: checked first, without Spark (`prepare`: the workflow and the options;
`check_redis`: what Redis holds); then a run record, its first round on Spark, its summary
(`run`). `submit` does all three; the CLI connects to Redis after `prepare` and starts Spark
before `run`, so that a refusal is made once, before anything starts.

Orchestration only: the round itself is jobs/settle.py's. Each function takes a Redis client
and, where it runs Spark, a session.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from recovery.api.loader import class_errors
from recovery.api.runnable import check_runnable
from recovery.connectors import files, log_offsets, sinks, spark_source
from recovery.errors import RecoveryError
from recovery.jobs.clear import clear
from recovery.jobs.settle import Progress, redis_lost_is_resumable, run_and_settle
from recovery.jobs.summary import RunSummary
from recovery.model import code
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow
from recovery.tracking import keys, runs, spill

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)


def check_classes(wf: Workflow) -> None:
    """At submit a `class=` that does not import is an error, not a warning."""
    problems = class_errors(wf)
    if problems:
        raise problems[0]


@dataclass(frozen=True)
class SubmitPlan:
    """A submit that `prepare` checked: everything `run` needs but Spark."""
    workflow: Workflow
    xml: str
    file: str | None          # the workflow file, absolute (kept in the run record); None: from code
    run_id: str
    tracking: bool
    master: str
    spill_location: str       # where its tasks spill (checked, not yet made)
    code_digest: str = ""     # the workflow's code shipped with its tasks (model/code.py)
    reset: str | None = None  # --reset: where a consumer goes on when its offset is below the log's start


def prepare(wf: Workflow, xml: str, file: str | None, tracking_on: bool = True, master: str = "local[*]",
            run_id: str | None = None, spill_dir: str | None = None, reset: str | None = None) -> SubmitPlan:
    """Every refusal a submit makes from the workflow and its options alone (no Redis, no
    Spark), in this order: a `class=` that does not load (and, with `file` and a local master,
    a shell script that does not exist: named by file and line), a bad property, a relative
    source or sink path with a master that is not local, a bad run id,
    a file sink's folder holding another run's output (mode="error"). Writes nothing.
    `spill_dir`: --spill-dir, else recovery.spill.dir, else RECOVERY_HOME/spill."""
    if file is not None:
        check_runnable(file, wf, local=master.startswith("local"))
    else:
        check_classes(wf)
    wf.check_config()   # as validate does (a workflow or its properties may come from code)
    files.check_paths_reach_executors(wf, master, file)   # a cluster's executors: no relative path
    run_id = runs.new_run_id(wf.name) if run_id is None else keys.check_run_id(run_id)
    sinks.check_folders(wf, run_id)     # mode="error" sinks refuse another run's output
    if tracking_on:   # (an untracked run spills nothing)
        spill.check_reaches_executors(spill_dir, wf.settings().spill_dir, master)
    location = spill.location(spill_dir, wf.settings().spill_dir)
    # (an <include> that does not exist, a link out of the workflow's folder and code over
    # recovery.ship.max.bytes are refused here, on any master: local runs behave as a cluster's)
    digest = code.bundle(wf, file).digest
    return SubmitPlan(wf, xml, os.path.abspath(file) if file is not None else None, run_id,
                      tracking_on, master, location, digest, reset)


def check_redis(client: redis.Redis, plan: SubmitPlan) -> None:
    """The refusals that read Redis, still before Spark starts: the run id is taken (`run`
    creates the run atomically in any case), a topic the workflow reads does not exist."""
    runs.check_absent(client, plan.run_id)
    if plan.workflow.reads_topics:
        log_offsets.check_plans(client, plan.workflow, plan.reset)


def run(spark: SparkSession, client: redis.Redis, redis_url: str, plan: SubmitPlan,
        progress: Progress | None = None) -> RunSummary:
    """Run a prepared submit: the checks that need Spark (a spark source's columns), the run
    record (created atomically: of two submits of one run id, one is refused here), round 0."""
    wf, run_id = plan.workflow, plan.run_id
    spark_source.check(spark, wf, plan.file, plan.xml)   # spark sources: their columns, unique ids
    if plan.tracking:
        spill.SpillStore.at(plan.spill_location).ensure_run_dir(run_id)
    wf_json = wf.to_task_json()
    lease = runs.create(client, run_id, plan.xml, wf_json, plan.file, plan.master, plan.tracking)
    log.info("run %s created (workflow %s, %d components, tracking %s, master %s)", run_id, wf.name,
             len(wf.components), "on" if plan.tracking else "off", plan.master)
    with lease, redis_lost_is_resumable(run_id, redis_url):
        source_json = "{}"
        if wf.reads_topics:   # a bounded run reads each partition up to its end now
            try:
                source_json = log_offsets.plan_ranges(client, wf, run_id, reset=plan.reset)
            except RecoveryError:
                clear(client, run_id, force=True)   # nothing ran: as if never submitted
                raise
        spec = RunSpec(run_id, 0, wf_json, redis_url, plan.tracking, source_json=source_json,
                       generation=lease.generation, spill_dir=plan.spill_location)
        runs.update(client, run_id, lease.generation, round=0, current_workflow=wf_json,
                    current_spec=spec.round_json(), spill_dir=plan.spill_location,
                    code_digest=plan.code_digest)
        return run_and_settle(spark, client, wf, spec, progress)


def submit(spark: SparkSession, client: redis.Redis, redis_url: str, wf: Workflow, xml: str, file: str | None,
           tracking_on: bool = True, master: str = "local[*]",
           progress: Progress | None = None, run_id: str | None = None,
           spill_dir: str | None = None, reset: str | None = None) -> RunSummary:
    """`prepare`, `check_redis`, then `run`: a workflow submitted and its first round's summary."""
    plan = prepare(wf, xml, file, tracking_on, master, run_id, spill_dir, reset)
    check_redis(client, plan)
    return run(spark, client, redis_url, plan, progress)
