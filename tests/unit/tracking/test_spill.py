"""The spill store (recovery/tracking/spill.py): files written per attempt under their final
names (a commit renames nothing), read back exactly, and a missing, truncated or corrupt file
named in one line. (On S3: tests/integration/test_spill_s3.py.)"""
from __future__ import annotations

import os
import struct

import msgpack
import pytest

from recovery.errors import RecoveryError, SpillError
from recovery.jobs import clear
from recovery.model.run import TaskIdentity
from recovery.tracking import keys, runs, spill, tracker
from tests.helpers import file_mode
from tests.unit.run_records import create_run


def _chunks(n: int, size: int = 100) -> list[tuple[tuple, bytes]]:
    return [(("count", i % 3), os.urandom(size // 2) + bytes(size - size // 2)) for i in range(n)]


def _write(store: spill.SpillStore, chunks: list, run_id: str = "run-1", index: int = 0) -> spill.SpillRef:
    w = store.writer(run_id, 0, "split", index)
    for key, blob in chunks:
        w.add(key, blob)
    ref = w.close()
    assert ref is not None
    return ref


def test_a_file_reads_back_every_chunk_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "FRAME_BYTES", 1000)   # many frames
    store = spill.SpillStore(str(tmp_path))
    chunks = _chunks(50)
    ref = _write(store, chunks)
    assert ref.chunks == 50 and ref.path.startswith("r0/split/0-") and ref.path.endswith(".spill")
    assert list(store.read("run-1", ref, "split:0, round 0")) == chunks
    assert ref.size == os.path.getsize(tmp_path / "run-1" / ref.path)
    assert spill.SpillRef.unpack(ref.pack()) == ref


def test_nothing_emitted_writes_no_file(tmp_path):
    store = spill.SpillStore(str(tmp_path))
    assert store.writer("run-1", 0, "sink", 0).close() is None
    assert store.run_files("run-1") == []


def test_files_are_private_and_attempts_never_share_a_file(tmp_path, umask_022):
    store = spill.SpillStore(str(tmp_path))
    a, b = store.writer("run-1", 0, "split", 1), store.writer("run-1", 0, "split", 1)
    for w in (a, b):
        w.add(("count", 0), b"x" * 10)
    ref_a = a.close()
    b._flush()   # b is still being written when a commits
    assert ref_a is not None
    files = store.run_files("run-1")
    assert len(files) == 2 and f"run-1/{ref_a.path}" in files
    assert all(f.startswith("run-1/r0/split/1-") and f.endswith(".spill") for f in files)
    for f in files:
        assert file_mode(tmp_path / f) == 0o600
    for folder in ("run-1", "run-1/r0", "run-1/r0/split"):
        assert file_mode(tmp_path / folder) == 0o700
    assert list(store.read("run-1", ref_a, "t")) == [(("count", 0), b"x" * 10)]


def test_folders_in_a_shared_location_take_its_modes(tmp_path, umask_022):
    """A spill folder given on a cluster is shared with executors that may run as another user
    than the driver: the run's folders inside it are as open as it is, its files stay 0600."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    writer = spill.SpillStore(str(shared)).writer("run-1", 0, "split", 1)
    writer.add(("count", 0), b"x")
    ref = writer.close()
    assert ref is not None
    for folder in ("run-1", "run-1/r0", "run-1/r0/split"):
        assert file_mode(shared / folder) == 0o777, folder
    assert file_mode(shared / "run-1" / ref.path) == 0o600


def test_a_file_is_written_under_its_final_name_and_the_commit_renames_nothing(tmp_path, monkeypatch):
    """The name the reference holds is the file's name from its first frame on: a filesystem
    without an atomic rename (S3) commits the same way. A rename at commit fails this test."""
    monkeypatch.setattr(spill, "FRAME_BYTES", 1000)
    store = spill.SpillStore(str(tmp_path))
    w = store.writer("run-1", 0, "split", 0)
    chunks = _chunks(30, 40_000)   # frames bigger than the file object's buffer: written through
    for key, blob in chunks[:20]:
        w.add(key, blob)
    final = tmp_path / "run-1" / w.rel_path
    half = final.read_bytes()
    assert half.startswith(spill.MAGIC) and len(half) > len(spill.MAGIC)   # frames, no end marker yet
    assert store.run_files("run-1") == [f"run-1/{w.rel_path}"]
    inode = final.stat().st_ino
    monkeypatch.setattr(os, "replace", _no_rename)
    monkeypatch.setattr(os, "rename", _no_rename)
    for key, blob in chunks[20:]:
        w.add(key, blob)
    ref = w.close()
    assert ref is not None and ref.path == w.rel_path and final.stat().st_ino == inode
    assert store.run_files("run-1") == [f"run-1/{ref.path}"]
    assert list(store.read("run-1", ref, "t")) == chunks


def _no_rename(*args: object) -> None:
    raise AssertionError(f"a rename at commit: {args}")


@pytest.mark.parametrize("given, shown", [
    ("s3://bkt/spill?endpoint_override=http://127.0.0.1:9000&region=us-east-1&scheme=http",
     "s3://bkt/spill?endpoint_override=http://127.0.0.1:9000&region=us-east-1&scheme=http"),
    ("s3://bkt/spill?access_key=AKID&secret_key=s3cr%2Fet&session_token=TOK&region=eu-west-1",
     "s3://bkt/spill?access_key=***&secret_key=***&session_token=***&region=eu-west-1"),
    ("s3://AKID:s3cret@bkt/spill?region=us-east-1", "s3://***@bkt/spill?region=us-east-1"),
    ("hdfs://me:pw@namenode:8020/spill", "hdfs://***@namenode:8020/spill"),
    ("/var/spill", "/var/spill"),
])
def test_a_location_is_shown_with_its_credentials_masked(given, shown):
    assert spill.redact(given) == shown
    for secret in ("AKID", "s3cret", "s3cr%2Fet", "TOK", "pw"):
        assert secret not in spill.redact_text(f"error: cannot open {given}: refused")
        assert secret not in spill.redact(given)


def test_an_error_quoting_a_credential_outside_a_uri_is_masked(monkeypatch):
    """A client's error may quote a key decoded, or the environment's secret: the store's
    messages mask them too."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    store = spill.SpillStore("file:///nonexistent?secret_key=s3cr%2Fet")
    line = store.why(OSError("denied for s3cr/et (and s3cr%2Fet) with env-secret-value\nsecond line"))
    assert line == "denied for *** (and ***) with ***"


def test_an_unusable_uri_location_is_one_line_with_its_secrets_masked():
    with pytest.raises(SpillError) as err:
        spill.SpillStore("nosuchscheme://bkt/x?secret_key=hush&region=r")
    assert str(err.value).startswith("spill location nosuchscheme://bkt/x?secret_key=***&region=r: cannot open it")
    assert "hush" not in str(err.value) and "\n" not in str(err.value)


def test_run_ids_and_component_ids_stay_one_path_segment(tmp_path):
    store = spill.SpillStore(str(tmp_path))
    _write(store, _chunks(1), run_id="../escape")
    assert not (tmp_path.parent / "escape").exists()
    assert store.run_files("../escape") and all(f.startswith("%2E.%2Fescape/") for f in store.run_files("../escape"))


@pytest.mark.parametrize("damage, words", [
    ("missing", "is missing"),
    ("truncated", "is truncated"),
    ("no-end-marker", "is corrupt"),
    ("flipped-byte", "is corrupt"),
    ("garbage-frame", "is corrupt"),
])
def test_a_missing_or_damaged_file_is_one_line_naming_the_file_and_the_task(tmp_path, damage, words):
    store = spill.SpillStore(str(tmp_path))
    ref = _write(store, _chunks(20, 3000))
    path = tmp_path / "run-1" / ref.path
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "no-end-marker":   # the same size as recorded, but the tail is not a marker
        path.write_bytes(data[:-16] + bytes(16))
    elif damage == "flipped-byte":
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    else:   # a frame header that fits, and bytes that do not decode
        body = struct.pack(">I", 8) + b"notzstd!"
        path.write_bytes(spill.MAGIC + body + data[len(spill.MAGIC) + len(body):])
    with pytest.raises(SpillError) as err:
        list(store.read("run-1", ref, "split:0, round 0"))
    line = str(err.value)
    assert "\n" not in line
    assert str(path) in line and "task split:0, round 0" in line and words in line, line
    assert "recovery recover run-1" in line


def test_a_bigger_file_than_recorded_is_corrupt(tmp_path):
    store = spill.SpillStore(str(tmp_path))
    ref = _write(store, _chunks(3))
    path = tmp_path / "run-1" / ref.path
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(SpillError, match="is corrupt"):
        list(store.read("run-1", ref, "t"))


def test_removal_by_reference_by_round_and_by_run(tmp_path):
    store = spill.SpillStore(str(tmp_path))
    ref0 = _write(store, _chunks(2), index=0)
    ref1 = _write(store, _chunks(2), index=1)
    orphan = store.writer("run-1", 0, "split", 2)
    orphan.add(("count", 0), b"x")
    orphan._flush()                       # an attempt that died: a file nothing references
    other = _write(store, _chunks(1), run_id="run-2")
    store.remove("run-1", [ref0])
    assert not (tmp_path / "run-1" / ref0.path).exists() and (tmp_path / "run-1" / ref1.path).exists()
    store.remove("run-1", [ref0])          # twice (two consumers dropping it): no error
    store.remove_round("run-1", 0)
    assert store.run_files("run-1") == []
    store.remove_run("run-1")
    store.remove_run("run-1")
    assert not (tmp_path / "run-1").exists()
    assert list(store.read("run-2", other, "t"))


def test_discard_leaves_no_file_and_no_empty_folder(tmp_path):
    store = spill.SpillStore(str(tmp_path))
    w = store.writer("run-1", 3, "split", 0)
    w.add(("count", 0), b"x")
    w._flush()
    w.discard()
    assert not (tmp_path / "run-1").exists()


def test_locations_default_under_recovery_home_and_the_flag_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    assert spill.location() == str(tmp_path / "home" / "spill")
    assert spill.location(None, "conf-dir") == os.path.abspath("conf-dir")
    assert spill.location(str(tmp_path / "flag"), "conf-dir") == str(tmp_path / "flag")
    assert spill.location("hdfs://nn:8020/spill", "x") == "hdfs://nn:8020/spill"


def test_a_filesystem_uri_works_through_pyarrow(tmp_path):
    """A URI location goes through pyarrow.fs (mock:// is Arrow's in-memory filesystem);
    file:// is a local folder, with private modes."""
    store = spill.SpillStore("mock:///spill")
    chunks = _chunks(5)
    ref = _write(store, chunks)
    assert list(store.read("run-1", ref, "t")) == chunks
    assert store.run_files("run-1") == [f"run-1/{ref.path}"]
    store.remove_run("run-1")
    assert store.run_files("run-1") == []
    local = spill.SpillStore(f"file://{tmp_path}")
    ref = _write(local, chunks)
    assert file_mode(tmp_path / "run-1" / ref.path) == 0o600


def test_an_unusable_location_is_one_line_naming_it(tmp_path):
    with pytest.raises(SpillError, match="spill location nosuchscheme://x"):
        spill.SpillStore("nosuchscheme://x")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpillError, match=f"cannot create {blocker}"):
        spill.SpillStore(str(blocker)).ensure_run_dir("r")


def test_the_driver_finds_the_line_in_a_spark_error():
    text = ("org.apache.spark.SparkException: Job aborted...\n  File \"x\", line 1\n"
            "recovery.errors.SpillError: spill file /s/r/r0/split/0-ab.spill of task split:0, round 0 "
            "(run r) is missing; put it back\n\tat org.apache...")
    assert spill.error_line(text) == ("spill file /s/r/r0/split/0-ab.spill of task split:0, round 0 "
                                      "(run r) is missing; put it back")
    assert spill.error_line("ValueError: x") is None


# --- the tracker's side: the commit references the file; replay, drop, fencing ----------------
CONF = {"recovery.max.attempts": "3"}


def _tracker(client, spill_dir, generation=None, run_id="r1"):
    return tracker.TaskTracker(client, TaskIdentity(run_id, 1, "mid", 0, 2), CONF, generation=generation,
                               spill_dir=str(spill_dir))


def test_a_commit_references_the_file_and_redis_holds_no_output(fake_redis, tmp_path):
    t = _tracker(fake_redis, tmp_path)
    chunks = _chunks(30, 500)
    for key, blob in chunks:
        t.add_output(key, blob)
    assert t.commit({5: 9}, {"executed": 30})
    ref = spill.SpillRef.unpack(fake_redis.hget(keys.task_spill("r1", 1), "mid:0"))
    assert ref.chunks == 30 and (tmp_path / "r1" / ref.path).is_file()
    assert msgpack.unpackb(fake_redis.hget(keys.task_done("r1", 1), "mid:0"))["spill_bytes"] == ref.size
    # Redis holds the reference, not the 15 kB of output
    assert sum(len(fake_redis.dump(k) or b"") for k in fake_redis.keys("*")) < 1000
    again = _tracker(fake_redis, tmp_path)          # the task runs again (a Spark retry)
    assert again.committed() is not None and list(again.stored_output()) == chunks


def test_a_committed_tasks_missing_file_is_a_spill_error_naming_file_and_task(fake_redis, tmp_path):
    t = _tracker(fake_redis, tmp_path)
    t.add_output(("out", 0), b"blob")
    assert t.commit({}, {"executed": 1})
    ref = spill.SpillRef.unpack(fake_redis.hget(keys.task_spill("r1", 1), "mid:0"))
    (tmp_path / "r1" / ref.path).unlink()
    with pytest.raises(SpillError) as err:
        list(_tracker(fake_redis, tmp_path).stored_output())
    assert f"spill file {tmp_path / 'r1' / ref.path} of task mid:0, round 1 (run r1) is missing" in str(err.value)


def test_dropped_outputs_leave_no_file_no_reference_and_replay_nothing(fake_redis, tmp_path):
    t = _tracker(fake_redis, tmp_path)
    t.add_output(("out", 0), b"blob")
    assert t.commit({}, {"executed": 1})
    t.drop_outputs("mid", 1)
    assert not fake_redis.exists(keys.task_spill("r1", 1))
    assert spill.SpillStore(str(tmp_path)).run_files("r1") == []
    assert list(_tracker(fake_redis, tmp_path).stored_output()) == []


def test_a_task_of_a_cleared_run_leaves_no_spill_file(fake_redis, tmp_path):
    lease = create_run(fake_redis)
    t = _tracker(fake_redis, tmp_path, lease.generation)
    for key, blob in _chunks(40, 20_000):            # frames written before the clear
        t.add_output(key, blob)
    assert spill.SpillStore(str(tmp_path)).run_files("r1")
    clear.clear(fake_redis, "r1", force=True)
    assert t.commit({5: 9}, {"executed": 1}) is False
    assert spill.SpillStore(str(tmp_path)).run_files("r1") == []
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))


# --- the driver's side, in process (the test kit: jobs.submit/recover, no JVM) ----------------
def test_a_missing_file_refuses_the_resume_with_its_line_and_the_run_resumes_once_it_is_back(fake_redis):
    from recovery import testing
    from tests.unit.testing.test_testing_kit import pipeline, words

    items = ["a", testing.CRASH, "b", "c"]   # spout task 0 commits (its file), task 1 "kills" the driver
    run = testing.run_local(pipeline(2), fake_redis, inputs={"words": items})
    assert run.interrupted == "crash"
    rec = runs.get(fake_redis, run.run_id)
    ref = spill.SpillRef.unpack(fake_redis.hget(keys.task_spill(run.run_id, 0), "words:0"))
    path = spill.SpillStore(rec.spill_dir).files.root / spill.safe_name(run.run_id) / ref.path
    kept = path.read_bytes()
    path.unlink()
    # refused before the round starts (no Spark job), the run left as the killed driver left it
    with pytest.raises(SpillError) as err:
        testing.recover_local(run)
    assert str(err.value) == (f"spill file {path} of task words:0, round 0 (run {run.run_id}) is missing; put it "
                              f"back, then `recovery recover {run.run_id}` resumes the run")
    assert runs.status_of(runs.get(fake_redis, run.run_id)) == runs.CRASHED
    path.write_bytes(kept)
    testing.recover_local(run)
    assert run.status == runs.COMPLETED and words(run) == ["A", "B", "C"]
    assert spill.SpillStore(rec.spill_dir).run_files(run.run_id) == []
    assert run.summary.spill_bytes > 0
    clear.clear(fake_redis, run.run_id)
    assert not (spill.SpillStore(rec.spill_dir).files.root / spill.safe_name(run.run_id)).exists()


def test_a_failed_write_fails_the_commit_never_an_emit(tmp_path, fake_redis):
    """A spill write that fails (disk full, a folder removed by hand) is raised by the commit, so
    the task fails and Spark's retry writes a new file; an emit never sees it (it would fail a
    user's tuple instead)."""
    t = _tracker(fake_redis, tmp_path)
    t.add_output(("out", 0), b"x" * 10)
    t._writer._flush()
    import shutil
    shutil.rmtree(tmp_path / "r1")
    t._writer._fh.close()          # the next write fails (a closed file, as a lost disk would)
    t.add_output(("out", 0), b"y" * (spill.FRAME_BYTES + 1))
    t.add_output(("out", 0), b"z")
    with pytest.raises(SpillError, match=r"cannot write spill file .* of task mid:0, round 1 \(run r1\)"):
        t.commit({}, {"executed": 1})
    assert not fake_redis.exists(keys.task_done("r1", 1))


def test_the_default_location_is_private_from_recovery_home_down(tmp_path, monkeypatch, umask_022):
    home = tmp_path / "fresh-home"
    monkeypatch.setenv("RECOVERY_HOME", str(home))
    _write(spill.SpillStore(spill.location()), _chunks(1))
    for folder in (home, home / "spill", home / "spill" / "run-1"):
        assert file_mode(folder) == 0o700, folder


def test_clear_all_removes_every_runs_spill_folder_where_its_record_says(fake_redis, tmp_path):
    for run_id in ("r1", "r2"):
        lease = create_run(fake_redis, run_id)
        runs.update(fake_redis, run_id, lease.generation, spill_dir=str(tmp_path / run_id[-1]), status="pending")
        _write(spill.SpillStore(str(tmp_path / run_id[-1])), _chunks(2), run_id=run_id)
    clear.clear_all(fake_redis)
    assert not (tmp_path / "1" / "r1").exists() and not (tmp_path / "2" / "r2").exists()
    assert fake_redis.keys("*") == []


def test_a_default_spill_folder_an_earlier_version_left_open_is_tightened(tmp_path, monkeypatch, umask_022):
    home = tmp_path / "old-home"
    (home / "spill").mkdir(parents=True)
    os.chmod(home, 0o700)
    os.chmod(home / "spill", 0o755)
    monkeypatch.setenv("RECOVERY_HOME", str(home))
    _write(spill.SpillStore(spill.location()), _chunks(1))
    assert file_mode(home / "spill") == 0o700


@pytest.mark.parametrize("explicit,configured", [(None, None), ("", "  "), ("spill", None), (None, "rel/spill")])
def test_a_spill_location_executors_do_not_reach_is_refused_with_a_clusters_master(explicit, configured):
    with pytest.raises(RecoveryError) as err:
        spill.check_reaches_executors(explicit, configured, "spark://head:7077")
    line = str(err.value)
    assert "\n" not in line and "every executor" in line and "URI (s3://, hdfs://)" in line
    assert ("--spill-dir" in line) if not (explicit or "").strip() and not (configured or "").strip() \
        else "is relative" in line


@pytest.mark.parametrize("explicit,configured,master", [
    (None, None, "local[2]"), (None, None, "in-process"), ("/mnt/shared/spill", None, "yarn"),
    (None, "s3://bucket/spill", "spark://head:7077"), ("file:///mnt/spill", None, "k8s://https://api:6443")])
def test_a_local_master_or_a_shared_spill_location_is_taken(explicit, configured, master):
    spill.check_reaches_executors(explicit, configured, master)
