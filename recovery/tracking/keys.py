"""Every Redis key the project writes, in one place, under one prefix.

Everything a run owns lives under `<prefix>run:<run_id>:` (plus its record
`<prefix>run:<run_id>` and its entry in `<prefix>runs`), so clearing a run is a SCAN of one
pattern and touches no other run. Topics and committed offsets outlive runs.

What goes into a key is checked here, once: a run id (model/run.py check_run_id), a topic
(model/workflow.py check_topic); component ids and stream ids are checked where a workflow is
read (the schema's id pattern, and the model's). None of them can hold ":" (two keys could
collide: topic "a:1" and partition 1 of topic "a"), "{" or "}" (a Redis Cluster hash tag:
the keys of one run are to share one slot through a tag of ours, not of the user's) or a
SCAN pattern's glob characters (`clear` of a run named "*" would match every run's keys).
"""
from __future__ import annotations

import os

from recovery.model.run import check_run_id
from recovery.model.workflow import check_topic

PREFIX = os.environ.get("RECOVERY_KEY_PREFIX", "recovery:")


def runs_index() -> str:
    """Sorted set: run id -> start time."""
    return f"{PREFIX}runs"


def run_record(run_id: str) -> str:
    """Hash: xml, status, counters, start/end times, driver pid, and the run's generation (a
    token set when the record is created: writers check it, so nothing writes into a run that
    was cleared or created anew under the same id)."""
    return runs_base() + check_run_id(run_id)


def runs_base() -> str:
    """What every run's record and keys start with (the run id follows)."""
    return f"{PREFIX}run:"


def runs_pattern() -> str:
    """SCAN pattern of every run's record and keys (`clear --all` finds orphans with it)."""
    return runs_base() + "*"


def run_prefix(run_id: str) -> str:
    return f"{runs_base()}{check_run_id(run_id)}:"


def run_key(run_id: str, *parts: object) -> str:
    return run_prefix(run_id) + ":".join(str(p) for p in parts)


def topic_meta(topic: str) -> str:
    return f"{PREFIX}topic:{check_topic(topic)}"


def topic_partition(topic: str, partition: int) -> str:
    return f"{PREFIX}topic:{check_topic(topic)}:{partition}"


def offsets(consumer: str, topic: str) -> str:
    """Hash: partition -> committed offset, for one consumer (workflow + spout)."""
    return f"{PREFIX}offsets:{consumer}:{check_topic(topic)}"


def consumer_owner(consumer: str, topic: str) -> str:
    """String: the run that last planned ranges for this consumer (one reader at a time)."""
    return offsets(consumer, topic) + ":run"


def consumer_claimer(consumer: str, topic: str) -> str:
    """String: "host pid" of the driver that took the owner key (its run record may not
    exist yet: a submit plans its ranges before it creates the record)."""
    return consumer_owner(consumer, topic) + ":driver"


def default_sink(component_id: str) -> str:
    """List: where a redis sink writes when its XML names no key. User output, not internal
    state: it stays outside PREFIX, as it always was."""
    return f"recovery:sink:{component_id}"


# Per run (all under run_prefix, so `clear` finds them with one SCAN pattern).
def lease(run_id: str) -> str:
    """String with an expiry: "host:pid:token" of the driver working on the run, refreshed while
    it runs; a `running` run whose lease expired is crashed."""
    return run_key(run_id, "lease")


def ledger(run_id: str, bucket: int) -> str:
    """Hash: producing task ("round:component:index" or "compacted") -> XOR contributions."""
    return run_key(run_id, "ledger", bucket)


def failed_set(run_id: str) -> str:
    """Set of failed positions "component:task"."""
    return run_key(run_id, "failed")


def queue(run_id: str, component: str, task: int) -> str:
    """Hash: tuple id -> the failed tuple (values, roots, error, attempt, ...)."""
    return run_key(run_id, "queue", component, task)


def queue_due(run_id: str) -> str:
    """Sorted set: failed position "component:task" -> the earliest `not_before` of its queued
    tuples (when the next of them may be replayed), kept with the queues: ZADD LT by the commit
    that queues a tuple, reset to the exact minimum by the queue source that reads the queue.
    A recovery round reads it instead of the tuples."""
    return run_key(run_id, "due")


def root_replay_set(run_id: str, round_no: int) -> str:
    """Set: the old ids of the roots a root-replay round re-emits (written by its supersede
    tasks, read by its spout tasks; dropped once the round is settled)."""
    return run_key(run_id, "rootreplay", round_no)


def replay_ranges(run_id: str) -> str:
    """List: every log-source plan a run read, for root replay (cleared with the run)."""
    return run_key(run_id, "logsource", "plans")


def dead(run_id: str) -> str:
    """Hash: "component:task:tuple id" -> a tuple that exhausted its attempts."""
    return run_key(run_id, "dead")


def dead_roots(run_id: str) -> str:
    return run_key(run_id, "deadroots")


def task_spill(run_id: str, round_no: int) -> str:
    """Hash: "component:index" -> the committed task's spill file reference (tracking/spill.py):
    its in-flight output, replayed from the file if the task runs again, never recomputed;
    dropped (with the file) once every task reading it committed."""
    return run_key(run_id, "spill", round_no)


def fired_sentinels(run_id: str) -> str:
    """Set: the test kit's sentinels (`component:position`) that fired in a run."""
    return run_key(run_id, "testing", "fired")


def task_done(run_id: str, round_no: int) -> str:
    """Hash: "component:index" -> the committed task's counters."""
    return run_key(run_id, "done", round_no)


def state(run_id: str, component: str) -> str:
    return run_key(run_id, "state", component)


def log(run_id: str) -> str:
    """List: the run's component logs and errors (capped)."""
    return run_key(run_id, "log")


def spout_messages(run_id: str, component: str) -> str:
    """Hash: "round:task index" -> [(root, message id)] a spout emitted whose fate its ack or
    fail has not been told yet (Storm spouts hear of every message id they emitted)."""
    return run_key(run_id, "spoutmsgs", component)


def timed_out(run_id: str, round_no: int, component: str, index: int | str) -> str:
    """Set: what the message-timeout watchdog ended by killing a task's worker (tuple ids, or
    "finish"), so that the task's retry fails it without running it again. Dropped at the
    task's commit."""
    return run_key(run_id, "timedout", round_no, component, index)
