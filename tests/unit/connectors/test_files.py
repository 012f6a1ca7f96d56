"""recovery.connectors.files: where a file source's files are, how records decode, and the
line splits (every line read by exactly one task, whatever the number of tasks)."""
from __future__ import annotations

import pytest

from recovery.connectors.files import _split_lines, _uri_files, decoder, resolve, source_file, source_files
from recovery.model.workflow import SourceImpl


def test_relative_paths_resolve_against_the_workflow_folder(tmp_path):
    assert resolve("data/x.txt", str(tmp_path)) == str(tmp_path / "data" / "x.txt")
    assert resolve("/abs/x.txt", str(tmp_path)) == "/abs/x.txt"
    assert resolve("x.txt", None) == "x.txt"
    for uri in ("s3://bucket/in/x.txt?region=us-east-1", "file:///data/x.txt", "hdfs://nn:8020/in"):
        assert resolve(uri, str(tmp_path)) == uri


def test_a_file_uri_is_the_local_file_and_other_uris_open_through_pyarrow(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"a\nbb\n")
    local = source_file(f"file://{tmp_path}/in.txt")
    assert (local.path, local.fs, local.name, local.size()) == (str(tmp_path / "in.txt"), None, "in.txt", 5)
    # a filesystem pyarrow opens (here the local one, as pyarrow.fs sees it): the same lines
    impl = SourceImpl(type="file", params=(("path", f"file://{tmp_path}/in.txt"),))
    [by_uri] = _uri_files(impl.param("path"))
    assert by_uri.fs is not None and by_uri.name == "in.txt" and by_uri.size() == 5
    assert list(_split_lines(by_uri, 0, 1)) == [(0, b"a\n"), (2, b"bb\n")]


def test_a_folder_source_reads_its_visible_files_sorted_and_a_glob_its_matches(tmp_path):
    for name in ("b.txt", "a.txt", ".hidden", "_SUCCESS"):
        (tmp_path / name).write_text("x\n")
    folder = SourceImpl(type="file", params=(("path", "."),))
    assert [f.name for f in source_files(folder, str(tmp_path))] == ["a.txt", "b.txt"]
    pattern = SourceImpl(type="file", params=(("path", "b*"),))
    assert [f.path for f in source_files(pattern, str(tmp_path))] == [str(tmp_path / "b.txt")]
    # the same at a URI that pyarrow.fs opens: a folder's visible files, a glob's matches
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("x\n")
    assert [f.name for f in _uri_files(f"file://{tmp_path}")] == ["a.txt", "b.txt"]
    assert [f.path for f in _uri_files(f"file://{tmp_path}/b*")] == [str(tmp_path / "b.txt")]
    assert [f.path for f in _uri_files(f"file://{tmp_path}/*/*.txt")] == [str(tmp_path / "sub" / "c.txt")]
    assert _uri_files(f"file://{tmp_path}/nowhere/*.txt") == []


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


CLUSTER_XML = '''<workflow xmlns="urn:recovery:workflow:1" name="c">
  <spout id="src"><source type="file" path="{src}"/><stream fields="line"/></spout>
  <bolt id="out"><sink type="jsonl"{sink}/><input from="src"/></bolt>
</workflow>'''


def cluster_workflow(tmp_path, src: str, sink: str):
    from recovery.model.xml.parse import parse_string
    (tmp_path / "in.txt").write_text("x\n")
    return parse_string(CLUSTER_XML.format(src=src, sink=sink), base_dir=str(tmp_path))


@pytest.mark.parametrize("src, sink, refused", [
    ("in.txt", ' path="/mnt/shared/out"', "spout 'src' (file source): path 'in.txt'"),
    ("{tmp}/in.txt", ' path="out"', "sink 'out' (jsonl): path 'out'"),
])
def test_a_relative_path_is_refused_at_submit_with_a_cluster_master_in_one_line(tmp_path, src, sink, refused):
    from recovery.errors import WorkflowError
    from recovery.jobs import submit
    wf = cluster_workflow(tmp_path, src.format(tmp=tmp_path), sink)
    with pytest.raises(WorkflowError) as err:
        submit.prepare(wf, "<xml/>", str(tmp_path / "c.xml"), master="spark://head:7077")
    line = str(err.value)
    assert line.startswith(f"{tmp_path / 'c.xml'}: {refused} is relative to the workflow's folder on "
                           "this host, which executors of master spark://head:7077 do not reach: give an "
                           "absolute path on storage every executor mounts, or a URI"), line
    assert "\n" not in line
    submit.prepare(wf, "<xml/>", None, master="local[2]")          # local: relative paths are fine


def test_submit_follow_refuses_a_relative_sink_path_with_a_cluster_master(tmp_path):
    from recovery.errors import WorkflowError
    from recovery.jobs import follow
    from recovery.model.xml.parse import parse_string
    wf = parse_string(CLUSTER_XML.format(src="", sink=' path="out"').replace(
        '<source type="file" path=""/>', '<source type="redis-stream" topic="t"/>'), base_dir=str(tmp_path))
    with pytest.raises(WorkflowError, match="sink 'out' \\(jsonl\\): path 'out' is relative"):
        follow.prepare(wf, "<xml/>", None, master="yarn")


def test_absolute_paths_and_uris_are_taken_as_storage_every_executor_reaches(tmp_path):
    from recovery.connectors.files import check_paths_reach_executors
    for src, sink in ((f"{tmp_path}/in.txt", f' path="{tmp_path}/out"'),
                      (f"file://{tmp_path}/in.txt", ' path="file:///mnt/shared/out"'),
                      ("s3://bucket/in/?region=eu-west-1", ' path="s3://bucket/out" mode="append"'),
                      ("hdfs://nn:8020/in/*.txt", ' path="gs://bucket/out"')):
        check_paths_reach_executors(cluster_workflow(tmp_path, src, sink), "spark://head:7077")
