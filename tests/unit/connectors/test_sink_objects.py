"""A file sink's folder at a URI (recovery/connectors/sink_objects.py): parts committed by
marker, never by rename. Run here on the local disk as pyarrow.fs opens it (a URI folder that
is not file:// goes this way; tests/integration/test_sinks_s3.py runs it on an S3 endpoint)."""
from __future__ import annotations

import pytest

from recovery.connectors.sink_folders import part_name
from recovery.connectors.sink_objects import ATTEMPT, COMMITTED, ObjectFolder, attempt_name, marker_name, part_of

PART = part_name("run-1", 0, "out", 3, "jsonl")
MARKER = f"{COMMITTED}/{marker_name(PART, 0)}"      # written by the run's first driver


def folder(tmp_path) -> ObjectFolder:
    return ObjectFolder(f"file://{tmp_path}/out")


def files(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_an_attempt_s_object_is_named_by_its_part_and_a_token_of_its_own():
    a, b = attempt_name(PART), attempt_name(PART)
    assert a != b and ATTEMPT.match(a) and not ATTEMPT.match(PART)
    assert a.startswith("part-run-1-r0000-out-t0003-") and a.endswith(".jsonl")
    assert part_of(a) == part_of(b) == PART


def test_a_commit_writes_the_object_then_the_marker_that_names_it(tmp_path):
    at = folder(tmp_path)
    name = at.commit(PART, lambda fh: fh.write(b'{"n": 1}\n'), None)
    assert files(tmp_path) == sorted([name, f"{COMMITTED}/{PART}.d0"])
    assert (tmp_path / "out" / name).read_bytes() == b'{"n": 1}\n'
    assert at.markers(lambda n: True) == [PART] and at.named_by(PART) == name
    assert at.attempts() == [name]


def test_a_retry_points_the_marker_at_its_own_object_and_removes_the_one_it_replaced(tmp_path):
    at = folder(tmp_path)
    first = at.commit(PART, lambda fh: fh.write(b"1\n"), None)
    second = at.commit(PART, lambda fh: fh.write(b"2\n"), None)
    assert first != second and at.named_by(PART) == second
    assert files(tmp_path) == sorted([second, MARKER])


def test_an_attempt_that_fails_or_is_fenced_leaves_no_object_and_moves_no_marker(tmp_path):
    at = folder(tmp_path)
    kept = at.commit(PART, lambda fh: fh.write(b"1\n"), None)

    def broken(fh):
        fh.write(b"half")
        raise OSError("disk full")

    def taken_over():
        raise RuntimeError("run taken over")

    with pytest.raises(OSError, match="disk full"):
        at.commit(PART, broken, None)
    with pytest.raises(RuntimeError, match="taken over"):
        at.commit(PART, lambda fh: fh.write(b"2\n"), taken_over)
    assert at.named_by(PART) == kept and files(tmp_path) == sorted([kept, MARKER])


def test_a_marker_that_names_no_attempt_of_its_part_is_never_followed(tmp_path):
    at = folder(tmp_path)
    at.commit(PART, lambda fh: fh.write(b"1\n"), None)
    other = attempt_name(part_name("run-1", 0, "out", 4, "jsonl"))
    for content in ("../../etc/passwd", other, ""):
        (tmp_path / "out" / MARKER).write_text(content)
        assert at.named_by(PART) is None
    assert at.named_by(part_name("run-1", 9, "out", 3, "jsonl")) is None      # no marker


def test_of_a_part_s_markers_the_latest_driver_s_counts_whenever_it_was_written(tmp_path):
    """A driver taken over may pass its ownership check, then write its marker after its
    successor wrote its own: the marker of the driver that came later (more drivers before it)
    counts, the other is never read and goes with the objects no counting marker names."""
    at = folder(tmp_path)
    successor = at.commit(PART, lambda fh: fh.write(b"successor\n"), lambda: 1)
    late = at.commit(PART, lambda fh: fh.write(b"taken over\n"), lambda: 0)     # after the successor's
    assert at.named_by(PART) == successor and at.markers(lambda n: True) == [PART]
    orphan = attempt_name(PART)
    (tmp_path / "out" / orphan).write_bytes(b"never committed")
    mine = lambda n: n.startswith("part-run-1-")  # noqa: E731
    removed = at.remove_uncounted(mine, mine)
    assert sorted(removed) == sorted([MARKER, late, orphan])
    assert files(tmp_path) == sorted([successor, f"{COMMITTED}/{marker_name(PART, 1)}"])
    assert at.remove_uncounted(mine, mine) == []


def test_remove_parts_takes_the_markers_first_then_the_objects_and_missing_ones_are_fine(tmp_path):
    at = folder(tmp_path)
    first = at.commit(PART, lambda fh: fh.write(b"1\n"), None)
    later = at.commit(PART, lambda fh: fh.write(b"2\n"), lambda: 1)
    orphan = attempt_name(PART)
    (tmp_path / "out" / orphan).write_bytes(b"never committed")
    assert sorted(at.remove_parts(lambda p: p == PART, [orphan])) == sorted(
        [MARKER, f"{COMMITTED}/{marker_name(PART, 1)}", first, later, orphan])
    at.remove_parts(lambda p: p == PART, [orphan, first])
    assert files(tmp_path) == [] and at.named_by(PART) is None


def test_an_attempt_written_in_pieces_is_named_by_no_marker_until_its_commit_and_an_abort_leaves_nothing(tmp_path):
    at = folder(tmp_path)
    attempt = at.attempt(PART)
    for i in range(3):
        attempt.stream.write(b'{"n": %d}\n' % i)
        assert at.named_by(PART) is None          # a reader sees no part while it is written
    name = attempt.commit(None)
    assert at.named_by(PART) == name and (tmp_path / "out" / name).read_bytes() == b'{"n": 0}\n{"n": 1}\n{"n": 2}\n'
    dropped = at.attempt(PART)
    dropped.stream.write(b"half a part")
    dropped.abort()
    assert files(tmp_path) == sorted([name, MARKER]) and at.named_by(PART) == name
