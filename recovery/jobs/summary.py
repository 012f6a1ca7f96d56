"""A run's summary: roots complete, pending, failed and dead, per-component counters in
topological order, and the failed positions (`RunSummary`, built by `summarize`)."""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel
from redis import Redis

from recovery.connectors import log_offsets
from recovery.connectors.redis_stream import report as stream_report
from recovery.model.graph import in_stage_order
from recovery.model.partition import PartitionRow
from recovery.model.record import ComponentStats, RoundRecord, RunRecord
from recovery.model.workflow import Workflow
from recovery.tracking import ledger, runs
from recovery.tracking import queue as failed_queue


class FailedPosition(BaseModel):
    """A task position holding queued failed tuples: how many, and the first one's error."""

    component: str
    task: int
    count: int
    sample_error: str | None = None


def components_of(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, ComponentStats]:
    """Per-component counters from their JSON (what a round's tasks report)."""
    return {c: ComponentStats.from_json(s) for c, s in stats.items()}


def sum_components(rounds: list[RoundRecord], wf: Workflow) -> dict[str, ComponentStats]:
    """Counters of several rounds added up, per component (seconds too: time spent)."""
    total: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for comp, st in r.components.items():
            agg = total.setdefault(comp, {})
            for k, v in st.to_json().items():
                if isinstance(v, (int, float)):
                    agg[k] = round(agg.get(k, 0) + v, 3)
    return in_stage_order({c: ComponentStats.from_json(agg) for c, agg in total.items()}, wf)


class RoundOutcome(NamedTuple):
    """What one round did (`round_outcome`)."""
    replayed: int
    recovered: int
    failed: int
    dead: int


def round_outcome(round_record: RoundRecord, original: Workflow) -> RoundOutcome:
    """What one recovery round did, from its record's counters: `replayed` the queued tuples its
    queue spouts emitted (a root replay: the roots it re-emitted), `recovered` those of them
    that no longer fail (replayed - failed), `failed` and `dead` the failures and the tuples that
    ran out of attempts. Round 0 (the submit) replays nothing."""
    comps = round_record.components
    ids = {c.id for c in original.components}   # queue spouts: what the original has not
    replayed = sum(c.emitted for cid, c in comps.items() if cid not in ids)
    replayed += sum(c.replayed_roots for c in comps.values())
    failed = sum(c.failed for c in comps.values())
    dead = sum(c.dead for c in comps.values())
    if not round_record.round:
        replayed = 0
    return RoundOutcome(replayed, max(0, replayed - failed) if replayed else 0, failed, dead)


def with_own_rounds(summary: RunSummary, rounds: list[RoundRecord], original: Workflow) -> RunSummary:
    """A recover's summary with what its own rounds did (their round records; a resumed one's
    included): their counters added up (the table under the summary, not round 0's), the
    tuples they recovered and those that died."""
    outcomes = [round_outcome(r, original) for r in rounds]
    summary.components = sum_components(rounds, original)
    summary.components_rounds = [r.round for r in rounds]
    summary.recovered = sum(o.recovered for o in outcomes)
    summary.newly_dead = sum(o.dead for o in outcomes)
    summary.spill_bytes = spill_bytes(summary.components)
    return summary


def spill_bytes(components: dict[str, ComponentStats]) -> int:
    """Bytes the tasks of these per-component counters wrote to the spill store."""
    return sum(c.spill_bytes for c in components.values())


def failed_positions(client: Redis, run_id: str) -> list[FailedPosition]:
    """Every failed position (an emptied queue too, until pruned), with its first tuple's error."""
    out = []
    for comp, task, count in failed_queue.counts(client, run_id):
        first = failed_queue.sample(client, run_id, comp, task, 1)
        sample = first[0].error if first else None
        out.append(FailedPosition(component=comp, task=task, count=count, sample_error=sample))
    return out


class RunSummary(BaseModel):
    """What submit, recover, follow and status report of a run. `to_json()` is the object
    `--json` prints, the web API returns and the run record stores.

    While a round is not settled the root counts are None and `counts_known` is false. The
    fields after `dead` are in the JSON only when set: `warnings` when there are some, the
    topics' `partitions` and a follow run's `batches` for a workflow reading topics,
    `resumed_round` when a crashed round was resumed first, the rest for `recover` (what its
    own rounds did)."""

    run_id: str
    workflow: str
    status: str
    round: int
    counts_known: bool = True
    unsettled_round: int | None = None
    dead_tuples: int = 0
    failed_positions: list[FailedPosition] = []
    components: dict[str, ComponentStats] = {}
    components_rounds: list[int] = []      # the rounds `components` adds up
    spill_bytes: int = 0
    started: float = 0.0
    ended: float | None = None
    roots: int | None = None
    complete: int | None = None
    pending: int | None = None
    failed: int | None = None
    in_flight: int | None = None
    dead: int | None = None
    # --- in the JSON only when set
    warnings: list[str] | None = None
    dead_written: int | None = None        # dead letters written to the dead-letter sink (out of Redis)
    dead_dropped: int | None = None        # dead letters dropped by recovery.dead.retention
    partitions: list[PartitionRow] | None = None
    batches: int | None = None
    resumed_round: int | None = None
    rounds: int | None = None              # recover: the rounds it ran (a resumed one included)
    resumed: bool | None = None
    recovered: int | None = None
    newly_dead: int | None = None
    duration: float | None = None
    strategy: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump()
        for name in _WHEN_SET:
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunSummary:
        """The summary `to_json` wrote (a run record's `summary`, a `--json` line)."""
        return cls.model_validate(obj)


_WHEN_SET = tuple(RunSummary.model_fields)[tuple(RunSummary.model_fields).index("warnings"):]


def summarize(client: Redis, rec: RunRecord, rounds: list[RoundRecord] | None = None,
              settled: bool = False) -> RunSummary:
    """Roots complete / pending / failed / dead and the failed positions, from the run record
    as read (`rec`: a report reads it once) and the run's queue (read here). `settled`: the
    caller just finished a round, so the status is the acker's verdict, not the record's.
    While a round is not settled (running, or its driver died in it) the root counts are in
    flux: they are None and `counts_known` is false, never a guess."""
    run_id = rec.run_id
    # the queue's positions and counters (one tuple per position), read together
    positions = [p for p in failed_positions(client, run_id) if p.count > 0]
    dead_tuples = failed_queue.dead_count(client, run_id)
    gone, gone_sample = failed_queue.gone_roots(client, run_id)
    status = runs.status_of(rec)
    original = rec.original_workflow()
    if rounds is None:
        rounds = rec.rounds
    first = next((r for r in rounds if r.round == 0), None)
    stats = in_stage_order(first.components if first else rec.stats, original)
    out = RunSummary(run_id=run_id, workflow=original.name, status=status, round=rec.round,
                     dead_tuples=dead_tuples, failed_positions=positions,
                     components=stats, components_rounds=[0] if stats else [], spill_bytes=spill_bytes(stats),
                     started=rec.started or 0.0, ended=rec.ended)
    out.dead_written, out.dead_dropped = rec.dead_written or None, rec.dead_dropped or None
    if rec.dead_dropped:
        out.warnings = [f"{rec.dead_dropped} dead letters were dropped from Redis by recovery.dead.retention "
                        "(oldest first); they are in no dead-letter sink"]
    round_no = out.round
    out.warnings = [*(out.warnings or []), *waiting_warnings(rec), *round_warnings(rec, out.status),
                    *gone_warnings(run_id, gone, gone_sample)] or None
    counted_round, counts = ledger.stored_counts(rec)
    if (not settled and not runs.round_settled(rec)) or counts is None or counted_round != round_no:
        # (no counts of this round stored: a run of an earlier version, never a guess either)
        out.counts_known, out.unsettled_round = False, round_no
        return out
    # every round's new roots (continuous runs read new messages in later rounds; replays
    # are counted apart by the tasks)
    roots = sum(c.roots for r in rounds for c in r.components.values())
    if not rounds:
        roots = sum(s.roots for s in stats.values())
    # the acker's counts of the settled round, stored by the tasks that folded the ledger
    in_flight = counts.pending - counts.dead - counts.failed
    if settled:
        out.status = (runs.COMPLETED if not counts.pending
                         else (runs.PENDING if positions or in_flight else runs.DEAD))
    out.roots, out.complete, out.pending = roots, roots - counts.pending, counts.pending - counts.dead
    out.failed, out.in_flight, out.dead = counts.failed, in_flight, counts.dead
    if in_flight > 0:
        # The round is settled: every task of it committed, so each pending root is queued or
        # dead. One that is neither has a tuple that no task will ever run (lost: a bug, or the
        # store changed by hand). Said, never taken for complete; not replayed either: where
        # its tree stopped is unknown, and a replay from the spout would write twice what it
        # had written already.
        out.warnings = [*(out.warnings or []),
            f"{in_flight} roots are in flight after round {round_no} settled, with no tuple "
            "queued for recovery and no task that will run them: their tuples were lost, and "
            "recovery cannot replay them without risking duplicates, so the run cannot complete "
            f"(see `recovery status {run_id} --json`; `recovery clear {run_id}` and a new submit "
            "start it over)"]
    return out


def waiting_warnings(rec: RunRecord) -> list[str]:
    """A follow run waiting for a topic's server that does not answer (jobs/follow.py)."""
    w = rec.source_waiting
    if not w or rec.follow_stopped:
        return []
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(w.get("since") or 0)))
    return [f"waiting: {w.get('place')} has not answered within {float(w.get('timeout') or 0):g} s "
            f"(since {since}); the run reads on when it does"]


def round_warnings(rec: RunRecord, status: str) -> list[str]:
    """What stops the current round, said: a live driver's round waiting without executors
    (engine/executor_watch.py), or why the round failed (status `error`)."""
    if status == runs.RUNNING and rec.executors_waiting:
        return [rec.executors_waiting]
    if status == runs.RUNNING and rec.master.startswith("sc://"):
        return [f"running on the Spark Connect server at {rec.master}: its executors are not watched from "
                "here (a round left without executors waits without a word; the server's own UI shows them)"]
    if status == runs.ERROR and rec.error:
        return [f"round {rec.round} failed: {rec.error} (`recovery recover {rec.run_id}` resumes it)"]
    return []


def gone_warnings(run_id: str, n: int, sample: str) -> list[str]:
    """One line when `n` roots are dead because their messages were gone from their source when
    a replay re-read them (`sample`: one's error; queue.gone_roots): nothing of them was
    written, and nothing can replay them."""
    if not n:
        return []
    what = ("1 root is dead because its message was gone from the source when root replay read it"
            if n == 1 else
            f"{n} roots are dead because their messages were gone from the source when root replay read them")
    return [f"{what} again (e.g. {sample}): nothing downstream of them was written; `recovery dead {run_id}` "
            "lists each message"]


# --- a workflow reading topics ---------------------------------------------------------------
class HasPartitions(Protocol):
    """A summary, or a follow run's outcome: what `report_lines` shows under it."""
    @property
    def warnings(self) -> list[str] | None: ...
    @property
    def partitions(self) -> list[PartitionRow] | None: ...


def with_topics(client: Redis, summary: RunSummary, rec: RunRecord, wf: Workflow | None = None) -> RunSummary:
    """A run's summary with its topics' partitions (committed, end, lag) and, for a follow run,
    roots counted over every batch (`summarize` counts round 0's); `rec`: the run record the
    summary was made of."""
    wf = wf or rec.original_workflow()
    if not log_offsets.log_spouts(wf):
        return summary
    summary.partitions = stream_report.partition_report(client, wf)
    if rec.follow:
        roots = rec.follow_messages
        summary.batches = rec.follow_batches
        if summary.counts_known:   # (a batch not settled: its counts stay unknown)
            summary.roots = roots
            summary.complete = max(0, roots - (summary.pending or 0) - (summary.dead or 0))
    trimmed: dict[str, int] = {}
    for r in rec.rounds:
        for comp, s in r.components.items():
            if s.trimmed:
                trimmed[comp] = trimmed.get(comp, 0) + s.trimmed
    summary.warnings = [*(summary.warnings or []), *stream_report.warnings_for(wf, client, trimmed)]
    return summary


def report_lines(summary: HasPartitions) -> list[str]:
    """The warnings, and a topic-reading run's partitions, as lines under the summary's tables."""
    lines = [f"warning: {w}" for w in summary.warnings or []]
    parts = summary.partitions
    if parts:
        lines.append("partitions:")
        lines += ["  " + line for line in stream_report.format_report(parts)]
    return lines
