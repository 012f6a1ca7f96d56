"""Drawing a workflow: text for a terminal, Graphviz DOT, Mermaid.

`marks` puts a note on a component, drawn prominently (e.g. "FAILED tasks 3,4 (12 tuples)");
`dim` are components drawn as not re-running (greyed in DOT/Mermaid, marked in text).
`recovery graph` and `recovery plan` use these.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

from recovery.model.graph import ChainPlan, Mode, subscribers, topological_order
from recovery.model.workflow import (
    DEFAULT_STREAM,
    ClassImpl,
    Component,
    Grouping,
    Input,
    ShellImpl,
    SinkImpl,
    SourceImpl,
    Workflow,
)

Format = Literal["text", "dot", "mermaid"]
FORMATS: tuple[str, ...] = ("text", "dot", "mermaid")

__all__ = ["FORMATS", "render", "render_text", "render_dot", "render_mermaid", "describe_impl",
           "stages", "chains_of"]

Chains = Iterable[Iterable[str]]   # each chain's members, head first (model.graph.ChainPlan)
# component id -> its execution mode (runtime.modes.shown_modes; None: its class does not load)
Modes = Mapping[str, Mode | None]


def chains_of(wf: Workflow) -> list[tuple[str, ...]]:
    """The chains of more than one member that a run of `wf` makes (one Spark stage each)."""
    return [c.members for c in ChainPlan.of_workflow(wf).chained]


def render(wf: Workflow, fmt: str = "text", marks: Mapping[str, str] | None = None,
           dim: Iterable[str] | None = None, *, color: bool = False,
           ascii_only: bool = False, chains: Chains | None = None, modes: Modes | None = None) -> str:
    """The workflow drawn in `fmt` ("text", "dot" or "mermaid"). `color` adds ANSI colours to
    the text format; `ascii_only` draws it without box-drawing characters. `chains`: the
    chains to draw (Flink's chained operators), by default those `wf` makes; `recovery plan`
    passes the recovery workflow's. `modes`: the execution mode the text format gives each
    component it names (deciding them loads classes: the caller's part)."""
    chain_list = [tuple(c) for c in (chains_of(wf) if chains is None else chains)]
    known = {c.id for c in wf.components}
    chain_list = [tuple(m for m in c if m in known) for c in chain_list]
    chain_list = [c for c in chain_list if len(c) > 1]
    marks = dict(marks or {})
    dim_set = set(dim or ())
    known = {c.id for c in wf.components}
    unknown = sorted((set(marks) | dim_set) - known)
    if unknown:
        raise ValueError(f"not components of workflow {wf.name!r}: {', '.join(unknown)}")
    if fmt == "text":
        return render_text(wf, marks, dim_set, color=color, ascii_only=ascii_only, chains=chain_list,
                           modes=modes)
    if fmt == "dot":
        return render_dot(wf, marks, dim_set, chains=chain_list)
    if fmt == "mermaid":
        return render_mermaid(wf, marks, dim_set, chains=chain_list)
    raise ValueError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})")


# ------------------------------------------------------------------------------- helpers


def describe_impl(c: Component) -> str:
    """One line: how the component is implemented."""
    impl = c.impl
    if isinstance(impl, ClassImpl):
        return f"class {impl.ref}"
    if isinstance(impl, ShellImpl):
        return " ".join(["shell", impl.command, *([impl.script] if impl.script else []),
                         *impl.args])
    if isinstance(impl, (SourceImpl, SinkImpl)):
        params = " ".join(f"{k}={v}" for k, v in impl.params)
        if isinstance(impl, SourceImpl) and impl.options:   # a spark source's reader options
            params += "; options " + " ".join(f"{k}={_shown_option(k, v)}" for k, v in impl.options)
        return f"{impl.kind} {impl.type}" + (f" ({params.lstrip('; ')})" if params else "")
    return "?"                                       # pragma: no cover


_SECRET_OPTION = re.compile(r"password|secret|token|credential", re.IGNORECASE)


def _shown_option(name: str, value: str) -> str:
    """An option's value as drawings show it: a password (jdbc's) is not printed."""
    return "***" if _SECRET_OPTION.search(name) else value


def _grouping(i: Input) -> str:
    if i.grouping is Grouping.FIELDS:
        return f"fields({', '.join(i.fields)})"
    return i.grouping.value


def edge_label(i: Input) -> str:
    g = _grouping(i)
    return g if i.stream == DEFAULT_STREAM else f"{i.stream}: {g}"


def stages(wf: Workflow) -> list[list[str]]:
    """Components grouped by depth (longest path from a spout), each stage in topological
    order."""
    order = topological_order(wf)
    depth: dict[str, int] = {}
    for cid in order:
        c = wf.component(cid)
        depth[cid] = max((depth[i.source] + 1 for i in c.inputs if i.source in depth), default=0)
    out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for cid in order:
        out[depth[cid]].append(cid)
    return out


# ---------------------------------------------------------------------------------- text

_UNICODE = {"node": "●", "failed": "✖", "dim": "○", "bar": "│", "tee": "├─▶", "last": "└─▶",
            "end": "└─", "arrow": " ─▶ ", "join": "⋈", "note": "‼", "times": "×", "sep": " · "}
_ASCII = {"node": "*", "failed": "X", "dim": "o", "bar": "|", "tee": "+->", "last": "`->",
          "end": "`-", "arrow": " -> ", "join": "><", "note": "!!", "times": "x", "sep": " | "}

_RED, _BOLD, _GREY, _RESET = "\x1b[31;1m", "\x1b[1m", "\x1b[90m", "\x1b[0m"


def render_text(wf: Workflow, marks: Mapping[str, str] | None = None,
                dim: Iterable[str] | None = None, *, color: bool = False,
                ascii_only: bool = False, chains: Chains | None = None, modes: Modes | None = None) -> str:
    marks = dict(marks or {})
    modes = dict(modes or {})
    dim = set(dim or ())
    chain_list = [tuple(c) for c in (chains_of(wf) if chains is None else chains)]
    chain_of = {m: c for c in chain_list for m in c}
    ch = _ASCII if ascii_only else _UNICODE
    order = topological_order(wf)

    def paint(text: str, style: str) -> str:
        return f"{style}{text}{_RESET}" if color and style else text

    n = len(wf.components)
    lines = [paint(f"workflow {wf.name}", _BOLD)
             + f"  ({n} component{'s' if n != 1 else ''}"
             + (f", {len(wf.config)} config propert{'ies' if len(wf.config) != 1 else 'y'}"
                if wf.config else "") + ")"]
    st = stages(wf)
    if st:
        lines.append("stages: " + ch["arrow"].join(", ".join(s) for s in st))
    for members in chain_list:   # as Flink's plan shows chained operators: one Spark stage each
        lines.append("chain: " + " -> ".join(members) + "   (one Spark stage, no shuffle inside)")
    if dim:
        rerun = [cid for cid in order if cid not in dim]
        lines.append(f"re-runs: {', '.join(rerun) or 'nothing'}"
                     f"   ({ch['dim']} = not re-run)")
    width = max((len(cid) for cid in order), default=0)

    for cid in order:
        c = wf.component(cid)
        is_dim = cid in dim
        style = _GREY if is_dim else (_RED if cid in marks else "")
        bullet = ch["failed"] if cid in marks else ch["dim"] if is_dim else ch["node"]
        head = (f"{bullet} {cid.ljust(width)}  {c.kind} {ch['times']}{c.parallelism}  "
                f"{describe_impl(c)}")
        sources = list(dict.fromkeys(i.source for i in c.inputs))
        if len(sources) > 1:
            head += f"   {ch['join']} joins {' + '.join(sources)}"
        if cid in chain_of:
            head += f"   [chain: {' -> '.join(chain_of[cid])}]"
        if is_dim:
            head += "   (not re-run)"
        lines.append("")
        lines.append(paint(head, style))
        bar = ch["bar"]
        if cid in marks:
            lines.append(f"{bar}  " + paint(f"{ch['note']} {marks[cid]}", _RED))
        if cid in modes:
            mode = modes[cid]
            lines.append(paint(f"{bar}  mode    {mode if mode is not None else '? (its class does not load)'}",
                               style))
        for key, value in c.config:
            lines.append(paint(f"{bar}  config  {key}={value}", style))
        src_w = max((len(i.source) for i in c.inputs), default=0)
        for i in c.inputs:
            stream = "" if i.stream == DEFAULT_STREAM else f" [{i.stream}]"
            lines.append(paint(f"{bar}  reads   {i.source.ljust(src_w)}{stream}  {_grouping(i)}",
                               style))
        if c.streams:
            decl = ch["sep"].join(
                f"{s.id} [{' '.join(s.fields)}]" + (" direct" if s.direct else "")
                for s in c.streams)
            lines.append(paint(f"{bar}  emits   {decl}", style))
        outs = subscribers(wf, cid)
        if not outs:
            lines.append(paint(f"{ch['end']} (end)", style))
        tgt_w = max((len(consumer.id) for consumer, _ in outs), default=0)
        for k, (consumer, inp) in enumerate(outs):
            arrow = ch["last"] if k == len(outs) - 1 else ch["tee"]
            target_style = _GREY if consumer.id in dim else style
            lines.append(paint(f"{arrow} {consumer.id.ljust(tgt_w)}  {edge_label(inp)}",
                               target_style))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- dot


def _dot_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(wf: Workflow, marks: Mapping[str, str] | None = None,
               dim: Iterable[str] | None = None, chains: Chains | None = None) -> str:
    marks = dict(marks or {})
    dim = set(dim or ())
    chain_list = [tuple(c) for c in (chains_of(wf) if chains is None else chains)]
    out = [f"digraph {_dot_str(wf.name)} {{",
           "  rankdir=LR;",
           '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
           'fontname="Helvetica"];',
           '  edge [fontname="Helvetica", fontsize=10];']
    for cid in topological_order(wf):
        c = wf.component(cid)
        label = f"{cid}\n{c.kind} ×{c.parallelism}\n{describe_impl(c)}"
        attrs = {"shape": "box"}
        if c.is_spout:
            attrs["shape"] = "invhouse"
            attrs["fillcolor"] = "#e3f0ff"
        elif isinstance(c.impl, SinkImpl):
            attrs["shape"] = "cylinder"
            attrs["fillcolor"] = "#eef7e8"
        if cid in marks:
            label += f"\n{marks[cid]}"
            attrs.update(color="#cc0000", penwidth="2.5", fillcolor="#ffdddd",
                         fontcolor="#990000")
        if cid in dim:
            attrs.update(color="#bbbbbb", fontcolor="#999999", fillcolor="#f4f4f4",
                         style="rounded,filled,dashed")
        attrs["label"] = label
        out.append(f"  {_dot_str(cid)} [" +
                   ", ".join(f"{k}={_dot_str(v)}" for k, v in attrs.items()) + "];")
    for k, members in enumerate(chain_list):   # a chain: one Spark stage (Flink's chaining)
        out.append(f"  subgraph {_dot_str(f'cluster_chain_{k}')} {{")
        out.append(f'    label={_dot_str("chain: " + " -> ".join(members))}; style="rounded,dashed"; '
                   'color="#5b7bb5"; fontname="Helvetica"; fontsize=10;')
        out.append("    " + " ".join(f"{_dot_str(m)};" for m in members))
        out.append("  }")
    for c in wf.components:
        for i in c.inputs:
            attrs = {"label": edge_label(i)}
            if c.id in dim or i.source in dim:
                attrs.update(color="#bbbbbb", fontcolor="#999999", style="dashed")
            out.append(f"  {_dot_str(i.source)} -> {_dot_str(c.id)} [" +
                       ", ".join(f"{k}={_dot_str(v)}" for k, v in attrs.items()) + "];")
    out.append("}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------- mermaid


def _mm(s: str) -> str:
    """Text safe inside a Mermaid label."""
    return (s.replace("&", "#amp;").replace('"', "#quot;").replace("|", "#124;")
            .replace("<", "#lt;").replace(">", "#gt;"))


def render_mermaid(wf: Workflow, marks: Mapping[str, str] | None = None,
                   dim: Iterable[str] | None = None, chains: Chains | None = None) -> str:
    marks = dict(marks or {})
    dim = set(dim or ())
    chain_list = [tuple(c) for c in (chains_of(wf) if chains is None else chains)]
    order = topological_order(wf)
    node = {cid: f"n{k}" for k, cid in enumerate(order)}
    out = ["flowchart LR"]
    for cid in order:
        c = wf.component(cid)
        parts = [cid, f"{c.kind} ×{c.parallelism}", describe_impl(c)]
        if cid in marks:
            parts.append(f"<b>{_mm(marks[cid])}</b>")
        label = "<br/>".join(p if p.startswith("<b>") else _mm(p) for p in parts)
        if c.is_spout:
            shape = ('(["', '"])')
        elif isinstance(c.impl, SinkImpl):
            shape = ('[("', '")]')
        else:
            shape = ('["', '"]')
        out.append(f"  {node[cid]}{shape[0]}{label}{shape[1]}")
    for k, members in enumerate(chain_list):   # a chain: one Spark stage (Flink's chaining)
        out.append(f'  subgraph chain{k}["{_mm("chain: " + " -> ".join(members))}"]')
        out.extend(f"    {node[m]}" for m in members)
        out.append("  end")
    for c in wf.components:
        for i in c.inputs:
            arrow = "-.->" if (c.id in dim or i.source in dim) else "-->"
            out.append(f'  {node[i.source]} {arrow}|"{_mm(edge_label(i))}"| {node[c.id]}')
    failed = [node[cid] for cid in order if cid in marks]
    dimmed = [node[cid] for cid in order if cid in dim]
    if failed:
        out.append("  classDef marked fill:#ffdddd,stroke:#cc0000,stroke-width:3px,color:#990000")
        out.append(f"  class {','.join(failed)} marked")
    if dimmed:
        out.append("  classDef dim fill:#f4f4f4,stroke:#bbbbbb,color:#999999,"
                   "stroke-dasharray:4 3")
        out.append(f"  class {','.join(dimmed)} dim")
    return "\n".join(out) + "\n"
