"""The spill store on a real local Spark and a real Redis: in-flight outputs live in
spill files that the commit records reference; the guarantees of docs/guarantees.md hold with them.

Each test drives a `submit` in a CLI process (local[2,3]: a task may fail and be retried) and
kills it with SIGKILL once a state is reached in Redis, so that the run's spill files are there
to look at: the round is not settled, nothing removed them yet."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from recovery.errors import SpillError
from recovery.jobs import clear, recover
from recovery.model.graph import TaskMap
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys, runs, spill
from tests.integration.conftest import kill_when_round_0, sink_records
from tests.integration.test_engine import run_keys, tracking_keys

PAD = 400          # bytes added to each line: outputs big enough to fill frames before a crash
LINES = 12_000

COMPONENTS = '''
from recovery import BasicBolt


class Pad(BasicBolt):
    def process(self, tup):
        self.emit([tup["line"] + "." * %d])
''' % PAD


def _workflow(tmp_path: Path) -> Path:
    """lines (file) -> pad (2 tasks, shuffle) -> out (jsonl sink, 1 task)."""
    (tmp_path / "spillcomps.py").write_text(COMPONENTS)
    (tmp_path / "input.txt").write_text("".join(f"line-{i}\n" for i in range(LINES)))
    xml = tmp_path / "spilled.xml"
    xml.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="spilled">
      <spout id="lines"><source type="file" path="input.txt"/><stream fields="line"/></spout>
      <bolt id="pad" parallelism="2" class="spillcomps:Pad">
        <input from="lines" grouping="shuffle"/><stream fields="line"/>
      </bolt>
      <bolt id="out"><sink type="jsonl" path="out"/><input from="pad" grouping="global"/></bolt>
    </workflow>''')
    return xml


def _expected() -> list[str]:
    return sorted(json.dumps({"line": f"line-{i}" + "." * PAD}, sort_keys=True) for i in range(LINES))


def _hold_out(tmp_path: Path) -> dict[str, str]:
    """`out` holds every line until the marker exists: the driver is killed before it commits."""
    return {"recovery.inject.z.component": "out", "recovery.inject.z.mode": "hold",
            "recovery.inject.z.rate": "1", "recovery.inject.z.marker": str(tmp_path / "let-out-go")}


def _crashed_submit(tmp_path: Path, redis_url: str, client, run_id: str, spill_dir: Path | str,
                    until: Callable[[set[str]], bool], props: dict[str, str] | None = None) -> Path:
    """A CLI `submit` killed with SIGKILL once its round 0's done markers satisfy `until`."""
    xml = _workflow(tmp_path)
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json",
           "--master", "local[2,3]", "--spill-dir", str(spill_dir)]
    for k, v in {**_hold_out(tmp_path), **(props or {})}.items():
        cmd += ["-p", f"{k}={v}"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, RECOVERY_REDIS_URL=redis_url),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    done = kill_when_round_0(proc, client, run_id, until, "the kill point")
    assert "out:0" not in done
    (tmp_path / "let-out-go").touch()   # (the driver and its workers are gone: for the recover)
    return xml


def _pad_done(done: set[str]) -> bool:
    return {"pad:0", "pad:1"} <= done


def _refs(client, run_id: str) -> dict[str, spill.SpillRef]:
    return {f.decode(): spill.SpillRef.unpack(v) for f, v in client.hgetall(keys.task_spill(run_id, 0)).items()}


def test_a_spark_retry_of_a_task_whose_file_was_half_written_is_exact(spark, redis_url, redis_client, tmp_path):
    """pad's task 0 dies (its Python worker exits) on Spark's first attempt after writing part
    of its spill file; Spark's retry writes a file of its own, which its commit references. The
    dead attempt's file is never read, and goes with the round."""
    spill_dir, run_id = tmp_path / "spill", "spill-retry"
    task = TaskMap.of(workflow_xml.load(_workflow(tmp_path))).task_ids("pad")[0]
    crash = {"recovery.inject.c.component": "pad", "recovery.inject.c.mode": "crash",
             "recovery.inject.c.task": str(task), "recovery.inject.c.after": "5000",
             "recovery.inject.c.marker": str(tmp_path / "crashed")}
    _crashed_submit(tmp_path, redis_url, redis_client, run_id, spill_dir, _pad_done, crash)
    assert (tmp_path / "crashed").exists()           # the first attempt really died
    referenced = spill_dir / run_id / _refs(redis_client, run_id)["pad:0"].path
    assert referenced.exists()
    # the dead attempt's file: under a name of its own (its final one), frames but no end marker
    left = [p for p in (spill_dir / run_id / "r0" / "pad").glob("0-*.spill") if p != referenced]
    assert len(left) == 1 and left[0].stat().st_size > len(spill.MAGIC), left
    assert left[0].read_bytes()[-spill._TAIL.size - 4:-spill._TAIL.size] != b"\xff" * 4
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out") == _expected()
    assert spill.SpillStore(str(spill_dir)).run_files(run_id) == []


def test_kill_9_after_commits_then_recover_is_exact_and_a_missing_or_corrupt_spill_file_stops_it_until_back(
        spark, redis_url, redis_client, tmp_path):
    """The driver killed once pad's tasks committed: their outputs are files the commit records
    reference (not Redis hashes), and the run crashed. A file missing stops `recover` in one line
    before Spark starts; a file corrupt fails the round, found by the task reading it; the file
    back as it was, `recover` ends exact and leaves no spill file and no key."""
    spill_dir, run_id = tmp_path / "spill", "spill-crash"
    _crashed_submit(tmp_path, redis_url, redis_client, run_id, spill_dir, _pad_done)
    refs = _refs(redis_client, run_id)
    assert {"pad:0", "pad:1"} <= set(refs)
    for ref in refs.values():
        assert (spill_dir / run_id / ref.path).stat().st_size == ref.size
    assert not [k for k in run_keys(redis_client, run_id) if ":out:" in k]
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    path = spill_dir / run_id / refs["pad:1"].path
    kept = path.read_bytes()
    path.unlink()
    done = subprocess.run([sys.executable, "-m", "recovery", "recover", run_id, "--master", "local[2]"],
                          env=dict(os.environ, RECOVERY_REDIS_URL=redis_url), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: spill file {path} of task pad:1, round 0 (run {run_id}) is missing; put it "
                      f"back, then `recovery recover {run_id}` resumes the run"], done.stderr[-3000:]
    # refused before Spark started: the run is as the killed driver left it
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    # corrupt: one byte changed (the size its commit recorded: found by a task reading it)
    i = len(kept) // 2
    path.write_bytes(kept[:i] + bytes([kept[i] ^ 0xFF]) + kept[i + 1:])
    with pytest.raises(SpillError) as err:
        recover.recover(spark, redis_client, redis_url, run_id)
    assert str(err.value).startswith(f"spill file {path} of task pad:1, round 0 (run {run_id}) is corrupt")
    assert runs.get(redis_client, run_id).status == runs.ERROR
    # back as it was: recover finishes exactly
    path.write_bytes(kept)
    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed", r
    assert sink_records(tmp_path / "out") == _expected()
    assert tracking_keys(redis_client, run_id) == set()
    assert spill.SpillStore(str(spill_dir)).run_files(run_id) == []


def test_clear_leaves_no_spill_file_and_no_key(redis_client):
    """A run whose driver died mid-round, on a real Redis: some tasks committed their spill
    files. (The test kit's CRASH makes one in this process: no Spark job is needed for it.)"""
    from recovery import testing
    from tests.unit.testing.test_testing_kit import pipeline

    run = testing.run_local(pipeline(2), redis_client, inputs={"words": ["a", testing.CRASH, "b", "c"]},
                            run_id="spill-clear")
    assert run.interrupted == "crash"
    run_id, spill_dir = run.run_id, Path(runs.get(redis_client, run.run_id).spill_dir)
    assert spill.SpillStore(str(spill_dir)).run_files(run_id)
    # the location is in the run record: clear needs no flag
    clear.clear(redis_client, run_id)
    assert run_keys(redis_client, run_id) == set() and not redis_client.exists(runs.record_key(run_id))
    assert not (spill_dir / run_id).exists()


FULL_DISK_COMPONENTS = '''
import resource
import signal

from recovery import BasicBolt


class Pad(BasicBolt):
    def prepare(self, conf, context):
        # this Python worker's files cannot grow past 64 KiB, as on a full disk: a write past
        # it fails (EFBIG; SIGXFSZ ignored, so the process lives and sees the error)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    def process(self, tup):
        self.emit([tup["line"] + "." * %d])
''' % PAD


def test_a_spill_location_that_cannot_be_written_is_one_error_line_not_two(redis_url, redis_client, tmp_path):
    """A full spill disk printed its error twice, once bare (a warning logged in
    the Spark worker, which has no logging set up) and once as the CLI's `error:` line. The
    disk is full for the pad tasks' Python workers alone (a file size limit set in their
    prepare), in a CLI process of its own (its workers end with it)."""
    xml = _workflow(tmp_path)
    (tmp_path / "spillcomps.py").write_text(FULL_DISK_COMPONENTS)
    spill_dir, run_id = tmp_path / "spill", "spill-full"
    done = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id,
                           "--master", "local[2]", "--spill-dir", str(spill_dir)],
                          env=dict(os.environ, RECOVERY_REDIS_URL=redis_url), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    mentions = [line for line in done.stderr.splitlines() if "spill file" in line]
    assert len(mentions) == 1, done.stderr[-3000:]
    assert mentions[0].startswith(f"error: cannot write spill file {spill_dir / run_id / 'r0' / 'pad'}/")
    assert mentions[0].endswith(f"(run {run_id}): File too large")
    assert runs.get(redis_client, run_id).status == runs.ERROR
