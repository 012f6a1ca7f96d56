"""Recovering a run: rounds that replay its failed positions (or its failed roots, root replay)
until nothing is pending, resuming a crashed round first; dead letters and their requeue."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from redis import Redis

from recovery.errors import RunError
from recovery.jobs.submit import (
    Progress,
    claim_run,
    redis_lost_is_resumable,
    run_and_settle,
    spec_json,
    workflow_json,
)
from recovery.jobs.summary import original_workflow, queued_positions, spill_bytes, sum_components, summarize
from recovery.model.failed import FailedTuple
from recovery.model.record import RunRecord
from recovery.model.run import RunSpec
from recovery.model.synthesis import synthesize
from recovery.model.workflow import Workflow
from recovery.tracking import keys, ledger, runs, spill

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)



def reconfigure(client: Redis, run_id: str, overrides: dict[str, str]) -> None:
    """Set workflow properties of a stored run (`recover -p`, values already checked): the
    next rounds, and a resumed round, read the stored workflows."""
    rec = runs.get(client, run_id)
    if runs.status_of(rec) == runs.RUNNING:
        raise RunError(f"run {run_id} is still running (driver pid {rec.driver_pid} on "
                       f"{rec.driver_host}): its configuration cannot change now")
    fields = {"workflow_json": workflow_json(original_workflow(rec).with_config(overrides))}
    if rec.current_workflow:
        current = Workflow.model_validate_json(rec.current_workflow)
        fields["current_workflow"] = workflow_json(current.with_config(overrides))
    runs.update(client, run_id, **fields)


def prune_failed_set(client: Redis, run_id: str) -> None:
    """A position leaves the failed set once its queue is empty."""
    for pos in client.smembers(keys.failed_set(run_id)):
        comp, task = cast(bytes, pos).decode().rsplit(":", 1)
        if client.hlen(keys.queue(run_id, comp, int(task))) == 0:
            client.srem(keys.failed_set(run_id), pos)


def resume_if_crashed(spark: SparkSession, client: Redis, redis_url: str, rec: RunRecord,
                      progress: Progress | None = None, generation: str | None = None,
                      taken_over: bool = False) -> dict[str, Any] | None:
    """A run whose driver died mid-round: run that round again. Committed tasks replay their
    stored output instead of executing, so only what was in flight is processed. The caller
    holds the run's lease (runs.take_over); `taken_over`: from a driver still alive (--force)."""
    status = runs.status_of(rec)
    if status not in (runs.CRASHED, runs.ERROR) and not (taken_over and status == runs.RUNNING):
        return None
    run_id = rec.run_id
    generation = generation or rec.generation
    claim_run(client, run_id, generation)
    wf = Workflow.model_validate_json(rec.current_workflow or rec.workflow_json)
    extra = json.loads(rec.current_spec or "{}")
    replay = extra.get("replay_roots")
    round_no = rec.round
    spec = RunSpec(run_id, round_no, workflow_json(wf), redis_url, True,
                   replay_roots=frozenset(replay) if replay is not None else None,
                   root_epoch=extra.get("root_epoch", 0), filter_epoch=extra.get("filter_epoch", 0),
                   original_json=rec.workflow_json if round_no else None,
                   source_json=extra.get("source_json") or "{}", generation=generation,
                   spill_dir=rec.spill_dir or None)
    settled = rec.settled_round == round_no
    summary = run_and_settle(spark, client, wf, spec, progress, execute=not settled)
    prune_failed_set(client, run_id)
    return summary


def check_not_running(rec: RunRecord) -> None:
    """Refuse to act on a run whose driver is alive (recover, requeue; the web view too)."""
    if runs.status_of(rec) == runs.RUNNING:
        raise RunError(f"run {rec.run_id} is still running ({runs.describe_driver(rec)}); wait for "
                       f"it, or take it over with `recovery recover {rec.run_id} --force`")


def recover(spark: SparkSession, client: Redis, redis_url: str, run_id: str, max_rounds: int | None = None,
            strategy: str = "localized", progress: Progress | None = None,
            on_round: Callable[[dict], None] | None = None, force: bool = False,
            lease: runs.Lease | None = None, spill_dir: str | None = None) -> dict[str, Any]:
    """Rounds until the failed set is empty (or max_rounds): each synthesizes a recovery
    workflow from the failed positions and runs it with the same tracking. A run whose driver
    is alive (its lease valid) is refused unless `force` takes it over; `lease`: this process
    drives the run already (a follow run between batches). `spill_dir` (--spill-dir): where the
    run's spill files are now; kept in the run record for later rounds and `clear`."""
    rec = runs.get(client, run_id)
    if spill_dir is not None:
        rec.spill_dir = spill.location(spill_dir)
        spill.SpillStore.at(rec.spill_dir).ensure_run_dir(run_id)
    if lease is not None:
        with redis_lost_is_resumable(run_id, redis_url):
            return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                            progress, on_round, taken_over=False)
    running = runs.status_of(rec) == runs.RUNNING
    if not force:
        check_not_running(rec)
    if not rec.tracking:
        raise RunError(f"run {run_id} ran with tracking off: there is nothing to recover from")
    lease = runs.take_over(client, rec, force=force)
    if spill_dir is not None:
        runs.update(client, run_id, lease.generation, spill_dir=rec.spill_dir)
    with lease, redis_lost_is_resumable(run_id, redis_url):
        return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                        progress, on_round, taken_over=running)


def _recover(spark: SparkSession, client: Redis, redis_url: str, rec: RunRecord, gen: str | None,
             max_rounds: int | None, strategy: str, progress: Progress | None,
             on_round: Callable[[dict], None] | None, taken_over: bool) -> dict[str, Any]:
    run_id = rec.run_id
    started = time.time()
    resumed = resume_if_crashed(spark, client, redis_url, rec, progress, gen, taken_over)
    ran = [rec.round] if resumed is not None else []
    claim_run(client, run_id, gen, status=runs.RUNNING)
    original = original_workflow(rec)
    rounds_run = 0
    queued_at_start = len(queued_positions(client, run_id))
    dead_at_start = client.hlen(keys.dead(run_id))
    while True:
        prune_failed_set(client, run_id)
        queued = queued_positions(client, run_id)
        if not queued or (max_rounds is not None and rounds_run >= max_rounds):
            break
        wait = min(r.not_before or 0 for r in queued) - time.time()
        if wait > 0:   # every queued tuple is still backing off
            log.info("run %s: every queued tuple is backing off; waiting up to %.1fs", run_id, wait)
            time.sleep(min(wait, original.setting("recovery.retry.max.delay.ms") / 1000))
        round_no = runs.get(client, run_id).round + 1
        if strategy == "root-replay":
            spec, wf = _root_replay_round(client, run_id, original, redis_url, round_no, queued, gen)
        else:
            failed: dict[str, list[int]] = {}
            for r in queued:
                failed.setdefault(r.component, [])
                if r.task not in failed[r.component]:
                    failed[r.component].append(r.task)
            wf = synthesize(original, failed)
            log.info("run %s round %d: recovery workflow of %d components replaying %d failed positions (%s)",
                     run_id, round_no, len(wf.components), len(queued),
                     ", ".join(f"{c} tasks {sorted(t)}" for c, t in sorted(failed.items())))
            spec = RunSpec(run_id, round_no, workflow_json(wf), redis_url, True,
                           original_json=rec.workflow_json, generation=gen,
                           spill_dir=rec.spill_dir or None)
        runs.update(client, run_id, gen, round=round_no, current_workflow=workflow_json(wf),
                    current_spec=spec_json(spec), status=runs.RUNNING)
        summary = run_and_settle(spark, client, wf, spec, progress)
        prune_failed_set(client, run_id)
        rounds_run += 1
        ran.append(round_no)
        if on_round is not None:
            on_round({"round": round_no, "replayed": len(queued), "summary": summary})
    # (a round that raised left the run in `error` or, killed, `running`: the next recover
    # resumes exactly that round, so the status is only settled here, after a clean loop)
    final = summarize(client, run_id, settled=True)
    runs.update(client, run_id, gen, status=final["status"], summary=final, ended=time.time())
    newly_dead = client.hlen(keys.dead(run_id)) - dead_at_start
    # the table under the summary: what this recover's rounds did, not round 0's
    ran_rounds = [r for r in runs.get(client, run_id).rounds if r.get("round") in ran]
    final.update({"rounds": rounds_run, "resumed": resumed is not None,
                  "components": sum_components(ran_rounds, original),
                  "components_rounds": [r["round"] for r in ran_rounds],
                  "recovered": max(0, queued_at_start - len(queued_positions(client, run_id)) - newly_dead),
                  "newly_dead": newly_dead,
                  "duration": round(time.time() - started, 3), "strategy": strategy})
    final["spill_bytes"] = spill_bytes(final["components"])   # this recover's rounds, as its table
    return final


def _root_replay_round(client: Redis, run_id: str, original: Workflow, redis_url: str, round_no: int,
                       queued: list[FailedTuple], gen: str | None = None) -> tuple[RunSpec, Workflow]:
    """Storm's behaviour, for comparison: replay every failed root from its spout, under a new
    root id (as Storm's acker would see a re-emitted message). The old roots are settled as
    superseded and their queue entries dropped."""
    rec = runs.get(client, run_id)
    epoch = rec.root_epoch
    old_roots = {int(r) for q in queued for r in q.roots}
    # supersede: zero the old roots' ledger entries and drop their queued tuples
    pending = {}
    for b in range(ledger.LEDGER_BUCKETS):
        roots, xors = ledger.fold(cast(list[bytes], client.hvals(keys.ledger(run_id, b))))
        for r, x in zip(roots.tolist(), xors.tolist()):
            if r in old_roots:
                pending[r] = x
    blobs = ledger.pack_xors(pending)

    def supersede(pipe: Any) -> None:
        for b, blob in enumerate(blobs):
            if blob:
                pipe.hset(keys.ledger(run_id, b), f"superseded:{round_no}", blob)
        for q in queued:
            pipe.hdel(keys.queue(run_id, q.component, q.task), str(q.id))
    if not ledger.fenced_transaction(client, run_id, gen, supersede):
        runs.check_generation(client, run_id, gen)
    runs.update(client, run_id, gen, root_epoch=round_no)
    spec = RunSpec(run_id, round_no, workflow_json(original), redis_url, True,
                   replay_roots=frozenset(old_roots), root_epoch=round_no, filter_epoch=epoch,
                   generation=gen, spill_dir=rec.spill_dir or None)
    return spec, original


# --- dead letters ----------------------------------------------------------------------------
def dead_letters(client: Redis, run_id: str, component: str | None = None) -> list[FailedTuple]:
    """The run's dead tuples (of `component`), in the order of their keys."""
    runs.get(client, run_id)
    out = []
    for field, raw in sorted(client.hgetall(keys.dead(run_id)).items()):
        rec = FailedTuple.unpack(cast(bytes, raw))
        if component is None or rec.component == component:
            out.append(rec)
    return out


def requeue_dead(client: Redis, run_id: str, component: str | None = None,
                 tuple_keys: list[str] | None = None) -> int:
    """Put dead tuples back in their queues (attempts reset) after the cause was fixed: all of
    them, a component's, or those named by `tuple_keys` (`component:task:id`, the dead-letter
    hash's fields). Each tuple moves in one transaction that only commits if it is still dead
    (WATCH) and the run was not cleared (its generation), so an interrupted or concurrent
    requeue neither loses nor doubles a tuple."""
    rec = runs.get(client, run_id)
    check_not_running(rec)
    gen = rec.generation
    dead_key = keys.dead(run_id)
    if tuple_keys is not None:
        unknown = [k for k in tuple_keys if not client.hexists(dead_key, k)]
        if unknown:
            raise RunError(f"run {run_id} has no dead tuple {unknown[0]!r} (see `recovery dead {run_id}`)")
        fields: list[bytes] = [k.encode() for k in tuple_keys]
    else:
        fields = cast(list[bytes], client.hkeys(dead_key))
    n = 0
    for field in fields:
        seen: dict[str, Any] = {}

        def read(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            raw = pipe.hget(dead_key, field)
            tup = FailedTuple.unpack(raw) if raw is not None else None
            # gone: requeued meanwhile by someone else; another component's: not asked for
            seen["tuple"] = tup if tup is not None and component in (None, tup.component) else None

        def requeue(pipe: Any, field: bytes = field, seen: dict[str, Any] = seen) -> None:
            dead: FailedTuple | None = seen["tuple"]
            if dead is None:
                return
            tup = dead.requeued()
            pipe.hset(keys.queue(run_id, tup.component, tup.task), str(tup.id), tup.pack())
            pipe.sadd(keys.failed_set(run_id), f"{tup.component}:{tup.task}")
            pipe.hdel(dead_key, field)
            if tup.roots:
                pipe.srem(keys.dead_roots(run_id), *[str(r) for r in tup.roots])

        if not ledger.fenced_transaction(client, run_id, gen, requeue, watch=(dead_key,), read=read):
            runs.check_generation(client, run_id, gen)
        if seen.get("tuple") is not None:
            n += 1
    if n:
        runs.update(client, run_id, gen, status=runs.PENDING)
    return n
