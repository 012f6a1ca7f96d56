"""A run drawn in a notebook (`Run._repr_html_`, through `run_html`): well-formed HTML, the
status table's fields, failed and dead positions marked on the web view's SVG, data escaped."""
from __future__ import annotations

from lxml import etree

from recovery.jobs.summary import RunSummary
from recovery.model.failed import FailedTuple
from recovery.run import run_html
from recovery.topology import Topology

SVG = "{http://www.w3.org/2000/svg}"


def test_a_runs_html_is_well_formed_marks_failures_and_escapes_what_came_from_data():
    t = Topology("w")
    t.spout("src", "m:S", fields="line")
    t.bolt("parse", "m:P", fields="x", parallelism=2).input("src")
    wf = t.workflow(check_classes=False)
    hostile = "<img src=x onerror=alert(1)> & \"quoted\""
    s = RunSummary(run_id="r-1", workflow="w", status="pending", round=0, roots=10, complete=7, pending=3,
                   failed=2, in_flight=0, dead=1,
                   failed_positions=[{"component": "parse", "task": 2, "count": 2, "sample_error": hostile}],
                   components={"parse": {"executed": 10, "acked": 8, "failed": 2, "emitted": 8, "roots": 0,
                                         "seconds": 0.1}})
    dead = [FailedTuple(id=1, component="parse", task=1, values=[hostile], error=hostile, dead=True)]
    page = run_html(s, wf, dead)
    root = etree.fromstring(page)                 # well-formed
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt; &amp;" in page
    summary = root.find("table")
    assert [th.text for th in summary[0]][:3] == ["run_id", "status", "round"]
    assert [td.text for td in summary[1]] == ["r-1", "pending", "0", "10", "7", "3", "2", "0", "1"]
    nodes = {g.get("data-component"): g for g in root.iter(SVG + "g") if g.get("data-component")}
    assert set(nodes) == {"src", "parse"}
    assert nodes["parse"].get("data-failed") == "2" and nodes["parse"].get("data-dead") == "1"
    assert nodes["src"].get("data-failed") is None
