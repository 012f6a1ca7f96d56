"""What the CLI's run commands do: submit a workflow, summarize a run, recover it, clear it.

Orchestration only: the engine runs rounds, tracking keeps the ledger, synthesis builds
recovery workflows. Each function takes a Redis client and, where it runs Spark, a session.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

import msgpack

from recovery import engine, keys, runs, tracking
from recovery.errors import RunError, WorkflowError
from recovery.model import Workflow
from recovery.runtime import RunSpec

Progress = Callable[[str, int, int], None]


def check_classes(wf: Workflow) -> None:
    """At submit a `class=` that does not import is an error, not a warning."""
    from recovery.loader import check_classes as check
    problems = check(wf)
    if problems:
        raise WorkflowError(problems[0])


def submit(spark: Any, client: Any, redis_url: str, wf: Workflow, xml: str, file: str | None,
           tracking_on: bool = True, master: str = "local[*]",
           progress: Progress | None = None, run_id: str | None = None) -> dict[str, Any]:
    check_classes(wf)
    run_id = run_id or runs.new_run_id(wf.name)
    wf_json = wf.model_dump_json(exclude=set())
    wf_json = json.dumps({**json.loads(wf_json), "base_dir": wf.base_dir})
    runs.create(client, run_id, xml, wf_json, file, master, tracking_on)
    spec = RunSpec(run_id, 0, wf_json, redis_url, tracking_on)
    runs.update(client, run_id, round=0, current_workflow=wf_json, current_spec=_spec_json(spec))
    return run_and_settle(spark, client, wf, spec, progress)


def _spec_json(spec: RunSpec) -> str:
    return json.dumps({"replay_roots": sorted(spec.replay_roots) if spec.replay_roots is not None else None,
                       "root_epoch": spec.root_epoch})


def run_and_settle(spark: Any, client: Any, wf: Workflow, spec: RunSpec,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) one round, let the acker decide, record the outcome, drop in-flight keys."""
    label = "submit" if spec.round == 0 else f"round {spec.round}"
    engine.run_round(spark, wf, spec, (lambda d, t: progress(label, d, t)) if progress else None)
    stats = engine.collect_stats(client, spec.run_id, spec.round) if spec.tracking else {}
    if spec.tracking:
        engine.resolve_ledger(spark, spec)
        engine.clear_round(client, spec.run_id, spec.round)
    rec = runs.get(client, spec.run_id)
    rounds = rec.get("rounds") or []
    rounds = [r for r in rounds if r.get("round") != spec.round]
    rounds.append({"round": spec.round, "components": stats, "ended": time.time()})
    if spec.round == 0:
        runs.update(client, spec.run_id, stats=stats)
    summary = summarize(client, spec.run_id, rounds=rounds, settled=True)
    runs.update(client, spec.run_id, rounds=rounds, summary=summary, status=summary["status"],
                ended=time.time())
    return summary


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
    caller just finished a round, so the status is the acker's verdict, not the record's."""
    rec = runs.get(client, run_id)
    if rounds is None:
        rounds = rec.get("rounds") or []
    first = next((r for r in rounds if r.get("round") == 0), None)
    stats = first["components"] if first else (rec.get("stats") or {})
    roots = sum(s.get("roots", 0) for s in stats.values())
    pending = tracking.pending_roots(client, run_id)
    dead_roots = {int(r) for r in client.smembers(keys.dead_roots(run_id))}
    dead = len(pending & dead_roots)
    positions = [p for p in failed_positions(client, run_id) if p["count"] > 0]
    queued_roots: set[int] = set()
    for p in positions:
        for _, raw in client.hscan_iter(keys.queue(run_id, p["component"], p["task"])):
            queued_roots.update(msgpack.unpackb(raw, strict_map_key=False).get("roots") or [])
    failed = len((pending - dead_roots) & queued_roots)
    in_flight = len(pending) - dead - failed
    status = runs.status_of(rec)
    if settled or status != runs.RUNNING and status != runs.CRASHED:
        status = runs.COMPLETED if not pending else (runs.PENDING if positions or in_flight else runs.DEAD)
    return {
        "run_id": run_id, "workflow": json.loads(rec["workflow_json"]).get("name"),
        "status": status, "round": int(rec.get("round") or 0),
        "roots": roots, "complete": roots - len(pending), "pending": len(pending) - dead,
        "failed": failed, "in_flight": in_flight, "dead": dead,
        "dead_tuples": client.hlen(keys.dead(run_id)),
        "failed_positions": positions,
        "components": stats,
        "started": float(rec.get("started") or 0), "ended": float(rec["ended"]) if rec.get("ended") else None,
    }
