"""One round of submit, recover and follow, run (or resumed) on Spark from the driver and settled
by the acker's counts, recorded in the run record; how a failed round is worded; and Redis lost
under a driver, worded as resumable.

Orchestration only: the engine runs rounds, tracking keeps the ledger, synthesis builds
recovery workflows. Each function takes a Redis client and, where it runs Spark, a session.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import redis

from recovery.connectors import log_offsets, sink_folders
from recovery.controlplane import connection
from recovery.engine import rounds as engine_rounds
from recovery.errors import ExecutorsLost, JobFailed, RecoveryError, RedisUnavailable, RunError, SpillError
from recovery.jobs import dead_sink
from recovery.jobs.summary import RunSummary, components_of, summarize
from recovery.model.config import PropertyError
from recovery.model.graph import in_stage_order
from recovery.model.record import RoundRecord
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow
from recovery.tracking import keys, ledger, runs, spill, tracker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


@contextmanager
def redis_lost_is_resumable(run_id: str, redis_url: str | None) -> Iterator[None]:
    """Redis going away under a driver is one line (exit 2) saying how to resume:
    what the run committed is in Redis, the rest runs again on `recover`."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
        reason = connection.one_line_error(err, redis_url or "")
        raise RedisUnavailable(
            f"lost Redis ({connection.describe(redis_url)}) during run {run_id}: {reason}; the run is "
            f"resumable: `recovery recover {run_id}` once Redis is back") from None


def _store_error(client: redis.Redis, spec: RunSpec, reason: str) -> None:
    """The run left in `error` with its reason (fenced by the round's generation); a run cleared
    or taken over meanwhile says that instead, without the failure it replaces as its context."""
    try:
        runs.update(client, spec.run_id, spec.generation, status=runs.ERROR, error=reason)
    except RecoveryError as cleared:
        raise cleared from None


def run_and_settle(spark: SparkSession, client: redis.Redis, wf: Workflow, spec: RunSpec,
                   progress: Progress | None = None, execute: bool = True) -> RunSummary:
    """Run (or resume) one round, let the acker decide, record the outcome, drop in-flight keys.
    `execute=False` only settles a round whose tasks all ran (a driver killed while settling)."""
    label = "submit" if spec.round == 0 else f"round {spec.round}"
    gen = spec.generation
    started = time.time()
    log.info("run %s %s: %s (%d components, %d tasks)", spec.run_id, label,
             "starting" if execute else "settling (its tasks all ran)", len(wf.components),
             sum(c.parallelism for c in wf.components))
    if execute and spec.root_replay:   # its roots selected and its queues dropped, once
        engine_rounds.prepare_root_replay(spark, client, spec)
    try:
        if execute:
            engine_rounds.run_round(spark, wf, spec, (lambda d, t: progress(label, d, t)) if progress else None)
    except PropertyError as err:
        # a run stored with a value no check refused then (the plan reads the settings before
        # any task runs): the run ends in `error` here, and `recover -p NAME=VALUE` mends it
        reason = f"property {err}"
        _store_error(client, spec, reason)
        raise RunError(f"run {spec.run_id} round {spec.round} cannot start: {reason} (`recovery recover "
                       f"{spec.run_id} -p {err.property}=VALUE` mends it)") from None
    except ExecutorsLost as lost:
        # the cluster lost every worker: the run waits for `recover` (its lease goes with this driver)
        _store_error(client, spec, str(lost))
        raise RunError(f"run {spec.run_id} round {spec.round} failed: {lost}; once a worker is back, "
                       f"`recovery recover {spec.run_id}` resumes it") from None
    except RecoveryError:
        raise   # already one line naming its cause (Redis lost, run cleared)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        raise   # redis_lost_is_resumable says how to resume
    except Exception as err:
        # Spark gave up on a task (a spout that cannot open, a worker that keeps dying): the
        # round stays resumable; say where, in one line. Anything else raised here is a bug
        # in this driver: the same one line, not blamed on Spark, its traceback in the log.
        in_spark = is_spark_failure(err)
        spill_line = spill.error_line(str(err)) if in_spark else None   # a spill file gone or damaged
        reason = spill_line or (spark_failure_reason(err, client if spec.tracking else None, spec) if in_spark
                                else f"{type(err).__name__}: {err}")
        log.debug("run %s round %d failed %s", spec.run_id, spec.round,
                  "in Spark" if in_spark else "in the driver", exc_info=err)
        _store_error(client, spec, reason)
        if spill_line is not None:
            raise SpillError(spill_line) from None   # exactly the task's line (file, task, how to resume)
        if not in_spark:
            raise RunError(f"run {spec.run_id} round {spec.round} failed in the driver (a bug in "
                           f"recovery; `-vv` logs its traceback): {reason} (`recovery recover "
                           f"{spec.run_id}` resumes it)") from err
        raise RunError(f"run {spec.run_id} round {spec.round} failed in Spark: {reason} "
                       f"(fix the cause, then `recovery recover {spec.run_id}` resumes it)") from None
    # a run cleared (clear --force) or taken over (recover --force) while its round ran: its
    # tasks wrote nothing since; stop here. Every later write is fenced by `gen` as well, so a
    # take-over at any step of this settle stops it at its next write (RunTakenOver)
    runs.check_generation(client, spec.run_id, gen)
    if spec.tracking:   # what a task killed after its commit point left staged (tracker module doc)
        tracker.apply_round(client, spec.run_id, spec.round, gen)
    stats = engine_rounds.collect_stats(client, spec.run_id, spec.round) if spec.tracking else {}
    stats = in_stage_order(stats, wf)
    rec = runs.get(client, spec.run_id)
    rounds = rec.rounds
    if stats or execute:   # (a settle-only resume after the markers went keeps what was recorded)
        rounds = [r for r in rounds if r.round != spec.round]
        rounds.append(RoundRecord(round=spec.round, components=components_of(stats), started=started,
                                  ended=time.time()))
        runs.update(client, spec.run_id, gen, rounds=rounds, **({"stats": stats} if spec.round == 0 else {}))
    # the acker's counts (those the round's last task counted, else by Spark tasks, one per
    # ledger bucket): stored with the settle
    counts = engine_rounds.resolve_ledger(spark, client, spec) if spec.tracking else ledger.RootCounts()
    # (a bucket task fenced out folds nothing: its counts are no verdict, and this says why)
    runs.check_generation(client, spec.run_id, gen)
    if spec.source_json != "{}" and wf.reads_topics:
        # every root read in this round is now complete, queued or dead: commit past it.
        # (log source: committed before clear_round, so a driver dying in between resumes a
        # round whose tasks are all committed, or whose ranges are committed: no re-reading)
        log_offsets.commit_ranges(client, wf, spec.source_json)
    # from here on the round is settled: a resumed driver must not execute it again (its done
    # markers and in-flight tuples are about to go)
    runs.update(client, spec.run_id, gen, settled_round=spec.round, **counts.record_fields(spec.round))
    # (a Kafka group is told the prefix of complete or dead roots, after a batch as after a
    # recovery round, whose workflow reads queues: the submitted one reads the topics)
    submitted = Workflow.from_task_json(spec.original_json) if spec.original_json else wf
    if submitted.reads_topics and spec.tracking:
        log_offsets.settled(client, submitted, spec.run_id)
    if spec.tracking:
        # fenced: a driver taken over removes nothing (its successor may be resuming the round)
        engine_rounds.clear_round(client, spec.run_id, spec.round, spec.spill_dir, gen, spec.root_replay)
        engine_rounds.tell_spouts(spark, client, spec)
        # the round's dead letters, out of Redis into the run's dead-letter sink (if it has one)
        dead_sink.flush(client, submitted, spec.run_id, gen)
    summary = summarize(client, runs.get(client, spec.run_id), rounds=rounds, settled=True)
    if summary.status in (runs.COMPLETED, runs.DEAD):   # complete: overwrite sinks drop other runs' parts
        runs.check_generation(client, spec.run_id, gen)     # (only while this driver owns the run)
        sink_folders.replace_other_runs(wf, spec.run_id, spec.original_json)
    runs.update(client, spec.run_id, gen, summary=summary.to_json(), status=summary.status, ended=time.time())
    log.info("run %s %s ended: %s, %d failed positions, %s pending, %s dead (%.1fs)", spec.run_id, label,
             summary.status, len(summary.failed_positions), summary.pending, summary.dead, time.time() - started)
    return summary


def is_spark_failure(err: BaseException) -> bool:
    """A failed Spark job (pyspark's and py4j's errors; the test kit's local engine raises
    JobFailed), told apart by module so that pyspark is not imported to check it."""
    return isinstance(err, JobFailed) or any(
        cls.__module__.partition(".")[0] in ("pyspark", "py4j") for cls in type(err).__mro__)


def spark_failure_reason(err: BaseException, client: redis.Redis | None = None, spec: RunSpec | None = None) -> str:
    """The last exception line of a Python worker's traceback inside a Spark error; for a
    worker that died (no traceback: Spark's last line is `Caused by: java.io.EOFException`),
    Spark's task and stage, and what the message timeout's last resort marked in Redis."""
    text = str(err)
    if "Python worker exited unexpectedly" in text:
        lost = re.search(r"Lost task (\S+) in stage (\S+)", text)
        reason = "a Python worker crashed (exited unexpectedly)" + (
            f" in Spark task {lost[1]} of stage {lost[2]}" if lost else "")
        ended = []   # Spark's text never holds the worker's last line; the watchdog's mark does
        if client is not None and spec is not None:
            pattern = keys.timed_out(spec.run_id, spec.round, "*", "*")
            ended = sorted(k.decode().rsplit(":", 2)[-2:] for k in connection.scan_keys(client, pattern))
        if ended:
            return reason + ": the message timeout's last resort ended it, stuck in " + \
                ", ".join(f"{c} task index {i}" for c, i in ended)
        return reason + " (its stderr says why)"
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in reversed(lines):
        if ("Error" in line or "Exception" in line) and ":" in line and not line.startswith("at "):
            return line[:500]
    return (lines[0] if lines else type(err).__name__)[:500]
