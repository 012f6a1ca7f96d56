"""The shapes a run is reported in: one function builds each, and both the CLI's `--json` and
the web view's JSON API (`recovery ui`, /api/v1/...) return what it builds.

Read-only: dead letters and their requeue are in jobs/dead_letters.py, clearing a run in
jobs/clear.py.
"""
from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, model_serializer
from redis import Redis

from recovery.connectors.redis_stream import report as stream_reader
from recovery.errors import NoSuchComponent, RecoveryError
from recovery.jobs import summary
from recovery.model.failed import FailedTuple
from recovery.model.graph import Mode
from recovery.model.partition import PartitionRow
from recovery.model.record import ComponentStats, RunRecord
from recovery.model.render import chains_of
from recovery.model.synthesis import plan_marks, synthesize
from recovery.model.xml.write import to_xml
from recovery.runtime.modes import shown_modes
from recovery.tracking import queue as failed_queue
from recovery.tracking import runs

# How each failure's `error` text begins, by where it came from (runtime.py, multilang.py);
# "message gone": a dead root whose message its source no longer had when a replay re-read it.
ERROR_KINDS = ("exception", "fail", "not acked", "timeout", "shell process lost", "message gone")
# Tuples listed per failed position in `failed` (the count is always the queue's full size).
FAILED_TUPLES_SHOWN = 50


def as_text(v: Any) -> Any:
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


class Report(BaseModel):
    """A report whose JSON `--json` prints and /api/v1 returns (`to_json`)."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()


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


class RoundReport(BaseModel):
    """One round of a run as reported (/api/v1/runs/ID/rounds, `Run.rounds()`): 0 is the
    submit, later ones recovery (or a follow run's batches). `replayed` the queued tuples it
    replayed, `recovered` those that no longer failed, `failed` and `dead` its failures and the
    tuples that ran out of attempts."""
    round: int
    components: dict[str, ComponentStats] = {}
    replayed: int = 0
    recovered: int = 0
    failed: int = 0
    dead: int = 0
    ended: float | None = None
    duration: float | None = None


class RoundsReport(Report):
    """A run's rounds, oldest first (`rounds`)."""
    run_id: str
    rounds: list[RoundReport]


def rounds(client: Redis, run_id: str) -> RoundsReport:
    """Per round: its components' counters, what it replayed, recovered and lost, its duration.
    Round 0 is the submit; a recovery round's `replayed` counts the queued tuples its queue
    spouts emitted, `recovered` those of them acked, `dead` the tuples that ran out of attempts."""
    rec = runs.get(client, run_id)
    original = rec.original_workflow()
    out = []
    previous_end = rec.started or 0.0
    for r in sorted(rec.rounds, key=lambda r: r.round):
        ended = r.ended or 0.0
        # rounds recorded before rounds had a start: from the end of the round before
        started = r.started or previous_end or 0.0
        outcome = summary.round_outcome(r, original)
        out.append(RoundReport(round=r.round, components=r.components, replayed=outcome.replayed,
                               recovered=outcome.recovered, failed=outcome.failed, dead=outcome.dead,
                               ended=ended or None,
                               duration=round(ended - started, 3) if ended and started else None))
        previous_end = ended or previous_end
    return RoundsReport(run_id=run_id, rounds=out)


class ComponentRound(BaseModel):
    """A component's counters in one round. Its JSON: the round, then the counters reported."""
    round: int
    stats: ComponentStats | None = None    # None: the component did not run in that round

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, **(self.stats.to_json() if self.stats is not None else {})}


class ComponentReport(Report):
    """One component of a run: its kind and tasks, its counters per round, its failed positions."""
    run_id: str
    component: str
    kind: str
    parallelism: int
    rounds: list[ComponentRound]
    failed_positions: list[summary.FailedPosition]


def component(client: Redis, run_id: str, component_id: str) -> ComponentReport:
    """One component: its counters per round and its failed positions (/api/v1/runs/ID/components/C)."""
    rec = runs.get(client, run_id)
    wf = rec.original_workflow()
    if component_id not in {c.id for c in wf.components}:
        raise NoSuchComponent(f"run {run_id}: no component {component_id!r} in workflow {wf.name!r}")
    c = wf.component(component_id)
    return ComponentReport(
        run_id=run_id, component=component_id, kind=c.kind, parallelism=c.parallelism,
        rounds=[ComponentRound(round=r.round, stats=r.components.get(component_id))
                for r in rounds(client, run_id).rounds],
        failed_positions=[p for p in summary.failed_positions(client, run_id)
                          if p.component == component_id and p.count])


class ShownTuple(BaseModel):
    """A queued failed tuple or a dead letter as reported: its record, its error's kind and,
    for a dead letter, its key (what `dead --requeue --tuple` takes). Its JSON is the fields its
    record holds (a spout's raw bytes as text), then `kind` (and `key`)."""
    record: FailedTuple
    kind: str
    key: str | None = None

    @classmethod
    def of(cls, rec: FailedTuple, key: str | None = None) -> ShownTuple:
        return cls(record=rec, kind="message gone" if rec.gone else error_kind(rec.error), key=key)

    @property
    def shown_values(self) -> Any:
        """Its values, or for a record that did not decode, that record (as text)."""
        return as_text(self.record.values if self.record.values is not None else self.record.raw)

    @model_serializer
    def to_json(self) -> dict[str, Any]:
        row = {k: as_text(v) for k, v in self.record.model_dump(exclude_unset=True).items()}
        row["kind"] = self.kind
        if self.key is not None:
            row["key"] = self.key
        return row


class FailedPositionReport(summary.FailedPosition):
    """A failed position with its queued tuples (at most `FAILED_TUPLES_SHOWN`) and their kinds."""
    kind: str
    tuples: list[ShownTuple]


class FailedReport(Report):
    """A run's failed positions with their queued tuples (`failed`)."""
    run_id: str
    failed_positions: list[FailedPositionReport]


def failed(client: Redis, run_id: str, limit: int = FAILED_TUPLES_SHOWN) -> FailedReport:
    """Failed positions with their queued tuples' full errors and tracebacks (/api/v1/runs/ID/failed).
    Each position lists at most `limit` tuples; `count` is always the whole queue."""
    runs.get(client, run_id)
    positions = []
    for p in summary.failed_positions(client, run_id):
        if not p.count:
            continue
        tuples = [ShownTuple.of(t) for t in failed_queue.sample(client, run_id, p.component, p.task, limit)]
        tuples.sort(key=lambda t: t.record.id)
        kinds = sorted({t.kind for t in tuples})
        positions.append(FailedPositionReport(**p.model_dump(), kind=", ".join(kinds), tuples=tuples))
    return FailedReport(run_id=run_id, failed_positions=positions)


class RecoveryPlan(Report):
    """What the next recovery round would run (`recovery plan`): the failed tasks per
    component, the components that run again, the marks per component, its chains, the
    execution mode of each component that runs again (None: its class does not load here) and
    the synthesized workflow's XML (None when nothing failed)."""
    run_id: str
    workflow: str
    failed: dict[str, list[int]]
    marks: dict[str, str]
    rerun: list[str]
    chains: list[list[str]]
    modes: dict[str, Mode | None]
    xml: str | None


def plan(client: Redis, run_id: str) -> RecoveryPlan:
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
    rerun = [c.id for c in original.components if c.id not in dim]
    # how the round runs each of them (a sink fed by its queue, say, is a row sink there)
    modes = {c: m for c, m in shown_modes(recovery_wf).items() if c in rerun} if recovery_wf is not None else {}
    return RecoveryPlan(run_id=run_id, workflow=original.name, failed=failed_tasks, marks=marks,
                        rerun=rerun, chains=chains, modes=modes, xml=xml)


class PartitionsReport(Report):
    """A topic-reading run's partitions (`partitions`)."""
    run_id: str
    partitions: list[PartitionRow]


def partitions(client: Redis, run_id: str) -> PartitionsReport:
    """Per log spout and topic partition: committed offset, end, lag (/api/v1/runs/ID/partitions)."""
    wf = runs.get(client, run_id).original_workflow()
    return PartitionsReport(run_id=run_id, partitions=stream_reader.partition_report(client, wf))
