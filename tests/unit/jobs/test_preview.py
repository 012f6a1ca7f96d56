"""A preview's report from a sandboxed round: per position who fails again (at the position or
downstream, by root) and why, grouped; per sink its count and sample; drawn escaped."""
from __future__ import annotations

from recovery.connectors.capture_sink import Captured
from recovery.jobs.preview import report
from recovery.jobs.sandbox import SandboxResult
from recovery.model.failed import FailedTuple


def queued(tid: int, root: int, value: str) -> FailedTuple:
    return FailedTuple(id=tid, roots=[root], component="upper", task=3, values=[value], error="old")


def test_fails_again_at_the_position_or_downstream_and_errors_are_grouped():
    replayed = [queued(1, 11, "a"), queued(2, 12, "<b>x</b>"), queued(3, 13, "c"), queued(4, 14, "d")]
    failures = [
        FailedTuple(id=1, roots=[11], component="upper", task=3, error="ValueError: <no>"),
        FailedTuple(id=2, roots=[12], component="upper", task=3, error="ValueError: <no>", dead=True),
        FailedTuple(id=99, roots=[13], component="measure", task=5, error="KeyError: 'size'"),
    ]
    result = SandboxResult("r1", 2, True, replayed, failures, [Captured("out", 1, [{"line": "D"}])], "s", None)
    p = report(result, dead=False)
    [pos] = p.positions
    assert (pos.component, pos.task, pos.tuples, pos.would_succeed, pos.would_fail) == ("upper", 3, 4, 1, 3)
    assert [(e.error, e.count, e.sample) for e in pos.errors] == [("ValueError: <no>", 2, ["a"]),
                                                                 ("KeyError: 'size'", 1, ["c"])]
    assert [(s.component, s.records, s.sample) for s in p.sinks] == [("out", 1, [{"line": "D"}])]
    j = p.to_json()
    assert j["run_id"] == "r1" and j["code_changed"] is True and j["message"] is None
    assert set(j["positions"][0]) >= {"component", "task", "tuples", "would_succeed", "would_fail", "errors"}
    assert set(j["positions"][0]["errors"][0]) == {"error", "count", "sample"}
    assert set(j["sinks"][0]) == {"component", "records", "sample"}
    page = p._repr_html_()
    assert "&lt;no&gt;" in page and "<no>" not in page and "changed since" in page


def test_a_preview_of_nothing_says_so():
    p = report(SandboxResult("r1", 1, False), dead=True)
    assert p.tuples == 0 and p.positions == [] and p.message == "run r1 has no dead letters: there is nothing to preview"
    assert "no dead letters" in p._repr_html_()
