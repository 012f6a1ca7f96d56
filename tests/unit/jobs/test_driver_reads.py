"""The driver holds nothing per tuple or per root: every command the driver sends
during a recovery and a `status` is recorded on fakeredis (the Spark tasks, run in process by
the test kit, use a client of their own), and it reads positions and counters only: no queued
tuple, no ledger, no set of dead roots, and the same commands with 8 or 300 tuples queued.
The root counts it stores at settle time equal a recount from the ledger, after submit,
recover and requeue."""
from __future__ import annotations

import collections
from typing import Any, cast

import fakeredis
import pytest

from recovery import BasicBolt, testing
from recovery.jobs import dead_letters, reports, summary
from recovery.jobs import recover as jobs_recover
from recovery.jobs.summary import RunSummary
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.runtime import task
from recovery.testing.local_spark import LocalSession
from recovery.tracking import keys, ledger, runs
from recovery.tracking import queue as failed_queue

NO_BACKOFF = {"recovery.retry.delay.period.ms": "0"}


def pipeline() -> Workflow:
    """words (TestingSpout) -> upper (2 tasks) -> out (ListSink)."""
    return Workflow(name="reads", components=(
        Component(id="words", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("word",)),)),
        Component(id="upper", kind="bolt", parallelism=2, impl=ClassImpl(ref="tests.unit.jobs.test_driver_reads:Upper"),
                  streams=(StreamDef(fields=("word",)),), inputs=(Input(source="words"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="upper"),))))


class Upper(BasicBolt):
    """Fails each word the first time it sees it (in this process: the test kit's tasks)."""
    SEEN: set[str] = set()

    def process(self, tup):
        if tup["word"] not in Upper.SEEN:
            Upper.SEEN.add(tup["word"])
            raise RuntimeError(f"first sight of {tup['word']}")
        self.emit([tup["word"].upper()])


def recording_client(server: fakeredis.FakeServer, log: list[tuple[bytes, ...]]) -> fakeredis.FakeRedis:
    """A client of `server` that appends every command it sends (pipelined ones too) to `log`."""
    client = fakeredis.FakeRedis(server=server)
    base = client.connection_pool.connection_class

    class RecordingConnection(base):  # type: ignore[misc, valid-type]
        def _connect(self) -> Any:
            sock = super()._connect()
            process = sock._process_command

            def record(fields: list[bytes]) -> Any:
                log.append(tuple(fields))
                return process(fields)
            sock._process_command = record
            return sock
    client.connection_pool.connection_class = RecordingConnection
    return client


def submitted(n_words: int, inject: dict[str, str]) -> tuple[testing.LocalRun, fakeredis.FakeServer]:
    server = fakeredis.FakeServer()
    Upper.SEEN.clear()
    run = testing.run_local(pipeline(), fakeredis.FakeRedis(server=server), run_id="r",
                            inputs={"words": [f"w{i}" for i in range(n_words)]}, config={**NO_BACKOFF, **inject})
    return run, server


def driven(run: testing.LocalRun, driver: fakeredis.FakeRedis, **kwargs: Any) -> RunSummary:
    """jobs.recover with `driver` as the driver's client; the tasks keep the run's own client."""
    with task.injected_client(run.redis_url, run.client):
        return jobs_recover.recover(cast(Any, LocalSession()), driver, run.redis_url, run.run_id, **kwargs)


def per_tuple_reads(log: list[tuple[bytes, ...]], run_id: str) -> list[tuple[bytes, ...]]:
    """The commands in `log` that read queued tuples, the ledger or the dead roots' set."""
    queue = keys.run_key(run_id, "queue", "").encode()
    ledger_keys = keys.run_key(run_id, "ledger").encode()
    dead_roots = failed_queue.dead_roots_key(run_id).encode()
    bad = []
    for cmd in log:
        name, key = cmd[0].upper(), cmd[1] if len(cmd) > 1 else b""
        if key.startswith(ledger_keys):
            bad.append(cmd)
        elif key.startswith(queue):
            # a count; one entry for its sample error; dropping the whole queue (root replay)
            sample = name == b"HSCAN" and [c.upper() for c in cmd[3:]] == [b"COUNT", b"1"]
            if name not in (b"HLEN", b"DEL") and not sample:
                bad.append(cmd)
        elif key == dead_roots and name in (b"SMEMBERS", b"SSCAN", b"SINTER", b"SDIFF", b"SUNION"):
            bad.append(cmd)
    return bad


def shape(log: list[tuple[bytes, ...]]) -> collections.Counter:
    """The commands by name and key, without the Lua scripts (run-record updates, the lease,
    whose refresh thread may or may not tick during a run)."""
    return collections.Counter((c[0].upper(), c[1] if len(c) > 1 else b"") for c in log
                               if c[0].upper() not in (b"EVALSHA", b"EVAL", b"SCRIPT"))


@pytest.mark.parametrize("strategy", ["localized", "root-replay"])
def test_a_recovery_round_and_status_read_only_positions_and_counters(strategy):
    """Every word fails once at `upper`: a recovery round replays them all."""
    shapes = []
    for n in (8, 300):
        run, server = submitted(n, {})
        assert sum(p.count for p in run.failed_positions) == n
        log: list[tuple[bytes, ...]] = []
        driver = recording_client(server, log)
        status = reports.run_status(driver, "r")
        assert (status["failed"], status["pending"], status["complete"]) == (n, n, 0)
        result = driven(run, driver, strategy=strategy)
        assert result.status == runs.COMPLETED and result.complete == n
        assert sorted(v[0] for v in run.sinks["out"]) == sorted(f"W{i}" for i in range(n))
        assert per_tuple_reads(log, "r") == []
        shapes.append(shape(log))
    assert shapes[0] == shapes[1]


def recount(client: Any, run_id: str) -> dict[str, int]:
    """The acker's counts from the ledger, the dead roots and the queues (what summarize did
    in the driver before: O(roots), for this test only)."""
    pending = ledger.pending_roots(client, run_id)
    dead_roots = {int(r) for r in client.smembers(failed_queue.dead_roots_key(run_id))}
    dead = len(pending & dead_roots)
    failed = len((pending - dead_roots) & ledger.queued_roots(client, run_id))
    return {"pending": len(pending) - dead, "failed": failed, "dead": dead,
            "in_flight": len(pending) - dead - failed}


def counted(s: RunSummary) -> dict[str, int]:
    return {k: getattr(s, k) for k in ("pending", "failed", "dead", "in_flight")}


def test_stored_counts_equal_a_recount_after_submit_recover_and_requeue(fake_redis):
    """`w1` and `w10`.. `w19` fail for good at `upper` (at most 2 attempts): after submit their
    roots are failed, after recover dead, after a requeue (of some, then of all) failed again,
    after another recover dead again."""
    inject = {"recovery.inject.p.component": "upper", "recovery.inject.p.mode": "permanent",
              "recovery.inject.p.match": "w1", "recovery.max.attempts": "2"}
    Upper.SEEN.update(f"w{i}" for i in range(40))    # (no first-sight failure here)
    run = testing.run_local(pipeline(), fake_redis, run_id="c", config={**NO_BACKOFF, **inject},
                            inputs={"words": [f"w{i}" for i in range(40)]})
    s = summary.summarize(fake_redis, runs.get(fake_redis, "c"))
    assert s.counts_known and s.failed == 11 and counted(s) == recount(fake_redis, "c")
    testing.recover_local(run)
    s = summary.summarize(fake_redis, runs.get(fake_redis, "c"))
    assert s.status == runs.DEAD and s.dead == 11 and counted(s) == recount(fake_redis, "c")
    assert dead_letters.requeue_dead(fake_redis, "c", tuple_keys=[dead_letters.dead_key(d) for d in
                                                                  dead_letters.dead_letters(fake_redis, "c")[:4]]) == 4
    s = summary.summarize(fake_redis, runs.get(fake_redis, "c"))
    assert (s.dead, s.failed) == (7, 4) and counted(s) == recount(fake_redis, "c")
    assert dead_letters.requeue_dead(fake_redis, "c") == 7
    s = summary.summarize(fake_redis, runs.get(fake_redis, "c"))
    assert (s.dead, s.failed) == (0, 11) and counted(s) == recount(fake_redis, "c")
    testing.recover_local(run)
    s = summary.summarize(fake_redis, runs.get(fake_redis, "c"))
    assert s.dead == 11 and counted(s) == recount(fake_redis, "c")


def test_status_reads_the_run_record_once():
    """`recovery status` (the run API's `status`): one HGETALL of the record, whatever the
    summary, its warnings and its topics take from it."""
    run, server = submitted(8, {})
    log: list[tuple[bytes, ...]] = []
    driver = recording_client(server, log)
    status = reports.run_summary(driver, "r")
    assert status.failed == 8 and status.warnings is None
    record = runs.record_key("r").encode()
    assert [c[0].upper() for c in log if len(c) > 1 and c[1] == record] == [b"HGETALL"]
