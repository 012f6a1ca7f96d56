"""The shapes a run is reported in: one function builds each, and both the CLI's `--json` and
the web view's JSON API (`recovery ui`, /api/v1/...) return what it builds.

Read-only: dead letters and their requeue are in jobs/dead_letters.py, clearing a run in
jobs/clear.py.
"""
from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel
from redis import Redis

from recovery.connectors.redis_stream import report as stream_reader
from recovery.errors import NoSuchComponent, RecoveryError
from recovery.jobs import summary
from recovery.model.failed import FailedTuple
from recovery.model.record import RunRecord
from recovery.model.render import chains_of
from recovery.model.synthesis import plan_marks, synthesize
from recovery.model.xml.write import to_xml
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs

# How each failure's `error` text begins, by where it came from (runtime.py, multilang.py);
# "message gone": a dead root whose message its source no longer had when a replay re-read it.
ERROR_KINDS = ("exception", "fail", "not acked", "timeout", "shell process lost", "message gone")
# Tuples listed per failed position in `failed` (the count is always the queue's full size).
FAILED_TUPLES_SHOWN = 50


def _text(v: Any) -> Any:
    """bytes (a spout's raw record) as text, so that every shape is JSON."""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def error_kind(error: str | None) -> str:
    """One of ERROR_KINDS for a failed tuple's error text."""
    e = error or ""
    if e.startswith("not acked by "):
        return "not acked"
    if "TupleTimeout" in e or " timed out after " in e:
        return "timeout"
    if e.startswith(("shell process `", "shell component ")) and "emitted" not in e.split(":", 1)[0]:
        return "shell process lost"
    if e.startswith("failed by "):
        return "fail"
    return "exception"


class RunRow(BaseModel):
    """One run as `recovery runs` lists it."""
    run_id: str
    workflow: str
    status: str
    round: int
    started: str                 # local time, as shown
    started_at: float
    ended_at: float | None
    duration: float | None
    counts_known: bool
    unsettled_round: int | None
    roots: int | None
    complete: int | None
    pending: int | None
    dead: int | None


def run_rows(client: Redis, status: str | None = None) -> list[RunRow]:
    """Every run this Redis knows, newest first. Each row's status and counts come from
    `run_summary`, so `runs` and `status` always agree."""
    rows = []
    for rid in reversed(runs.list_ids(client)):
        try:
            s = run_summary(client, rid)
        except RecoveryError:   # cleared while we listed
            continue
        row = RunRow(run_id=rid, workflow=s.workflow, status=s.status, round=s.round,
                     started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)),
                     started_at=s.started, ended_at=s.ended,
                     duration=round(s.ended - s.started, 3) if s.ended else None,
                     counts_known=s.counts_known, unsettled_round=s.unsettled_round,
                     roots=s.roots, complete=s.complete, pending=s.pending, dead=s.dead)
        if status is None or row.status == status:
            rows.append(row)
    return rows


def runs_list(client: Redis, status: str | None = None) -> dict[str, Any]:
    """`run_rows` as JSON (`recovery runs --json`, /api/v1/runs)."""
    return {"runs": [r.model_dump() for r in run_rows(client, status)]}


def run_summary(client: Redis, run_id: str, rec: RunRecord | None = None) -> summary.RunSummary:
    """A run's summary with its topics' partitions (`recovery status`): the run record read once
    (`rec`: when the caller read it already)."""
    rec = rec if rec is not None else runs.get(client, run_id)
    return summary.with_topics(client, summary.summarize(client, rec), rec)


def run_status(client: Redis, run_id: str) -> dict[str, Any]:
    """`run_summary` as JSON (`recovery status --json`, /api/v1/runs/ID)."""
    return run_summary(client, run_id).to_json()


def rounds(client: Redis, run_id: str) -> dict[str, Any]:
    """Per round: its components' counters, what it replayed, recovered and lost, its duration.
    Round 0 is the submit; a recovery round's `replayed` counts the queued tuples its queue
    spouts emitted, `recovered` those of them acked, `dead` the tuples that ran out of attempts."""
    rec = runs.get(client, run_id)
    original = rec.original_workflow()
    out = []
    previous_end = rec.started or 0.0
    for r in sorted(rec.rounds, key=lambda r: r.get("round", 0)):
        ended = float(r.get("ended") or 0)
        # rounds recorded before rounds had a start: from the end of the round before
        started = float(r.get("started") or previous_end or 0)
        out.append({"round": r.get("round", 0), "components": r.get("components") or {},
                    **summary.round_outcome(r, original),
                    "ended": ended or None,
                    "duration": round(ended - started, 3) if ended and started else None})
        previous_end = ended or previous_end
    return {"run_id": run_id, "rounds": out}


def component(client: Redis, run_id: str, component_id: str) -> dict[str, Any]:
    """One component: its counters per round and its failed positions (/api/v1/runs/ID/components/C)."""
    rec = runs.get(client, run_id)
    wf = rec.original_workflow()
    if component_id not in {c.id for c in wf.components}:
        raise NoSuchComponent(f"run {run_id}: no component {component_id!r} in workflow {wf.name!r}")
    c = wf.component(component_id)
    per_round = [{"round": r["round"], **(r["components"].get(component_id) or {})}
                 for r in rounds(client, run_id)["rounds"]]
    return {"run_id": run_id, "component": component_id, "kind": c.kind,
            "parallelism": c.parallelism, "rounds": per_round,
            "failed_positions": [p.model_dump() for p in summary.failed_positions(client, run_id)
                                 if p.component == component_id and p.count]}


def tuple_row(rec: FailedTuple) -> dict[str, Any]:
    """A failed tuple as shown: the fields its record holds, and its error's kind."""
    row = {k: _text(v) for k, v in rec.model_dump(exclude_unset=True).items()}
    row["kind"] = "message gone" if rec.gone else error_kind(rec.error)
    return row


def failed(client: Redis, run_id: str, limit: int = FAILED_TUPLES_SHOWN) -> dict[str, Any]:
    """Failed positions with their queued tuples' full errors and tracebacks (/api/v1/runs/ID/failed).
    Each position lists at most `limit` tuples; `count` is always the whole queue."""
    runs.get(client, run_id)
    positions = []
    for p in summary.failed_positions(client, run_id):
        if not p.count:
            continue
        tuples = [tuple_row(t) for t in failed_queue.sample(client, run_id, p.component, p.task, limit)]
        tuples.sort(key=lambda t: t.get("id", 0))
        kinds = sorted({t["kind"] for t in tuples})
        positions.append({**p.model_dump(), "kind": ", ".join(kinds), "tuples": tuples})
    return {"run_id": run_id, "failed_positions": positions}


def plan(client: Redis, run_id: str) -> dict[str, Any]:
    """The recovery workflow the next round would run (`recovery plan`, /api/v1/runs/ID/plan):
    the failed tasks per component, the components that run again, what each failed one is
    marked with, and the synthesized workflow as XML (None when nothing failed)."""
    rec = runs.get(client, run_id)
    original = rec.original_workflow()
    counts = {(p.component, p.task): p.count for p in summary.failed_positions(client, run_id) if p.count}
    marks, dim = plan_marks(original, counts)
    failed_tasks: dict[str, list[int]] = {}
    for comp, task in sorted(counts):
        failed_tasks.setdefault(comp, []).append(task)
    recovery_wf = synthesize(original, failed_tasks) if failed_tasks else None
    xml = to_xml(recovery_wf) if recovery_wf is not None else None
    # the recovery round's chains (one Spark stage each), as `recovery graph` shows a run's
    chains = [list(c) for c in chains_of(recovery_wf)] if recovery_wf is not None else []
    return {"run_id": run_id, "workflow": original.name, "failed": failed_tasks,
            "marks": marks, "rerun": [c.id for c in original.components if c.id not in dim],
            "chains": chains, "xml": xml}


def partitions(client: Redis, run_id: str) -> dict[str, Any]:
    """Per log spout and topic partition: committed offset, end, lag (/api/v1/runs/ID/partitions)."""
    wf = runs.get(client, run_id).original_workflow()
    return {"run_id": run_id, "partitions": stream_reader.partition_report(client, wf)}
