"""The batched text file source's reader (runtime.batch._line_blocks) finds the lines the row
source's reader (connectors.files._split_lines) finds, at the same offsets, whatever the
number of tasks and wherever its reads cut a line."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.connectors import files
from recovery.runtime import batch as batch_runtime

line = st.one_of(st.sampled_from([b"", b" ", b"\t \r", b"\x0b\x0c", b"\xff\xfe", b"caf\xc3\xa9"]),
                 st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")))
ending = st.sampled_from([b"\n", b"\r\n", b"\n\n"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.tuples(line, ending), max_size=25), last_newline=st.booleans(),
       tasks=st.integers(1, 4), read_bytes=st.sampled_from([1, 5, 16, 1 << 22]), max_lines=st.sampled_from([1, 3, 1024]))
def test_the_batched_reader_finds_the_row_readers_lines(tmp_path, monkeypatch, lines, last_newline, tasks,
                                                        read_bytes, max_lines):
    data = b"".join(a + b for a, b in lines)
    if not last_newline:
        data = data.rstrip(b"\n") + b"tail"
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    monkeypatch.setattr(batch_runtime, "READ_BYTES", read_bytes)
    for index in range(tasks):
        want = [(off, raw) for off, raw in files._split_lines(str(path), index, tasks) if raw.strip()]
        blocks = list(batch_runtime._line_blocks(str(path), index, tasks, max_lines))
        assert all(0 < len(raw) <= max_lines for _, raw in blocks)
        got = [(int(o), r) for offsets, raw in blocks for o, r in zip(offsets.tolist(), raw.to_pylist())]
        assert got == want


@pytest.mark.parametrize("content", [b"", b"\n\n", b"one line, no newline"])
def test_small_files(tmp_path, content):
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    got = [r for _, raw in batch_runtime._line_blocks(str(path), 0, 1, 8) for r in raw.to_pylist()]
    assert got == [raw for _, raw in files._split_lines(str(path), 0, 1) if raw.strip()]
