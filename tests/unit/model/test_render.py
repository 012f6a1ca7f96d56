"""recovery.model.render: text, DOT and Mermaid drawings of the example workflows, with marks and
dimmed components as `recovery plan` draws them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from recovery.model.render import describe_impl, render, stages
from recovery.model.workflow import (
    ClassImpl,
    Component,
    Input,
    ShellImpl,
    SinkImpl,
    SourceImpl,
    StreamDef,
    Workflow,
)
from recovery.model.xml.parse import load

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
EXAMPLES = sorted(WORKFLOWS.glob("*.xml"))
MARK = "FAILED tasks 3,4 (12 tuples)"


@pytest.fixture(scope="module")
def fanout():
    return load(WORKFLOWS / "fanout.xml")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("fmt", ["text", "dot", "mermaid"])
def test_every_component_is_drawn(path, fmt):
    wf = load(path)
    out = render(wf, fmt)
    assert out.endswith("\n")
    for c in wf.components:
        assert c.id in out
        assert f"×{c.parallelism}" in out
    for c in wf.components:
        for i in c.inputs:
            if fmt == "dot":
                assert f'"{i.source}" -> "{c.id}"' in out


def test_text_shows_fan_out_and_join(fanout):
    out = render(fanout)
    lines = out.splitlines()
    assert lines[0] == "workflow fanout  (7 components, 1 config property)"
    assert lines[1] == "stages: numbers ─▶ fork, archive ─▶ square, cube ─▶ join ─▶ out"
    block = out.split("\n\n")
    numbers = next(b for b in block if b.startswith("● numbers"))
    assert "├─▶ fork" in numbers and "└─▶ archive" in numbers          # fan-out
    fork = next(b for b in block if b.startswith("● fork"))
    assert re.search(r"├─▶ square\s+left: shuffle", fork)
    assert re.search(r"└─▶ cube\s+right: shuffle", fork)
    assert "emits   left [n] · right [n]" in fork
    join = next(b for b in block if b.startswith("● join"))
    assert "⋈ joins square + cube" in join.splitlines()[0]               # join
    assert re.search(r"reads\s+square\s+fields\(n\)", join)
    assert re.search(r"reads\s+cube\s+fields\(n\)", join)
    assert "class fanout.components:Join" in join
    archive = next(b for b in block if b.startswith("● archive"))
    assert "sink jsonl (path=out/fanout/archive)" in archive and "└─ (end)" in archive


def test_text_follows_topological_order(fanout):
    heads = [line.split()[1] for line in render(fanout).splitlines() if line.startswith("●")]
    assert heads == ["numbers", "fork", "archive", "square", "cube", "join", "out"]


def test_text_marks_and_dim(fanout):
    out = render(fanout, marks={"cube": MARK}, dim={"numbers", "fork", "archive", "square"})
    assert "re-runs: cube, join, out" in out
    cube = next(b for b in out.split("\n\n") if "cube " in b.splitlines()[0])
    assert cube.startswith("✖ cube")
    assert f"‼ {MARK}" in cube.splitlines()[1]                     # right under the header
    for cid in ("numbers", "fork", "archive", "square"):
        head = next(line for line in out.splitlines() if line.startswith(f"○ {cid} "))
        assert head.endswith("(not re-run)")
    assert "● join" in out and "● out" in out


def test_text_with_everything_dim_reruns_nothing(fanout):
    out = render(fanout, dim={c.id for c in fanout.components})
    assert "re-runs: nothing" in out


def test_text_color_and_ascii(fanout):
    colored = render(fanout, marks={"cube": MARK}, dim={"numbers"}, color=True)
    assert "\x1b[31;1m" in colored and "\x1b[90m" in colored
    assert "\x1b[" not in render(fanout, marks={"cube": MARK})
    plain = render(fanout, marks={"cube": MARK}, dim={"numbers"}, ascii_only=True)
    assert plain.isascii()
    assert "X cube" in plain and "!! FAILED" in plain and "o numbers" in plain
    assert "+-> fork" in plain and "`-> archive" in plain


def test_dot(fanout):
    out = render(fanout, "dot", marks={"cube": MARK}, dim={"numbers", "fork"})
    assert out.startswith('digraph "fanout" {') and out.rstrip().endswith("}")
    cube = next(line for line in out.splitlines() if line.strip().startswith('"cube" ['))
    assert 'color="#cc0000"' in cube and MARK in cube
    fork = next(line for line in out.splitlines() if line.strip().startswith('"fork" ['))
    assert "dashed" in fork and "#999999" in fork
    assert '"numbers" [shape="invhouse"' in out
    assert '"out" [shape="cylinder"' in out
    assert '"fork" -> "square" [label="left: shuffle"' in out
    assert '"square" -> "join" [label="fields(n)"]' in out
    assert out.count("->") == sum(len(c.inputs) for c in fanout.components)


def test_dot_escapes_quotes():
    # a name no workflow can have (the schema and the model refuse it): the drawing escapes it anyway
    wf = Workflow.model_construct(name='we"ird', config=(), base_dir=None, components=(
        Component(id="s", kind="spout", impl=ShellImpl(command='say "hi"', args=("a\\b",)),
                  streams=(StreamDef(fields=("x",)),)),))
    out = render(wf, "dot")
    assert 'digraph "we\\"ird"' in out
    assert 'shell say \\"hi\\" a\\\\b' in out


def test_mermaid(fanout):
    out = render(fanout, "mermaid", marks={"cube": MARK}, dim={"numbers", "fork"})
    lines = out.splitlines()
    assert lines[0] == "flowchart LR"
    ids = dict(re.findall(r'^\s+(n\d+)[\[(]+"([^<]+)<br/>', out, re.M))
    node = {v: k for k, v in ids.items()}
    assert set(node) == {c.id for c in fanout.components}
    assert f'{node["numbers"]}(["numbers<br/>' in out                # spouts: stadium
    assert f'{node["out"]}[("out<br/>' in out                        # sinks: cylinder
    assert f'  {node["fork"]} -.->|"left: shuffle"| {node["square"]}' in lines
    assert f'  {node["join"]} -->|"global"| {node["out"]}' in lines
    assert f"<b>{MARK}</b>" in out
    assert f"  class {node['cube']} marked" in lines
    assert f"  class {node['numbers']},{node['fork']} dim" in lines


def test_mermaid_escapes_labels():
    wf = Workflow(name="w", components=(
        Component(id="s", kind="spout", impl=SourceImpl(type="file", params=(
            ("path", 'a|"b"<c>.txt'),)), streams=(StreamDef(fields=("x",)),)),))
    out = render(wf, "mermaid", marks={"s": "x|y"})
    assert 'a#124;#quot;b#quot;#lt;c#gt;.txt' in out
    assert "<b>x#124;y</b>" in out


def test_unknown_format_and_components(fanout):
    with pytest.raises(ValueError, match="unknown format 'png'"):
        render(fanout, "png")
    with pytest.raises(ValueError, match="not components of workflow 'fanout': nope"):
        render(fanout, marks={"nope": "x"})
    with pytest.raises(ValueError, match="nope"):
        render(fanout, "dot", dim={"nope"})


def test_describe_impl():
    def comp(impl, kind="bolt"):
        return Component(id="c", kind=kind, impl=impl,
                         inputs=(Input(source="s"),) if kind == "bolt" else ())
    assert describe_impl(comp(ClassImpl(ref="a.b:C"))) == "class a.b:C"
    assert describe_impl(comp(ShellImpl(command="node", script="x.js", args=("-v",)))) == \
        "shell node x.js -v"
    assert describe_impl(comp(SinkImpl(type="redis", params=(("key", "k"),)))) == \
        "sink redis (key=k)"
    assert describe_impl(comp(SourceImpl(type="queue", params=(("component", "b"),
                                                                ("tasks", "3 4"))),
                              kind="spout")) == "source queue (component=b tasks=3 4)"


def test_stages(fanout):
    assert stages(fanout) == [["numbers"], ["fork", "archive"], ["square", "cube"], ["join"],
                              ["out"]]
    assert stages(Workflow(name="w")) == []


def test_render_empty_workflow():
    out = render(Workflow(name="empty"))
    assert out.startswith("workflow empty  (0 components)")
    assert render(Workflow(name="empty"), "dot").startswith('digraph "empty"')
    assert render(Workflow(name="empty"), "mermaid") == "flowchart LR\n"


def test_chains_are_drawn_in_every_format():
    from recovery.model.render import chains_of
    wf = load(WORKFLOWS / "cdn_logs.xml", check_paths=False)
    assert chains_of(wf) == [("logs", "split", "normalize")]
    text = render(wf, "text")
    assert "chain: logs -> split -> normalize" in text
    assert text.count("[chain: logs -> split -> normalize]") == 3
    dot = render(wf, "dot")
    assert 'subgraph "cluster_chain_0"' in dot and '"logs"; "split"; "normalize";' in dot
    mermaid = render(wf, "mermaid")
    assert 'subgraph chain0["chain: logs -#gt; split -#gt; normalize"]' in mermaid
    # a plan draws the recovery round's chains on the original topology; none: nothing
    assert "chain:" not in render(wf, "text", chains=[])
    assert "cluster_chain_0" in render(wf, "dot", chains=[["split", "normalize"]])
    unchained = wf.with_config({"recovery.chain": "false"})
    assert "chain:" not in render(unchained, "text") and "subgraph" not in render(unchained, "mermaid")
