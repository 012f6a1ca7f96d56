"""The file source and the jsonl and parquet sinks on S3 (moto's server on loopback, reached
through pyarrow's S3FileSystem, tests/s3.py): an object store without rename, where a part is
committed by a marker naming its attempt's object (recovery/connectors/sink_objects.py). First
the driver's side alone (a folder's runs, `overwrite`, `clear`), then a run on Spark reading
s3:// and writing s3://, with failures and the driver killed -9, then `recover` and `clear`."""
from __future__ import annotations

from html import escape

import pytest

from recovery.connectors import files
from recovery.connectors.sink_base import SinkFolderError
from recovery.connectors.sink_folders import (
    check_file_folders,
    committed_parts,
    part_files,
    part_name,
    read_jsonl_dir,
    remove_uncommitted,
    replace_other_runs,
)
from recovery.connectors.sink_objects import COMMITTED, ObjectFolder, attempt_name
from recovery.jobs import clear, recover
from recovery.model.xml.parse import parse_string
from recovery.tracking import runs
from tests.integration.conftest import kill_when_round_0, start_submit
from tests.integration.test_engine import run_keys

LINES = 1200


def _xml(src: str, jsonl: str, parquet: str, mode: str = "") -> str:
    return f'''<workflow xmlns="urn:recovery:workflow:1" name="s3sinks">
      <spout id="lines" parallelism="2"><source type="file" path="{escape(src)}"/><stream fields="line"/></spout>
      <bolt id="shout" parallelism="2" class="s3comps:Shout">
        <input from="lines" grouping="shuffle"/><stream fields="line"/>
      </bolt>
      <bolt id="j" parallelism="2"><sink type="jsonl" path="{escape(jsonl)}"{mode}/><input from="shout"/></bolt>
      <bolt id="p" parallelism="2"><sink type="parquet" path="{escape(parquet)}"{mode}/><input from="shout"/></bolt>
    </workflow>'''


COMPONENTS = '''
from recovery import BasicBolt


class Shout(BasicBolt):
    def process(self, tup):
        self.emit([tup["line"].upper()])
'''


def _commit(uri: str, run_id: str, task: int, data: bytes = b'{"line": "x"}\n') -> str:
    return ObjectFolder(uri).commit(part_name(run_id, 0, "j", task, "jsonl"), lambda fh: fh.write(data), None)


# --- the driver's side ------------------------------------------------------------------------
def test_a_folder_s_runs_overwrite_and_clear_at_an_s3_folder(tmp_path, s3_bucket):
    """mode="error" sees another run's committed parts (its markers), `overwrite` removes them
    (markers, objects, never-committed attempts), `clear` removes only the run's objects that
    no marker names: its committed parts stay, as in a local folder."""
    jsonl, parquet = s3_bucket.uri("out/j"), s3_bucket.uri("out/p")
    wf = parse_string(_xml(s3_bucket.uri("in"), jsonl, parquet), base_dir=str(tmp_path))
    check_file_folders(wf, "run-b")                                     # no folder yet
    old = _commit(jsonl, "run-a", 1)
    stray = attempt_name(part_name("run-a", 0, "j", 2, "jsonl"))          # run-a's, never committed
    s3_bucket.put(f"out/j/{stray}", b"never committed")
    assert part_files(jsonl) == [part_name("run-a", 0, "j", 1, "jsonl")]
    with pytest.raises(SinkFolderError) as err:
        check_file_folders(wf, "run-b")
    line = str(err.value)
    assert line.startswith(f"sink 'j' (jsonl): folder {jsonl} already holds another run's output (1 part files")
    assert "\n" not in line
    with pytest.raises(SinkFolderError, match="an earlier run with the same id 'run-a'"):
        check_file_folders(wf, "run-a")

    over = parse_string(_xml(s3_bucket.uri("in"), jsonl, parquet, ' mode="overwrite"'), base_dir=str(tmp_path))
    check_file_folders(over, "run-b")
    mine = _commit(jsonl, "run-b", 1, b'{"line": "mine"}\n')
    dead = attempt_name(part_name("run-b", 0, "j", 2, "jsonl"))          # died before its marker
    s3_bucket.put(f"out/j/{dead}", b'{"line": "dead"}\n')
    removed = replace_other_runs(over, "run-b")
    shown = f"s3://{s3_bucket.name}/out/j"
    assert removed == [f"{shown}/{COMMITTED}/{part_name('run-a', 0, 'j', 1, 'jsonl')}.d0"] + sorted(
        [f"{shown}/{old}", f"{shown}/{stray}"])
    assert replace_other_runs(over, "run-b") == []                      # idempotent
    assert read_jsonl_dir(jsonl) == [{"line": "mine"}]                  # never the dead attempt's
    assert remove_uncommitted(over, "run-b") == [f"s3://{s3_bucket.name}/out/j/{dead}"]
    assert s3_bucket.files("out/") == sorted([f"out/j/{mine}", f"out/j/{COMMITTED}/{part_name('run-b', 0, 'j', 1, 'jsonl')}.d0"])
    fs, paths = committed_parts(jsonl)
    assert paths == [f"{s3_bucket.name}/out/j/{mine}"] and fs.type_name == "s3"


def _killed_upload(s3_bucket, key: str) -> None:
    """What an attempt killed while uploading its object leaves: a multipart upload never ended."""
    client = s3_bucket.endpoint.client()
    upload = client.create_multipart_upload(Bucket=s3_bucket.name, Key=key)
    client.upload_part(Bucket=s3_bucket.name, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"half")


def test_killed_attempts_unfinished_uploads_go_when_their_part_commits_and_at_clear(tmp_path, s3_bucket):
    jsonl = s3_bucket.uri("out/j")
    wf = parse_string(_xml(s3_bucket.uri("in"), jsonl, s3_bucket.uri("out/p")), base_dir=str(tmp_path))
    same_part = attempt_name(part_name("run-a", 0, "j", 1, "jsonl"))
    other_task = attempt_name(part_name("run-a", 0, "j", 2, "jsonl"))
    other_run = attempt_name(part_name("run-b", 0, "j", 1, "jsonl"))
    for name in (same_part, other_task, other_run):
        _killed_upload(s3_bucket, f"out/j/{name}")
    assert len(s3_bucket.uploads("out/")) == 3
    _commit(jsonl, "run-a", 1)                      # the part's own killed attempt: aborted
    assert s3_bucket.uploads("out/") == sorted([f"out/j/{other_task}", f"out/j/{other_run}"])
    assert f"s3://{s3_bucket.name}/out/j/{other_task}" in remove_uncommitted(wf, "run-a")   # the run's, at clear
    assert s3_bucket.uploads("out/") == [f"out/j/{other_run}"]
    assert read_jsonl_dir(jsonl) == [{"line": "x"}]


def test_the_file_source_lists_an_s3_folder_or_glob_and_splits_its_objects(s3_bucket):
    for key in ("in/a.txt", "in/b.txt", "in/_SUCCESS", "in/.hidden", "in/sub/c.txt"):
        s3_bucket.put(key, b"one\ntwo\nthree\n")
    impl = parse_string(_xml(s3_bucket.uri("in"), "/o/j", "/o/p"), base_dir="/").component("lines").impl
    listed = files.source_files(impl, "/")
    assert [f.name for f in listed] == ["a.txt", "b.txt"]
    assert [f.shown for f in listed] == [f"s3://{s3_bucket.name}/in/a.txt", f"s3://{s3_bucket.name}/in/b.txt"]
    matched = files.source_files(impl.model_copy(update={"params": (("path", s3_bucket.uri("in/*/*.txt")),)}), "/")
    assert [f.path for f in matched] == [f"{s3_bucket.name}/in/sub/c.txt"]
    for tasks in (1, 2, 3):
        lines = [line for i in range(tasks) for _, line in files._split_lines(listed[0], i, tasks)]
        assert lines == [b"one\n", b"two\n", b"three\n"]


# --- on Spark ---------------------------------------------------------------------------------
def _expected() -> list[str]:
    return sorted(f"LINE-{i}" for i in range(LINES))


def _jsonl_lines(uri: str) -> list[str]:
    return sorted(r["line"] for r in read_jsonl_dir(uri))


def _parquet_lines(uri: str) -> list[str]:
    import pyarrow.dataset as ds
    fs, paths = committed_parts(uri)
    return sorted(ds.dataset(paths, filesystem=fs, format="parquet").to_table().column("line").to_pylist())


def test_kill_9_then_recover_with_source_sinks_and_spill_on_s3_is_exact_and_clear_keeps_only_the_output(
        spark, redis_url, redis_client, tmp_path, s3_bucket):
    """Lines read from s3://, failures at a bolt, both sinks slowed down and the driver killed
    -9 once a sink task committed (so that some parts are committed and others not), then
    `recover`: each sink holds every record exactly once, read through its markers. An attempt
    that died before its marker is never read, and `clear` removes it with the spill objects;
    the committed parts stay."""
    s3_bucket.put("in/a.txt", "".join(f"line-{i}\n" for i in range(0, LINES, 2)).encode())
    s3_bucket.put("in/b.txt", "".join(f"line-{i}\n" for i in range(1, LINES, 2)).encode())
    jsonl, parquet = s3_bucket.uri("out/j"), s3_bucket.uri("out/p")
    (tmp_path / "s3comps.py").write_text(COMPONENTS)
    xml = tmp_path / "s3sinks.xml"
    xml.write_text(_xml(s3_bucket.uri("in"), jsonl, parquet))
    props = {"recovery.inject.t.component": "shout", "recovery.inject.t.rate": "0.05",
             "recovery.retry.delay.period.ms": "10"}
    for name, sink in (("y", "j"), ("z", "p")):
        props.update({f"recovery.inject.{name}.component": sink, f"recovery.inject.{name}.mode": "slow",
                      f"recovery.inject.{name}.rate": "1", f"recovery.inject.{name}.delay.ms": "2"})
    run_id = "s3-sinks-crash"
    proc = start_submit(redis_url, xml, run_id, props, "--master", "local[2,3]", "--spill-dir", s3_bucket.uri("spill"))
    sinks = {"j:0", "j:1", "p:0", "p:1"}
    done = kill_when_round_0(proc, redis_client, run_id, lambda d: bool(d & sinks), "a sink task's commit")
    assert not sinks <= done, done                 # the round was cut short
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    # an attempt that died after writing its object, before its marker: what a reader must skip
    dead = attempt_name(part_name(run_id, 0, "j", 1, "jsonl"))
    s3_bucket.put(f"out/j/{dead}", b'{"line": "LINE-0"}\n')

    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert _jsonl_lines(jsonl) == _expected()
    assert _parquet_lines(parquet) == _expected()
    assert f"out/j/{dead}" in s3_bucket.files("out/j/")

    clear.clear(redis_client, run_id)
    assert run_keys(redis_client, run_id) == set() and s3_bucket.files("spill/") == []
    kept = s3_bucket.files("out/")
    assert f"out/j/{dead}" not in kept
    for uri, prefix in ((jsonl, "out/j/"), (parquet, "out/p/")):
        _, paths = committed_parts(uri)
        markers = [k for k in kept if k.startswith(f"{prefix}{COMMITTED}/")]
        assert sorted(paths + [f"{s3_bucket.name}/{m}" for m in markers]) == \
            sorted(f"{s3_bucket.name}/{k}" for k in kept if k.startswith(prefix))
    assert _jsonl_lines(jsonl) == _expected() and _parquet_lines(parquet) == _expected()

