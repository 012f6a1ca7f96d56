"""A cluster's master (given by --master or RECOVERY_SPARK_MASTER) and a workflow whose source
or sink paths are relative to the driver's folder: `submit` and `recover` refuse it in one line
naming the component, before Spark starts (recovery.connectors.files.check_paths_reach_executors)."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from recovery import run as api
from recovery.cli import main
from tests.unit.run_records import create_run

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
NOWHERE = "redis://127.0.0.1:1/0"   # never reached: the refusal comes first
REFUSAL = ("is relative to the workflow's folder on this host, which executors of master spark://head:7077 do "
           "not reach: give an absolute path on storage every executor mounts, or a URI")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_submit_refuses_relative_paths_with_the_environment_s_cluster_master(monkeypatch):
    monkeypatch.setenv("RECOVERY_SPARK_MASTER", "spark://head:7077")
    xml = WORKFLOWS / "wordcount.xml"
    result = run("submit", str(xml), "--redis", NOWHERE)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {xml}: spout ") and REFUSAL in line, line


def test_recover_on_a_cluster_refuses_a_run_submitted_with_relative_paths(monkeypatch, fake_redis):
    create_run(fake_redis, "r1")
    monkeypatch.setattr(api, "client_for", lambda url: (fake_redis, NOWHERE))
    monkeypatch.setattr(api, "start_session", lambda master, conf: (_ for _ in ()).throw(AssertionError("Spark")))
    result = run("recover", "r1", "--force", "--master", "spark://head:7077", "--redis", NOWHERE)
    assert result.exit_code == 2, result.output
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: <workflow>: spout 'src' (file source): path 'x' ") and REFUSAL in line, line


def _absolute_paths_run(client, run_id: str, spill_dir: str) -> None:
    """A run whose workflow names absolute paths only, spilling at `spill_dir`."""
    from recovery.model.workflow import SinkImpl, SourceImpl, Workflow
    from recovery.tracking import runs
    from tests.unit.run_records import WF
    absolute = Workflow(name=WF.name, components=tuple(
        c.model_copy(update={"impl": type(c.impl)(type=c.impl.type, params=(("path", f"/mnt/shared/{c.id}"),))})
        if isinstance(c.impl, (SourceImpl, SinkImpl)) else c for c in WF.components))
    runs.create(client, run_id, "<xml/>", absolute.to_task_json(), None, "local", True)
    runs.update(client, run_id, None, spill_dir=spill_dir, status=runs.ERROR)


def test_recover_on_a_cluster_refuses_a_run_spilling_under_recovery_home(monkeypatch, fake_redis, tmp_path):
    from recovery.tracking import spill
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    _absolute_paths_run(fake_redis, "r2", spill.location())
    monkeypatch.setattr(api, "client_for", lambda url: (fake_redis, NOWHERE))
    monkeypatch.setattr(api, "start_session", lambda master, conf: (_ for _ in ()).throw(AssertionError("Spark")))
    result = run("recover", "r2", "--force", "--master", "spark://head:7077", "--redis", NOWHERE)
    assert result.exit_code == 2, result.output
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert "under RECOVERY_HOME" in line and "--spill-dir" in line, line
    # given a folder every executor mounts, the refusal is gone: Spark is next
    try:
        run("recover", "r2", "--force", "--master", "spark://head:7077", "--redis", NOWHERE,
            "--spill-dir", str(tmp_path / "shared-spill"))
    except AssertionError as err:
        assert str(err) == "Spark"
    else:
        raise AssertionError("recover did not reach Spark")
