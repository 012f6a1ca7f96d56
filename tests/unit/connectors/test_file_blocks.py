"""The batched text file source's reader (connectors.file_blocks.line_blocks) finds the lines the row
source's reader (connectors.files._split_lines) finds, at the same offsets, whatever the
number of tasks and wherever its reads cut a line."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.connectors import file_blocks, files
from recovery.tracking import ids

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
    monkeypatch.setattr(file_blocks, "READ_BYTES", read_bytes)
    for index in range(tasks):
        want = [(off, raw) for off, raw in files._split_lines(str(path), index, tasks) if raw.strip()]
        blocks = list(file_blocks.line_blocks(str(path), index, tasks, max_lines))
        assert all(0 < len(raw) <= max_lines for _, raw in blocks)
        got = [(int(o), r) for offsets, raw in blocks for o, r in zip(offsets.tolist(), raw.to_pylist())]
        assert got == want


@pytest.mark.parametrize("content", [b"", b"\n\n", b"one line, no newline"])
def test_small_files(tmp_path, content):
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    got = [r for _, raw in file_blocks.line_blocks(str(path), 0, 1, 8) for r in raw.to_pylist()]
    assert got == [raw for _, raw in files._split_lines(str(path), 0, 1) if raw.strip()]


# --- the source over its runner (connectors.runner.BatchSourceRunner) ---------------------------
class Runner:
    """What file_source_blocks uses of its task runner: the component, the batch size, the
    root-replay selection, emit_roots and spout_record."""

    def __init__(self, path, batch_size: int, replay: set[int] | None = None):
        from recovery.model.workflow import Component, SourceImpl, StreamDef, Workflow
        self.comp = Component(id="lines", kind="spout", impl=SourceImpl(type="file", params=(("path", str(path)),)),
                              streams=(StreamDef(fields=("line",)),))
        self.wf = Workflow(name="t", components=(self.comp,))
        self.index, self.batch_size, self.replay = 0, batch_size, replay
        self.blocks: list[tuple[list[int], list[str], str]] = []
        self.records: list[tuple[tuple, bytes]] = []

    def select_roots(self, hashes):
        return None if self.replay is None else np.isin(hashes, np.array(sorted(self.replay), dtype=np.uint64))

    def emit_roots(self, hashes, values, stream):
        self.blocks.append((hashes.tolist(), values.column("line").to_pylist(), stream))

    def spout_record(self, message_id, decode, raw, stream="default", fmt="", attempt=1, replayed=False):
        self.records.append((message_id, raw))


def test_blocks_of_lines_are_emitted_as_roots_by_their_position_hashes(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\r\ntwo\n\nthree\nfour")
    runner = Runner(path, batch_size=2)
    list(file_blocks.file_source_blocks(runner))
    offsets = [0, 5, 10, 16]   # the blank line is no record
    want = ids.position_hashes("in.txt", np.array(offsets, dtype=np.uint64)).tolist()
    assert all(0 < len(hashes) <= 2 and stream == "default" for hashes, _, stream in runner.blocks)
    assert [h for hashes, _, _ in runner.blocks for h in hashes] == want
    assert [line for _, lines, _ in runner.blocks for line in lines] == ["one", "two", "three", "four"]
    assert runner.records == []


def test_a_block_with_a_line_that_is_not_utf8_goes_record_by_record(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"good\nbad \xff\nfine\n")
    runner = Runner(path, batch_size=2)
    list(file_blocks.file_source_blocks(runner))
    assert runner.records == [(("in.txt", 0), b"good\n"), (("in.txt", 5), b"bad \xff\n")]
    assert [lines for _, lines, _ in runner.blocks] == [["fine"]]


def test_a_root_replay_emits_only_the_selected_lines(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb\nc\n")
    hashes = ids.position_hashes("in.txt", np.array([0, 2, 4], dtype=np.uint64)).tolist()
    runner = Runner(path, batch_size=8, replay={hashes[1]})
    list(file_blocks.file_source_blocks(runner))
    assert runner.blocks == [([hashes[1]], ["b"], "default")]
    nothing = Runner(path, batch_size=8, replay=set())
    list(file_blocks.file_source_blocks(nothing))
    assert nothing.blocks == [] and nothing.records == []
