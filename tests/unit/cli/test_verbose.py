"""`recovery -v`: the driver's log on stderr, stdout left to --json."""
from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from recovery import run as api
from recovery.cli import main
from recovery.testing.local_spark import LocalSession

WORKFLOW = """<workflow xmlns="urn:recovery:workflow:1" name="echo">
  <spout id="lines" parallelism="1">
    <source type="file" path="lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out"/>
    <input from="lines" grouping="shuffle"/>
  </bolt>
</workflow>
"""


@pytest.fixture
def echo_workflow(tmp_path, monkeypatch):
    """A file-to-jsonl workflow, run on the in-process engine (no JVM) against the real Redis."""
    (tmp_path / "lines.txt").write_text("a\nb\nc\n")
    xml = tmp_path / "echo.xml"
    xml.write_text(WORKFLOW)
    monkeypatch.setattr(api, "start_session", lambda master, conf: LocalSession())
    return str(xml)


def submit(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.parametrize("verbose", [["-v"], ["-vv"], ["--verbose"]])
def test_verbose_logs_the_round_on_stderr_and_json_stays_on_stdout(echo_workflow, redis_url, verbose):
    result = submit([*verbose, "submit", echo_workflow, "--redis", redis_url, "--run-id", "echo-v", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)   # nothing but the JSON object on stdout
    assert summary["run_id"] == "echo-v" and summary["status"] == "completed"
    assert "INFO recovery.jobs.settle: run echo-v submit: starting" in result.stderr
    assert "INFO recovery.jobs.settle: run echo-v submit ended: completed" in result.stderr
    assert "INFO recovery.controlplane.connection: connected to Redis at" in result.stderr
    assert ("DEBUG recovery." in result.stderr) == (verbose == ["-vv"])


def test_without_verbose_stderr_has_no_log(echo_workflow, redis_url):
    result = submit(["submit", echo_workflow, "--redis", redis_url, "--run-id", "echo-q", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "completed"
    assert "recovery.jobs.settle" not in result.stderr


def test_the_logger_is_left_as_it_was_after_the_command(echo_workflow, redis_url):
    logger = logging.getLogger("recovery")
    before = (logger.level, list(logger.handlers))
    submit(["-vv", "submit", echo_workflow, "--redis", redis_url, "--run-id", "echo-undo", "--json"])
    assert (logger.level, list(logger.handlers)) == before
