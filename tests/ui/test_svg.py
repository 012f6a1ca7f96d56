"""The topology and rounds SVGs of the web view (recovery/ui/svg.py), without a browser."""
from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from recovery.jobs.reports import RoundReport
from recovery.model.synthesis import recovery_components, synthesize
from recovery.model.xml import parse as workflow_xml
from recovery.ui import svg

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
NS = {"s": "http://www.w3.org/2000/svg"}


def _nodes(text: str) -> dict[str, ElementTree.Element]:
    root = ElementTree.fromstring(text)          # well-formed XML
    return {g.get("data-component"): g for g in root.iterfind(".//s:g[@data-component]", NS)}


def test_failed_dead_rerun_and_dim_are_marked():
    wf = workflow_xml.load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    failed = {"aggregate": {1: 7, 3: 2}}
    rerun = recovery_components(wf, {"aggregate": [1, 3]})
    nodes = _nodes(svg.topology(wf, svg.Marks(failed=failed, dead={"split": 4}, rerun=rerun)))
    assert set(nodes) == {c.id for c in wf.components}
    agg = nodes["aggregate"]
    assert agg.get("data-failed") == "9" and "failed" in agg.get("class").split()
    assert "9 failed · 2 tasks" in "".join(agg.itertext())
    assert "task 1: 7 tuples, task 3: 2 tuples" in agg.find("s:title", NS).text
    assert nodes["split"].get("data-dead") == "4" and "dead" in nodes["split"].get("class").split()
    assert "rerun" in nodes["output"].get("class").split() and "dim" in nodes["logs"].get("class").split()
    assert nodes["logs"].get("data-failed") is None


def test_edges_are_labelled_with_grouping_and_stream_and_queue_spouts_drawn():
    wf = workflow_xml.load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    rec = synthesize(wf, {"normalize": [7]})
    text = svg.topology(rec)
    root = ElementTree.fromstring(text)
    labels = {(g.get("data-from"), g.get("data-to")): g.find("s:text", NS).text
              for g in root.iterfind(".//s:g[@data-from]", NS)}
    assert labels[("replay-normalize", "normalize")] == "__replay: direct"
    assert labels[("normalize", "aggregate")] == "fields(key)"
    assert "queue" in _nodes(text)["replay-normalize"].get("class").split()


def test_rounds_chart():
    assert svg.rounds_chart([RoundReport(round=0)]) == ""
    chart = svg.rounds_chart([RoundReport(round=0), RoundReport(round=1, replayed=41, recovered=21, dead=0),
                              RoundReport(round=2, replayed=20, recovered=0, dead=20)])
    titles = [t.text for t in ElementTree.fromstring(chart).iterfind(".//s:rect/s:title", NS)]
    assert titles == ["round 1: 41 replayed", "round 1: 21 recovered", "round 1: 0 dead",
                      "round 2: 20 replayed", "round 2: 0 recovered", "round 2: 20 dead"]


def test_chains_are_framed_and_their_members_marked():
    wf = workflow_xml.load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    text = svg.topology(wf)
    root = ElementTree.fromstring(text)
    [chain] = root.findall(".//s:g[@class='chain']", NS)
    assert chain.get("data-members") == "logs split normalize"
    assert "chain: logs -> split -> normalize" in "".join(chain.itertext())
    nodes = _nodes(text)
    for m in ("logs", "split", "normalize"):
        assert nodes[m].get("data-chain") == "logs -> split -> normalize"
        assert "chained" in nodes[m].get("class").split()
    assert nodes["aggregate"].get("data-chain") is None
    # the recovery workflow of a failure at normalize: normalize is fed by its queue spout
    # (direct), so nothing is chained there
    assert root is not None and "class=\"chain\"" not in svg.topology(synthesize(wf, {"normalize": [7]}))
