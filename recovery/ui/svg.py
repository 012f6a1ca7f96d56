"""SVG drawings for the web view, built on the server (no JavaScript): a workflow's topology in
stages and the small chart of recovery rounds.

The topology is laid out as recovery/model/render.py lays out the text form: one column per stage
(components grouped by their depth from a spout), edges labelled with grouping and stream.
Every node is a `<g class="node ...">` with `data-component` and, where tuples failed or died
there, `data-failed` / `data-dead` counts, so that tests and stylesheets can find them.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from recovery.jobs.reports import RoundReport
from recovery.model.render import chains_of, describe_impl, edge_label, stages
from recovery.model.synthesis import is_queue_spout
from recovery.model.workflow import SinkImpl, Workflow
from recovery.visible import visible

NODE_W, NODE_H = 150, 66


def escape(text: str) -> str:
    """`text` for SVG text and attributes: HTML-escaped, control characters as the pages show them."""
    return html.escape(visible(text, multiline=True))

COL_GAP, ROW_GAP, PAD = 84, 26, 16


@dataclass
class Marks:
    """What to mark on a topology: failed tuples per component and task, dead tuples per
    component, the components a recovery round runs again (highlighted; the rest dimmed)."""
    failed: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    dead: Mapping[str, int] = field(default_factory=dict)
    rerun: Iterable[str] | None = None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def topology(wf: Workflow, marks: Marks | None = None, title: str | None = None) -> str:
    """`wf` as an inline SVG element. Its chains (components run as one Spark stage, as Flink
    chains operators) are drawn as a dashed frame around their members, `<g class="chain">`
    with `data-members`, and each member node carries `data-chain`."""
    marks = marks or Marks()
    rerun = set(marks.rerun) if marks.rerun is not None else None
    columns = stages(wf)
    pos: dict[str, tuple[float, float]] = {}
    for s, column in enumerate(columns):
        for i, cid in enumerate(column):
            pos[cid] = (PAD + s * (NODE_W + COL_GAP), PAD + 18 + i * (NODE_H + ROW_GAP))
    width = PAD * 2 + max(len(columns), 1) * (NODE_W + COL_GAP) - COL_GAP
    height = PAD * 2 + 18 + max((len(c) for c in columns), default=1) * (NODE_H + ROW_GAP) - ROW_GAP
    label = title or f"topology of workflow {wf.name}"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" role="img" '
           f'aria-label="{escape(label)}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
           'fill="#7a8494"/></marker></defs>']
    chain_of: dict[str, str] = {}
    for members in chains_of(wf):
        name = " -> ".join(members)
        chain_of.update((m, name) for m in members)
        xs = [pos[m][0] for m in members]
        ys = [pos[m][1] for m in members]
        x0, y0 = min(xs) - 7, min(ys) - 7
        w, h = max(xs) - min(xs) + NODE_W + 14, max(ys) - min(ys) + NODE_H + 14
        out.append(f'<g class="chain" data-members="{escape(" ".join(members))}">'
                   f'<title>chain: {escape(name)} (one Spark stage, no shuffle inside)</title>'
                   f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" rx="12" fill="none" '
                   f'stroke="#5b7bb5" stroke-dasharray="6 4"/>'
                   f'<text x="{x0 + 8}" y="{y0 + h + 12}" font-size="10">chain: {escape(name)}</text></g>')
    for s in range(len(columns)):
        out.append(f'<text class="stage" x="{PAD + s * (NODE_W + COL_GAP) + NODE_W / 2}" '
                   f'y="{PAD + 4}" text-anchor="middle">stage {s + 1}</text>')
    for c in wf.components:
        for inp in c.inputs:
            if inp.source not in pos:
                continue
            (x1, y1), (x2, y2) = pos[inp.source], pos[c.id]
            x1, y1, y2 = x1 + NODE_W, y1 + NODE_H / 2, y2 + NODE_H / 2
            mid = (x1 + x2) / 2
            dim = rerun is not None and (c.id not in rerun or inp.source not in rerun)
            text = edge_label(inp)
            out.append(f'<g class="edge{" dim" if dim else ""}" data-from="{escape(inp.source)}" '
                       f'data-to="{escape(c.id)}"><title>{escape(inp.source)} → {escape(c.id)}: '
                       f'{escape(text)}</title>'
                       f'<path d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 2},{y2}" '
                       f'marker-end="url(#arrow)"/>'
                       f'<text x="{mid}" y="{(y1 + y2) / 2 - 5}" text-anchor="middle">'
                       f'{escape(text)}</text></g>')
    for cid, (x, y) in pos.items():
        out.append(_node(wf, cid, x, y, marks, rerun, chain_of.get(cid)))
    out.append("</svg>")
    return "".join(out)


def _node(wf: Workflow, cid: str, x: float, y: float, marks: Marks, rerun: set[str] | None,
          chain: str | None = None) -> str:
    c = wf.component(cid)
    failed_tasks = dict(marks.failed.get(cid) or {})
    n_failed = sum(failed_tasks.values())
    n_dead = int(marks.dead.get(cid) or 0)
    classes = ["node", c.kind]
    if is_queue_spout(c):
        classes.append("queue")
    elif isinstance(c.impl, SinkImpl):
        classes.append("sink")
    if n_failed:
        classes.append("failed")
    if n_dead:
        classes.append("dead")
    if rerun is not None:
        classes.append("rerun" if cid in rerun else "dim")
    tip = [f"{cid}: {c.kind} ×{c.parallelism}", describe_impl(c)]
    if n_failed:
        tip.append("failed: " + ", ".join(f"task {t}: {_plural(n, 'tuple')}"
                                          for t, n in sorted(failed_tasks.items())))
    if n_dead:
        tip.append(f"dead letters: {_plural(n_dead, 'tuple')}")
    if rerun is not None:
        tip.append("runs again in the recovery round" if cid in rerun else "does not run again")
    if chain is not None:
        classes.append("chained")
        tip.append(f"chain: {chain}")
    attrs = f'data-component="{escape(cid)}"'
    if n_failed:
        attrs += f' data-failed="{n_failed}"'
    if n_dead:
        attrs += f' data-dead="{n_dead}"'
    if chain is not None:
        attrs += f' data-chain="{escape(chain)}"'
    parts = [f'<g class="{" ".join(classes)}" {attrs} transform="translate({x},{y})">',
             f'<title>{escape(chr(10).join(tip))}</title>',
             f'<rect width="{NODE_W}" height="{NODE_H}" rx="8"/>',
             f'<text class="name" x="10" y="20">{escape(_fit(cid, 17))}</text>',
             f'<text class="kind" x="10" y="37">{c.kind} ×{c.parallelism}</text>']
    if n_failed:
        where = (f"task {next(iter(failed_tasks))}" if len(failed_tasks) == 1
                 else f"{len(failed_tasks)} tasks")
        parts.append(f'<text class="failures" x="10" y="55">✖ {n_failed} failed · {where}</text>')
    if n_dead:
        parts.append(f'<g class="dead-badge" transform="translate({NODE_W - 10},-8)">'
                     f'<rect x="-62" width="62" height="17" rx="8"/>'
                     f'<text x="-31" y="12.5" text-anchor="middle">☠ {n_dead} dead</text></g>')
    parts.append("</g>")
    return "".join(parts)


def _fit(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def rounds_chart(rounds: list[RoundReport]) -> str:
    """Recovery rounds as grouped bars: replayed, recovered and dead tuples per round."""
    rows = [r for r in rounds if r.round]
    if not rows:
        return ""
    series: tuple[tuple[str, Callable[[RoundReport], int]], ...] = (
        ("replayed", lambda r: r.replayed), ("recovered", lambda r: r.recovered), ("dead", lambda r: r.dead))
    top = max(max(value(r) for _, value in series) for r in rows) or 1
    bar, gap, h, left, bottom = 16, 22, 120, 40, 22
    width = left + len(rows) * (bar * len(series) + gap) + 120
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
           f'aria-label="recovery rounds" viewBox="0 0 {width} {h + bottom + 10}" width="{width}" '
           f'height="{h + bottom + 10}">',
           f'<line class="axis" x1="{left - 4}" y1="{h + 5}" x2="{width - 120}" y2="{h + 5}"/>',
           f'<text class="tick" x="{left - 8}" y="14" text-anchor="end">{top}</text>',
           f'<text class="tick" x="{left - 8}" y="{h + 5}" text-anchor="end">0</text>']
    for i, r in enumerate(rows):
        x0 = left + i * (bar * len(series) + gap)
        for j, (key, value) in enumerate(series):
            v = value(r)
            bh = round(v / top * (h - 10), 1)
            out.append(f'<rect class="{key}" x="{x0 + j * bar}" y="{h + 5 - bh}" width="{bar - 2}" '
                       f'height="{bh}"><title>round {r.round}: {v} {key}</title></rect>')
        out.append(f'<text class="tick" x="{x0 + bar * len(series) / 2}" y="{h + bottom}" '
                   f'text-anchor="middle">round {r.round}</text>')
    lx = width - 110
    for j, (key, _) in enumerate(series):
        out.append(f'<rect class="{key}" x="{lx}" y="{10 + j * 20}" width="12" height="12"/>'
                   f'<text class="tick" x="{lx + 18}" y="{20 + j * 20}">{key}</text>')
    out.append("</svg>")
    return "".join(out)
