"""recovery.jobs.clear on fakeredis: a run's keys, orphans of a run without a record."""
from __future__ import annotations

import json
import os
import stat

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.engine import shipping
from recovery.errors import RunError
from recovery.home import private_dir
from recovery.jobs import clear
from recovery.model import code
from recovery.model.workflow import ClassImpl, Component, StreamDef, Workflow
from recovery.tracking import keys, runs
from tests.unit.run_records import create_run as _create


def test_clear_finds_orphan_keys_of_a_run_without_record(fake_redis, monkeypatch):
    _create(fake_redis, "kept")
    fake_redis.hset(keys.task_done("gone", 3), "mid:0", b"x")         # an orphan of a cleared run
    fake_redis.set("unrelated", "1")
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))
    r = CliRunner().invoke(main, ["clear", "--all", "--force", "--json"])
    assert r.exit_code == 0, r.stderr
    removed = json.loads(r.stdout)["removed"]
    assert keys.task_done("gone", 3) in removed["gone"] and "kept" in removed
    assert not list(fake_redis.scan_iter(match=keys.runs_pattern()))
    assert fake_redis.get("unrelated") == b"1"
    # and `clear RUN` of an orphan alone
    fake_redis.hset(keys.task_done("gone2", 1), "mid:0", b"x")
    assert clear.clear(fake_redis, "gone2").keys == [keys.task_done("gone2", 1)]
    with pytest.raises(RunError, match="no run 'gone3'"):
        clear.clear(fake_redis, "gone3")


def _run_with_code(client, run_id: str, digest: str) -> None:
    lease = _create(client, run_id)
    runs.update(client, run_id, lease.generation, code_digest=digest, status=runs.PENDING)
    lease.release()


def _zip_of(tmp_path, name: str) -> tuple[str, str]:
    """A workflow folder's code packed where a cluster run ships it from: (digest, zip path)."""
    base = tmp_path / name
    (base / "mine").mkdir(parents=True)
    (base / "mine" / "__init__.py").write_text(f"NAME = {name!r}\n")
    wf = Workflow(name="w", base_dir=str(base), components=(
        Component(id="s", kind="spout", impl=ClassImpl(ref="mine:S"), streams=(StreamDef(id="default", fields=("x",)),)),))
    bundle = code.bundle(wf)
    packed = code.pack(bundle, private_dir(shipping.code_folder()))
    return bundle.digest, str(packed.path)


def test_a_runs_shipped_code_archive_goes_with_the_last_run_that_shipped_it(fake_redis, tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    shared, shared_zip = _zip_of(tmp_path, "a")
    alone, alone_zip = _zip_of(tmp_path, "b")
    stray, stray_zip = _zip_of(tmp_path, "c")         # a run's whose record is gone
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (shared_zip, alone_zip, stray_zip)} == {0o600}
    _run_with_code(fake_redis, "r1", shared)
    _run_with_code(fake_redis, "r2", shared)
    _run_with_code(fake_redis, "r3", alone)
    clear.clear(fake_redis, "r1")
    assert os.path.exists(shared_zip)                  # r2 shipped the same code
    clear.clear(fake_redis, "r2")
    assert not os.path.exists(shared_zip)
    assert os.path.exists(alone_zip) and os.path.exists(stray_zip)
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))
    r = CliRunner().invoke(main, ["clear", "--all"])
    assert r.exit_code == 0, r.stderr
    assert not os.listdir(shipping.code_folder())      # r3's, and the one no run records


def test_clear_removes_the_runs_staged_sink_files_and_nothing_else(fake_redis, tmp_path):
    from recovery.connectors.sink_folders import staged_name
    from recovery.model.workflow import Input, SinkImpl, SourceImpl
    wf = Workflow(name="w", base_dir=str(tmp_path), components=(
        Component(id="src", kind="spout", impl=SourceImpl(type="file", params=(("path", "x"),)),
                  streams=(StreamDef(id="default", fields=("line",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
                  inputs=(Input(source="src"),))),
        dead_letters=SinkImpl(type="jsonl", params=(("path", "dead"),)))
    runs.create(fake_redis, "r1", "<xml/>", wf.to_task_json(), None, "local", True).release()
    out, dead = tmp_path / "o", tmp_path / "dead"
    out.mkdir()
    dead.mkdir()
    mine = [out / staged_name("part-r1-r0000-out-t0001.jsonl"), dead / staged_name("part-r1-r0002-dead-letters-t0003.jsonl")]
    kept = [out / "part-r1-r0000-out-t0002.jsonl", out / staged_name("part-r10-r0000-out-t0001.jsonl"),
            out / ".tmp-abc123"]
    for path in mine + kept:
        path.write_text("x")
    clear.clear(fake_redis, "r1")
    assert [p.exists() for p in mine] == [False, False]
    assert [p.exists() for p in kept] == [True, True, True]
