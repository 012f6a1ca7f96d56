"""A run's summary: roots complete, pending, failed and dead, per-component counters in
topological order, and the failed positions."""
from __future__ import annotations

from typing import Any, cast

from redis import Redis

from recovery.model.failed import FailedTuple
from recovery.model.graph import topological_order
from recovery.model.record import RunRecord
from recovery.model.workflow import Workflow
from recovery.tracking import keys, ledger, runs


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


def spill_bytes(components: dict[str, Any]) -> int:
    """Bytes the tasks of these per-component counters wrote to the spill store."""
    return int(sum(c.get("spill_bytes", 0) for c in components.values()))


def failed_positions(client: Redis, run_id: str) -> list[dict[str, Any]]:
    out = []
    for pos in sorted(cast(bytes, p).decode() for p in client.smembers(keys.failed_set(run_id))):
        comp, task = pos.rsplit(":", 1)
        qkey = keys.queue(run_id, comp, int(task))
        count = client.hlen(qkey)
        sample = None
        for _, raw in client.hscan_iter(qkey, count=1):
            sample = FailedTuple.unpack(raw).error
            break
        out.append({"component": comp, "task": int(task), "count": count, "sample_error": sample})
    return out


def summarize(client: Redis, run_id: str, rounds: list | None = None, settled: bool = False
              ) -> dict[str, Any]:
    """Roots complete / pending / failed / dead and the failed positions. `settled`: the
    caller just finished a round, so the status is the acker's verdict, not the record's.
    While a round is not settled (running, or its driver died in it) the root counts are in
    flux: they are None and `counts_known` is false, never a guess."""
    rec = runs.get(client, run_id)
    original = original_workflow(rec)
    if rounds is None:
        rounds = rec.rounds
    first = next((r for r in rounds if r.get("round") == 0), None)
    stats = in_topological_order(first["components"] if first else rec.stats, original)
    positions = [p for p in failed_positions(client, run_id) if p["count"] > 0]
    out: dict[str, Any] = {
        "run_id": run_id, "workflow": original.name,
        "status": runs.status_of(rec), "round": rec.round,
        "counts_known": True, "unsettled_round": None,
        "dead_tuples": client.hlen(keys.dead(run_id)),
        "failed_positions": positions,
        "components": stats, "components_rounds": [0] if stats else [],
        "spill_bytes": spill_bytes(stats),
        "started": rec.started or 0.0, "ended": rec.ended,
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
    pending = ledger.pending_roots(client, run_id)
    dead_roots = {int(r) for r in client.smembers(keys.dead_roots(run_id))}
    dead = len(pending & dead_roots)
    queued_roots = {r for q in queued_positions(client, run_id, positions) for r in q.roots}
    failed = len((pending - dead_roots) & queued_roots)
    in_flight = len(pending) - dead - failed
    if settled:
        out["status"] = (runs.COMPLETED if not pending
                         else (runs.PENDING if positions or in_flight else runs.DEAD))
    out.update({"roots": roots, "complete": roots - len(pending), "pending": len(pending) - dead,
                "failed": failed, "in_flight": in_flight, "dead": dead})
    return out


# --- the run's original workflow and its queued positions (what recovery replays) -----------
def original_workflow(rec: RunRecord) -> Workflow:
    return Workflow.model_validate_json(rec.workflow_json)


def queued_positions(client: Redis, run_id: str, positions: list[dict[str, Any]] | None = None
            ) -> list[FailedTuple]:
    """Every queued failed tuple (small: failures only), of `positions` if already read."""
    out = []
    for p in failed_positions(client, run_id) if positions is None else positions:
        for _, raw in client.hscan_iter(keys.queue(run_id, p["component"], p["task"])):
            out.append(FailedTuple.unpack(raw))
    return out
