"""ShellBolt and ShellSpout against real pystorm 3.1.4 programs (tests/multilang_programs),
run with this interpreter. Unit level: a recording collector, no Spark, no Redis."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "multilang_programs"))

from multilang_harness import Harness, Shells, run, tuples  # noqa: E402

from recovery.api.components import Tuple  # noqa: E402
from recovery.errors import RecoveryError  # noqa: E402
from recovery.multilang import process  # noqa: E402
from recovery.multilang.base import ShellError  # noqa: E402
from recovery.multilang.bolt import ShellBolt  # noqa: E402

pytestmark = pytest.mark.timeout(60)
BOLT = "pystorm_bolt.py"


@pytest.fixture
def shells():
    s = Shells()
    yield s
    s.close()


def test_handshake_sends_conf_context_and_pid_dir(shells):
    bolt, h = shells.bolt(BOLT, "context", config={"topology.subprocess.timeout.secs": "7"})
    run(bolt, ["hello"])
    [emit] = h.emitted()
    timeout, name, tracking, component, task, out_fields, in_fields, values, word = emit
    assert timeout == 7 and tracking is True          # Storm sends typed config values
    assert name == "multilang-test"
    assert (component, task) == ("bolt", 1)
    assert out_fields["default"] == ["word"] and out_fields["ids"] == ["a", "b"]
    assert in_fields == {"spout": {"default": ["word"]}}
    assert values == ["hello"] and word == "hello"    # pystorm built its namedtuple from them
    assert h.acked == [1000] and not h.failed
    # pystorm's own greeting arrives as a log message
    assert any(level == "info" and "pystorm" in msg for level, msg in h.logs)
    assert len(bolt.pids) == 1 and bolt.restarts == 0


def test_auto_ack_bolt_anchors_emits_to_their_input(shells):
    bolt, h = shells.bolt(BOLT, "split")
    tups = run(bolt, ["snow white", "and the seven", "dwarfs"])
    assert [(e.values, e.anchors) for e in h.emits] == [
        (["snow"], [1000]), (["white"], [1000]), (["and"], [1001]), (["the"], [1001]),
        (["seven"], [1001]), (["dwarfs"], [1002])]
    assert h.acked == [t.id for t in tups] and not h.failed
    assert not bolt.errors


def test_explicit_ack_and_fail(shells):
    bolt, h = shells.bolt(BOLT, "ackfail")
    run(bolt, [1, 2, 3, 4])
    assert h.acked == [1001, 1003]
    assert [i for i, _ in h.failed] == [1000, 1002]
    assert all("failed by shell process" in e for _, e in h.failed)
    assert [(e.values, e.anchors) for e in h.emits] == [([20], [1001]), ([40], [1003])]
    assert bolt.restarts == 0                          # a fail is no misbehaviour


def test_multi_anchoring_maps_ids_back_to_the_input_tuples(shells):
    bolt, h = shells.bolt(BOLT, "pairs")
    tups = tuples(["a", "b", "c", "d"])
    for t in tups:
        bolt.process(t)
    bolt.finish()
    assert [(e.values, e.anchors) for e in h.emits] == [(["a", "b"], [1000, 1001]),
                                                        (["c", "d"], [1002, 1003])]
    assert sorted(h.acked) == [1000, 1001, 1002, 1003]


def test_anchors_are_the_very_tuple_objects(shells):
    seen = []

    class Keeping(Harness):
        def emit(self, component, values, stream, anchors, direct_task, message_id):
            seen.append(anchors)
            return super().emit(component, values, stream, anchors, direct_task, message_id)

    bolt, h = shells.bolt(BOLT, "pairs", harness=Keeping())
    tups = tuples(["a", "b"])
    for t in tups:
        bolt.process(t)
    bolt.finish()
    assert len(seen) == 1 and seen[0][0] is tups[0] and seen[0][1] is tups[1]


def test_task_ids_are_replied_in_order_and_only_when_asked(shells):
    # every emit gets a different task-id list; the program asks for ids on its first emit
    # per tuple and not on the second, and reports what it was told on the "ids" stream
    lists = [[1, 2], [3], [4, 5], [6], [7, 8], [9]]
    bolt, h = shells.bolt(BOLT, "taskids", harness=Harness(lists))
    run(bolt, ["x", "y", "z"])
    assert h.emitted() == [["x"], ["y"], ["z"]]
    assert h.emitted("ids") == [["ids", [1, 2]], ["ids", [4, 5]], ["ids", [7, 8]]]
    assert sorted(h.acked) == [1000, 1001, 1002]


def test_need_task_ids_false_gets_no_reply(shells):
    # pass-through emits say need_task_ids false; a stray reply would be read by the next
    # emit that asks for ids ("taskids" mode) and shift every answer after it
    lists = [[10], [11], [12], [13]]
    bolt, h = shells.bolt(BOLT, "taskids", harness=Harness(lists))
    run(bolt, ["a", "b"])
    assert h.emitted("ids") == [["ids", [10]], ["ids", [12]]]


def test_direct_emits(shells):
    bolt, h = shells.bolt(BOLT, "direct")
    run(bolt, ["x", "y"])
    direct = [e for e in h.emits if e.stream == "default"]
    assert [(e.values, e.direct_task, e.anchors) for e in direct] == [(["x"], 3, [1000]),
                                                                      (["y"], 3, [1001])]
    # pystorm answers [3] itself and waits for nothing; nothing was replied that would
    # confuse it (it would otherwise fail the next tuple)
    assert h.emitted("ids") == [["direct", [3]], ["direct", [3]]]
    assert sorted(h.acked) == [1000, 1001] and not h.failed


class FrozenClock:
    """Stands in for the shell components' monotonic clock: time moves only when the test
    says, so a tick is due exactly when the test advances past its period, however slow the
    machine is."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    frozen = FrozenClock()
    monkeypatch.setattr(process, "monotonic", frozen)
    return frozen


def test_tick_tuples_reach_process_tick(clock, shells):
    bolt, h = shells.bolt(BOLT, "ticks", config={"topology.tick.tuple.freq.secs": "1"})
    bolt.process(tuples(["a"])[0])
    clock.advance(1.0)                                 # one tick period: exactly one tick due
    bolt.process(tuples(["b"], 1001)[0])
    bolt.finish()
    assert h.emitted("ticks") == [["tick", 1]]        # pystorm saw comp __system, stream __tick
    assert sorted(h.acked) == [1000, 1001]           # the tick's ack is no tuple's
    assert h.emitted() == [["a"], ["b"]]
    assert all(e.anchors == [] for e in h.emits if e.stream == "ticks")


def test_no_ticks_by_default(clock, shells):
    bolt, h = shells.bolt(BOLT, "ticks")
    bolt.process(tuples(["a"])[0])
    clock.advance(5.0)                                 # long past any tick period a test sets
    bolt.process(tuples(["b"], 1001)[0])
    bolt.finish()
    assert h.emitted("ticks") == []


def test_slow_bolt_with_heartbeats(shells):
    # 0.4 s a tuple, heartbeats every 0.1 s while tuples are outstanding: one is sent while
    # the first tuples are processed. pystorm answers it when it gets to it (after the tuples
    # written before it), and the bolt is not taken for hung meanwhile. The subprocess timeout
    # is far above the time the tuples take even on a loaded machine; what is checked is that
    # a late answer is no failure, not how late it may be.
    bolt, h = shells.bolt(BOLT, "slow", config={
        "topology.multilang.heartbeat.interval.secs": "0.1",
        "topology.subprocess.timeout.secs": "20"})
    run(bolt, ["a", "b", "c", "d"])
    assert bolt.heartbeats >= 1
    # the answer to that heartbeat comes before the next tuple's ack (pystorm handles its
    # input in order): after one more tuple it has surely been read
    run(bolt, ["e"], first_id=1004)
    assert sorted(h.acked) == [1000, 1001, 1002, 1003, 1004] and not h.failed
    assert bolt.syncs >= 1
    assert not bolt.errors and bolt.restarts == 0


def test_metrics_are_recorded(shells):
    bolt, h = shells.bolt(BOLT, "metrics")
    run(bolt, ["a", "b", "c"])
    assert bolt.metrics == {"seen": [1, 2, 3]}


def test_log_levels(shells):
    bolt, h = shells.bolt(BOLT, "logs")
    run(bolt, ["a"])
    assert ("warn", "seen a") in h.logs


def test_exception_in_process_fails_that_tuple_and_a_fresh_process_takes_the_rest(shells):
    bolt, h = shells.bolt(BOLT, "raises")
    run(bolt, ["a", "bad", "b", "c", "d"])
    assert [i for i, _ in h.failed] == [1001]
    error = h.failed[0][1]
    assert "ValueError" in error and "cannot handle 'bad'" in error
    assert sorted(h.acked) == [1000, 1002, 1003, 1004]
    assert h.emitted() == [["a"], ["b"], ["c"], ["d"]]
    assert bolt.restarts == 1 and len(bolt.pids) == 2
    assert any(level == "error" and "ValueError" in msg for level, msg in h.logs)
    assert "exited with code 1" in bolt.errors[0]


def test_values_that_do_not_fit_the_declared_fields(shells):
    # pystorm builds a namedtuple from source->stream->fields before process() is called: it
    # raises outside process(), logs the traceback and exits without failing the tuple
    bolt, h = shells.bolt(BOLT, "passthrough")
    bolt.process(Tuple(1, "spout", "default", 1, ["a", "extra"], source_task=2))
    bolt.process(Tuple(2, "spout", "default", 1, ["b"], source_task=2))
    bolt.finish()
    assert [i for i, _ in h.failed] == [1] and h.acked == [2]
    error = h.failed[0][1]
    assert "exited with code 1" in error and "TypeError" in error


def test_every_tuple_that_raises_gets_a_real_try(shells):
    # each exception costs a fresh process; failures the program reports itself do not make
    # the component give up as fast as silent deaths do (tuples are tried, not written off)
    bolt, h = shells.bolt(BOLT, "raises")
    run(bolt, ["bad"] * 8 + ["good"])
    assert [i for i, _ in h.failed] == list(range(1000, 1008))
    assert all("ValueError" in e and "gave up" not in e for _, e in h.failed)
    assert h.acked == [1008] and bolt.restarts == 8


def test_many_tuples_in_flight(shells):
    bolt, h = shells.bolt(BOLT, "passthrough")
    bolt.max_outstanding = 50                          # exercises waiting at the limit
    values = [f"w{i}" for i in range(2000)]
    run(bolt, values)
    assert len(h.acked) == 2000 and not h.failed
    assert h.emitted() == [[v] for v in values]
    assert all(e.anchors == [1000 + i] for i, e in enumerate(h.emits))


def test_same_tuple_id_twice_at_once(shells):
    bolt, h = shells.bolt(BOLT, "passthrough")
    t1 = Tuple(7, "spout", "default", 1, ["a"], source_task=2)
    t2 = Tuple(7, "spout", "default", 1, ["b"], source_task=2)
    bolt.process(t1)
    bolt.process(t2)
    bolt.finish()
    assert h.acked == [7, 7] and h.emitted() == [["a"], ["b"]]


def test_values_that_are_not_json_fail_the_tuple_only(shells):
    bolt, h = shells.bolt(BOLT, "passthrough")
    bolt.process(Tuple(1, "spout", "default", 1, [object()], source_task=2))
    bolt.process(Tuple(2, "spout", "default", 1, ["fine"], source_task=2))
    bolt.finish()
    assert [i for i, _ in h.failed] == [1] and "not JSON" in h.failed[0][1]
    assert h.acked == [2] and bolt.restarts == 0


def test_spout_next_ack_fail_and_exhaustion(shells):
    spout, h = shells.spout("pystorm_spout.py", "3")
    spout.activate()
    assert [spout.next_tuple() for _ in range(3)] == [True, True, True]
    assert [(e.values, e.message_id) for e in h.emits] == [
        (["sentence 0"], 0), (["sentence 1"], 1), (["sentence 2"], 2)]
    assert all(e.anchors == [] and e.direct_task is None for e in h.emits)
    assert spout.next_tuple() is False                 # emitted nothing: exhausted
    spout.ack(0)
    spout.fail(1)
    assert spout.next_tuple() is True                  # pystorm's spout re-emits what failed
    assert (h.emits[-1].values, h.emits[-1].message_id) == (["sentence 1"], 1)
    assert spout.next_tuple() is False
    spout.deactivate()
    messages = [m for _, m in h.logs]
    for expected in ("activated", "acked 0", "failed 1", "deactivated"):
        assert expected in messages
    assert not spout.errors and spout.restarts == 0


def test_start_errors_name_the_component_and_raise_from_prepare(shells, tmp_path):
    from multilang_harness import workflow

    from recovery.model.graph import ComponentContext
    from recovery.model.workflow import ShellImpl

    impl = ShellImpl(command=sys.executable, script="no_such_script.py")
    wf = workflow(impl)
    bolt = ShellBolt(impl, str(tmp_path))
    bolt._collector = Harness()
    with pytest.raises(ShellError, match=r"'bolt'.*no_such_script\.py.*not found"):
        bolt.prepare(wf.conf("bolt"), ComponentContext(wf, "bolt", 1))
    assert issubclass(ShellError, RecoveryError)

    impl = ShellImpl(command="/nonexistent/interpreter", script=None)
    bolt = ShellBolt(impl, str(tmp_path))
    bolt._collector = Harness()
    with pytest.raises(ShellError, match="cannot start"):
        bolt.prepare(wf.conf("bolt"), ComponentContext(wf, "bolt", 1))
