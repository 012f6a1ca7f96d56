"""The spill store on S3: a real S3-protocol endpoint on loopback (moto's server,
tests/s3.py) reached through pyarrow's S3FileSystem, as a cluster reaches S3 or any service that
speaks its protocol. S3 has no atomic rename: a task's object is written under its final key and
counts once its commit references it. First the store alone, then the tracker's commit, then
the guarantees of tests/integration/test_spill.py with `--spill-dir s3://…`: kill -9 and
`recover` exact, a Spark retry of a half-written file. (`recovery clear` deleting a run's objects:
test_clear_and_clear_all_delete_the_runs_objects; on a cluster of two workers:
tests/integration/test_cluster.py.)"""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from recovery.errors import SpillError
from recovery.jobs import clear, recover
from recovery.model.graph import TaskMap
from recovery.model.run import TaskIdentity
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys, runs, spill, tracker
from tests.integration.conftest import sink_records
from tests.integration.test_engine import run_keys, tracking_keys
from tests.integration.test_spill import _crashed_submit, _expected, _pad_done, _refs, _workflow
from tests.unit.run_records import create_run

TASK = "split:0, round 0"


def _chunks(n: int, size: int = 3000) -> list[tuple[tuple, bytes]]:
    return [(("count", i % 3), os.urandom(size // 2) + bytes(size - size // 2)) for i in range(n)]


def _write(store: spill.SpillStore, chunks: list, run_id: str = "run-1", index: int = 0,
           round_no: int = 0) -> spill.SpillRef:
    w = store.writer(run_id, round_no, "split", index)
    for key, blob in chunks:
        w.add(key, blob)
    ref = w.close()
    assert ref is not None
    return ref


DIE_WHILE_WRITING = """
import os, sys
from recovery.tracking import spill
w = spill.SpillStore(sys.argv[1]).writer(sys.argv[2], int(sys.argv[3]), "split", int(sys.argv[4]))
w.add(("count", 0), b"x" * 100)
w._flush()
os._exit(1)
"""


def _die_while_writing(uri: str, run_id: str, round_no: int, index: int) -> None:
    """An attempt whose process dies (no close, no destructor) after writing part of its file."""
    done = subprocess.run([sys.executable, "-c", DIE_WHILE_WRITING, uri, run_id, str(round_no), str(index)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]


# --- the store --------------------------------------------------------------------------------
def test_an_object_is_written_under_its_final_key_and_appears_whole_at_the_commit(s3_bucket, monkeypatch):
    """No temporary key and no copy: while the task writes, its object's multipart upload is
    open under the final key (nothing listed); its close completes it; the reference names it."""
    monkeypatch.setattr(spill, "FRAME_BYTES", 4000)            # many frames
    store = spill.SpillStore(s3_bucket.uri())
    store.ensure_run_dir("run-1")
    chunks = _chunks(60)
    w = store.writer("run-1", 0, "split", 0)
    for key, blob in chunks[:40]:
        w.add(key, blob)
    key = f"spill/run-1/{w.rel_path}"
    assert s3_bucket.uploads() == [key] and s3_bucket.files() == []
    for k, blob in chunks[40:]:
        w.add(k, blob)
    ref = w.close()
    assert ref is not None and ref.path == w.rel_path
    assert s3_bucket.files() == [key] and s3_bucket.uploads() == []
    assert len(s3_bucket.get(key)) == ref.size
    assert store.run_files("run-1") == [f"run-1/{ref.path}"]
    # another process (a Spark retry, a resumed round) reads it back through a store of its own
    assert list(spill.SpillStore(s3_bucket.uri()).read("run-1", ref, TASK)) == chunks


@pytest.mark.parametrize("damage, words", [
    ("missing", "is missing"),
    ("truncated", "is truncated"),
    ("no-end-marker", "is corrupt"),
    ("flipped-byte", "is corrupt"),
    ("garbage-frame", "is corrupt"),
    ("longer", "is corrupt"),
])
def test_a_missing_or_damaged_object_is_one_line_naming_it_and_the_task(s3_bucket, damage, words):
    store = spill.SpillStore(s3_bucket.uri(credentials=("AKIDINURI", "hush-hush")))
    ref = _write(store, _chunks(20))
    key = f"spill/run-1/{ref.path}"
    data = s3_bucket.get(key)
    if damage == "missing":
        s3_bucket.delete(key)
    elif damage == "truncated":
        s3_bucket.put(key, data[: len(data) // 2])
    elif damage == "no-end-marker":   # the recorded size, but no marker at its end
        s3_bucket.put(key, data[:-16] + bytes(16))
    elif damage == "flipped-byte":
        i = len(data) // 2
        s3_bucket.put(key, data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif damage == "garbage-frame":
        body = struct.pack(">I", 8) + b"notzstd!"
        s3_bucket.put(key, spill.MAGIC + body + data[len(spill.MAGIC) + len(body):])
    else:
        s3_bucket.put(key, data + b"x")
    with pytest.raises(SpillError) as err:
        list(store.read("run-1", ref, TASK))
    line = str(err.value)
    assert "\n" not in line and "hush-hush" not in line and "AKIDINURI" not in line
    # the object named by its URI without the query (the endpoint's options are not its name)
    assert line.startswith(f"spill file s3://{s3_bucket.name}/spill/{key[len('spill/'):]} of task {TASK} "
                           f"(run run-1) is {words.split()[1]}"), line
    assert line.endswith("then `recovery recover run-1` resumes the run")


def test_removal_by_reference_by_round_and_by_run_on_s3(s3_bucket):
    store = spill.SpillStore(s3_bucket.uri())
    store.ensure_run_dir("run-1")
    ref0, ref1 = _write(store, _chunks(2), index=0), _write(store, _chunks(2), index=1)
    orphan = _write(store, _chunks(2), index=2)            # closed, its commit never made: not referenced
    _die_while_writing(s3_bucket.uri(), "run-1", 0, 3)     # an open upload, never completed
    assert len(s3_bucket.uploads("spill/run-1/r0/split/3-")) == 1
    later = _write(store, _chunks(1), round_no=1)
    other = _write(store, _chunks(1), run_id="run-2")
    store.remove("run-1", [ref0])
    store.remove("run-1", [ref0])                          # twice (two consumers dropping it): no error
    assert f"spill/run-1/{ref0.path}" not in s3_bucket.files() and f"spill/run-1/{ref1.path}" in s3_bucket.files()
    store.remove_round("run-1", 0)
    assert s3_bucket.keys("spill/run-1/r0") == [] and orphan.path.startswith("r0/")
    assert s3_bucket.files("spill/run-1/") == [f"spill/run-1/{later.path}"]
    store.remove_run("run-1")
    store.remove_run("run-1")
    assert s3_bucket.keys("spill/run-1") == []              # no object, no folder marker
    assert s3_bucket.files() == [f"spill/run-2/{other.path}"]
    assert list(store.read("run-2", other, "t"))


def test_discard_leaves_no_object_and_no_marker(s3_bucket):
    store = spill.SpillStore(s3_bucket.uri())
    store.ensure_run_dir("run-1")
    w = store.writer("run-1", 3, "split", 0)
    w.add(("count", 0), b"x")
    w._flush()
    w.discard()
    assert s3_bucket.keys("spill/run-1") == [] and s3_bucket.uploads() == []


def test_a_location_that_cannot_be_written_is_one_line_with_its_secret_masked(s3_endpoint):
    from tests.s3 import Bucket

    missing = Bucket(s3_endpoint, "no-such-bucket").uri(credentials=("AKIDINURI", "hush-hush"))
    with pytest.raises(SpillError) as err:
        spill.SpillStore(missing).ensure_run_dir("run-1")
    line = str(err.value)
    assert line.startswith(f"spill location {spill.redact(missing)}: cannot create s3://no-such-bucket/spill/run-1: ")
    assert f"s3://{spill.MASK}@no-such-bucket/" in line and "\n" not in line
    assert "AKIDINURI" not in line and "hush-hush" not in line


# --- the tracker's commit -----------------------------------------------------------------------
def test_a_commit_references_the_object_and_a_rerun_reads_it(redis_client, s3_bucket):
    uri = s3_bucket.uri()
    t = tracker.TaskTracker(redis_client, TaskIdentity("r1", 1, "mid", 0, 2), {}, spill_dir=uri)
    chunks = _chunks(30, 500)
    for key, blob in chunks:
        t.add_output(key, blob)
    assert t.commit({5: 9}, {"executed": 30})
    ref = spill.SpillRef.unpack(redis_client.hget(keys.task_spill("r1", 1), "mid:0"))
    assert s3_bucket.files() == [f"spill/r1/{ref.path}"]
    again = tracker.TaskTracker(redis_client, TaskIdentity("r1", 1, "mid", 0, 2), {}, spill_dir=uri)
    assert again.committed() is not None and list(again.stored_output()) == chunks
    again.drop_outputs("mid", 1)
    assert s3_bucket.files() == [] and not redis_client.exists(keys.task_spill("r1", 1))


def test_clear_and_clear_all_delete_the_runs_objects(redis_url, redis_client, s3_bucket):
    """`recovery clear RUN` deletes that run's objects (found from its run record's URI) and
    its keys, nothing of another run's; clear_all every run's."""
    for run_id in ("r1", "r2"):
        lease = create_run(redis_client, run_id)
        uri = s3_bucket.uri(f"spill-{run_id}")
        runs.update(redis_client, run_id, lease.generation, spill_dir=uri, status="pending")
        assert runs.get(redis_client, run_id).spill_dir == uri          # kept whole, query and all
        _write(spill.SpillStore(uri), _chunks(2), run_id=run_id)
    assert len(s3_bucket.files()) == 2
    done = subprocess.run([sys.executable, "-m", "recovery", "clear", "r1"],
                          env=dict(os.environ, RECOVERY_REDIS_URL=redis_url), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert s3_bucket.keys("spill-r1/r1") == [] and run_keys(redis_client, "r1") == set()
    assert len(s3_bucket.files("spill-r2/r2/")) == 1 and runs.get(redis_client, "r2").spill_dir
    clear.clear_all(redis_client)
    assert s3_bucket.files() == [] and redis_client.keys("*") == []


# --- on Spark, with --spill-dir s3://… ---------------------------------------------------------
def test_kill_9_then_recover_with_spill_files_on_s3_is_exact(spark, redis_url, redis_client, tmp_path, s3_bucket):
    """The URI (its query too) reaches the tasks and the run record whole; a missing object stops
    `recover` with one line naming it (the secret in the URI masked); put back, `recover` is
    exact and leaves no object."""
    uri, run_id = s3_bucket.uri(credentials=("AKIDINURI", "hush-hush")), "s3-crash"
    _crashed_submit(tmp_path, redis_url, redis_client, run_id, uri, _pad_done)
    assert runs.get(redis_client, run_id).spill_dir == uri
    refs = _refs(redis_client, run_id)
    assert {"pad:0", "pad:1"} <= set(refs)
    for ref in refs.values():
        assert len(s3_bucket.get(f"spill/{run_id}/{ref.path}")) == ref.size
    assert not [k for k in run_keys(redis_client, run_id) if ":out:" in k]
    key = f"spill/{run_id}/{refs['pad:1'].path}"
    kept = s3_bucket.get(key)
    s3_bucket.delete(key)
    done = subprocess.run([sys.executable, "-m", "recovery", "recover", run_id, "--master", "local[2]"],
                          env=dict(os.environ, RECOVERY_REDIS_URL=redis_url), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: spill file s3://{s3_bucket.name}/{key} of task pad:1, round 0 (run {run_id}) is "
                      f"missing; put it back, then `recovery recover {run_id}` resumes the run"], done.stderr[-3000:]
    assert "hush-hush" not in done.stderr and "AKIDINURI" not in done.stderr
    # refused before Spark started: the run is as the killed driver left it
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    s3_bucket.put(key, kept)
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out") == _expected()
    assert tracking_keys(redis_client, run_id) == set()
    assert s3_bucket.files(f"spill/{run_id}/") == []


def test_a_spark_retry_of_a_task_whose_object_was_half_written_is_exact(
        spark, redis_url, redis_client, tmp_path, s3_bucket):
    """pad's task 0 dies on Spark's first attempt after writing part of its object (an upload
    begun, never completed: no object); the retry writes an object of its own, which its commit
    references."""
    run_id = "s3-retry"
    task = TaskMap.of(workflow_xml.load(_workflow(tmp_path))).task_ids("pad")[0]
    crash = {"recovery.inject.c.component": "pad", "recovery.inject.c.mode": "crash",
             "recovery.inject.c.task": str(task), "recovery.inject.c.after": "5000",
             "recovery.inject.c.marker": str(tmp_path / "crashed")}
    _crashed_submit(tmp_path, redis_url, redis_client, run_id, s3_bucket.uri(), _pad_done, crash)
    assert (tmp_path / "crashed").exists()                 # the first attempt really died
    referenced = f"spill/{run_id}/{_refs(redis_client, run_id)['pad:0'].path}"
    dead = s3_bucket.uploads(f"spill/{run_id}/r0/pad/0-")
    assert len(dead) == 1 and dead[0] != referenced, (dead, referenced)
    assert referenced in s3_bucket.files()
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out") == _expected()
    assert s3_bucket.files(f"spill/{run_id}/") == []
