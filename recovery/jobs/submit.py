"""What the CLI's run commands do: submit a workflow, summarize a run, recover it, clear it.

Orchestration only: the engine runs rounds, tracking keeps the ledger, synthesis builds
recovery workflows. Each function takes a Redis client and, where it runs Spark, a session.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import msgpack

from recovery.engine import rounds as engine_rounds
from recovery.tracking import keys, runs, tracker
from recovery.connectors import sinks
from recovery.errors import RecoveryError, RedisUnavailable, RunError, WorkflowError
from recovery.model.graph import topological_order
from recovery.model.workflow import Workflow
from recovery.model.run import RunSpec

Progress = Callable[[str, int, int], None]


def check_classes(wf: Workflow) -> None:
    """At submit a `class=` that does not import is an error, not a warning."""
    from recovery.api.loader import check_classes as check
    problems = check(wf)
    if problems:
        raise WorkflowError(problems[0])


def submit(spark: Any, client: Any, redis_url: str, wf: Workflow, xml: str, file: str | None,
           tracking_on: bool = True, master: str = "local[*]",
           progress: Progress | None = None, run_id: str | None = None) -> dict[str, Any]:
    check_classes(wf)
    run_id = run_id or runs.new_run_id(wf.name)
    sinks.check_folders(wf, run_id)     # mode="error" sinks refuse another run's output
    wf_json = workflow_json(wf)
    # atomic: of two submits of the same --run-id one is refused here, before writing anything
    lease = runs.create(client, run_id, xml, wf_json, file, master, tracking_on)
    with lease, redis_lost_is_resumable(run_id, redis_url):
        source_json = "{}"
        if uses_log_source(wf):   # a bounded run reads each partition up to its end now
            from recovery.connectors.redis_stream import offsets as stream_reader
            try:
                source_json = stream_reader.plan_ranges(client, wf, run_id)
            except RecoveryError:
                clear(client, run_id, force=True)   # nothing ran: as if never submitted
                raise
        spec = RunSpec(run_id, 0, wf_json, redis_url, tracking_on, source_json=source_json,
                       generation=lease.generation)
        runs.update(client, run_id, lease.generation, round=0, current_workflow=wf_json,
                    current_spec=_spec_json(spec))
        return run_and_settle(spark, client, wf, spec, progress)


@contextmanager
def redis_lost_is_resumable(run_id: str, redis_url: str | None) -> Iterator[None]:
    """Redis going away under a driver is one line (exit 2) saying how to resume (DESIGN 7.6):
    what the run committed is in Redis, the rest runs again on `recover`."""
    import redis
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
        from recovery.redis import connection
        reason = connection._one_line(err, redis_url or "")
        raise RedisUnavailable(
            f"lost Redis ({connection.describe(redis_url)}) during run {run_id}: {reason}; the run is "
            f"resumable: `recovery recover {run_id}` once Redis is back") from None


def in_topological_order(stats: dict[str, Any], wf: Workflow) -> dict[str, Any]:
    """Per-component counters in the workflow's stage order (components a recovery workflow
    added, such as its queue sources, first: they feed the rest)."""
    order = topological_order(wf)
    return {**{c: stats[c] for c in stats if c not in order},
            **{c: stats[c] for c in order if c in stats}}


def sum_components(rounds: list[dict[str, Any]], wf: Workflow) -> dict[str, Any]:
    """Counters of several rounds added up, per component (seconds too: time spent)."""
    total: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for comp, st in (r.get("components") or {}).items():
            agg = total.setdefault(comp, {})
            for k, v in st.items():
                if isinstance(v, (int, float)):
                    agg[k] = round(agg.get(k, 0) + v, 3)
    return in_topological_order(total, wf)


def workflow_json(wf: Workflow) -> str:
    """The workflow as tasks receive it: base_dir kept (the model leaves it out of dumps)."""
    return json.dumps({**json.loads(wf.model_dump_json()), "base_dir": wf.base_dir})


def _claim(client: Any, run_id: str, generation: str | None, **fields: Any) -> None:
    """This process is now the run's driver (it holds the run's lease; pid and host for people)."""
    runs.update(client, run_id, generation, driver_pid=os.getpid(), driver_host=socket.gethostname(),
                **fields)


def _spec_json(spec: RunSpec) -> str:
    return json.dumps({"replay_roots": sorted(spec.replay_roots) if spec.replay_roots is not None else None,
                       "root_epoch": spec.root_epoch, "filter_epoch": spec.filter_epoch,
                       "source_json": spec.source_json})


def uses_log_source(wf: Workflow) -> bool:
    return any(c.impl.kind == "source" and c.impl.type == "redis-stream" for c in wf.spouts)


def run_and_settle(spark: Any, client: Any, wf: Workflow, spec: RunSpec,
                   progress: Progress | None = None, execute: bool = True) -> dict[str, Any]:
    """Run (or resume) one round, let the acker decide, record the outcome, drop in-flight keys.
    `execute=False` only settles a round whose tasks all ran (a driver killed while settling)."""
    label = "submit" if spec.round == 0 else f"round {spec.round}"
    gen = spec.generation
    started = time.time()
    try:
        if execute:
            engine_rounds.run_round(spark, wf, spec, (lambda d, t: progress(label, d, t)) if progress else None)
    except Exception as err:
        # Spark gave up on a task (a spout that cannot open, a worker that keeps dying):
        # the round stays resumable; say where, in one line
        reason = spark_failure_reason(err, client if spec.tracking else None, spec)
        try:
            runs.update(client, spec.run_id, gen, status=runs.ERROR, error=reason)
        except RecoveryError as cleared:
            raise cleared from None
        raise RunError(f"run {spec.run_id} round {spec.round} failed in Spark: {reason} "
                       f"(fix the cause, then `recovery recover {spec.run_id}` resumes it)") from None
    # a run cleared (clear --force) while its round ran: its tasks wrote nothing; stop here
    runs.check_generation(client, spec.run_id, gen)
    stats = engine_rounds.collect_stats(client, spec.run_id, spec.round) if spec.tracking else {}
    stats = in_topological_order(stats, wf)
    rec = runs.get(client, spec.run_id)
    rounds = rec.get("rounds") or []
    if stats or execute:   # (a settle-only resume after the markers went keeps what was recorded)
        rounds = [r for r in rounds if r.get("round") != spec.round]
        rounds.append({"round": spec.round, "components": stats, "started": started, "ended": time.time()})
        runs.update(client, spec.run_id, gen, rounds=rounds, **({"stats": stats} if spec.round == 0 else {}))
    if spec.tracking:
        engine_rounds.resolve_ledger(spark, spec)
    if spec.source_json != "{}" and uses_log_source(wf):
        # every root read in this round is now complete, queued or dead: commit past it.
        # (log source: committed before clear_round, so a driver dying in between resumes a
        # round whose tasks are all committed, or whose ranges are committed: no re-reading)
        from recovery.connectors.redis_stream import offsets as stream_reader
        stream_reader.commit_ranges(client, wf, spec.source_json)
    # from here on the round is settled: a resumed driver must not execute it again (its done
    # markers and in-flight tuples are about to go)
    runs.update(client, spec.run_id, gen, settled_round=spec.round)
    if spec.tracking:
        engine_rounds.clear_round(client, spec.run_id, spec.round)
        pending = tracker.pending_roots(client, spec.run_id)
        engine_rounds.tell_spouts(spark, client, spec, pending,
                           {int(r) for r in client.smembers(keys.dead_roots(spec.run_id))})
    summary = summarize(client, spec.run_id, rounds=rounds, settled=True)
    if summary["status"] in (runs.COMPLETED, runs.DEAD):   # complete: overwrite sinks drop other runs' parts
        sinks.replace_other_runs(wf, spec.run_id, spec.original_json)
    runs.update(client, spec.run_id, gen, summary=summary, status=summary["status"], ended=time.time())
    return summary


def spark_failure_reason(err: BaseException, client: Any = None, spec: RunSpec | None = None) -> str:
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
            ended = sorted(k.decode().rsplit(":", 2)[-2:] for k in client.scan_iter(match=pattern))
        if ended:
            return reason + ": the message timeout's last resort ended it, stuck in " + \
                ", ".join(f"{c} task index {i}" for c, i in ended)
        return reason + " (its stderr says why)"
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in reversed(lines):
        if ("Error" in line or "Exception" in line) and ":" in line and not line.startswith("at "):
            return line[:500]
    return (lines[0] if lines else type(err).__name__)[:500]


def failed_positions(client: Any, run_id: str) -> list[dict[str, Any]]:
    out = []
    for pos in sorted(p.decode() for p in client.smembers(keys.failed_set(run_id))):
        comp, task = pos.rsplit(":", 1)
        qkey = keys.queue(run_id, comp, int(task))
        count = client.hlen(qkey)
        sample = None
        for _, raw in client.hscan_iter(qkey, count=1):
            rec = msgpack.unpackb(raw, strict_map_key=False)
            sample = rec.get("error")
            break
        out.append({"component": comp, "task": int(task), "count": count, "sample_error": sample})
    return out


def summarize(client: Any, run_id: str, rounds: list | None = None, settled: bool = False
              ) -> dict[str, Any]:
    """Roots complete / pending / failed / dead and the failed positions. `settled`: the
    caller just finished a round, so the status is the acker's verdict, not the record's.
    While a round is not settled (running, or its driver died in it) the root counts are in
    flux: they are None and `counts_known` is false, never a guess."""
    rec = runs.get(client, run_id)
    original = original_workflow(rec)
    if rounds is None:
        rounds = rec.get("rounds") or []
    first = next((r for r in rounds if r.get("round") == 0), None)
    stats = in_topological_order(first["components"] if first else (rec.get("stats") or {}), original)
    positions = [p for p in failed_positions(client, run_id) if p["count"] > 0]
    out: dict[str, Any] = {
        "run_id": run_id, "workflow": original.name,
        "status": runs.status_of(rec), "round": int(rec.get("round") or 0),
        "counts_known": True, "unsettled_round": None,
        "dead_tuples": client.hlen(keys.dead(run_id)),
        "failed_positions": positions,
        "components": stats, "components_rounds": [0] if stats else [],
        "started": float(rec.get("started") or 0), "ended": float(rec["ended"]) if rec.get("ended") else None,
    }
    if not settled and not runs.round_settled(rec):
        out.update({"counts_known": False, "unsettled_round": out["round"], "roots": None,
                    "complete": None, "pending": None, "failed": None, "in_flight": None, "dead": None})
        return out
    # every round's new roots (continuous runs read new messages in later rounds; replays
    # are counted apart by the tasks)
    roots = sum(c.get("roots", 0) for r in rounds for c in (r.get("components") or {}).values())
    if not rounds:
        roots = sum(s.get("roots", 0) for s in stats.values())
    pending = tracker.pending_roots(client, run_id)
    dead_roots = {int(r) for r in client.smembers(keys.dead_roots(run_id))}
    dead = len(pending & dead_roots)
    queued_roots = {r for q in _queued(client, run_id, positions) for r in (q.get("roots") or [])}
    failed = len((pending - dead_roots) & queued_roots)
    in_flight = len(pending) - dead - failed
    if settled:
        out["status"] = (runs.COMPLETED if not pending
                         else (runs.PENDING if positions or in_flight else runs.DEAD))
    out.update({"roots": roots, "complete": roots - len(pending), "pending": len(pending) - dead,
                "failed": failed, "in_flight": in_flight, "dead": dead})
    return out


# --- recovery ------------------------------------------------------------------------------
def original_workflow(rec: dict[str, Any]) -> Workflow:
    return Workflow.model_validate_json(rec["workflow_json"])


def _queued(client: Any, run_id: str, positions: list[dict[str, Any]] | None = None
            ) -> list[dict[str, Any]]:
    """Every queued failed tuple (small: failures only), of `positions` if already read."""
    out = []
    for p in failed_positions(client, run_id) if positions is None else positions:
        for _, raw in client.hscan_iter(keys.queue(run_id, p["component"], p["task"])):
            out.append(msgpack.unpackb(raw, strict_map_key=False))
    return out


def reconfigure(client: Any, run_id: str, overrides: dict[str, str]) -> None:
    """Set workflow properties of a stored run (`recover -p`, values already checked): the
    next rounds, and a resumed round, read the stored workflows."""
    rec = runs.get(client, run_id)
    if runs.status_of(rec) == runs.RUNNING:
        raise RunError(f"run {run_id} is still running (driver pid {rec.get('driver_pid')} on "
                       f"{rec.get('driver_host')}): its configuration cannot change now")
    fields = {"workflow_json": workflow_json(original_workflow(rec).with_config(overrides))}
    if rec.get("current_workflow"):
        current = Workflow.model_validate_json(rec["current_workflow"])
        fields["current_workflow"] = workflow_json(current.with_config(overrides))
    runs.update(client, run_id, **fields)


def prune_failed_set(client: Any, run_id: str) -> None:
    """A position leaves the failed set once its queue is empty."""
    for pos in client.smembers(keys.failed_set(run_id)):
        comp, task = pos.decode().rsplit(":", 1)
        if client.hlen(keys.queue(run_id, comp, int(task))) == 0:
            client.srem(keys.failed_set(run_id), pos)


def resume_if_crashed(spark: Any, client: Any, redis_url: str, rec: dict[str, Any],
                      progress: Progress | None = None, generation: str | None = None,
                      taken_over: bool = False) -> dict[str, Any] | None:
    """A run whose driver died mid-round: run that round again. Committed tasks replay their
    stored output instead of executing, so only what was in flight is processed. The caller
    holds the run's lease (runs.take_over); `taken_over`: from a driver still alive (--force)."""
    status = runs.status_of(rec)
    if status not in (runs.CRASHED, runs.ERROR) and not (taken_over and status == runs.RUNNING):
        return None
    run_id = rec["run_id"]
    generation = generation or rec.get("generation")
    _claim(client, run_id, generation)
    wf = Workflow.model_validate_json(rec.get("current_workflow") or rec["workflow_json"])
    extra = json.loads(rec.get("current_spec") or "{}")
    replay = extra.get("replay_roots")
    round_no = int(rec.get("round") or 0)
    spec = RunSpec(run_id, round_no, workflow_json(wf), redis_url, True,
                   replay_roots=frozenset(replay) if replay is not None else None,
                   root_epoch=extra.get("root_epoch", 0), filter_epoch=extra.get("filter_epoch", 0),
                   original_json=rec["workflow_json"] if round_no else None,
                   source_json=extra.get("source_json") or "{}", generation=generation)
    settled = str(rec.get("settled_round", "")) == str(round_no)
    summary = run_and_settle(spark, client, wf, spec, progress, execute=not settled)
    prune_failed_set(client, run_id)
    return summary


def check_not_running(rec: dict[str, Any]) -> None:
    """Refuse to act on a run whose driver is alive (recover, requeue; the web view too)."""
    if runs.status_of(rec) == runs.RUNNING:
        raise RunError(f"run {rec['run_id']} is still running ({runs.describe_driver(rec)}); wait for "
                       f"it, or take it over with `recovery recover {rec['run_id']} --force`")


def recover(spark: Any, client: Any, redis_url: str, run_id: str, max_rounds: int | None = None,
            strategy: str = "localized", progress: Progress | None = None,
            on_round: Callable[[dict], None] | None = None, force: bool = False,
            lease: runs.Lease | None = None) -> dict[str, Any]:
    """Rounds until the failed set is empty (or max_rounds): each synthesizes a recovery
    workflow from the failed positions and runs it with the same tracking. A run whose driver
    is alive (its lease valid) is refused unless `force` takes it over; `lease`: this process
    drives the run already (a follow run between batches)."""
    rec = runs.get(client, run_id)
    if lease is not None:
        with redis_lost_is_resumable(run_id, redis_url):
            return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                            progress, on_round, taken_over=False)
    running = runs.status_of(rec) == runs.RUNNING
    if not force:
        check_not_running(rec)
    if not int(rec.get("tracking") or 0):
        raise RunError(f"run {run_id} ran with tracking off: there is nothing to recover from")
    lease = runs.take_over(client, rec, force=force)
    with lease, redis_lost_is_resumable(run_id, redis_url):
        return _recover(spark, client, redis_url, rec, lease.generation, max_rounds, strategy,
                        progress, on_round, taken_over=running)


def _recover(spark: Any, client: Any, redis_url: str, rec: dict[str, Any], gen: str | None,
             max_rounds: int | None, strategy: str, progress: Progress | None,
             on_round: Callable[[dict], None] | None, taken_over: bool) -> dict[str, Any]:
    from recovery.model.synthesis import synthesize
    run_id = rec["run_id"]
    started = time.time()
    resumed = resume_if_crashed(spark, client, redis_url, rec, progress, gen, taken_over)
    ran = [int(rec.get("round") or 0)] if resumed is not None else []
    _claim(client, run_id, gen, status=runs.RUNNING)
    original = original_workflow(rec)
    rounds_run = 0
    queued_at_start = len(_queued(client, run_id))
    dead_at_start = client.hlen(keys.dead(run_id))
    while True:
        prune_failed_set(client, run_id)
        queued = _queued(client, run_id)
        if not queued or (max_rounds is not None and rounds_run >= max_rounds):
            break
        wait = min(r.get("not_before", 0) for r in queued) - time.time()
        if wait > 0:   # every queued tuple is still backing off
            time.sleep(min(wait, original.setting("recovery.retry.max.delay.ms") / 1000))
        round_no = int(runs.get(client, run_id).get("round") or 0) + 1
        if strategy == "root-replay":
            spec, wf = _root_replay_round(client, run_id, original, redis_url, round_no, queued, gen)
        else:
            failed: dict[str, list[int]] = {}
            for r in queued:
                failed.setdefault(r["component"], [])
                if r["task"] not in failed[r["component"]]:
                    failed[r["component"]].append(r["task"])
            wf = synthesize(original, failed)
            spec = RunSpec(run_id, round_no, workflow_json(wf), redis_url, True,
                           original_json=rec["workflow_json"], generation=gen)
        runs.update(client, run_id, gen, round=round_no, current_workflow=workflow_json(wf),
                    current_spec=_spec_json(spec), status=runs.RUNNING)
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
    ran_rounds = [r for r in runs.get(client, run_id).get("rounds") or [] if r.get("round") in ran]
    final.update({"rounds": rounds_run, "resumed": resumed is not None,
                  "components": sum_components(ran_rounds, original),
                  "components_rounds": [r["round"] for r in ran_rounds],
                  "recovered": max(0, queued_at_start - len(_queued(client, run_id)) - newly_dead),
                  "newly_dead": newly_dead,
                  "duration": round(time.time() - started, 3), "strategy": strategy})
    return final


def _root_replay_round(client: Any, run_id: str, original: Workflow, redis_url: str, round_no: int,
                       queued: list[dict], gen: str | None = None) -> tuple[RunSpec, Workflow]:
    """Storm's behaviour, for comparison: replay every failed root from its spout, under a new
    root id (as Storm's acker would see a re-emitted message). The old roots are settled as
    superseded and their queue entries dropped."""
    rec = runs.get(client, run_id)
    epoch = int(rec.get("root_epoch") or 0)
    old_roots = {int(r) for q in queued for r in (q.get("roots") or [])}
    # supersede: zero the old roots' ledger entries and drop their queued tuples
    pending = {}
    for b in range(tracker.LEDGER_BUCKETS):
        roots, xors = tracker.fold(client.hvals(keys.ledger(run_id, b)))
        for r, x in zip(roots.tolist(), xors.tolist()):
            if r in old_roots:
                pending[r] = x
    blobs = tracker.pack_xors(pending)

    def supersede(pipe: Any) -> None:
        for b, blob in enumerate(blobs):
            if blob:
                pipe.hset(keys.ledger(run_id, b), f"superseded:{round_no}", blob)
        for q in queued:
            pipe.hdel(keys.queue(run_id, q["component"], q["task"]), str(q["id"]))
    if not tracker.fenced_transaction(client, run_id, gen, supersede):
        runs.check_generation(client, run_id, gen)
    runs.update(client, run_id, gen, root_epoch=round_no)
    spec = RunSpec(run_id, round_no, workflow_json(original), redis_url, True,
                   replay_roots=frozenset(old_roots), root_epoch=round_no, filter_epoch=epoch,
                   generation=gen)
    return spec, original


# --- dead letters and clearing ------------------------------------------------------------
def dead_letters(client: Any, run_id: str, component: str | None = None) -> list[dict[str, Any]]:
    runs.get(client, run_id)
    out = []
    for field, raw in sorted(client.hgetall(keys.dead(run_id)).items()):
        rec = msgpack.unpackb(raw, strict_map_key=False)
        if component is None or rec.get("component") == component:
            out.append(rec)
    return out


def requeue_dead(client: Any, run_id: str, component: str | None = None,
                 tuple_keys: list[str] | None = None) -> int:
    """Put dead tuples back in their queues (attempts reset) after the cause was fixed: all of
    them, a component's, or those named by `tuple_keys` (`component:task:id`, the dead-letter
    hash's fields). Each tuple moves in one transaction that only commits if it is still dead
    (WATCH) and the run was not cleared (its generation), so an interrupted or concurrent
    requeue neither loses nor doubles a tuple."""
    rec = runs.get(client, run_id)
    check_not_running(rec)
    gen = rec.get("generation")
    dead_key = keys.dead(run_id)
    if tuple_keys is not None:
        unknown = [k for k in tuple_keys if not client.hexists(dead_key, k)]
        if unknown:
            raise RunError(f"run {run_id} has no dead tuple {unknown[0]!r} (see `recovery dead {run_id}`)")
        fields: list[bytes] = [k.encode() for k in tuple_keys]
    else:
        fields = list(client.hkeys(dead_key))
    n = 0
    for field in fields:
        seen: dict[str, Any] = {}

        def read(pipe: Any, field: bytes = field) -> None:
            raw = pipe.hget(dead_key, field)
            tup = msgpack.unpackb(raw, strict_map_key=False) if raw is not None else None
            # gone: requeued meanwhile by someone else; another component's: not asked for
            seen["tuple"] = tup if tup is not None and component in (None, tup.get("component")) else None

        def requeue(pipe: Any, field: bytes = field) -> None:
            tup = seen["tuple"]
            if tup is None:
                return
            tup.pop("dead", None)
            tup["attempt"] = 0     # the next replay is attempt 1 of a fresh allowance
            tup["not_before"] = 0
            pipe.hset(keys.queue(run_id, tup["component"], tup["task"]), str(tup["id"]),
                      msgpack.packb(tup, default=repr))
            pipe.sadd(keys.failed_set(run_id), f"{tup['component']}:{tup['task']}")
            pipe.hdel(dead_key, field)
            if tup.get("roots"):
                pipe.srem(keys.dead_roots(run_id), *[str(r) for r in tup["roots"]])

        if not tracker.fenced_transaction(client, run_id, gen, requeue, watch=(dead_key,), read=read):
            runs.check_generation(client, run_id, gen)
        if seen.get("tuple") is not None:
            n += 1
    if n:
        runs.update(client, run_id, gen, status=runs.PENDING)
    return n


def clear(client: Any, run_id: str, force: bool = False) -> list[str]:
    """Remove every key of the run (its record too) and nothing else; returns what it removed.
    Keys left under the run's prefix without a record (orphans) go too."""
    try:
        rec: dict[str, Any] | None = runs.get(client, run_id)
    except RunError:
        rec = None
    if rec is not None and runs.status_of(rec) == runs.RUNNING and not force:
        raise RunError(f"run {run_id} is still running ({runs.describe_driver(rec)}); "
                       "use --force to clear it anyway")
    removed = [k.decode() for k in client.scan_iter(match=keys.run_prefix(run_id) + "*", count=1000)]
    if rec is None and not removed and client.zscore(keys.runs_index(), run_id) is None:
        raise RunError(f"no run {run_id!r} in this Redis (see `recovery runs`)")
    # the record first: a driver still working on the run sees it gone and writes nothing more
    client.delete(keys.run_record(run_id))
    for i in range(0, len(removed), 500):
        client.delete(*removed[i:i + 500])
    client.zrem(keys.runs_index(), run_id)
    return ([keys.run_record(run_id)] if rec is not None else []) + sorted(removed)


def clear_all(client: Any, force: bool = False) -> dict[str, list[str]]:
    """`clear --all`: every run this Redis knows, then any key left under the runs' prefix
    (orphans of runs whose record is gone), grouped by the run id they name."""
    removed = {rid: clear(client, rid, force) for rid in runs.list_ids(client)}
    known = runs.list_ids(client)   # runs created meanwhile stay
    base = keys.run_record("")
    orphans: dict[str, list[str]] = {}
    for raw in client.scan_iter(match=keys.runs_pattern(), count=1000):
        name = raw.decode()
        if any(name == keys.run_record(r) or name.startswith(keys.run_prefix(r)) for r in known):
            continue
        orphans.setdefault(name[len(base):].split(":", 1)[0], []).append(name)
    for rid, names in orphans.items():
        client.delete(*names)
        removed.setdefault(rid, []).extend(sorted(names))
    return removed
