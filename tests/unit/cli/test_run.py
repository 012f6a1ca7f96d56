"""The run commands' run ids through click's CliRunner: an unsafe run id is
one line and exit 2 as it is parsed, before Redis (here unreachable) or Spark is touched."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
NOWHERE = "redis://127.0.0.1:1/0"   # nothing listens there: a command that connects fails otherwise


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("run_id", ["a/../../b", "*", "a:b", ".x", ""])
@pytest.mark.parametrize("command", [
    ["submit", str(WORKFLOWS / "wordcount.xml"), "--run-id"],
    ["submit", str(WORKFLOWS / "cdn_logs_stream.xml"), "--follow", "--run-id"],
    ["status"], ["plan"], ["recover"], ["dead"], ["dead", "--requeue"], ["clear"], ["clear", "--force"],
], ids=lambda c: " ".join(a for a in c if not a.endswith(".xml")))
def test_an_unsafe_run_id_is_one_line_and_exit_2_before_anything_runs(command, run_id):
    result = run(*command, run_id, "--redis", NOWHERE)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" not in lines[0]
    assert lines[0] in (f"error: invalid run id {run_id!r}: use 1 to 128 letters, digits, '.', '_' or '-', "
                        "not starting with '.'", "error: a run id cannot be empty")
