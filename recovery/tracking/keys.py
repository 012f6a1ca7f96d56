"""The layout of every Redis key the project writes: one prefix, one pattern per run, a hash slot
for each; and the keys of what has no other owner. A concept's own keys are named by the module
that owns it, built from this layout: the run record, its lease and the runs' index by
tracking/runs.py, the failed-tuple queue and the dead letters by tracking/queue/, the ledger's
buckets by tracking/ledger.py, keyed state by tracking/state.py.

Everything a run owns lives under `<prefix>run:{<run_id>` (its record `<prefix>run:{<run_id>}`,
the keys `<prefix>run:{<run_id>}:...` and `<prefix>run:{<run_id>:...}...`) plus its entry in
`<prefix>runs`, so clearing a run is a SCAN of one pattern (`run_pattern`: on every master of a
Redis Cluster) and touches no other run. Topics and committed offsets outlive runs.

Hash slots (Redis Cluster; a single server ignores the braces). Every transaction and every
Lua script touches the keys of one slot only, chosen by a hash tag (the part between the first
`{` and `}`):

- **The run's home slot**, tag `{<run_id>}`: the record, the lease, the done markers and the
  commit records of each round (`done:<round>`, `commits:<round>`) and its acker counts
  (`counts:<round>`), the spill references, the
  failed set and `due`, the dead letters and dead roots, keyed state, the spouts' waiting
  message ids, the log, the timeout marks, the root-replay sets. Control data: a few writes per
  task, so the generation check (the record) and the commit point (the done marker) are one
  transaction here.
- **The ledger's buckets**, tag `{<run_id>:ledger:<bucket>:<salt>}`: bucket b of a run is put in
  the middle of the b-th eighth of the slot range (counted from a point that depends on the
  run id), the salt being the first number that lands it there. With masters owning equal contiguous slot
  ranges (what `redis-cli --cluster create` does) the eight buckets of a run are spread evenly
  over the masters (3 masters: 3, 3 and 2 buckets), and runs start on different masters. The
  ledger is the bulk of a run's bytes and writes.
- **Each failed position's queue**, tag `{<run_id>:queue:<component>:<task>}`: the queue, and
  the commits' staged writes into it (written ahead of the commit point, moved into the queue
  after it), which only ever touch that queue.
- Topics: tag `{<topic>}` (the metadata, every partition, its batch times and the consumers of
  one topic: the producer's script updates them together). Committed offsets: tag
  `{<consumer>:<topic>}` (offsets, owner and claimer: the claim is one WATCHed transaction).
- `<prefix>runs`, the index, is a slot of its own.

What goes into a key is checked here, once: a run id (`check_run_id`, below), a topic
(model/workflow.py check_topic); component ids and stream ids are checked where a workflow is
read (the schema's id pattern, and the model's). None of them can hold ":" (two keys could
collide: topic "a:1" and partition 1 of topic "a"), "{" or "}" (a Redis Cluster hash tag:
the tags are ours, never the user's) or a SCAN pattern's glob characters (`clear` of a run
named "*" would match every run's keys).
"""
from __future__ import annotations

import binascii
import functools
import re

from recovery.environment import environment
from recovery.errors import BadRequest, RunError
from recovery.model.workflow import check_topic

# A run id names the run's Redis keys, its spill folder and its sinks' part files, so it is
# one safe path segment and one key segment: letters, digits, ".", "_", "-" (no "/", no ":"
# to split keys on, no "{" or "}" to make a Redis Cluster hash tag, no glob character for a
# SCAN pattern), not starting with "." (no "..", no hidden file), 1 to 128 characters.
RUN_ID_MAX = 128
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,%d}" % (RUN_ID_MAX - 1))


class RunIdError(RunError, BadRequest):
    """A run id outside the allowed alphabet (`check_run_id`)."""


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a valid run id, else RunIdError (exit 2) saying what a run id may be.
    Every key of a run is built from `run_home` or `spread_key`, so every command and job that
    takes a run id is refused here before anything is read or written; the CLI, the run API and the web view check it as
    it comes in."""
    if not isinstance(run_id, str) or not run_id:
        raise RunIdError("a run id cannot be empty")
    if not is_run_id(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:57] + "..."
        raise RunIdError(f"invalid run id {shown!r}: use 1 to {RUN_ID_MAX} letters, digits, '.', '_' "
                         "or '-', not starting with '.'")
    return run_id


def is_run_id(run_id: str) -> bool:
    """Whether `check_run_id` accepts `run_id`."""
    return isinstance(run_id, str) and RUN_ID_PATTERN.fullmatch(run_id) is not None


def prefix() -> str:
    """What the runs' index and keys, topics and offsets start with (RECOVERY_KEY_PREFIX)."""
    return environment().key_prefix


#: Redis Cluster's hash slots (CRC16 of the hash tag, modulo this).
SLOTS = 16384
#: The ledger's buckets per run (ledger.LEDGER_BUCKETS is this).
LEDGER_BUCKETS = 8


def hash_slot(key: str | bytes) -> int:
    """The Redis Cluster hash slot of `key` (its hash tag's when it has one), as a server
    computes it: the same slot means the keys may share a transaction or a script."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return binascii.crc_hqx(raw, 0) % SLOTS


def run_home(run_id: str) -> str:
    """`<prefix>run:{<run id>}`: the run's home slot. The run record's key (tracking/runs.py),
    and what the run's other keys in that slot start with (`run_prefix`)."""
    return runs_base() + "{" + check_run_id(run_id) + "}"


def runs_base() -> str:
    """What every run's record and keys start with (the run id follows)."""
    return f"{prefix()}run:"


def runs_pattern() -> str:
    """SCAN pattern of every run's record and keys (`clear --all` finds orphans with it)."""
    return runs_base() + "*"


def run_prefix(run_id: str) -> str:
    """What the run's keys in its home slot start with."""
    return run_home(run_id) + ":"


def run_pattern(run_id: str) -> str:
    """SCAN pattern of every key of the run: its record, its home slot's keys and its spread
    keys (`{<run id>:...}`), and no other run's."""
    return runs_base() + "{" + check_run_id(run_id) + "[}:]*"


def run_of_key(key: str) -> str | None:
    """The run id a key under runs_base() names (None for another key): `run:{R}...`,
    `run:{R:...}...`, or the layout before hash tags, `run:R:...`."""
    if not key.startswith(runs_base()):
        return None
    rest = key[len(runs_base()):]
    if rest.startswith("{"):
        rest = rest[1:]
        for stop in "}:":
            rest = rest.split(stop, 1)[0]
        return rest or None
    return rest.split(":", 1)[0] or None


def run_key(run_id: str, *parts: object) -> str:
    """A key of the run in its home slot."""
    return run_prefix(run_id) + ":".join(str(p) for p in parts)


def spread_key(run_id: str, tag: str, *parts: object) -> str:
    """A key of the run in the slot of tag `{<run id>:<tag>}` (parts after the tag)."""
    return runs_base() + "{" + check_run_id(run_id) + ":" + tag + "}" + "".join(f":{p}" for p in parts)


@functools.lru_cache(maxsize=256)
def ledger_tags(run_id: str) -> tuple[str, ...]:
    """The hash tag of each ledger bucket of a run (module doc: bucket b on the b-th eighth of
    the slot range, from a point that depends on the run id)."""
    check_run_id(run_id)
    width = SLOTS // LEDGER_BUCKETS
    origin = binascii.crc_hqx(run_id.encode(), 0) % SLOTS
    tags = []
    for b in range(LEDGER_BUCKETS):
        # the middle quarter of the bucket's eighth: eight points one eighth apart, so that any
        # third of the slot range holds 2 or 3 of them, never 4
        low = (origin + b * width + 3 * width // 8) % SLOTS
        salt = 0
        while (hash_slot(f"{run_id}:ledger:{b}:{salt}") - low) % SLOTS >= width // 4:
            salt += 1
        tags.append(f"ledger:{b}:{salt}")
    return tuple(tags)


def topic_meta(topic: str) -> str:
    """Hash: the topic's partition count, format and each partition's next offset."""
    return f"{prefix()}topic:{{{check_topic(topic)}}}"


def topic_partition(topic: str, partition: int) -> str:
    """Stream: one partition of a topic (in its metadata's slot: the producer's script writes both)."""
    return f"{prefix()}topic:{{{check_topic(topic)}}}:{partition}"


def topic_times(topic: str, partition: int) -> str:
    """Sorted set: when each produced batch of a partition was written (score: time, member: the
    batch's first offset); what an age retention trims by (entry ids are offsets, not times)."""
    return f"{topic_partition(topic, partition)}:times"


def topic_consumers(topic: str) -> str:
    """Set: the consumers that read the topic; trimming never passes what one has not committed."""
    return f"{prefix()}topic:{{{check_topic(topic)}}}:consumers"


def offsets(consumer: str, topic: str) -> str:
    """Hash: partition -> committed offset, for one consumer (workflow + spout)."""
    return f"{prefix()}offsets:{{{consumer}:{check_topic(topic)}}}"


def consumer_owner(consumer: str, topic: str) -> str:
    """String: the run that last planned ranges for this consumer (one reader at a time)."""
    return offsets(consumer, topic) + ":run"


def consumer_claimer(consumer: str, topic: str) -> str:
    """String: "host pid" of the driver that took the owner key (its run record may not
    exist yet: a submit plans its ranges before it creates the record)."""
    return consumer_owner(consumer, topic) + ":driver"


def default_sink(component_id: str) -> str:
    """List: where a redis sink writes when its XML names no key. User output, not internal
    state: it stays outside prefix(), as it always was."""
    return f"recovery:sink:{component_id}"


# Per run, of no one module (all matched by run_pattern, so `clear` finds them with one SCAN pattern).
def task_commits(run_id: str, round_no: int) -> str:
    """Hash: "component:index" -> the committed attempt's token and the queue positions its
    commit staged writes into (written with the done marker, the commit point)."""
    return run_key(run_id, "commits", round_no)


def root_replay_set(run_id: str, round_no: int) -> str:
    """Set: the old ids of the roots a root-replay round re-emits (written by its supersede
    tasks, read by its spout tasks; dropped once the round is settled)."""
    return run_key(run_id, "rootreplay", round_no)


def root_replay_attempts(run_id: str, round_no: int) -> str:
    """Hash: root id -> the attempt of its message a root-replay round is at. The round's
    supersede tasks write its failed roots' (the attempt they failed at), its spout tasks each
    re-emitted root's (one more), read by its tasks' failures; dropped once it is settled."""
    return run_key(run_id, "rootreplay", round_no, "attempts")


def replay_ranges(run_id: str) -> str:
    """List: every log-source plan a run read, for root replay (cleared with the run)."""
    return run_key(run_id, "logsource", "plans")


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


def round_counts(run_id: str, round_no: int) -> str:
    """String: the acker's counts of a round whose tasks all committed, counted by its last task
    to commit (tracker.commit_together) under the driver's generation, which the driver's settle
    takes instead of running the per-bucket job (engine.rounds.resolve_ledger); dropped once the
    round is settled."""
    return run_key(run_id, "counts", round_no)


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
