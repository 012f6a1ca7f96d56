"""How the CLI shows text from data (recovery/visible.py, recovery/cli/safe_text.py): control
characters as visible escapes, Rich markup as the characters it is made of."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from recovery.cli.common import print_summary
from recovery.cli.safe_text import plain, rich_text
from recovery.jobs.summary import RunSummary
from recovery.visible import visible

TITLE = "\x1b]0;TITLE\x07"
RED = "\x1b[31m"
MARKUP = "[bold]x[/bold] [link=http://evil.example]click[/link] :warning:"


@pytest.mark.parametrize("raw,shown", [
    ("plain text, é ü 中 ✓", "plain text, é ü 中 ✓"),
    (TITLE, "\\x1b]0;TITLE\\x07"), (RED + "red", "\\x1b[31mred"), ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
    ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"), ("\u202eevil", "\\u202eevil"), ("\u2067x", "\\u2067x"),
    ("back\\slash", "back\\slash"), (42, "42"), (None, "None")])
def test_control_characters_become_visible_escapes(raw, shown):
    assert visible(raw) == plain(raw) == shown


def test_a_multi_line_field_keeps_its_lines_and_tabs_only():
    assert visible("Traceback\n\tline " + RED + "\r", multiline=True) == "Traceback\n\tline \\x1b[31m\\r"
    assert visible(visible(TITLE)) == visible(TITLE)     # escaping twice changes nothing more


def test_rich_text_is_never_markup():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=200)
    console.print(rich_text(MARKUP + TITLE, "bold"))
    text = out.getvalue()
    assert "[bold]x[/bold] [link=http://evil.example]click[/link] :warning:\\x1b]0;TITLE\\x07" in text
    assert "\x1b]8;" not in text and "\x07" not in text and "⚠" not in text


def test_the_summary_tables_show_errors_and_names_as_text(capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")      # Rich styles as on a terminal (hyperlinks included)
    monkeypatch.setenv("COLUMNS", "250")
    summary = RunSummary(run_id="r1", workflow="w", status="pending", round=0, roots=3, complete=1, pending=2,
                         failed=2, dead=0, components={"split" + RED: {"executed": 3, "failed": 2}},
                         failed_positions=[{"component": "split" + RED, "task": 1, "count": 2,
                                            "sample_error": "ValueError: bad record " + TITLE + " " + MARKUP}])
    print_summary(summary)
    out = capsys.readouterr().out
    assert "\x1b]0;TITLE" not in out and "\x07" not in out and "\x1b]8;" not in out and RED not in out
    assert "\\x1b]0;TITLE\\x07" in out and "[bold]x[/bold]" in out and "[link=http://evil.example]" in out
    assert "split\\x1b[31m" in out
    assert "\x1b[1m" in out        # Rich's own styling still reaches the terminal


def test_log_lines_on_stderr_show_control_characters_as_escapes(capsys):
    import logging

    from recovery.cli import log_to_stderr
    undo = log_to_stderr(0)
    try:
        logging.getLogger("recovery.test").warning("tuple failed: %s", "bad " + TITLE + "\nnext")
    finally:
        undo()
    err = capsys.readouterr().err
    assert err == "WARNING recovery.test: tuple failed: bad \\x1b]0;TITLE\\x07\nnext\n"
