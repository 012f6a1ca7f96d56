"""The failed-tuple queue and the dead letters of a run: the one package that knows how they are
stored. Every other module reads and writes them through the functions below, with typed
`FailedTuple` values (model/failed.py); tests/test_structure.py fails when a module outside this
package names their keys.

A *position* is a task where tuples failed, `(component, task id)`. Stored in Redis under the
keys that tracking/queue/store.py names (tracking/keys.py says in which hash slot):

- the failed set (`failed_key`): the positions that may hold queued tuples;
- each position's queue (`queue_key`): tuple id -> the packed FailedTuple, and the writes a
  task attempt's commit stages into it ahead of its commit point (`staged_key`);
- the positions' earliest replay times (`due_key`), so a round reads no tuple to know whether
  one is due;
- the dead letters (`dead_letters_key`): "component:task:id" -> the packed FailedTuple that ran
  out of attempts, and the dead roots (`dead_roots_key`), the roots of those tuples, and the
  dead roots whose message was gone from its source (`gone_key`);
- each position's history (`history_key`): its tuples' failures, successful replays and
  requeues, kept after they leave the queue (tracking/queue/history.py), and the positions that
  have one (`history_positions_key`);
- the dead letters being written to the run's dead-letter sink (`flush_key`, one hash per
  flush; `flushes_key`, those not confirmed), and what the retention cap dropped (run-record
  counters).

The interface, by who calls it:

- reading (reports, status, metrics, the web view): `positions`, `counts`, `read`, `sample`,
  `earliest_due`, `queued_roots`, `dead_count`, `dead_letters`, `dead_among`, `gone_roots`,
  `storage_keys`, `fingerprint`; a root's history (`history.of_root`, for `trace`);
- a task's commit (tracking/tracker.py): `staged_writes` and `stage` (step 1), `record_failures`
  (at the commit point: a tuple into the failed set, or *moved to dead*), `apply_staged` (step 3);
- the queue source of a recovery round: `read`, then `reset_due`;
- recovery: `prune_empty`, `clear` (root replay drops every queue), `forget_dead_roots`;
- a sandbox (`recovery preview`): `holds_failures` (what it does not copy), `enqueue`;
- the dead letters (tracking/queue/dead.py): `requeue`, the retention cap `drop_dead`, `dead_totals`;
  for the dead-letter sink `take_for_flush`, `flush_of`, `pending_flushes`, `flush_done`.
"""
from recovery.tracking.queue.dead import dead_totals, drop_dead, requeue
from recovery.tracking.queue.store import (
    DEAD_DROPPED,
    DEAD_FLUSHES,
    DEAD_WRITTEN,
    OWNED_KEYS,
    READ_BATCH,
    Position,
    apply_staged,
    clear,
    counts,
    dead_among,
    dead_count,
    dead_key,
    dead_letters,
    dead_letters_key,
    dead_roots_key,
    due_key,
    earliest_due,
    enqueue,
    failed_key,
    fingerprint,
    flush_done,
    flush_key,
    flush_of,
    flushes_key,
    forget_dead_roots,
    gone_key,
    gone_roots,
    history_key,
    history_positions_key,
    holds_failures,
    parse_position,
    pending_flushes,
    position_name,
    positions,
    prune_empty,
    queue_key,
    queued_roots,
    read,
    record_failures,
    reset_due,
    sample,
    stage,
    staged_key,
    staged_writes,
    storage_keys,
    take_for_flush,
)

