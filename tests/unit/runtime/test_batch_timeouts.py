"""The message timeout in the batch runtime (runtime.batch.bolt, runtime.batch.sink): a
process_batch call, and a batch sink's write, that overrun it fail their rows as timed-out row
tuples (queued at that task, recoverable), without bisection and without a duplicate write.

The runtime's clock (runtime.timeouts.clock) is moved forward by the components instead of
sleeping: an overrun is a state, not a wait."""
from __future__ import annotations

import threading
import time

import fakeredis
import msgpack
import numpy as np
import pyarrow as pa
import pytest

from recovery import BatchBolt, testing
from recovery.connectors import file_sinks, sink_folders
from recovery.model.record import ComponentStats
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.runtime import timeouts
from recovery.tracking import keys, ledger
from recovery.tracking import queue as failed_queue
from recovery.tracking.state import state_key

HERE = __name__ + ":"
TIMEOUT = 0.5
OVERRUN = 4 * TIMEOUT      # what a slow call adds to the runtime's clock
CLOCK = [0.0]              # seconds added to time.monotonic by the components and writes


@pytest.fixture(autouse=True)
def movable_clock(monkeypatch):
    CLOCK[0] = 0.0
    monkeypatch.setattr(timeouts, "clock", lambda: time.monotonic() + CLOCK[0])
    SlowBatch.SLOWED.clear()
    StuckBatch.RAN.clear()
    StuckBatch.KILLED.clear()


class SlowBatch(BatchBolt):
    """[n] -> [n, 2n]. The first batch holding n == 3 overruns the timeout at the point
    test.slow.at names; with test.fail.seven, it fails the row n == 7 with fail_rows first."""

    SLOWED: list = []

    def process_batch(self, batch):
        n = batch.column("n").to_numpy()
        slow = 3 in n.tolist() and not SlowBatch.SLOWED
        at = self.conf.get("test.slow.at", "")
        if self.conf.get("test.fail.seven"):
            self.fail_rows(np.flatnonzero(n == 7).tolist(), "ValueError: seven")
        for v in n.tolist():
            self.state.put(str(v), v)        # discarded with the call's outputs when it times out
        if slow and at == "before its emit":
            SlowBatch.SLOWED.append(1)
            CLOCK[0] += OVERRUN
        self.emit_batch(pa.record_batch([pa.array(n), pa.array(2 * n)], names=["n", "d"]))
        if slow and at == "after its emit":
            SlowBatch.SLOWED.append(1)
            CLOCK[0] += OVERRUN


class StuckBatch(BatchBolt):
    """On the batch holding n == 3: waits for an event only the test's stand-in for the
    worker's end sets (a wait that never returns by itself), then ends as the process would."""

    KILLED = threading.Event()
    RAN: list = []

    def process_batch(self, batch):
        n = batch.column("n").to_pylist()
        StuckBatch.RAN.extend(n)
        if 3 in n:
            CLOCK[0] += OVERRUN
            StuckBatch.KILLED.wait()
            raise WorkerEnded
        self.emit_batch(pa.record_batch([pa.array(n), pa.array([2 * v for v in n])], names=["n", "d"]))


class WorkerEnded(BaseException):
    """Stands for the end of the worker process: nothing after it runs."""


def workflow(bolt: str, sink: SinkImpl | None = None, base_dir: str | None = None, **conf: str) -> Workflow:
    """src (12 numbers) -> slow (the batch bolt, batches of 4) -> out (a ListSink, or `sink`)."""
    out_impl = sink or ClassImpl(ref=testing.LIST_SINK)
    return testing.feed(Workflow(name="bt", base_dir=base_dir, config=(
        ("topology.message.timeout.secs", str(TIMEOUT)), ("recovery.batch.size", "4"),
        ("recovery.retry.delay.period.ms", "0"), *conf.items()), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT), streams=(StreamDef(fields=("n",)),)),
        Component(id="slow", kind="bolt", impl=ClassImpl(ref=HERE + bolt), streams=(StreamDef(fields=("n", "d")),),
                  inputs=(Input(source="src"),)),
        Component(id="out", kind="bolt", impl=out_impl, inputs=(Input(source="slow"),)))), "src", list(range(12)))


def _run(wf: Workflow, **kw) -> testing.LocalRun:
    return testing.run_local(wf, fakeredis.FakeRedis(server=fakeredis.FakeServer()), run_id="r",
                             list_sinks=False, **kw)


def _stats(run: testing.LocalRun, component: str) -> ComponentStats:
    return run.summary.components[component]


def _errors(run: testing.LocalRun) -> dict[int, str]:
    return {t.values[0]: t.error for t in run.failed_tuples()}


def _state(run: testing.LocalRun) -> set[str]:
    return {msgpack.unpackb(k) for k in run.client.hkeys(state_key("r", "slow"))}


@pytest.mark.parametrize("at", ["before its emit", "after its emit"])
def test_a_batch_over_the_message_timeout_fails_its_rows_alone_and_recovery_completes_them(at):
    run = _run(workflow("SlowBatch", **{"test.slow.at": at}))
    errors = _errors(run)
    # the batch holding 3 (4 rows) failed with the row path's timeout error, at its position
    assert 3 in errors and len(errors) == 4
    assert set(errors.values()) == {f"TupleTimeout: tuple timed out after {TIMEOUT:g}s in slow"}
    assert [(p.component, p.count) for p in run.failed_positions] == [("slow", 4)]
    # nothing it emitted flowed on, nothing it wrote to keyed state stayed; the others' did
    others = sorted(set(range(12)) - set(errors))
    assert sorted(n for n, _ in run.sinks["out"]) == others
    assert _state(run) == {str(n) for n in others}
    stats = _stats(run, "slow")
    assert (stats.executed, stats.acked, stats.failed, stats.bisect_runs) == (12, 8, 4, 0)
    assert ledger.pending_roots(run.client, "r") == {r for t in run.failed_tuples() for r in t.roots}
    testing.recover_local(run)       # the batch is not slow again: its rows complete
    assert run.status == "completed" and ledger.pending_roots(run.client, "r") == set()
    assert sorted(n for n, _ in run.sinks["out"]) == list(range(12))


def test_rows_failed_in_time_keep_their_error_when_the_batch_then_times_out():
    run = _run(workflow("SlowBatch", **{"test.slow.at": "after its emit", "test.fail.seven": "1"}))
    errors = _errors(run)
    assert errors[7] == "ValueError: seven"
    timed_out = {n for n, e in errors.items() if e.startswith("TupleTimeout")}
    assert 3 in timed_out and len(timed_out) == 4 and 7 not in timed_out


def test_a_batch_in_time_is_not_failed_by_the_timeout():
    run = _run(workflow("SlowBatch"))
    assert run.status == "completed" and run.failed_positions == []
    assert sorted(n for n, _ in run.sinks["out"]) == list(range(12))


def test_a_stuck_batch_is_marked_before_its_worker_ends_and_the_retry_fails_its_rows_unrun(monkeypatch, fake_redis):
    wf = testing.with_list_sinks(workflow("StuckBatch"))
    spec = RunSpec("r", 0, wf.model_dump_json(), "fake://", True)
    marks_key = keys.timed_out("r", 0, "slow", 0)
    at_kill = []

    def end_worker(message):   # stands for os._exit: records what Redis holds at that moment
        at_kill.append((fake_redis.smembers(marks_key), message))
        StuckBatch.KILLED.set()

    monkeypatch.setattr(timeouts, "_kill_armed", lambda: True)
    monkeypatch.setattr(timeouts, "_end_worker", end_worker)
    with pytest.raises(WorkerEnded):
        testing.execute_round(wf, spec, fake_redis)
    [(marks, message)] = at_kill
    assert len(marks) == 4 and "a batch of 4 tuples" in message
    assert fake_redis.hget(keys.task_done("r", 0), "slow:0") is None    # nothing committed
    stuck_ids = {int(m) for m in marks}

    # the retry (Spark's, or the round `recover` resumes): the marked rows fail unrun
    StuckBatch.RAN.clear()
    testing.execute_round(wf, spec, fake_redis)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(fake_redis, "r", b)
    assert 3 not in StuckBatch.RAN and len(StuckBatch.RAN) == 8
    queued = [msgpack.unpackb(v) for pos in fake_redis.smembers(failed_queue.failed_key("r"))
              for v in fake_redis.hvals(failed_queue.queue_key("r", *_position(pos)))]
    assert {q["id"] for q in queued} == stuck_ids
    assert all(q["error"] == f"TupleTimeout: tuple timed out after {TIMEOUT:g}s in slow (stuck: its worker was "
               "ended)" for q in queued)
    assert not fake_redis.exists(marks_key)    # the task committed: its marks are done


def _position(pos: bytes) -> tuple[str, int]:
    component, task = pos.decode().rsplit(":", 1)
    return component, int(task)


class Pass(BatchBolt):
    def process_batch(self, batch):
        n = batch.column("n").to_numpy()
        self.emit_batch(pa.record_batch([pa.array(n), pa.array(2 * n)], names=["n", "d"]))


def _slow_write(monkeypatch, when: str) -> list:
    """The jsonl sink's write overruns the timeout once, before or after it publishes its part."""
    real_write, slowed = file_sinks.atomic_write, []

    def slow_write(path, write, fence=None):
        if not slowed and when == "before publishing":
            slowed.append(path)
            CLOCK[0] += OVERRUN
        real_write(path, write, fence)
        if not slowed and when == "after publishing":
            slowed.append(path)
            CLOCK[0] += OVERRUN

    monkeypatch.setattr(file_sinks, "atomic_write", slow_write)
    return slowed


def _written(tmp_path) -> list[int]:
    return sorted(r["n"] for r in sink_folders.read_jsonl_dir(str(tmp_path / "out")))


def test_a_batch_sink_write_past_the_timeout_publishes_nothing_and_recovery_writes_its_rows_once(monkeypatch, tmp_path):
    slowed = _slow_write(monkeypatch, "before publishing")
    wf = workflow("Pass", SinkImpl(type="jsonl", params=(("path", "out"),)), str(tmp_path))
    run = _run(wf)
    assert slowed and _written(tmp_path) == []          # nothing was published
    errors = _errors(run)
    assert sorted(errors) == list(range(12))
    assert set(errors.values()) == {f"TupleTimeout: tuple timed out after {TIMEOUT:g}s in out"}
    assert [(p.component, p.count) for p in run.failed_positions] == [("out", 12)]
    testing.recover_local(run)
    assert run.status == "completed" and _written(tmp_path) == list(range(12))


def test_a_batch_sink_write_that_published_in_time_stays_acked_when_it_returns_late(monkeypatch, tmp_path):
    slowed = _slow_write(monkeypatch, "after publishing")
    wf = workflow("Pass", SinkImpl(type="jsonl", params=(("path", "out"),)), str(tmp_path))
    run = _run(wf)
    assert slowed and run.status == "completed" and run.failed_positions == []
    assert _written(tmp_path) == list(range(12))
    logs = [msgpack.unpackb(m) for m in run.client.lrange(keys.log("r"), 0, -1)]
    assert any("ran past the 0.5s timeout; its rows stay acked" in str(m) for m in logs)


def test_a_batch_redis_sink_write_past_the_timeout_sets_no_field(monkeypatch):
    from recovery.connectors import redis_sink
    real_write = redis_sink.RedisHashSink.write_chunk

    def slow_write(self, part, chunk):   # time spent before the HSET (encoding, a slow client)
        CLOCK[0] += OVERRUN
        real_write(self, part, chunk)

    monkeypatch.setattr(redis_sink.RedisHashSink, "write_chunk", slow_write)
    run = _run(workflow("Pass", SinkImpl(type="redis", params=(("key", "sunk"),))))
    assert run.client.hlen("sunk") == 0
    assert sorted(_errors(run)) == list(range(12))
    assert set(_errors(run).values()) == {f"TupleTimeout: tuple timed out after {TIMEOUT:g}s in out"}
