"""Run records: what was submitted, where it is, what it counted; who is driving it.

A record is created once, atomically (a second `submit --run-id X` is refused). It carries a
*generation*, a token chosen at creation: every writer of a run's keys (task commits, the
driver's updates, its lease) checks it in the same atomic step as its writes, so a run that was
cleared, or cleared and created anew under the same id, is never written into by a process
still working on the old one. The driver holding a run keeps a *lease* (a key with an expiry,
refreshed by a daemon thread): a `running` run whose lease expired, or whose driver's pid is
gone on this host, is crashed.

Taking a run over (`recover` of a crashed run, `recover --force` of a live one) draws a new
generation in the same atomic step as it takes the lease, and keeps the old one in the record's
`retired_generations`: from that step on, every write of the previous driver and of its Spark
tasks still running is refused (and said to be a take-over, not a clear), so two drivers never
write into one run, however their steps interleave.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import WatchError

from recovery.controlplane.connection import is_cluster
from recovery.environment import environment
from recovery.errors import RunBusy, RunCleared, RunExists, RunFenced, RunNotFound, RunTakenOver
from recovery.model.record import RunRecord, encode
from recovery.tracking import keys

log = logging.getLogger(__name__)

RUNNING = "running"
COMPLETED = "completed"      # every root complete
PENDING = "pending"          # failures queued for recovery
DEAD = "dead"                # nothing left to recover, but some roots are dead
CRASHED = "crashed"          # the driver died mid-round (its lease expired or its pid is gone)
ERROR = "error"              # Spark gave up on a round; `recover` resumes it

# KEYS: record, lease, runs index. ARGV: generation, lease holder, lease ms, now, run id,
# then the record's field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'generation', ARGV[1], unpack(ARGV, 6))
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
return 1
"""

# The same without the index (a Redis Cluster: the index is in another slot). KEYS: record, lease.
_CREATE_IN_SLOT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'generation', ARGV[1], unpack(ARGV, 6))
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

# The record exists and (when ARGV[1] is not empty) still holds generation ARGV[1].
_FENCE = """
local gen = redis.call('HGET', KEYS[1], 'generation')
if redis.call('EXISTS', KEYS[1]) == 0 or (ARGV[1] ~= '' and gen ~= ARGV[1]) then return -1 end
"""

# KEYS: record. ARGV: generation or '', then field/value pairs.
_UPDATE = _FENCE + """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""

_INCREMENT = _FENCE + """
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""

# KEYS: record, lease. ARGV: the new generation, holder, ms, the holder seen as dead or '', force.
# The lease (free, held by the holder seen as dead, or by anyone with force) and a new
# generation, the old one retired. Returns -1 (no record: cleared), 1 taken, or the live holder
# that refused it.
_TAKE_OVER = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= ARGV[2] and cur ~= ARGV[4] and ARGV[5] ~= '1' then return cur end
local old = redis.call('HGET', KEYS[1], 'generation')
if old then
  local retired = redis.call('HGET', KEYS[1], 'retired_generations') or ''
  redis.call('HSET', KEYS[1], 'retired_generations', retired .. old .. ' ')
end
redis.call('HSET', KEYS[1], 'generation', ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: record, lease. ARGV: generation or '', holder, ms. -1 fenced, 0 taken over, 1 refreshed.
_REFRESH = _FENCE + """
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def index_key() -> str:
    """Sorted set: run id -> start time, the runs this Redis knows (a slot of its own)."""
    return f"{keys.prefix()}runs"


def record_key(run_id: str) -> str:
    """Hash: xml, status, counters, start/end times, driver pid, and the run's generation (a
    token set when the record is created: writers check it, so nothing writes into a run that
    was cleared or created anew under the same id). In the run's home slot: the slot's tag."""
    return keys.run_home(run_id)


def lease_key(run_id: str) -> str:
    """String with an expiry: "host:pid:token" of the driver working on the run, refreshed while
    it runs; a `running` run whose lease expired is crashed. In the run's home slot."""
    return keys.run_key(run_id, "lease")


def new_run_id(name: str) -> str:
    """<workflow name>-<date>-<time>-<4 hex digits>, the name cut to keep it a valid run id."""
    return f"{name[:keys.RUN_ID_MAX - 21]}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _dec(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _cleared(run_id: str) -> RunCleared:
    return RunCleared(f"run {run_id} was cleared (or created anew) while this process worked on "
                      "it; it stopped without writing into it")


def fenced_out(client: redis.Redis, run_id: str, generation: str | None) -> RunFenced:
    """Why a write of `generation` into the run was refused, as the error to raise: the run was
    taken over by another driver (`generation` is one the record retired), or it was cleared
    (or created anew)."""
    record, lease = record_key(run_id), lease_key(run_id)
    with client.pipeline(transaction=False) as pipe:
        pipe.hmget(record, ["generation", "retired_generations"])
        pipe.get(lease)
        (current, retired), holder = pipe.execute()
    if generation and current is not None and generation in (_dec(retired) or "").split():
        who = "another driver"
        if holder is not None:
            host, pid = _parse_holder(_dec(holder))
            who += f" (pid {pid} on {host})"
        return RunTakenOver(f"run {run_id} was taken over by {who} while this driver worked on it; "
                            "this driver stopped without writing into it")
    return _cleared(run_id)


def create(client: redis.Redis, run_id: str, xml: str, wf_json: str, file: str | None, master: str,
           tracking: bool) -> Lease:
    """Create the run's record, its lease (held by this process) and its index entry in one
    atomic step; a run id that exists already is refused. Returns the lease (not yet refreshed:
    use it as a context manager around the work)."""
    now = time.time()
    lease = Lease(client, run_id, secrets.token_hex(8))
    fields: dict[str, Any] = {
        "run_id": run_id, "xml": xml, "workflow_json": wf_json, "file": file,
        "master": master, "status": RUNNING, "started": now, "ended": None, "round": 0,
        "driver_pid": os.getpid(), "driver_host": socket.gethostname(),
        "tracking": tracking, "stats": {}, "rounds": [],
    }
    args: list[Any] = [lease.generation, lease.holder, lease.ttl_ms, now, run_id]
    for k, v in fields.items():
        args += [k, encode(v)]
    if is_cluster(client):
        # the index is a slot of its own (keys.py): its entry first (NX: an existing run's
        # stays as it was), then the record and the lease in one script of the run's slot. A
        # process killed in between leaves an entry without a record, which `runs` skips and
        # `clear` removes; never a run missing from the index.
        client.zadd(index_key(), {run_id: now}, nx=True)
        created = client.register_script(_CREATE_IN_SLOT)(
            keys=[record_key(run_id), lease_key(run_id)], args=args)
    else:
        created = client.register_script(_CREATE)(
            keys=[record_key(run_id), lease_key(run_id), index_key()], args=args)
    if not created:
        raise _exists(run_id)
    return lease


def create_unlisted(client: redis.Redis, run_id: str, fields: dict[str, Any]) -> Lease:
    """Create a record with `fields` and its lease (held by this process), outside the runs'
    index: a scratch run (tracking/scratch.py) that `runs` and the web view never list. A run
    id that exists already is refused."""
    now = time.time()
    lease = Lease(client, run_id, secrets.token_hex(8))
    fields = {"run_id": run_id, "status": RUNNING, "started": now, "driver_pid": os.getpid(),
              "driver_host": socket.gethostname(), **fields}
    args: list[Any] = [lease.generation, lease.holder, lease.ttl_ms, now, run_id]
    for k, v in fields.items():
        args += [k, encode(v)]
    if not client.register_script(_CREATE_IN_SLOT)(keys=[record_key(run_id), lease_key(run_id)], args=args):
        raise _exists(run_id)
    return lease


def not_found(run_id: str) -> RunNotFound:
    """The refusal of a run id this Redis has no run of."""
    return RunNotFound(f"no run {run_id!r} in this Redis (see `recovery runs`)")


def _exists(run_id: str) -> RunExists:
    return RunExists(f"run {run_id!r} exists already (see `recovery status {run_id}`; choose another --run-id)")


def check_absent(client: redis.Redis, run_id: str) -> None:
    """Refuse (RunExists) a run id this Redis has a run of: before anything starts for a new run
    (`create` refuses it again, atomically, when two submits race)."""
    if client.exists(record_key(run_id)):
        raise _exists(run_id)


def get(client: redis.Redis, run_id: str) -> RunRecord:
    """The record, with its lease as read now (`lease_holder`, `lease_ms`: -2 when none).
    Raises RunNotFound for a run this Redis does not know, or a record that does not parse."""
    record, lease = record_key(run_id), lease_key(run_id)
    with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(record)
        pipe.get(lease)
        pipe.pttl(lease)
        raw, holder, ttl = pipe.execute()
    if not raw:
        raise not_found(run_id)
    return RunRecord.from_hash(raw, record, lease_holder=_dec(holder),
                               lease_ms=int(ttl) if holder is not None else -2)


def update(client: redis.Redis, run_id: str, generation: str | None = None, **fields: Any) -> None:
    """Set fields of an existing record (never recreates a cleared one); with `generation`,
    only while the record still holds it. Raises RunCleared or RunTakenOver otherwise."""
    args: list[Any] = [generation or ""]
    for k, v in fields.items():
        args += [k, encode(v)]
    if client.register_script(_UPDATE)(keys=[record_key(run_id)], args=args) != 1:
        raise fenced_out(client, run_id, generation)


def claim(client: redis.Redis, run_id: str, generation: str | None, **fields: Any) -> None:
    """This process is now the run's driver (it holds the run's lease; pid and host for
    people), with `fields` set in the same update."""
    update(client, run_id, generation, driver_pid=os.getpid(), driver_host=socket.gethostname(), **fields)


def increment(client: redis.Redis, run_id: str, generation: str | None = None, **amounts: int) -> None:
    """HINCRBY fields of an existing record, fenced as `update` is."""
    args: list[Any] = [generation or ""]
    for k, v in amounts.items():
        args += [k, int(v)]
    if client.register_script(_INCREMENT)(keys=[record_key(run_id)], args=args) != 1:
        raise fenced_out(client, run_id, generation)


def list_ids(client: redis.Redis) -> list[str]:
    return [_dec(r) for r in client.zrange(index_key(), 0, -1)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def local_pid_alive(pid: int | None) -> bool:
    """Is the driver process `pid` on this host alive? No pid: nothing to check, not alive
    (os.kill would take 0 or a negative pid for a process group: this one's, or another's)."""
    return pid is not None and pid > 0 and _pid_alive(pid)


def _parse_holder(holder: str) -> tuple[str, int]:
    """"host:pid:token" -> (host, pid)."""
    parts = holder.rsplit(":", 2)
    try:
        return parts[0], int(parts[1])
    except (IndexError, ValueError):
        return holder, 0


def driver_alive(rec: RunRecord) -> bool:
    """Is the driver of a `running` run (a record read by `get`) alive? Its lease says so until
    it expires; on this host a driver whose pid is gone is dead at once (the fast path)."""
    if not rec.generation:
        # a record written before runs had leases: only a driver on this host can be checked
        if rec.driver_host != socket.gethostname():
            return True
        return local_pid_alive(rec.driver_pid)
    if not rec.lease_holder or rec.lease_ms == -2:
        return False
    host, pid = _parse_holder(rec.lease_holder)
    if host == socket.gethostname():
        return local_pid_alive(pid)
    return True


def status_of(rec: RunRecord) -> str:
    """The one status every command shows: the record's, `crashed` for a dead driver's run."""
    if rec.status == RUNNING and not driver_alive(rec):
        return CRASHED
    return rec.status


def check_not_running(rec: RunRecord) -> None:
    """Refuse to act on a run whose driver is alive (recover, requeue; the web view too)."""
    if status_of(rec) == RUNNING:
        raise RunBusy(f"run {rec.run_id} is still running ({describe_driver(rec)}); wait for "
                      f"it, or take it over with `recovery recover {rec.run_id} --force`")


def describe_driver(rec: RunRecord) -> str:
    if rec.lease_holder and rec.generation:
        host, pid = _parse_holder(rec.lease_holder)
        return f"driver pid {pid} on {host}, lease valid {max(rec.lease_ms, 0) / 1000:.0f}s more"
    return f"driver pid {rec.driver_pid} on {rec.driver_host}"


class Lease:
    """This process drives the run: a key with an expiry that a daemon thread refreshes while
    the process works (`with lease:`). Released at the end; if the process dies it expires."""

    def __init__(self, client: redis.Redis, run_id: str, generation: str | None,
                 ttl: float | None = None):
        self.client = client
        self.run_id = run_id
        self.generation = generation
        self.ttl_ms = max(1, int((ttl if ttl is not None else environment().lease_seconds) * 1000))
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _keys(self) -> list[str]:
        return [record_key(self.run_id), lease_key(self.run_id)]

    def take_over(self, seen_holder: str | None = None, force: bool = False) -> None:
        """Take the lease: free, held by `seen_holder` (a driver found dead), or with `force`
        from a live one; with it the run gets this lease's generation, the old one retired, in
        one atomic step. So of two `recover`s of a crashed run only one goes on, and from that
        step on nothing of the previous driver writes into the run."""
        got = self.client.register_script(_TAKE_OVER)(
            keys=self._keys(), args=[self.generation or "", self.holder, self.ttl_ms,
                                     seen_holder or "", "1" if force else "0"])
        if got == -1:
            raise _cleared(self.run_id)
        if got != 1:
            host, pid = _parse_holder(_dec(got))
            raise RunBusy(f"run {self.run_id} is held by another driver (pid {pid} on {host}); "
                           f"see `recovery status {self.run_id}`")

    def refresh(self) -> bool:
        """Extend the lease; False once it was taken over or the run cleared (stops refreshing)."""
        got = self.client.register_script(_REFRESH)(
            keys=self._keys(), args=[self.generation or "", self.holder, self.ttl_ms])
        if got != 1:
            taken = got == 0 or isinstance(fenced_out(self.client, self.run_id, self.generation), RunTakenOver)
            log.warning("run %s: %s; this driver no longer holds its lease", self.run_id,
                        "taken over by another driver" if taken else "cleared")
            self.lost.set()
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not self.refresh():
                    return
            except redis.RedisError as err:   # Redis away for a while: the lease may expire; keep trying
                log.debug("run %s: could not refresh the driver's lease: %s", self.run_id, err)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            self.client.register_script(_RELEASE)(keys=[lease_key(self.run_id)], args=[self.holder])
        except redis.RedisError as err:   # Redis gone: the lease expires on its own
            log.debug("run %s: could not release the driver's lease: %s", self.run_id, err)

    def __enter__(self) -> Lease:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def take_over(client: redis.Redis, rec: RunRecord, force: bool = False) -> Lease:
    """The lease of a run this process is about to drive (a crashed or errored run; a live one
    only with `force`), under a new generation (Lease.take_over): whatever the previous driver
    or its tasks still do, they write nothing more. `rec` is what the caller read before (its
    generation is set to the new one); read the record again after this: the previous driver
    may have moved on meanwhile."""
    run_id = rec.run_id
    lease = Lease(client, run_id, secrets.token_hex(8))
    # a holder found dead may be replaced (atomically: if two try, one wins); a live one only by force
    lease.take_over(seen_holder=None if driver_alive(rec) else rec.lease_holder, force=force)
    rec.generation = lease.generation   # (the rest of `rec` is as read before)
    log.info("run %s taken over by this driver (was %s%s)", run_id, status_of(rec), ", forced" if force else "")
    return lease


def check_generation(client: redis.Redis, run_id: str, generation: str | None) -> None:
    """Raise RunCleared (or RunTakenOver) when the run was cleared, created anew or taken over
    since `generation` was read."""
    if generation is not None and _dec(client.hget(record_key(run_id), "generation")) != generation:
        raise fenced_out(client, run_id, generation)


def round_settled(rec: RunRecord) -> bool:
    """Has the record's current round been settled (acker verdict taken)? Until then its root
    counts are in flux (a driver running it, or one that died in it)."""
    return rec.settled_round == rec.round


def fenced_transaction(client: redis.Redis, run_id: str, generation: str | None,
                       build: Callable[[Any], None], watch: tuple[str, ...] = (),
                       read: Callable[[Any], None] | None = None) -> bool:
    """Queue `build(pipe)`'s writes in one MULTI/EXEC that runs only while the run's record still
    holds `generation` (the record is WATCHed with `watch`, so a `clear` or a re-created run
    between the check and EXEC aborts it; `read(pipe)` reads the watched keys first). False when
    the run is gone: nothing was written. `generation` None: no check (a run without a record).

    On a Redis Cluster a transaction holds the keys of one slot: `build` writes the keys of the
    run's home slot (the record's), or those of the slot of `watch` (then every key it writes
    is in that slot). In the second case the record cannot be WATCHed with them: the `watch`
    keys are WATCHed, then the generation is read from the record's master, then EXEC. A
    `clear` deletes the record first and the run's other keys after it, so it either fails
    that check or changes a watched key before EXEC; a take-over does neither, so only writes
    that are the same whichever driver makes them (folds, idempotent steps) go this way."""
    record = record_key(run_id)
    home = keys.hash_slot(record)
    elsewhere = bool(watch) and is_cluster(client) and any(keys.hash_slot(k) != home for k in watch)
    watched = ((record,) if generation is not None and not elsewhere else ()) + watch
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                if watched:
                    pipe.watch(*watched)
                if generation is not None:
                    held = client.hget(record, "generation") if elsewhere else pipe.hget(record, "generation")
                    if held != generation.encode():
                        pipe.reset()
                        return False
                if read is not None:
                    read(pipe)
                pipe.multi()
                build(pipe)
                pipe.execute()
                return True
            except WatchError:   # the record or a watched key changed: read and check again
                continue
