"""Dead letters: the tuples that failed `recovery.max.attempts` times, listed with their errors
(`recovery dead`, /api/v1/runs/ID/dead) and put back in their queues once the cause is fixed
(`recovery dead --requeue`, POST .../dead/requeue)."""
from __future__ import annotations

from typing import Any

from redis import Redis

from recovery.jobs.reports import Report, ShownTuple
from recovery.model.failed import FailedTuple
from recovery.tracking import ledger, runs
from recovery.tracking import queue as failed_queue


def dead_letters(client: Redis, run_id: str, component: str | None = None) -> list[FailedTuple]:
    """The run's dead tuples Redis holds (of `component`), in the order of their keys."""
    runs.get(client, run_id)
    return failed_queue.dead_letters(client, run_id, component)


def requeue_dead(client: Redis, run_id: str, component: str | None = None,
                 tuple_keys: list[str] | None = None) -> int:
    """Put dead tuples back in their queues (attempts reset) after the cause was fixed: all of
    them, a component's, or those named by `tuple_keys` (`component:task:id`, the dead-letter
    keys), each in one transaction that moves it only if it is still dead and the run was not
    cleared (tracking.queue.requeue). The run's stored root counts follow, without a recount."""
    rec = runs.get(client, run_id)
    runs.check_not_running(rec)
    gen = rec.generation
    record = runs.record_key(run_id)
    counted = ledger.stored_counts(rec)[1] is not None

    def adjust_counts(pipe: Any, undead: int) -> None:
        if counted:   # the stored counts stay exact without a recount
            pipe.hincrby(record, ledger.COUNT_FIELDS["dead"], -undead)
            pipe.hincrby(record, ledger.COUNT_FIELDS["failed"], undead)
    n = failed_queue.requeue(client, run_id, gen, component, tuple_keys, adjust_counts)
    if n:
        runs.update(client, run_id, gen, status=runs.PENDING)
    return n


dead_key = failed_queue.dead_key


class DeadReport(Report):
    """A run's dead letters with their errors and keys (`dead`)."""
    run_id: str
    dead: list[ShownTuple]


def dead(client: Redis, run_id: str, component: str | None = None) -> DeadReport:
    """Dead letters with their errors (`recovery dead --json`, /api/v1/runs/ID/dead)."""
    return DeadReport(run_id=run_id, dead=[ShownTuple.of(r, dead_key(r))
                                           for r in dead_letters(client, run_id, component)])


def requeue(client: Redis, run_id: str, component: str | None = None,
            tuple_keys: list[str] | None = None) -> dict[str, Any]:
    """Dead tuples back in their queues (`recovery dead --requeue --json`, POST .../dead/requeue)."""
    return {"run_id": run_id, "requeued": requeue_dead(client, run_id, component, tuple_keys)}
