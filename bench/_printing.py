"""Small helpers for printing figures: medians, verdicts against a goal, plain tables."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

# --------------------------------------------------------------------------- printing

def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured markdown table (readable in a terminal too)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(r, widths))) + " |"
    sep = "|" + "|".join(("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":")
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def verdict(value: float, goal: float, at_least: bool = False) -> str:
    """'met', or how far off the goal `value` is (a ratio at most `goal`, or at least it)."""
    if (value >= goal) if at_least else (value <= goal):
        return "met"
    if at_least:
        return f"not met ({goal / value:.2f}x short)" if value > 0 else "not met"
    return f"not met ({value / goal - 1:.0%} over)"
