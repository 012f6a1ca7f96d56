"""recovery.connectors.files: where a file source's files are, how records decode, and the
line splits (every line read by exactly one task, whatever the number of tasks)."""
from __future__ import annotations

import pytest

from recovery.connectors.files import _split_lines, decoder, resolve, source_files
from recovery.model.workflow import SourceImpl


def test_relative_paths_resolve_against_the_workflow_folder(tmp_path):
    assert resolve("data/x.txt", str(tmp_path)) == str(tmp_path / "data" / "x.txt")
    assert resolve("/abs/x.txt", str(tmp_path)) == "/abs/x.txt"
    assert resolve("x.txt", None) == "x.txt"


def test_a_folder_source_reads_its_visible_files_sorted_and_a_glob_its_matches(tmp_path):
    for name in ("b.txt", "a.txt", ".hidden", "_SUCCESS"):
        (tmp_path / name).write_text("x\n")
    folder = SourceImpl(type="file", params=(("path", "."),))
    assert [p.rsplit("/", 1)[1] for p in source_files(folder, str(tmp_path))] == ["a.txt", "b.txt"]
    pattern = SourceImpl(type="file", params=(("path", "b*"),))
    assert source_files(pattern, str(tmp_path)) == [str(tmp_path / "b.txt")]


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
def test_every_line_goes_to_exactly_one_task(tmp_path, tasks):
    lines = [f"line {i} {'x' * (i % 5)}\n".encode() for i in range(40)]
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(lines))
    read = [line for index in range(tasks) for _, line in _split_lines(str(path), index, tasks)]
    assert read == lines


def test_decoders_text_and_jsonl():
    assert decoder("text", ("line",))(b"hello\r\n") == ["hello"]
    decode = decoder("jsonl", ("a", "b"))
    assert decode(b'{"b": 2, "a": 1}') == [1, 2]
    with pytest.raises(KeyError, match="no field 'b'"):
        decode(b'{"a": 1}')
    with pytest.raises(ValueError, match="expected a JSON object"):
        decode(b"[1, 2]")
    with pytest.raises(ValueError, match="unknown source format"):
        decoder("csv", ())
