"""Dead letters leaving Redis: written to the run's dead-letter sink after each settled round
(`flush`), and, in a follow run, dropped beyond `recovery.dead.retention` (`enforce_retention`).

Exactly once: a flush first moves the dead letters Redis holds into a numbered flush of their
own (one transaction: a fixed set, whatever dies meanwhile), then writes that flush as one
part of the sink (idempotent per part, connectors/dead_letter_sink.py), then drops it from
Redis and counts it written. A driver that dies anywhere in between leaves the flush in Redis
(`recovery dead` still lists it), and the next settle of the run writes it again, which the
sink's part commit turns into nothing when the first write got through."""
from __future__ import annotations

import logging
import time

from redis import Redis

from recovery.connectors import dead_letter_sink
from recovery.errors import RecoveryError
from recovery.model.workflow import Workflow
from recovery.tracking import queue as failed_queue

log = logging.getLogger(__name__)


def flush(client: Redis, wf: Workflow, run_id: str, generation: str | None) -> int:
    """The dead letters Redis holds, into the workflow's dead-letter sink (none: nothing
    happens, they stay in Redis). Flushes left by a driver that died are written first.
    Returns the dead letters written. A sink that cannot take them (a database down) leaves
    them in Redis, said in the log; the next settle tries again, and takes no new flush
    before."""
    if wf.dead_letters is None:
        return 0
    written = 0
    # a new flush only once those under way are written: while the sink refuses them, new dead
    # letters stay where the retention cap and requeue reach them
    for number in [*failed_queue.pending_flushes(client, run_id), None]:
        if number is None:
            number = failed_queue.take_for_flush(client, run_id, generation)
            if number is None:
                break
        records = failed_queue.flush_of(client, run_id, number)
        try:
            dead_letter_sink.write_part(client, wf, run_id, generation, number, records)
        except (RecoveryError, OSError) as err:
            log.warning("run %s: %d dead letters stay in Redis, not written to the dead-letter sink (%s): %s",
                        run_id, len(records), wf.dead_letters.type, err)
            return written
        if failed_queue.flush_done(client, run_id, generation, number):
            written += len(records)
    if written:
        log.info("run %s: %d dead letters written to the dead-letter sink (%s)", run_id, written,
                 wf.dead_letters.type)
    return written


def enforce_retention(client: Redis, wf: Workflow, run_id: str, generation: str | None,
                      now: float | None = None) -> int:
    """`recovery.dead.retention` (a count or an age), applied to the dead letters Redis holds
    and is not writing to the sink: the rest go, oldest first, counted in the run record
    (`status` says how many). Returns how many went now."""
    keep, age = wf.settings().dead_retention_limit()
    if keep is None and age is None:
        return 0
    older_than = (now if now is not None else time.time()) - age if age is not None else None
    dropped = failed_queue.drop_dead(client, run_id, generation, keep=keep, older_than=older_than)
    if dropped:
        log.info("run %s: %d dead letters dropped from Redis by recovery.dead.retention=%s", run_id,
                 len(dropped), wf.settings().dead_retention)
    return len(dropped)
