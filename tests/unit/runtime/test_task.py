"""The task runner without Spark (fakeredis): timeouts, direct emits, double acks."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import fakeredis
import msgpack
import pytest

from recovery.jobs import settle
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, ShellImpl, StreamDef, Workflow
from recovery.runtime import collector, timeouts
from recovery.testing import execute_round
from recovery.tracking import ids, keys, ledger
from recovery.tracking import queue as failed_queue
from tests.unit import runner_components as rc

REF = "tests.unit.runner_components:"


def _run(wf: Workflow, run_id: str = "r"):
    client = fakeredis.FakeRedis()
    execute_round(wf, RunSpec(run_id, 0, wf.model_dump_json(), "fake://", True), client)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(client, run_id, b)
    return client


def queued_positions(client, run_id="r"):
    out = []
    for pos in client.smembers(failed_queue.failed_key(run_id)):
        comp, task = pos.decode().rsplit(":", 1)
        out += [msgpack.unpackb(v) for v in client.hvals(failed_queue.queue_key(run_id, comp, int(task)))]
    return out


def test_a_tuple_over_the_message_timeout_fails_and_the_task_goes_on():
    wf = Workflow(name="t", config=(("topology.message.timeout.secs", "0.5"),), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="slow", kind="bolt", impl=ClassImpl(ref=REF + "SlowOnThree"),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="src"),))))
    client = _run(wf)
    [rec] = queued_positions(client)
    assert rec["values"] == [3] and "timed out after 0.5s" in rec["error"]
    assert len(ledger.pending_roots(client, "r")) == 1
    stats = msgpack.unpackb(client.hget(keys.task_done("r", 0), "slow:0"))
    assert stats["executed"] == 6 and stats["acked"] == 5


def _slow_workflow(slow_ref: str, **conf: str) -> Workflow:
    """Numbers -> slow (a component under the 0.5 s message timeout) -> sink (Collect)."""
    return Workflow(name="t", config=(("topology.message.timeout.secs", "0.5"), *conf.items()),
                    components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="slow", kind="bolt", impl=ClassImpl(ref=REF + slow_ref),
                  streams=(StreamDef(fields=("n", "extra")),), inputs=(Input(source="src"),)),
        Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "Collect"), inputs=(Input(source="slow"),))))


def _stats(client, component, run_id="r"):
    return msgpack.unpackb(client.hget(keys.task_done(run_id, 0), f"{component}:0"))


@pytest.mark.parametrize("point", ["before its first emit", "between emits", "between emit and ack",
                                   "inside ack"])
def test_a_tuple_slow_at_any_point_before_its_ack_fails_alone_with_the_timeout(point):
    rc.Collect.SEEN.clear()
    client = _run(_slow_workflow("SlowAt", **{"test.slow.at": point}))
    [rec] = queued_positions(client)
    assert rec["values"] == [3] and rec["component"] == "slow"
    assert rec["error"] == "TupleTimeout: tuple timed out after 0.5s in slow"
    # nothing the timed-out tuple emitted flowed on; every other output arrived, once
    assert sorted(n for _, n in rc.Collect.SEEN) == sorted([n for n in range(6) if n != 3] +
                                                          [n + 100 for n in range(6) if n != 3])
    # its root is pending, and only its root: the queued tuple completes it when replayed
    assert ledger.pending_roots(client, "r") == set(rec["roots"])
    stats = _stats(client, "slow")
    assert (stats["executed"], stats["acked"], stats["failed"], stats["emitted"]) == (6, 5, 1, 10)


def test_a_tuple_slow_after_its_ack_stays_acked_and_the_overrun_is_logged():
    rc.Collect.SEEN.clear()
    client = _run(_slow_workflow("SlowAt", **{"test.slow.at": "after ack"}))
    assert queued_positions(client) == [] and ledger.pending_roots(client, "r") == set()
    assert sorted(n for _, n in rc.Collect.SEEN) == sorted(list(range(6)) + [n + 100 for n in range(6)])
    logs = [msgpack.unpackb(m) for m in client.lrange(keys.log("r"), 0, -1)]
    assert any("ran past the 0.5s timeout" in m[4] or "TupleTimeout" in m[4] for m in logs)


def test_a_slow_seal_inside_ack_loses_no_chunk(monkeypatch):
    """The runner's own code is never interrupted: `_seal` takes a chunk out of the task's
    buffers and stores it as one step. (SIGALRM used to raise in the slow serialization,
    after the chunk was taken out and its tuples' ids XORed: the chunk was lost, its roots
    pending for ever with nothing queued.)"""
    monkeypatch.setattr(collector, "CHUNK", 4)    # the ack of tuple 3 seals a chunk of 4
    rc.Collect.SEEN.clear()
    client = _run(_slow_workflow("SlowToSeal"))
    assert sorted(n for _, n in rc.Collect.SEEN) == list(range(6))
    assert ledger.pending_roots(client, "r") == set() and queued_positions(client) == []
    stats = _stats(client, "slow")
    assert (stats["executed"], stats["acked"], stats["failed"], stats["emitted"]) == (6, 6, 0, 6)


def test_a_stuck_tuple_is_marked_before_its_worker_ends_and_the_retry_fails_it_unrun(monkeypatch, fake_redis):
    """The last resort: a tuple that never hands control back (a C-level wait) is marked timed
    out in Redis, then the worker ends; the task's retry fails that tuple without running it."""
    wf = _slow_workflow("StuckOnThree")
    spec = RunSpec("r", 0, wf.model_dump_json(), "fake://", True)
    marks_key = keys.timed_out("r", 0, "slow", 0)
    marks_at_kill = []

    def end_worker(message):   # stands for os._exit: records what Redis holds at that moment
        marks_at_kill.append((fake_redis.smembers(marks_key), message))
        rc.StuckOnThree.KILLED.set()

    monkeypatch.setattr(timeouts, "_kill_armed", lambda: True)
    monkeypatch.setattr(timeouts, "_end_worker", end_worker)
    rc.StuckOnThree.KILLED.clear()
    rc.StuckOnThree.RAN.clear()
    rc.Collect.SEEN.clear()
    with pytest.raises(rc.WorkerEnded):
        execute_round(wf, spec, fake_redis)
    [(marks, message)] = marks_at_kill
    assert len(marks) == 1 and "tuple timed out after 0.5s in slow" in message
    assert fake_redis.hget(keys.task_done("r", 0), "slow:0") is None    # nothing committed
    stuck_id = int(next(iter(marks)))

    # the retry (Spark's, or the resumed round of `recover`): the spout committed, so it
    # replays its stored output; the bolt task fails tuple 3 without running it and goes on
    rc.StuckOnThree.RAN.clear()
    execute_round(wf, spec, fake_redis)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(fake_redis, "r", b)
    assert sorted(rc.StuckOnThree.RAN) == [0, 1, 2, 4, 5]
    [rec] = queued_positions(fake_redis)
    assert rec["id"] == stuck_id and rec["values"] == [3]
    assert rec["error"].startswith("TupleTimeout: tuple timed out after 0.5s in slow")
    assert sorted(n for _, n in rc.Collect.SEEN) == [0, 1, 2, 4, 5]
    assert ledger.pending_roots(fake_redis, "r") == set(rec["roots"])
    assert not fake_redis.exists(marks_key)    # the task committed: its marks are done


def test_a_slow_finish_fails_what_is_outstanding_with_the_timeout():
    rc.Collect.SEEN.clear()
    client = _run(_slow_workflow("AcksInFinish", **{"test.slow.finish": "1"}))
    queued = queued_positions(client)
    assert sorted(r["values"][0] for r in queued) == list(range(6)) and rc.Collect.SEEN == []
    assert {r["error"] for r in queued} == {"slow.finish raised TupleTimeout: tuple timed out after 0.5s in slow"}
    assert ledger.pending_roots(client, "r") == {r["roots"][0] for r in queued}


def test_a_finish_marked_timed_out_is_not_run_again_and_fails_what_is_outstanding(fake_redis):
    wf = _slow_workflow("AcksInFinish")
    fake_redis.sadd(keys.timed_out("r", 0, "slow", 0), timeouts.FINISH)   # an attempt killed in it
    rc.AcksInFinish.FINISHED.clear()
    rc.Collect.SEEN.clear()
    execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), fake_redis)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(fake_redis, "r", b)
    assert rc.AcksInFinish.FINISHED == [] and rc.Collect.SEEN == []
    queued = queued_positions(fake_redis)
    assert len(queued) == 6 and all("timed out after 0.5s in slow" in r["error"] for r in queued)
    assert not fake_redis.exists(keys.timed_out("r", 0, "slow", 0))


def test_direct_emits_reach_the_named_task_and_double_acks_are_ignored():
    rc.Collect.SEEN.clear()
    wf = Workflow(name="d", components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=REF + "Numbers"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="router", kind="bolt", parallelism=2, impl=ClassImpl(ref=REF + "DirectToLast"),
                  streams=(StreamDef(id="direct", fields=("n",), direct=True),), inputs=(Input(source="src"),)),
        Component(id="sink", kind="bolt", parallelism=3, impl=ClassImpl(ref=REF + "Collect"),
                  inputs=(Input(source="router", stream="direct", grouping=Grouping.DIRECT),))))
    client = _run(wf)
    from recovery.model.graph import TaskMap
    last = TaskMap.of(wf).task_ids("sink")[-1]
    assert sorted(rc.Collect.SEEN) == [(last, n) for n in range(6)]
    assert ledger.pending_roots(client, "r") == set() and queued_positions(client) == []


def test_a_state_value_that_cannot_be_stored_fails_only_its_tuple():
    wf = Workflow(name="u", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="bad", kind="bolt", impl=ClassImpl(ref=REF + "Unmsgpackable"),
                  inputs=(Input(source="src"),))))
    client = _run(wf)
    assert len(queued_positions(client)) == 6
    assert all("TypeError" in r["error"] for r in queued_positions(client))


class TickCounterWithMetrics(rc.TickCounter):
    """A Python bolt with an attribute a shell bolt has: still a Python bolt, sent ticks."""

    metrics: dict = {}


@pytest.mark.parametrize("ticker", [REF + "TickCounter", __name__ + ":TickCounterWithMetrics"])
def test_tick_tuples_reach_process_tick_and_a_last_one_ends_the_input(ticker):
    rc.Collect.SEEN.clear()
    wf = Workflow(name="k", config=(("topology.tick.tuple.freq.secs", "1"),), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="ticker", kind="bolt", impl=ClassImpl(ref=ticker),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="src"),)),
        Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "Collect"),
                  inputs=(Input(source="ticker"),))))
    client = _run(wf)
    counts = [n for _, n in rc.Collect.SEEN]
    assert counts and counts[-1] == 6            # the last tick saw the whole input
    assert ledger.pending_roots(client, "r") == set()


PROGRAMS = Path(__file__).resolve().parents[2] / "multilang_programs"


def _replay_spec(wf: Workflow, spout: str, message_ids: list[int], client) -> RunSpec:
    """A root-replay round (engine.rounds.prepare_root_replay): the spout re-reads its input and
    emits only the roots of the round's replay set (these messages' round-0 ids), under
    epoch-1 ids."""
    client.sadd(keys.root_replay_set("r", 1), *[ids.root_id(ids.name_salt(spout), m) for m in message_ids])
    return RunSpec("r", 1, wf.to_task_json(), "fake://", True, root_replay=True,
                   root_epoch=1, filter_epoch=0)


@pytest.mark.parametrize("spout_impl", [
    ClassImpl(ref=REF + "Numbers"),
    ShellImpl(command=sys.executable, script="raw_spout.py")])
def test_root_replay_replays_failed_roots_after_unselected_ones(spout_impl, fake_redis):
    """Messages 3 and 4 failed; 0, 1, 2 come first and are not selected. An unselected emit
    is still an emit: the spout is not taken for exhausted at message 0 (it was: nothing
    was replayed, and the superseded roots' records were lost)."""
    rc.Collect.SEEN.clear()
    wf = Workflow(name="rr", base_dir=str(PROGRAMS), components=(
        Component(id="src", kind="spout", impl=spout_impl, streams=(StreamDef(fields=("n",)),)),
        Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "Collect"),
                  inputs=(Input(source="src"),))))
    execute_round(wf, _replay_spec(wf, "src", [3, 4], fake_redis), fake_redis)
    assert sorted(n for _, n in rc.Collect.SEEN) == [3, 4]
    stats = msgpack.unpackb(fake_redis.hget(keys.task_done("r", 1), "src:0"))
    assert stats["replayed_roots"] == 2 and stats["roots"] == 0


def test_a_sink_write_longer_than_the_message_timeout_is_acked_not_written_twice(monkeypatch, fake_redis, tmp_path):
    """A built-in sink writes its part in finish(), then acks. A write that took longer than
    the message timeout made those acks raise TupleTimeout: records already durable failed,
    and recovery wrote them again into another part. The message timeout bounds user code;
    a built-in sink runs none, so its acks after the write stand."""
    from recovery.connectors import file_sinks, sink_folders
    from recovery.model.workflow import SinkImpl
    clock = [0.0]     # seconds the (fake) write adds to the runtime's clock
    monkeypatch.setattr(timeouts, "clock", lambda: time.monotonic() + clock[0])
    real_write = file_sinks.atomic_write

    def slow_write(path, data, fence=None):
        clock[0] += 2.0                 # four message timeouts
        real_write(path, data, fence)

    monkeypatch.setattr(file_sinks, "atomic_write", slow_write)
    wf = Workflow(name="w", base_dir=str(tmp_path), config=(("topology.message.timeout.secs", "0.5"),),
                  components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "out"),)),
                  inputs=(Input(source="src"),))))
    execute_round(wf, RunSpec("r", 0, wf.to_task_json(), "fake://", True), fake_redis)
    for b in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(fake_redis, "r", b)
    assert clock[0] == 2.0                                   # the write was slow, once
    assert sorted(r["n"] for r in sink_folders.read_jsonl_dir(str(tmp_path / "out"))) == list(range(6))
    assert queued_positions(fake_redis) == [] and ledger.pending_roots(fake_redis, "r") == set()
    stats = msgpack.unpackb(fake_redis.hget(keys.task_done("r", 0), "out:0"))
    assert (stats["acked"], stats["failed"]) == (6, 0)


# What PySpark 4.3 (local[2], one attempt per task) raises when a Python worker dies, e.g.
# ended by the message timeout's last resort (os._exit): measured, trimmed of JVM frames.
# The worker's own last line went to its stderr and is not in it.
WORKER_CRASHED = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 3.0 failed 1 times, most recent failure: Lost task 1.0 in stage 3.0 (TID 7) (localhost executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting 'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python.worker.faulthandler.enabled' configuration to 'true' for the better Python traceback.
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(PythonRunner.scala:1136)
Caused by: java.io.EOFException
\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)
\t... 22 more

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$3(DAGScheduler.scala:4568)
Caused by: org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting 'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python.worker.faulthandler.enabled' configuration to 'true' for the better Python traceback.
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(PythonRunner.scala:1136)
Caused by: java.io.EOFException
\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)
\t... 22 more
"""


def test_a_crashed_python_worker_is_named_as_such_not_as_an_eof_exception(fake_redis):
    """`recover` used to say "failed in Spark: Caused by: java.io.EOFException"."""
    spec = RunSpec("r", 2, "{}", "fake://", True)
    err = Exception(WORKER_CRASHED)
    assert settle.spark_failure_reason(err) == (
        "a Python worker crashed (exited unexpectedly) in Spark task 1.0 of stage 3.0 "
        "(its stderr says why)")
    # the last resort marked what it ended: the reason names that component's task
    fake_redis.sadd(keys.timed_out("r", 2, "slow", 1), 12345)
    fake_redis.sadd(keys.timed_out("r", 1, "other", 0), 1)     # another round's: not this one
    assert settle.spark_failure_reason(err, fake_redis, spec) == (
        "a Python worker crashed (exited unexpectedly) in Spark task 1.0 of stage 3.0: the "
        "message timeout's last resort ended it, stuck in slow task index 1")
    # a worker's Python traceback is still read as before
    traceback_text = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                      "recovery.multilang.ShellError: shell component 'numbers' gave up\n")
    assert settle.spark_failure_reason(Exception(traceback_text), fake_redis, spec) == \
        "recovery.multilang.ShellError: shell component 'numbers' gave up"


def test_an_emit_anchored_twice_to_one_tuple_gets_ids_of_its_own():
    # anchors=[t, t] XORed to an anchor key of 0, shared by every task and round: two tasks'
    # children got the same ids, and their failures overwrote each other in one queue
    wf = Workflow(name="a", components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=REF + "Numbers"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="twice", kind="bolt", parallelism=2, impl=ClassImpl(ref=REF + "AnchorsTwice"),
                  streams=(StreamDef(fields=("n",)),), inputs=(Input(source="src"),)),
        Component(id="fails", kind="bolt", impl=ClassImpl(ref=REF + "FailsAll"),
                  inputs=(Input(source="twice", grouping=Grouping.GLOBAL),))))
    client = _run(wf)
    queued = queued_positions(client)
    assert sorted(r["values"][0] for r in queued) == list(range(6))
    assert len(ledger.pending_roots(client, "r")) == 6


def test_a_spout_that_emits_one_message_id_twice_is_refused_not_merged():
    # the two would share a root id: their XORs cancel and one queue field holds both
    wf = Workflow(name="m", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "SameMessageIdTwice"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "FailsAll"), inputs=(Input(source="src"),))))
    with pytest.raises(ValueError, match=r"message id 7 .*twice"):
        _run(wf)


def test_the_collector_threshold_is_raised_while_tasks_run_and_restored_by_the_last_one_out():
    import gc

    from recovery.runtime import task
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        first, second = task.relaxed_gc(), task.relaxed_gc()
        first.__enter__()
        assert gc.get_threshold() == (task.GC_YOUNG_THRESHOLD, 10, 10)
        second.__enter__()             # two task generators of one worker, interleaved:
        first.__exit__(None, None, None)   # the first one ends while the second still runs
        assert gc.get_threshold()[0] == task.GC_YOUNG_THRESHOLD
        second.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 10)
        # and a real task: the threshold is back once its output is consumed
        rc.Collect.SEEN.clear()
        _run(Workflow(name="g", components=(
            Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
            Component(id="sink", kind="bolt", impl=ClassImpl(ref=REF + "Collect"), inputs=(Input(source="src"),)))))
        assert sorted(n for _, n in rc.Collect.SEEN) == list(range(6))
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_a_task_of_a_driver_taken_over_publishes_no_part_commits_nothing_and_fails_its_round(
        monkeypatch, fake_redis, tmp_path):
    """The run is taken over (`recover --force`) while its sink task is writing
    its part. The task checks, under the folder's lock, that its driver still owns the run
    right before it renames the part into place: it publishes nothing (its successor's task
    writes that part), commits nothing, and fails, so nothing of it flows on. A task of that
    driver that starts afterwards does not start at all."""
    import os

    from recovery.connectors import file_sinks
    from recovery.errors import RunTakenOver
    from recovery.model.workflow import SinkImpl
    from recovery.tracking import runs
    wf = Workflow(name="w", base_dir=str(tmp_path), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "out"),)),
                  inputs=(Input(source="src"),))))
    lease = runs.create(fake_redis, "r", "<x/>", wf.to_task_json(), None, "local", True)
    spec = RunSpec("r", 0, wf.to_task_json(), "fake://", True, generation=lease.generation,
                   spill_dir=str(tmp_path / "spill"))
    real_write = file_sinks.atomic_write

    def taken_over_while_writing(path, write, fence=None):
        runs.take_over(fake_redis, runs.get(fake_redis, "r"), force=True)
        real_write(path, write, fence)

    monkeypatch.setattr(file_sinks, "atomic_write", taken_over_while_writing)
    with pytest.raises(RunTakenOver, match="run r was taken over by another driver"):
        execute_round(wf, spec, fake_redis)
    assert os.listdir(tmp_path / "out") == []          # no part, no temporary file left
    assert fake_redis.hkeys(keys.task_done("r", 0)) == [b"src:0"]   # (committed before the take-over)
    monkeypatch.undo()
    with pytest.raises(RunTakenOver):
        execute_round(wf, spec, fake_redis)
    assert os.listdir(tmp_path / "out") == [] and fake_redis.hkeys(keys.task_done("r", 0)) == [b"src:0"]


def test_a_delta_sink_task_of_a_driver_taken_over_commits_nothing_to_its_table(monkeypatch, fake_redis, tmp_path):
    """The table sinks check the fence too, right before their commit: a Delta part of a task
    whose driver was taken over meanwhile is never committed (its successor's task writes it)."""
    from recovery.connectors import delta
    from recovery.errors import RunTakenOver
    from recovery.model.workflow import SinkImpl
    from recovery.tracking import runs
    wf = Workflow(name="w", base_dir=str(tmp_path), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="lake", kind="bolt", impl=SinkImpl(type="delta", params=(("path", "lake"),)),
                  inputs=(Input(source="src"),))))
    lease = runs.create(fake_redis, "r", "<x/>", wf.to_task_json(), None, "local", True)
    spec = RunSpec("r", 0, wf.to_task_json(), "fake://", True, generation=lease.generation,
                   spill_dir=str(tmp_path / "spill"))
    real_conform = delta.conform

    def taken_over_before_the_commit(*args, **kwargs):
        runs.take_over(fake_redis, runs.get(fake_redis, "r"), force=True)
        return real_conform(*args, **kwargs)

    monkeypatch.setattr(delta, "conform", taken_over_before_the_commit)
    with pytest.raises(RunTakenOver):
        execute_round(wf, spec, fake_redis)
    table = delta.open_table(str(tmp_path / "lake"))
    assert table is None or table.to_pyarrow_table().num_rows == 0
    assert fake_redis.hkeys(keys.task_done("r", 0)) == [b"src:0"]


def test_a_bolt_task_keeps_no_emit_count_of_an_input_once_it_is_acked(fake_redis):
    """Emit indexes are counted per anchor, and no emit can anchor to an acked tuple: a task
    that kept each input's count would hold one entry per tuple of its partition."""
    from recovery.runtime import wire
    from recovery.runtime.task import TaskRunner, injected_client
    wf = Workflow(name="w", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=REF + "Numbers"), streams=(StreamDef(fields=("n",)),)),
        Component(id="pass", kind="bolt", impl=ClassImpl(ref=REF + "PassOn"), streams=(StreamDef(fields=("n",)),),
                  inputs=(Input(source="src"),))))
    spec = RunSpec("r", 0, wf.to_task_json(), "fake://", True)
    records = [(("pass", 0), wire.pack_rows("src", 0, [[i + 1, (i + 1,), "default", [i]] for i in range(50)]))]
    with injected_client("fake://", fake_redis):
        runner = TaskRunner(spec, "pass", 0)
        list(runner.run_bolt(records))
    assert runner.stats["acked"] == 50 and runner.collector.emit_counts == {}
