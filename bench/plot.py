"""Draw the benches' JSON results (bench/results/*.json) as SVG pictures for the docs, and print
the README's table of current figures.

    .venv/bin/python bench/plot.py [--results bench/results] [--out docs] [--table]

Pictures (each drawn only when its JSON is there):

  perf-tracking.svg   tracked vs untracked vs the components without the runtime vs a hand-written
                      PySpark job (tracking_overhead.json; older files: plain PySpark): wall and
                      CPU seconds of the same workflow run each way
  perf-batch.svg      row vs batch components (tracking_overhead_cdn_logs_batch.json): roots
                      per second, tracked and untracked
  perf-recovery.svg   localized recovery vs root replay vs full rerun (recovery_cost.json), as
                      tuple executions and as wall time
  perf-scale.svg      Redis bytes per root and driver peak memory against roots, one line per
                      failure rate (scale.json)

The SVGs are deterministic: the same JSON gives the same bytes (a fixed `svg.hashsalt`, no
date in the metadata, text kept as text), so the committed pictures can be checked against the
committed JSON (tests/bench/test_plot.py). `--table` prints the Markdown table of the README's
Performance section from the same files instead of drawing.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
OUT = REPO / "docs"

# One colour per meaning, the same in every picture.
COLOURS = {"tracked": "#1f77b4", "untracked": "#7fb2dc", "plain": "#b0b0b0", "row": "#d98c3a",
           "localized": "#2a9d5c", "root-replay": "#d98c3a", "full rerun": "#b0b0b0",
           "component classes (no tracking)": "#b0b0b0", "pyspark (hand-written)": "#555555"}
# tracking_overhead's baselines: the component classes without the runtime (named `plain`
# before the hand-written job joined them), and the job written by hand
COMPONENTS, HAND = "component classes (no tracking)", "pyspark (hand-written)"
SHORT = {COMPONENTS: "component classes", HAND: "hand-written PySpark"}
BUSY_COLOUR = "#d62728"
RATE_COLOURS = ["#1f77b4", "#d62728", "#2a9d5c", "#9467bd", "#8c564b"]


def load(results: Path, name: str) -> dict[str, Any] | None:
    """bench/results/NAME.json, or None when that bench has not written one."""
    path = results / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- drawing

def _pyplot() -> Any:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcdefaults()
    plt.rcParams.update({
        "svg.hashsalt": "recovery-bench",   # ids of clip paths and the like: fixed
        "svg.fonttype": "none",             # text stays text: small files, no glyph paths
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.axisbelow": True,
    })
    return plt


def _caption(doc: dict[str, Any]) -> str:
    """Two lines under a picture: when, where and how it was measured; the run's note."""
    m = doc.get("machine", {})
    load = m.get("load_average_start") or [0]
    first = (f"{doc.get('date', '?')}, {m.get('cpus', '?')} vCPUs (load average {load[0]:.1f} at start), "
             f"Python {m.get('python', '?')}, PySpark {m.get('pyspark', '?')}: {doc.get('command', '')}")
    # a long note wraps rather than runs off the picture
    return first + ("\n" + textwrap.fill(m["note"], 150) if m.get("note") else "")


def busy_text(doc: dict[str, Any]) -> str | None:
    """What a picture and a table row say of figures measured on a busy machine (other
    processes above a tenth of it, written with --busy-ok); None for a quiet run."""
    if not doc.get("busy"):
        return None
    share = doc.get("machine", {}).get("other_cpu_share")
    used = f": other processes used {share:.0%} of it" if share is not None else ""
    return f"busy machine{used}"


def _save(plt: Any, fig: Any, doc: dict[str, Any], path: Path) -> Path:
    busy = busy_text(doc)
    if busy:
        fig.text(0.99, 0.99, busy.upper(), fontsize=8, color=BUSY_COLOUR, ha="right", va="top",
                 fontweight="bold")
    fig.text(0.01, 0.01, _caption(doc), fontsize=6.5, color="#555555", ha="left", va="bottom")
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return path


def _label_bars(ax: Any, bars: Any, fmt: str) -> None:
    ax.grid(axis="x", visible=False)
    for bar in bars:
        h = bar.get_height()
        ax.annotate(fmt.format(h), (bar.get_x() + bar.get_width() / 2, h), ha="center", va="bottom",
                    fontsize=7.5, xytext=(0, 2), textcoords="offset points")


def plot_tracking(doc: dict[str, Any], path: Path) -> Path:
    """Wall and CPU seconds per variant (tracked, untracked, plain PySpark)."""
    plt = _pyplot()
    figs = doc["figures"]
    hand = HAND in figs["variants"]   # the benches since the hand-written job joined
    names = ("tracked", "untracked", COMPONENTS, HAND) if hand else ("tracked", "untracked", "plain")
    variants = [v for v in names if v in figs["variants"]]
    # results with chaining also ran each variant without it ("<variant> unchained"): side by side
    # (the hand-written job runs one way only)
    both = all(f"{v} unchained" in figs["variants"] for v in variants if v != HAND)
    labels = [SHORT.get(v, v) for v in variants]
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for ax, key, title in ((axes[0], "median_wall_s", "wall seconds"), (axes[1], "median_cpu_s", "CPU seconds")):
        values = [figs["variants"][v][key] for v in variants]
        if not both:
            bars = ax.bar(labels, values, color=[COLOURS[v] for v in variants])
            _label_bars(ax, bars, "{:.1f}")
        else:
            two = [v for v in variants if v != HAND]
            unchained = [figs["variants"][f"{v} unchained"][key] for v in two]
            xs = range(len(variants))
            widths = [0.4 if v != HAND else 0.5 for v in variants] if hand else 0.4
            bars = ax.bar([x - 0.2 if v != HAND else x for x, v in zip(xs, variants)], values, widths,
                          color=[COLOURS[v] for v in variants], label="chained")
            _label_bars(ax, bars, "{:.1f}")
            bars = ax.bar([x + 0.2 for x in range(len(two))], unchained, 0.4, color=[COLOURS[v] for v in two],
                          hatch="///", edgecolor="white", label="unchained")
            _label_bars(ax, bars, "{:.1f}")
            ax.set_xticks(list(xs), labels)
            values = values + unchained
            ax.legend(fontsize=7, loc="upper right")
        if hand:
            ax.tick_params(axis="x", labelsize=7)
        ax.set_title(title)
        ax.set_ylim(0, max(values) * (1.35 if both else 1.18))
    p = doc["parameters"]
    what = ("tracked / untracked / the same components without the runtime / a hand-written PySpark job"
            if hand else "tracked / untracked / plain PySpark RDD of the same components")
    fig.suptitle(f"Tracking overhead: {p['workflow']}, {p['roots']:,} roots ({what})"
                 f"{chr(10) + 'each chained (solid) and unchained (hatched)' if both else ''}", fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.76 if both else 0.82, bottom=0.22, wspace=0.3)
    return _save(plt, fig, doc, path)


def plot_batch(doc: dict[str, Any], path: Path) -> Path:
    """Roots per second: the row workflow tracked, the batch workflow tracked and untracked."""
    plt = _pyplot()
    v = doc["figures"]["variants"]
    labels = ["row, tracked", "batch, tracked", "batch, untracked"]
    kinds = ["row", "tracked", "untracked"]
    values = [v[k]["roots_per_s"] for k in kinds]
    colours = [COLOURS[k] for k in kinds]
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    if not all(f"{k} unchained" in v for k in kinds):
        bars = ax.bar(labels, values, color=colours)
        _label_bars(ax, bars, "{:,.0f}")
    else:   # each variant chained and unchained, side by side
        xs = range(len(kinds))
        bars = ax.bar([x - 0.2 for x in xs], values, 0.4, color=colours, label="chained")
        _label_bars(ax, bars, "{:,.0f}")
        unchained = [v[f"{k} unchained"]["roots_per_s"] for k in kinds]
        bars = ax.bar([x + 0.2 for x in xs], unchained, 0.4, color=colours, hatch="///", edgecolor="white",
                      label="unchained")
        _label_bars(ax, bars, "{:,.0f}")
        ax.set_xticks(list(xs), labels)
        ax.legend(fontsize=7, loc="upper left")
        values = values + unchained
    ax.set_ylabel("roots per second")
    ax.set_ylim(0, max(values) * 1.25)
    p = doc["parameters"]
    fig.suptitle(f"Row vs batch components: cdn_logs vs cdn_logs_batch, {p['roots']:,} roots", fontsize=9)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.86, bottom=0.22)
    return _save(plt, fig, doc, path)


def plot_recovery(doc: dict[str, Any], path: Path) -> Path:
    """Tuple executions and wall seconds per strategy."""
    plt = _pyplot()
    s = doc["figures"]["strategies"]
    names = [n for n in ("localized", "root-replay", "full rerun") if n in s]
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    ex = [s[n]["executions"] for n in names]
    bars = axes[0].bar(names, ex, color=[COLOURS[n] for n in names])
    axes[0].set_yscale("log")
    axes[0].set_ylim(min(ex) / 2, max(ex) * 4)
    _label_bars(axes[0], bars, "{:,.0f}")
    axes[0].set_title("tuple executions (log scale)")
    wall = [s[n]["wall_s"] for n in names]
    bars = axes[1].bar(names, wall, color=[COLOURS[n] for n in names])
    axes[1].set_ylim(0, max(wall) * 1.18)
    _label_bars(axes[1], bars, "{:.1f} s")
    axes[1].set_title("wall seconds")
    p = doc["parameters"]
    fig.suptitle(f"Recovering {doc['figures']['failed_tuples']:,} failed tuples ({p['rate']:.0%} failing once at "
                 f"{p['failing_component']}) of {p['roots']:,} roots", fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.82, bottom=0.2, wspace=0.3)
    return _save(plt, fig, doc, path)


def _rate(rate: float) -> str:
    return f"{_pct(rate)} failing"


def plot_scale(doc: dict[str, Any], path: Path) -> Path:
    """Redis bytes per root and driver peak RSS against roots, one line per failure rate."""
    plt = _pyplot()
    cases = doc["figures"]["cases"]
    rates = sorted({c["rate"] for c in cases})
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for i, rate in enumerate(rates):
        mine = sorted((c for c in cases if c["rate"] == rate), key=lambda c: c["roots"])
        roots = [c["roots"] for c in mine]
        colour = RATE_COLOURS[i % len(RATE_COLOURS)]
        axes[0].plot(roots, [c["redis_bytes_per_root"] for c in mine], "o-", color=colour,
                     label=_rate(rate))
        axes[1].plot(roots, [c["driver_peak_rss_bytes"] / 1e6 for c in mine], "o-", color=colour,
                     label=_rate(rate))
    all_roots = sorted({c["roots"] for c in cases})
    for ax in axes:
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(all_roots, [f"{r:,}" for r in all_roots])
        ax.set_xlabel("roots")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)   # room for the legend above the lines
        ax.legend(fontsize=7.5, loc="upper left", ncols=2)
    axes[0].set_title("Redis peak bytes per root")
    axes[1].set_title("driver peak RSS, MB")
    p = doc["parameters"]
    fig.suptitle(f"Scale: {p['workflow']}, submit then recover, a fresh embedded Redis per case", fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.82, bottom=0.25, wspace=0.3)
    return _save(plt, fig, doc, path)


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any], Path], Path]]] = {
    "perf-tracking.svg": ("tracking_overhead", plot_tracking),
    "perf-batch.svg": ("tracking_overhead_cdn_logs_batch", plot_batch),
    "perf-recovery.svg": ("recovery_cost", plot_recovery),
    "perf-scale.svg": ("scale", plot_scale),
}


def draw(results: Path = RESULTS, out: Path = OUT) -> list[Path]:
    """Every picture whose JSON is in `results`, into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, (name, plot) in PLOTS.items():
        doc = load(results, name)
        if doc is None:
            print(f"plot: no {name}.json in {results}: {filename} not drawn", file=sys.stderr)
            continue
        written.append(plot(doc, out / filename))
    return written


# --------------------------------------------------------------------------- the README's table

def _pct(rate: float) -> str:
    return f"{rate * 100:g}%"


def _x(v: float) -> str:
    return f"{v:.2f}x"


def table(results: Path = RESULTS) -> str:
    """The README's Performance table: one row per figure, each with the command that
    reproduces it (from the JSON the bench wrote)."""
    rows: list[tuple[str, str, str]] = []
    seen: list[dict[str, Any]] = []

    row_docs: list[dict[str, Any]] = []   # each row's JSON (cmd is called once per row, in order)

    def cmd(doc: dict[str, Any]) -> str:
        if doc not in seen:
            seen.append(doc)
        row_docs.append(doc)
        return f"`{doc['command']}`"

    doc = load(results, "tracking_overhead")
    if doc:
        f, p = doc["figures"], doc["parameters"]
        r = f["ratios"]
        rows.append((f"tracked / untracked, {p['workflow']} ({p['roots']:,} roots)",
                     f"{_x(r['tracked/untracked']['cpu'])} CPU, {_x(r['tracked/untracked']['wall'])} wall", cmd(doc)))
        if "untracked/plain" in r:
            rows.append(("untracked / plain PySpark RDD of the same components",
                         f"{_x(r['untracked/plain']['cpu'])} CPU, {_x(r['untracked/plain']['wall'])} wall", cmd(doc)))
        for key, what in (("tracked/hand-written", "tracked / a hand-written PySpark job of the same functions"),
                          ("untracked/hand-written", "untracked / the hand-written PySpark job"),
                          ("untracked/components", "untracked / the same component classes without the runtime")):
            if key in r:
                rows.append((what, f"{_x(r[key]['cpu'])} CPU, {_x(r[key]['wall'])} wall", cmd(doc)))
        rows.append(("tracked throughput, row components",
                     f"{f['variants']['tracked']['roots_per_s']:,} roots/s", cmd(doc)))
        if "tracked chained/unchained" in r:     # results with chaining run each variant both ways
            c = r["tracked chained/unchained"]
            rows.append((f"chained / unchained, tracked, {p['workflow']}",
                         f"{_x(c['cpu'])} CPU, {_x(c['wall'])} wall", cmd(doc)))
        cold = f.get("cold_submit")
        if cold:
            rows.append((f"cold `recovery submit` of {cold['lines']:,} lines (a new driver: JVM, Spark session), "
                         "after `server start`",
                         f"{cold['wall_s']:.1f} s wall ({cold['server_start_wall_s']:.1f} + "
                         f"{cold['submit_wall_s']:.1f}), {cold['submit_cpu_s']:.1f} CPU s", cmd(doc)))
    doc = load(results, "peers")
    if doc:
        for n, size in doc["figures"]["sizes"].items():
            v = size["variants"]
            rec = v["recovery tracked"]
            for peer in ("bytewax, 2 workers", "bytewax, 2 processes"):
                if peer in v:
                    rows.append((f"recovery tracked / {peer}, recovery on, cdn_logs ({int(n):,} roots)",
                                 f"{_x(rec['median_cpu_s'] / v[peer]['median_cpu_s'])} CPU, "
                                 f"{_x(rec['median_wall_s'] / v[peer]['median_wall_s'])} wall", cmd(doc)))
    doc = load(results, "tracking_overhead_cdn_logs_batch")
    if doc:
        f, p = doc["figures"], doc["parameters"]
        v = f["variants"]
        rows.append((f"batch components, tracked ({p['workflow']}, {p['roots']:,} roots)",
                     f"{v['tracked']['roots_per_s']:,} roots/s, {_x(f['ratios']['row/tracked']['wall'])} "
                     "the row workflow's", cmd(doc)))
        if "tracked/untracked" in f["ratios"] and "tracked chained/unchained" in f["ratios"]:
            rows.append((f"tracked / untracked, {p['workflow']}",
                         f"{_x(f['ratios']['tracked/untracked']['cpu'])} CPU, "
                         f"{_x(f['ratios']['tracked/untracked']['wall'])} wall", cmd(doc)))
    doc = load(results, "framework_cost")
    if doc:
        f = doc["figures"]
        rows.append(("framework cost per tuple-execution, tracked (chain of pass-through bolts, one stage each)",
                     f"{f['framework_us_per_execution']['tracked']:.2f} µs CPU above plain PySpark", cmd(doc)))
        chained = f.get("chained")
        if chained:
            tracked = chained["variants"]["tracked"]
            rows.append(("the same chain run as one stage (`recovery.chain.shuffle=true`), tracked",
                         f"{chained['framework_us_per_execution']['tracked']:.2f} µs CPU above plain PySpark "
                         f"chained the same way; {1e6 / tracked['cpu_us_per_execution']:,.0f} executions per CPU s, "
                         f"{_x(tracked['chained_over_unchained'])} the unchained CPU", cmd(doc)))
    doc = load(results, "recovery_cost")
    if doc:
        f, p = doc["figures"], doc["parameters"]
        s = f["strategies"]
        loc, rr, full = s["localized"], s["root-replay"], s["full rerun"]
        rows.append((f"localized recovery of {f['failed_tuples']:,} failed tuples ({p['rate']:.0%} of "
                      f"{p['roots']:,} roots)",
                     f"{loc['executions']:,} executions, {loc['wall_s']:.1f} s, "
                     f"{sum(loc['duplicates'].values())} duplicates", cmd(doc)))
        rows.append(("the same by root replay (Storm's way)",
                     f"{rr['executions']:,} executions, {rr['wall_s']:.1f} s, "
                     f"{sum(rr['duplicates'].values()):,} duplicates", cmd(doc)))
        rows.append(("the same by a full rerun",
                     f"{full['executions']:,} executions, {full['wall_s']:.1f} s", cmd(doc)))
    doc = load(results, "scale")
    if doc:
        cases = doc["figures"]["cases"]
        low = min(c["rate"] for c in cases)
        success = [c for c in cases if c["rate"] == low]
        worst = max(success, key=lambda c: c["redis_bytes_per_root"])
        small = min(cases, key=lambda c: (c["roots"], c["rate"]))
        big = max(cases, key=lambda c: (c["roots"], c["rate"]))
        rows.append((f"Redis peak per root, success path ({_pct(low)} failing; worst case, {worst['roots']:,} roots)",
                     f"{worst['redis_bytes_per_root']:.0f} B (polled: {worst['redis_polled_bytes_per_root']:.0f} B)",
                     cmd(doc)))
        rows.append((f"driver peak RSS, {big['roots']:,} roots with {_pct(big['rate'])} failing / "
                     f"{small['roots']:,} with {_pct(small['rate'])}",
                     f"{big['driver_peak_rss_bytes'] / 1e6:.0f} / {small['driver_peak_rss_bytes'] / 1e6:.0f} MB "
                     f"= {big['driver_peak_rss_bytes'] / small['driver_peak_rss_bytes']:.2f}", cmd(doc)))
    doc = load(results, "shell_throughput")
    if doc:
        f = doc["figures"]
        rows.append(("one shell bolt (pystorm) vs the same bolt in Python",
                     f"{f['shell']['tuples_per_s']:,} vs {f['python']['tuples_per_s']:,} tuples/s", cmd(doc)))
    # figures of a busy machine (written with --busy-ok) say so on their row
    marks = [f" ({busy_text(d)})" if busy_text(d) else "" for d in row_docs]
    lines = ["| figure | value | reproduce with |", "|---|---|---|"]
    lines += [f"| {a} | {b}{mark} | {c} |" for (a, b, c), mark in zip(rows, marks)]
    if seen:
        dates = sorted({d.get("date", "?") for d in seen})
        loads = [d.get("machine", {}).get("load_average_start", [0])[0] for d in seen]
        cpus = sorted({str(d.get("machine", {}).get("cpus", "?")) for d in seen})
        lines.append("")
        lines.append(f"Measured {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)} on "
                     f"{'/'.join(cpus)} vCPUs, load average {min(loads):.1f} to {max(loads):.1f} at the start "
                     "of the runs (each JSON file has its own, and what else the machine ran).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the benches' JSON (default bench/results)")
    ap.add_argument("--out", type=Path, default=OUT, help="folder the SVGs go to (default docs)")
    ap.add_argument("--table", action="store_true", help="print the README's table instead of drawing")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.results))
        return 0
    for path in draw(args.results, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
