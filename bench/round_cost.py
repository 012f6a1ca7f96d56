"""The fixed cost of a round: where the seconds of a small round go.

One Spark session (local[2]) and one embedded Redis; a small workflow (wordcount over 200
sentences by default) submitted --repeats times after a warm-up. Each phase of the driver's
round (recovery/jobs/settle.py run_and_settle) is timed by wrapping the function that does it:

  session        starting the SparkSession (once, before the rounds)
  round job      engine.rounds.run_round: the round's Spark job (its last task also
                 counts the acker's verdict: ledger.count_round)
  ledger job     engine.rounds.resolve_ledger: reading those counts, or the separate
                 per-bucket job when there are none (a task that died before counting, a
                 round resumed by another driver)
  stats          collect_stats: the done markers read back
  clear          clear_round: done markers, spill references and the round's spill folder
  spouts job     tell_spouts: acks and fails delivered to Python and shell spouts
  record         runs.update / summarize: the run record written, the summary read

and the Spark jobs each submit started (SparkContext.statusTracker). --compare runs each repeat
twice, side by side in one session: as the engine does, and with the counts the round's last
task stored dropped before the settle reads them, so that the settle runs the per-bucket job
(what every round did before the round's last task counted). Times are printed, never asserted; the figures are
written as JSON too (--json PATH; default bench/results/round_cost.json).

    .venv/bin/python bench/round_cost.py [--sentences 200] [--repeats 5] [--workflow wordcount|cdn_logs]
        [--unchained] [--compare] [--json PATH]
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
    "summary": ("recovery.jobs.settle", "summarize"),
}


def _timed(spent: dict[str, float], phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter() - t0
    return wrapper


def instrument(spent: dict[str, float], ledger_job: list[bool]) -> None:
    """Wrap every phase's function where the driver looks it up (module attributes). While
    ledger_job[0] is True, the settle finds no counts stored by the round's last task."""
    import importlib

    from recovery.engine import rounds
    from recovery.jobs import settle
    from recovery.tracking import keys
    resolve = rounds.resolve_ledger

    def resolve_ledger(spark: Any, client: Any, spec: Any) -> Any:
        if ledger_job[0]:
            client.delete(keys.round_counts(spec.run_id, spec.round))
        return resolve(spark, client, spec)
    rounds.resolve_ledger = resolve_ledger
    for phase, (module, name) in PHASES.items():
        mod = importlib.import_module(module)
        setattr(mod, name, _timed(spent, phase, getattr(mod, name)))
    assert settle.summarize is not None   # (wrapped above: the settle module imported it by name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=200, help="input lines (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="measured submits (default 5)")
    ap.add_argument("--workflow", default="wordcount", choices=("wordcount", "cdn_logs"))
    ap.add_argument("--unchained", action="store_true",
                    help="recovery.chain=false: one stage per component (cdn_logs chains three)")
    ap.add_argument("--compare", action="store_true",
                    help="each repeat also with the settle's separate per-bucket ledger job, side by side")
    C.add_result_args(ap, "round_cost")
    args = ap.parse_args(argv)
    results = C.Results("round_cost", args, {"workflow": args.workflow, "lines": args.sentences,
                                             "chained": not args.unchained, "compare": args.compare,
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
                clear.clear(client, s.run_id)
                spent: dict[str, float] = collections.defaultdict(float)
                ledger_job = [False]
                instrument(spent, ledger_job)
                variants = [False, True] if args.compare else [False]
                walls: dict[bool, list[float]] = collections.defaultdict(list)
                jobs: dict[bool, list[int]] = collections.defaultdict(list)
                per_phase: dict[bool, dict[str, list[float]]] = {
                    v: collections.defaultdict(list) for v in variants}
                for rep in range(args.repeats):
                    for variant in variants:
                        ledger_job[0] = variant
                        before = dict(spent)
                        n_jobs = len(sc.statusTracker().getJobIdsForGroup())
                        s, wall = C.submit(spark, client, url, xml, config)
                        jobs[variant].append(len(sc.statusTracker().getJobIdsForGroup()) - n_jobs)
                        walls[variant].append(wall)
                        for phase in PHASES:
                            per_phase[variant][phase].append(spent[phase] - before.get(phase, 0.0))
                        clear.clear(client, s.run_id)
                        shutil.rmtree(out, ignore_errors=True)
                        print(f"repeat {rep + 1}/{args.repeats}{' (ledger job)' if variant else ''}: "
                              f"{wall:.2f}s, {jobs[variant][-1]} Spark jobs "
                              f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    names = {False: "counted in the round", True: "separate ledger job"}
    med = {v: C.median(walls[v]) for v in variants}
    rows = [["session start (once)", f"{session_s:.2f}", ""] + (["", ""] if args.compare else [])]
    accounted = {v: 0.0 for v in variants}
    for phase in PHASES:
        row = [phase]
        for v in variants:
            m = C.median(per_phase[v][phase])
            accounted[v] += m
            row += [f"{m:.3f}", f"{m / med[v]:.0%}"]
        rows.append(row)
    row = ["other (plan, lease, run record creation)"]
    for v in variants:
        rest = max(med[v] - accounted[v], 0)
        row += [f"{rest:.3f}", f"{rest / med[v]:.0%}"]
    rows.append(row)
    rows.append(["a submit, wall"] + sum(([f"{med[v]:.3f}", "100%"] for v in variants), []))
    rows.append(["Spark jobs per submit"] + sum(([str(sorted(set(jobs[v]))), ""] for v in variants), []))
    name = args.workflow + (" unchained" if args.unchained else "")
    print(f"\n{name}, {args.sentences} lines, {args.repeats} submits after a warm-up, Spark "
          f"local[2], embedded Redis, {time.strftime('%Y-%m-%d %H:%M')}, load average "
          f"{os.getloadavg()[0]:.1f}")
    header = ["phase"] + sum(([f"median s ({names[v]})", "of a submit"] for v in variants), [])
    print(C.table(header, rows))
    if args.compare:
        print(f"counted in the round / separate ledger job, a submit's median wall: "
              f"{med[False] / med[True]:.2f}x")
    figures: dict[str, Any] = {"session_s": round(session_s, 3)}
    for v in variants:
        key = "ledger_job" if v else "counted_in_round"
        figures[key] = {"submit_wall_s": [round(w, 3) for w in walls[v]],
                        "spark_jobs_per_submit": jobs[v],
                        "phases_s": {p: round(C.median(x), 4) for p, x in per_phase[v].items()}}
    if args.compare:
        figures["wall_ratio_counted_over_job"] = round(med[False] / med[True], 3)
    results.write(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
