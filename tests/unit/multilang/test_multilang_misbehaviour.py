"""Shell processes that break the protocol never stall or crash the run: the tuples involved
fail at the component with an error quoting what the process sent, the process is killed and
a fresh one (a new handshake) takes the tuples after, and nothing is left running.

The programs are tests/multilang_programs/raw_bolt.py and raw_spout.py (the protocol by hand,
misbehaving on request) and pystorm_bolt.py ("prints")."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "multilang_programs"))

from multilang_harness import Harness, Shells, alive, run  # noqa: E402

from recovery.multilang.base import ShellError  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(60)
RAW = "raw_bolt.py"
FAST = {"topology.subprocess.timeout.secs": "2",
        "topology.multilang.heartbeat.interval.secs": "0.2"}


@pytest.fixture
def shells():
    s = Shells()
    yield s
    s.close()


def check_one_failure(bolt, h, bad_id: int, quoted: str, all_ids: list[int]) -> str:
    """The bad tuple failed (once, quoting `quoted`), every other tuple was acked, by a
    fresh process after the failure."""
    assert [i for i, _ in h.failed] == [bad_id], h.failed
    error = h.failed[0][1]
    assert quoted in error, error
    assert f"`{bolt.label}`" in error                 # names the program
    assert len(error) < 1500
    assert sorted(h.acked) == sorted(i for i in all_ids if i != bad_id)
    assert bolt.restarts == 1 and len(bolt.pids) == 2
    assert bolt.errors and bolt.errors[0] in error
    assert any(level == "error" and quoted in msg for level, msg in h.logs)
    return error


def test_invalid_json(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "badjson", "b", "c"])
    error = check_one_failure(bolt, h, 1001, "{this is not json", [t.id for t in tups])
    assert "invalid JSON" in error
    assert h.emitted() == [["a"], ["b"], ["c"]]


def test_message_without_end_then_eof(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "noend", "b"])
    error = check_one_failure(bolt, h, 1001, '{"command": "ack", "id": "1001"}',
                              [t.id for t in tups])
    assert "without an 'end' line" in error and "code 0" in error


def test_message_without_end_from_a_process_that_stays(shells):
    bolt, h = shells.bolt(RAW, "ok", config=FAST)
    tups = run(bolt, ["a", "noend-stay", "b"])
    error = check_one_failure(bolt, h, 1001, '{"command": "ack", "id": "1001"}',
                              [t.id for t in tups])
    assert "hung" in error and "without an 'end' line" in error


def test_raw_text_on_stdout(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "garbage", "b"])
    check_one_failure(bolt, h, 1001, "just text on stdout", [t.id for t in tups])


def test_print_inside_a_pystorm_bolt(shells):
    # on Python 3 pystorm does not redirect print(): the text lands in the protocol stream
    bolt, h = shells.bolt("pystorm_bolt.py", "prints")
    tups = run(bolt, ["a", "bad", "b", "c"])
    check_one_failure(bolt, h, 1001, "debugging output from a bolt", [t.id for t in tups])
    assert h.emitted() == [["a"], ["b"], ["c"]]


def test_unknown_command(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "unknown", "b"])
    check_one_failure(bolt, h, 1001, '"command": "dance"', [t.id for t in tups])


def test_exit_mid_stream_quotes_stderr(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "exit", "b", "c", "d"])
    error = check_one_failure(bolt, h, 1001, "exited with code 3", [t.id for t in tups])
    assert "dying on purpose" in error                 # its stderr, quoted
    assert ("stderr", "dying on purpose") in h.logs    # and logged line by line
    assert h.emitted() == [["a"], ["b"], ["c"], ["d"]]


def test_hang_is_detected_within_the_subprocess_timeout(shells):
    bolt, h = shells.bolt(RAW, "ok", config=FAST)
    tups = run(bolt, ["a", "hang", "b", "c"])
    error = check_one_failure(bolt, h, 1001, "did not answer for 2 s", [t.id for t in tups])
    assert "hung" in error
    assert not alive(bolt.pids[0])                     # the hung process was stopped


def test_never_acks(shells):
    bolt, h = shells.bolt(RAW, "noack", config=FAST)
    run(bolt, ["a", "b", "c"])
    assert [i for i, _ in h.failed] == [1000, 1001, 1002]
    for _, error in h.failed:
        assert "did not ack or fail any of 3 outstanding tuples for 2 s" in error
        assert "it answered heartbeats" in error
    assert not h.acked
    assert bolt.heartbeats >= 1 and bolt.syncs >= 1    # it was alive, just not acking
    # the next tuples get a fresh process
    run(bolt, ["d"], first_id=2000)
    assert [i for i, _ in h.failed][-1] == 2000 and len(bolt.pids) == 2
    assert not alive(bolt.pids[0])                     # the process that never acked was stopped


def test_tuples_written_before_a_crash_go_to_the_fresh_process(shells):
    # everything is written before anything is read: "exit" dies with b..j in its pipe;
    # those were never touched, so the fresh process handles them, once
    bolt, h = shells.bolt(RAW, "ok")
    values = ["a", "exit"] + list("bcdefghij")
    tups = run(bolt, values)
    check_one_failure(bolt, h, 1001, "exited with code 3", [t.id for t in tups])
    assert h.emitted() == [[v] for v in values if v != "exit"]


def test_pipelined_tuples_that_all_kill_the_program(shells):
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["exit"] * 12)
    assert not h.acked
    assert sorted(i for i, _ in h.failed) == [t.id for t in tups]  # each fails once
    assert len(bolt.pids) <= bolt.max_resends + 2      # not a process per tuple


def test_a_program_that_always_dies_is_given_up(shells):
    bolt, h = shells.bolt(RAW, "ok")
    for i in range(10):
        run(bolt, ["exit"], first_id=1000 + i)
    assert sorted(i for i, _ in h.failed) == list(range(1000, 1010))
    assert len(bolt.pids) == bolt.max_restarts + 1     # then it stops starting it
    assert "gave up after 6 consecutive process failures" in h.failed[-1][1]
    assert "without being run" in h.failed[-1][1]
    assert "dying on purpose" in h.failed[-1][1]


def test_program_that_cannot_start(shells):
    with pytest.raises(ShellError, match=r"exited with code 5 during the handshake.*"
                                         r"cannot start: missing configuration"):
        shells.bolt(RAW, "crashstart")


@pytest.mark.parametrize("mode", ["latepid", "nopid"])
def test_bolt_that_writes_its_pid_file_late_or_never_works(shells, mode):
    # Storm's storm.py answers {"pid": N} before it writes the pid file, and Storm's host
    # never needs the file: "latepid" writes it only after reading its first tuple (a host
    # that checks when the pid arrives always finds it missing), "nopid" never writes it
    bolt, h = shells.bolt(RAW, mode)
    tups = run(bolt, ["a", "b", "c"])
    assert sorted(h.acked) == [t.id for t in tups] and not h.failed
    assert h.emitted() == [["a"], ["b"], ["c"]]
    assert not bolt.errors and bolt.restarts == 0
    bolt.cleanup()
    notes = [m for level, m in h.logs if "pid file" in m]
    if mode == "nopid":          # noted once the process is gone, never an error
        assert len(notes) == 1 and ("warn", notes[0]) in h.logs
    else:
        assert notes == []


@pytest.mark.parametrize("mode", ["latepid", "nopid"])
def test_spout_that_writes_its_pid_file_late_or_never_works(shells, mode):
    spout, h = shells.spout("raw_spout.py", mode)
    spout.activate()
    emitted = 0
    while spout.next_tuple():
        emitted += 1
        assert emitted < 20
    assert [e.message_id for e in h.emits] == [0, 1, 2, 3, 4]
    spout.ack(0)
    assert "ack 0" in [m for _, m in h.logs]
    assert not spout.errors and spout.restarts == 0


def test_cleanup_kills_the_whole_process_group(shells):
    bolt, h = shells.bolt(RAW, "fork")
    run(bolt, ["a"])

    def grandchild_logged() -> bool:
        bolt.finish()                  # stderr is read by a thread, logged by finish()
        return any("grandchild" in m for _, m in h.logs)

    wait_for(grandchild_logged, 30, "the bolt to log its grandchild's pid from stderr")
    [line] = [m for level, m in h.logs if level == "stderr" and "grandchild" in m]
    shells.extra_pids.append(int(re.search(r"grandchild (\d+)", line).group(1)))
    # Shells.close() (the fixture) checks it and the bolt's own process are gone


@pytest.mark.parametrize("mode, quoted", [("exit", "exited with code 4"),
                                          ("hang", "did not answer for 2 s"),
                                          ("garbage", "not the protocol")])
def test_spout_failures_restart_the_program(shells, tmp_path, mode, quoted):
    spout, h = shells.spout("raw_spout.py", mode, str(tmp_path / "marker"), config=FAST)
    results = []
    while spout.next_tuple():
        results.append(True)
        assert len(results) < 20
    # 0, 1, then the program misbehaves on the third `next`; a fresh one starts from 0
    assert [e.message_id for e in h.emits] == [0, 1, 0, 1, 2, 3, 4]
    assert spout.restarts == 1 and len(spout.errors) == 1 and quoted in spout.errors[0]
    assert any(level == "error" and quoted in msg for level, msg in h.logs)
    # the raw spout asks for task ids (Storm's default) and logs what it got
    assert "sent 4 to [5, 6]" in [m for _, m in h.logs]


def test_spout_that_fails_at_the_same_place_for_ever_gives_up_by_failing_its_task(shells, tmp_path):
    # "exit" misbehaves only when its marker file is missing: remove it after every failure
    # and every fresh program emits 0, 1 and dies again. Giving up must not look like the
    # end of the input (the run would say `completed` with the rest of it missing): it
    # raises, which fails the spout's task, naming the spout and its last failure
    marker = tmp_path / "marker"
    spout, h = shells.spout("raw_spout.py", "exit", str(marker), config=FAST)
    spout.max_failures = 4
    calls = 0
    with pytest.raises(ShellError) as gave_up:
        while spout.next_tuple():
            calls += 1
            marker.unlink(missing_ok=True)
            assert calls < 100
    error = str(gave_up.value)
    assert len(spout.errors) == 5 and "gave up after 5 process failures" in error
    assert "last failure:" in error and "exited with code 4" in error and "\n" not in error
    assert h.logs[-1] == ("error", error)
    with pytest.raises(ShellError):    # and it stays given up
        spout.next_tuple()


def test_spout_emit_the_host_refuses_fails_its_record_and_the_spout_hears_fail(shells):
    # message 2 goes to an undeclared stream: the collector raises; its record must not
    # vanish: it fails at the spout's position, dead at once (a replay could only fail the
    # same way), and the program hears `fail 2`; the other messages flow
    spout, h = shells.spout("raw_spout.py", "badstream", harness=Harness(streams={"default"}))
    spout.activate()
    drain_as_the_runtime_does(spout, h)
    assert [e.message_id for e in h.emits] == [0, 1, 3, 4]
    [failure] = h.spout_failures
    assert failure.message_id == 2 and failure.stream == "nowhere"
    assert failure.attempt == 3                        # recovery.max.attempts: dead at once
    assert "undeclared stream 'nowhere'" in failure.error
    assert json.loads(failure.raw)["tuple"] == [2]    # the emit as the program sent it
    messages = [m for _, m in h.logs]
    assert messages.count("fail 2") == 1 and "sent 2 to []" in messages
    assert any(level == "error" and "nowhere" in m for level, m in h.logs)
    assert not spout.errors and spout.restarts == 0


def drain_as_the_runtime_does(spout, h) -> None:
    """TaskRunner.run_spout's loop: a next_tuple() that made or failed no record ends it."""
    for _ in range(20):
        before = len(h.emits) + len(h.spout_failures)
        if spout.next_tuple() is False or len(h.emits) + len(h.spout_failures) == before:
            return
    raise AssertionError("the spout never ended")


def test_spout_that_re_emits_what_failed_is_told_once_and_goes_on(shells):
    # a spout re-emitting every failed message would loop for ever: the second refusal of
    # message 2 neither fails its root again nor sends another `fail`; and the `next` that
    # only re-emitted it must not make the runtime take the spout for exhausted
    spout, h = shells.spout("raw_spout.py", "badstream-retry",
                            harness=Harness(streams={"default"}))
    drain_as_the_runtime_does(spout, h)
    assert [e.message_id for e in h.emits] == [0, 1, 3, 4]
    assert [f.message_id for f in h.spout_failures] == [2]
    assert [m for _, m in h.logs].count("fail 2") == 1


def test_bolt_emits_for_a_tuple_failed_by_the_host_do_not_flow(shells):
    # "badstream" first emits on an undeclared stream (the host fails that tuple), then on
    # the default stream anchored to it, then acks it: that emit must not flow (not
    # unanchored and untracked either: the tuple is replayed and would emit it twice)
    bolt, h = shells.bolt(RAW, "ok", harness=Harness(streams={"default"}))
    tups = run(bolt, ["a", "badstream", "b"])
    assert [i for i, _ in h.failed] == [tups[1].id]
    assert "undeclared stream 'nowhere'" in h.failed[0][1]
    assert h.emitted() == [["a"], ["b"]]
    assert all(e.anchors for e in h.emits)
    assert sorted(h.acked) == [tups[0].id, tups[2].id]
    assert bolt.restarts == 0 and not bolt._failed_here   # its ack closed the entry


def test_bolt_emit_of_values_that_cannot_be_encoded_fails_its_tuple(shells):
    # JSON carries 2**70; msgpack (the runtime's encoding) cannot: the emit fails its input
    # tuple instead of failing a whole chunk of other tuples at the task's end
    bolt, h = shells.bolt(RAW, "ok")
    tups = run(bolt, ["a", "bigint", "b"])
    assert [i for i, _ in h.failed] == [tups[1].id]
    assert "out of range" in h.failed[0][1] and str(2 ** 70) in h.failed[0][1]
    assert h.emitted() == [["a"], ["b"]]
    assert sorted(h.acked) == [tups[0].id, tups[2].id]
