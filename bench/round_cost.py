"""The fixed cost of a round (issue 20 item 6): where the seconds of a small round go.

One Spark session (local[2]) and one embedded Redis; a small workflow (wordcount over 200
sentences by default) submitted --repeats times after a warm-up. Each phase of the driver's
round (recovery/jobs/driver.py run_and_settle) is timed by wrapping the function that does it:

  session        starting the SparkSession (once, before the rounds)
  round job      engine.rounds.run_round: the round's Spark job (and, since issue 20, the
                 ledger's per-bucket resolution riding in it)
  ledger job     engine.rounds.resolve_ledger: the separate per-bucket job (only when the
                 round could not carry it: a settle-only resume)
  stats          collect_stats: the done markers read back
  clear          clear_round: done markers, spill references and the round's spill folder
  spouts job     tell_spouts: acks and fails delivered to Python and shell spouts
  record         runs.update / summarize: the run record written, the summary read

and the Spark jobs each submit started (SparkContext.statusTracker). Times are printed, never
asserted; the figures are written as JSON too (--json PATH; default bench/results/round_cost.json).

    .venv/bin/python bench/round_cost.py [--sentences 200] [--repeats 5] [--workflow wordcount|cdn_logs]
        [--unchained] [--json PATH]
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402

PHASES = {   # phase -> (module, function) wrapped
    "round job": ("recovery.engine.rounds", "run_round"),
    "ledger job": ("recovery.engine.rounds", "resolve_ledger"),
    "stats": ("recovery.engine.rounds", "collect_stats"),
    "clear": ("recovery.engine.rounds", "clear_round"),
    "spouts job": ("recovery.engine.rounds", "tell_spouts"),
    "record": ("recovery.tracking.runs", "update"),
    "summary": ("recovery.jobs.driver", "summarize"),
}


def _timed(spent: dict[str, float], phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter() - t0
    return wrapper


def instrument(spent: dict[str, float]) -> None:
    """Wrap every phase's function where the driver looks it up (module attributes)."""
    import importlib

    from recovery.jobs import driver
    for phase, (module, name) in PHASES.items():
        mod = importlib.import_module(module)
        setattr(mod, name, _timed(spent, phase, getattr(mod, name)))
    assert driver.summarize is not None   # (wrapped above: the driver imported it by name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=200, help="input lines (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="measured submits (default 5)")
    ap.add_argument("--workflow", default="wordcount", choices=("wordcount", "cdn_logs"))
    ap.add_argument("--unchained", action="store_true",
                    help="recovery.chain=false: one stage per component (cdn_logs chains three)")
    C.add_result_args(ap, "round_cost")
    args = ap.parse_args(argv)
    results = C.Results("round_cost", args, {"workflow": args.workflow, "lines": args.sentences,
                                             "chained": not args.unchained,
                                             "repeats": args.repeats, "master": "local[2]"})
    with C.bench_home(False, "recovery-bench-round-") as home:
        xml = C.copy_workflow(args.workflow, home / "wf")
        name = "sentences.txt" if args.workflow == "wordcount" else "cdn.log"
        data = xml.parent / "data" / name
        lines = (C.WORKFLOWS / "data" / name).read_text().splitlines(keepends=True)
        data.write_text("".join((lines * (args.sentences // max(len(lines), 1) + 1))[:args.sentences]))
        from recovery.jobs import clear
        with C.redis_for(home) as (client, url):
            t0 = time.perf_counter()
            with C.spark_session(home) as spark:
                session_s = time.perf_counter() - t0
                sc = spark.sparkContext
                out = xml.parent / "out"
                config = C.CHAINING["unchained"] if args.unchained else {}
                s, _ = C.submit(spark, client, url, xml, config)   # warm-up: Python workers started
                shutil.rmtree(out, ignore_errors=True)
                clear.clear(client, s["run_id"])
                spent: dict[str, float] = collections.defaultdict(float)
                instrument(spent)
                walls, jobs = [], []
                per_phase: dict[str, list[float]] = collections.defaultdict(list)
                for rep in range(args.repeats):
                    before = dict(spent)
                    n_jobs = len(sc.statusTracker().getJobIdsForGroup())
                    s, wall = C.submit(spark, client, url, xml, config)
                    jobs.append(len(sc.statusTracker().getJobIdsForGroup()) - n_jobs)
                    walls.append(wall)
                    for phase in PHASES:
                        per_phase[phase].append(spent[phase] - before.get(phase, 0.0))
                    clear.clear(client, s["run_id"])
                    shutil.rmtree(out, ignore_errors=True)
                    print(f"repeat {rep + 1}/{args.repeats}: {wall:.2f}s, {jobs[-1]} Spark jobs "
                          f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    med_wall = C.median(walls)
    rows = [["session start (once)", f"{session_s:.2f}", ""]]
    accounted = 0.0
    for phase in PHASES:
        m = C.median(per_phase[phase])
        accounted += m
        rows.append([phase, f"{m:.3f}", f"{m / med_wall:.0%}"])
    rows.append(["other (plan, lease, run record creation)", f"{max(med_wall - accounted, 0):.3f}",
                 f"{max(med_wall - accounted, 0) / med_wall:.0%}"])
    rows.append(["a submit, wall", f"{med_wall:.3f}", "100%"])
    name = args.workflow + (" unchained" if args.unchained else "")
    print(f"\n{name}, {args.sentences} lines, {args.repeats} submits after a warm-up, Spark "
          f"local[2], embedded Redis, {time.strftime('%Y-%m-%d %H:%M')}, load average "
          f"{os.getloadavg()[0]:.1f}; Spark jobs per submit: {sorted(set(jobs))}")
    print(C.table(["phase", "median s", "of a submit"], rows))
    results.write({"session_s": round(session_s, 3), "submit_wall_s": [round(w, 3) for w in walls],
                   "spark_jobs_per_submit": jobs,
                   "phases_s": {p: round(C.median(v), 4) for p, v in per_phase.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
