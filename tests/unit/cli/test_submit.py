"""`submit --follow`'s events as the command prints them on stderr, one line each; none with --json."""
from __future__ import annotations

from recovery.cli.submit import echo_events
from recovery.jobs import follow_events as events
from recovery.jobs.summary import RunSummary


def test_each_event_is_one_line_on_stderr_and_is_passed_on(capsys):
    seen: list[events.FollowEvent] = []
    echo = echo_events(False, seen.append)
    resumed = RunSummary(run_id="r0", workflow="wf", status="completed", round=3, resumed_round=3, pending=0, dead=1)
    sent: list[events.FollowEvent] = [
        events.Resumed(resumed), events.Continued("r1", 4), events.Started("r2"),
        events.Batch(run_id="r2", round=0, messages=10, failed=2, trimmed=3, roots=10, pending=2, dead=0,
                     dead_dropped=0, seconds=1.25),
        events.Recovered("r2", 1, 0, 0), events.Trimmed("r2", "5 messages were trimmed"),
        events.Stopping("SIGINT"), events.Retry(1, "PythonException")]
    for event in sent:
        echo(event)
    assert seen == sent
    assert capsys.readouterr().err.splitlines() == [
        "resumed crashed run r0 (round 3): pending 0, dead 1",
        "continuing run r1 after round 4",
        "run r2",
        "batch round 0: 10 messages, failed 2, trimmed 3; run pending 2, dead 0 (1.2s)",
        "recovery: 1 round(s); pending 0, dead 0",
        "warning: 5 messages were trimmed",
        "SIGINT: stopping after this batch (again to abort)",
        "round 1 was interrupted (PythonException): finishing it"]


def test_with_json_the_events_are_passed_on_and_not_printed(capsys):
    seen: list[events.FollowEvent] = []
    echo_events(True, seen.append)(events.Started("r2"))
    assert seen == [events.Started("r2")] and capsys.readouterr().err == ""
