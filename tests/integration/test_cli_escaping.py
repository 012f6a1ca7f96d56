"""Data that holds terminal escapes and Rich markup, through every run command as a user sees
them on a terminal: a workflow whose bolt fails with the line it read (a window-title OSC, a
colour, markup with a hyperlink). submit and recover run in this process on the session's Spark
with Rich forced to terminal mode; the read-only commands run as real processes under
util-linux `script` (a pseudo-terminal, so Rich and click believe a person is watching). No
output may carry the data's own escape sequences, or an OSC 8 hyperlink, or BEL; each shows the
escaped forms. Rich's own styling sequences are allowed: they are not the data's."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main

TITLE = "\x1b]0;TITLE\x07"
RED = "\x1b[31mred"
MARKUP = "[bold]x[/bold] [link=http://evil.example]click[/link]"
HOSTILE = f"{MARKUP} {TITLE} {RED}"
SHOWN = ("\\x1b]0;TITLE\\x07", "\\x1b[31mred", MARKUP)    # how the CLI shows it
TERMINAL_ENV = {"FORCE_COLOR": "1", "COLUMNS": "400", "TERM": "xterm-256color"}

COMPONENTS = '''
from recovery import BasicBolt, Tuple


class Picky(BasicBolt):
    """Passes lines starting "ok"; fails any other with the line as its message."""

    def process(self, tup: Tuple) -> None:
        line = tup["line"]
        if not line.startswith("ok"):
            raise ValueError(line)
        self.emit([line])
'''

WORKFLOW = '''<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="hostile">
  <config><property name="recovery.max.attempts" value="2"/></config>
  <spout id="lines" parallelism="1">
    <source type="file" path="data/lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="picky" parallelism="1" class="hostile.components:Picky">
    <input from="lines" grouping="shuffle"/>
    <stream fields="line"/>
  </bolt>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/hostile"/>
    <input from="picky" grouping="shuffle"/>
  </bolt>
</workflow>
'''


def hostile_workflow(dest: Path) -> Path:
    """A workflow whose bolt fails on 3 of its 13 lines, each failure's message the line
    itself: markup, a window-title escape and a colour."""
    (dest / "hostile").mkdir(parents=True)
    (dest / "hostile" / "__init__.py").write_text("")
    (dest / "hostile" / "components.py").write_text(COMPONENTS)
    (dest / "data").mkdir()
    lines = [f"ok {i}" for i in range(10)] + [f"{HOSTILE} {i}" for i in range(3)]
    (dest / "data" / "lines.txt").write_text("\n".join(lines) + "\n")
    (dest / "hostile.xml").write_text(WORKFLOW)
    return dest / "hostile.xml"


def assert_safe(out: str, what: str, shown: tuple[str, ...] = SHOWN) -> None:
    """No sequence of the data reached the output, and its visible form did."""
    assert "\x1b]0;" not in out and "\x07" not in out, (what, out)
    assert "\x1b[31mred" not in out, (what, out)
    assert "\x1b]8;" not in out and "evil.example\x1b" not in out, (what, out)    # OSC 8 hyperlink
    for text in shown:
        assert text in out, (what, text, out)


def in_process(redis_url: str, *args: str) -> tuple[int, str, str]:
    """A run command in this process (the session's Spark), Rich in terminal mode, click
    not stripping escapes (as on a terminal)."""
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url, **TERMINAL_ENV},
                           catch_exceptions=False, color=True)
    return r.exit_code, r.stdout, r.stderr


def on_terminal(redis_url: str, home: Path, *args: str) -> tuple[int, str]:
    """`recovery ARGS` as a real process on a pseudo-terminal (util-linux script): what a user's
    terminal receives, stdout and stderr together."""
    command = shlex.join([sys.executable, "-m", "recovery", *args])
    done = subprocess.run(["script", "-qefc", command, "/dev/null"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **TERMINAL_ENV, "RECOVERY_REDIS_URL": redis_url,
                               "RECOVERY_HOME": str(home)}, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux `script` is not installed")
def test_no_command_writes_the_datas_escapes_or_markup(spark, redis_url, redis_client, tmp_path):
    xml = hostile_workflow(tmp_path / "wf")
    home = tmp_path / "home"
    code, out, err = in_process(redis_url, "submit", str(xml), "--run-id", "hostile-1")
    assert code == 0, err
    assert_safe(out, "submit")            # the failed positions' sample error
    assert "picky" in out and "\x1b[1m" in out      # (Rich styled it: a terminal, as intended)

    code, out = on_terminal(redis_url, home, "status", "hostile-1")
    assert code == 0 and "failed positions" in out, out
    assert_safe(out, "status")
    code, out = on_terminal(redis_url, home, "runs")
    assert code == 0 and "hostile-1" in out, out
    assert_safe(out, "runs", ())
    for fmt in ("xml", "text"):
        code, out = on_terminal(redis_url, home, "plan", "hostile-1", "--format", fmt)
        assert code == 0 and "picky" in out, out
        assert_safe(out, f"plan {fmt}", ())

    code, out, err = in_process(redis_url, "recover", "hostile-1")
    assert code == 0, err
    assert_safe(out + err, "recover", ())
    code, out = on_terminal(redis_url, home, "dead", "hostile-1")
    assert code == 0 and out.count("error: ") == 3, out
    assert_safe(out, "dead")
    # --json stays exact: the values and errors as they were
    code, out, _ = in_process(redis_url, "dead", "hostile-1", "--json")
    assert sorted(d["error"] for d in json.loads(out)["dead"]) == [f"ValueError: {HOSTILE} {i}" for i in range(3)] \
        or all(HOSTILE in d["error"] for d in json.loads(out)["dead"])
    code, out = on_terminal(redis_url, home, "clear", "hostile-1")
    assert code == 0 and "cleared hostile-1" in out, out
    assert_safe(out, "clear", ())


def test_an_error_quoting_data_is_one_escaped_line(redis_url, tmp_path):
    # a RecoveryError that quotes the user's input (a file name) is one line, escaped; and
    # validate's own error lines too
    missing = str(tmp_path / f"none{TITLE}{RED}\n.xml")
    for args in (["submit", missing], ["validate", missing]):
        code, out, err = in_process(redis_url, *args)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert_safe(err, args[0], ("\\x1b]0;TITLE\\x07", "\\x1b[31mred\\n.xml"))
