"""Recovery cost: workflows/bench_pipeline.xml (events → parse → enrich →
aggregate (fields grouping, keyed state) → format → out, and parse → archive), N root tuples,
1% of the tuples failing once at stage 4 (`aggregate`, by recovery.inject.*). What does it cost
to get the exact failure-free output?

  localized     jobs.recover(strategy="localized"): re-runs aggregate, format and out, fed
                from the failed tuples' queues
  root-replay   jobs.recover(strategy="root-replay"): Storm's way, every failed root replayed
                from the spout (the source is re-read; its whole tree re-runs)
  full rerun    a failure-free submit of the whole input into the failed run's folder (its
                sink parts are named by run, so they land beside the failed run's: the
                duplicates it reports are what rerunning without emptying the output gives;
                its own parts are checked against the reference too)

The same failing run is submitted once per strategy, each under its own run id and folder
(tuple ids and injections are deterministic, so the three are identical; the bench checks
their failure counts agree). A failure-free run in a fourth folder is the reference.

For each strategy: tuple executions (the sum of `executed` over components in the round stats
of the run record, recovery rounds only for the two recoveries), recovery rounds, wall time,
duplicate sink writes (records in the sinks beyond the failure-free run's, as a multiset
difference) and missing records; then the ratios localized/root-replay and
localized/full-rerun. Times are printed, never asserted; the figures are written as JSON too
(--json PATH; by default bench/results/recovery_cost.json, or recovery_cost_cdn_logs_batch.json)
for bench/plot.py.

    .venv/bin/python bench/recovery_cost.py [--roots 200000] [--rate 0.01] [--redis URL]
        [--workflow bench_pipeline|cdn_logs_batch] [--no-root-replay] [--json PATH] [--note TEXT]

--no-root-replay leaves root replay out (one failing submit and its recovery fewer: at 1M roots
on a shared machine the whole bench takes the better part of an hour); the goal's ratio,
localized / full rerun, is printed either way.

--workflow cdn_logs_batch is the batch variant: workflows/cdn_logs_batch.xml with
the rate's tuples failing once at its batch `aggregate`, recovered localized, against a
failure-free run of the same input; and workflows/cdn_logs.xml (row bolts) the same way, for
comparison (the injection chooses tuples by id, and both derive the same ids). Prints
executions, bisection re-executions per isolated failure, duplicates and missing records.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402

if TYPE_CHECKING:
    from recovery.model.record import RunRecord

WORKFLOW = "bench_pipeline"
STAGE4 = "aggregate"
SINKS = ("main", "archive")
DATA = Path("bench_pipeline") / "data" / "events.csv"   # relative to the XML, as in the XML


def injection(rate: float) -> dict[str, str]:
    return {"recovery.inject.bench.component": STAGE4,
            "recovery.inject.bench.mode": "transient",
            "recovery.inject.bench.rate": str(rate),
            "recovery.inject.bench.attempts": "1"}


def executions(rec: RunRecord, recovery_rounds: bool) -> int:
    """Sum of `executed` over components: round 0 only, or every round after it."""
    total = 0
    for r in rec.rounds:
        if (r.round > 0) == recovery_rounds:
            total += sum(c.executed for c in r.components.values())
    return total


def sinks_of(folder: Path, run_id: str | None = None) -> dict[str, collections.Counter]:
    return {s: C.sink_multiset(folder / "out" / WORKFLOW / s, run_id) for s in SINKS}


def diff(got: dict[str, collections.Counter], ref: dict[str, collections.Counter]) -> tuple[dict, dict]:
    dupes = {s: sum((got[s] - ref[s]).values()) for s in SINKS}
    missing = {s: sum((ref[s] - got[s]).values()) for s in SINKS}
    return dupes, missing


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def batch_variant(args: argparse.Namespace, results: C.Results) -> int:
    """cdn_logs_batch and cdn_logs, each: failure-free run, failing run, localized recovery."""
    n = args.tuples
    figures: dict[str, dict] = {}
    inject = {"recovery.inject.bench.component": "aggregate", "recovery.inject.bench.mode": "transient",
              "recovery.inject.bench.rate": str(args.rate), "recovery.inject.bench.attempts": "1"}
    with C.bench_home(args.keep, "recovery-bench-cost-batch-") as home:
        sys.path.insert(0, str(C.WORKFLOWS))
        from cdn_logs.generate import generate

        from recovery.jobs import clear, recover
        from recovery.tracking import runs
        src = home / "cdn.log"
        generate(str(src), n, seed=4, invalid=0.0)

        def folder(workflow: str, name: str) -> Path:
            xml = C.copy_workflow(workflow, home / name)
            C.copy_workflow("cdn_logs", home / name)   # cdn_logs_batch's components import cdn_logs's
            target = xml.parent / "data" / "cdn.log"
            target.unlink(missing_ok=True)
            os.link(src, target)
            return xml

        def sink(name: str, workflow: str) -> collections.Counter:
            return C.sink_multiset(home / name / "out" / workflow)

        rows = []
        with C.redis_for(home, args.redis) as (client, url), C.spark_session(home) as spark:
            warm, _ = C.submit(spark, client, url, folder("cdn_logs_batch", "warm"), inject)
            recover.recover(spark, client, url, warm.run_id)
            clear.clear(client, warm.run_id)
            for workflow in ("cdn_logs_batch", "cdn_logs"):
                s, clean_secs = C.submit(spark, client, url, folder(workflow, f"{workflow}-clean"),
                                         run_id=f"bench-{workflow}-clean")
                clear.clear(client, s.run_id)
                ref = sink(f"{workflow}-clean", workflow)
                run_id = f"bench-{workflow}-failing"
                s, fail_secs = C.submit(spark, client, url, folder(workflow, f"{workflow}-failing"), inject,
                                        run_id=run_id)
                failed = sum(p.count for p in s.failed_positions)
                agg = s.components["aggregate"].to_json()
                t0 = time.perf_counter()
                r = recover.recover(spark, client, url, run_id)
                rec_secs = time.perf_counter() - t0
                got = sink(f"{workflow}-failing", workflow)
                dupes, missing = sum((got - ref).values()), sum((ref - got).values())
                figures[workflow] = {
                    "clean_s": round(clean_secs, 3), "failing_s": round(fail_secs, 3), "failed": failed,
                    "bisect_runs": agg.get("bisect_runs", 0), "bisect_isolated": agg.get("bisect_isolated", 0),
                    "bisect_rows": agg.get("bisect_rows", 0),
                    "recovery_executions": executions(runs.get(client, run_id), True),
                    "recovery_s": round(rec_secs, 3), "duplicates": dupes, "missing": missing,
                    "status": r.status}
                rows.append([workflow, f"{clean_secs:.2f}", f"{fail_secs:.2f}", f"{failed:,}",
                             f"{agg.get('bisect_runs', 0):,}", f"{agg.get('bisect_isolated', 0):,}",
                             f"{agg.get('bisect_runs', 0) / max(agg.get('bisect_isolated', 0), 1):.1f}"
                             if "bisect_runs" in agg else "-", f"{agg.get('bisect_rows', 0):,}",
                             f"{executions(runs.get(client, run_id), True):,}", f"{rec_secs:.2f}",
                             str(dupes), str(missing), r.status])
                print(f"{workflow}: failing run {fail_secs:.2f}s, recovery {rec_secs:.2f}s, {r.status}",
                      file=sys.stderr)
                clear.clear(client, run_id)
        print()
        print(f"cdn_logs_batch vs cdn_logs, {n:,} roots, {args.rate:.1%} of tuples failing once at "
              f"`aggregate`; Spark local[2], {'Redis ' + args.redis if args.redis else 'embedded Redis'}, "
              f"{time.strftime('%Y-%m-%d')}")
        print(C.table(["workflow", "clean s", "failing s", "failed", "bisect runs", "isolated",
                       "runs per isolated", "rows run again", "recovery executions", "recovery s", "duplicates",
                       "missing", "final status"], rows))
        exact = all(r[10] == "0" and r[11] == "0" and r[12] == "completed" for r in rows)
        print(f"goal: exact after recovery, 0 duplicates: {'met' if exact else 'NOT met'}")
        results.write({"workflows": figures, "exact": exact})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", "--tuples", dest="tuples", type=int, default=200_000,
                    help="root tuples (default 200,000; --roots 1000000 runs at 1M roots)")
    ap.add_argument("--rate", type=float, default=0.01,
                    help="fraction of tuples failing once at stage 4 (default 0.01)")
    ap.add_argument("--redis", default=None, help="a Redis URL (default: an embedded server)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--no-root-replay", action="store_true",
                    help="localized recovery and the full rerun only (one failing submit fewer: big runs)")
    ap.add_argument("--workflow", default=WORKFLOW, choices=(WORKFLOW, "cdn_logs_batch"),
                    help="cdn_logs_batch: the batch variant (see above)")
    C.add_result_args(ap, "recovery_cost[_cdn_logs_batch]")
    args = ap.parse_args(argv)
    name = "recovery_cost" if args.workflow == WORKFLOW else f"recovery_cost_{args.workflow}"
    results = C.Results(name, args, {"workflow": args.workflow, "roots": args.tuples, "rate": args.rate,
                                     "failing_component": STAGE4, "master": "local[2]",
                                     "root_replay": not args.no_root_replay,
                                     "redis": "external" if args.redis else "embedded"})
    if args.workflow == "cdn_logs_batch":
        return batch_variant(args, results)
    n = args.tuples
    inject = injection(args.rate)

    with C.bench_home(args.keep, "recovery-bench-cost-") as home:
        src = home / "events.csv"
        sys.path.insert(0, str(C.WORKFLOWS))
        from bench_pipeline.generate import generate
        t0 = time.perf_counter()
        generate(str(src), n)
        print(f"input: {n:,} events ({src.stat().st_size / 1e6:.1f} MB), generated in "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)

        def folder(name: str, data: Path = src) -> Path:
            xml = C.copy_workflow(WORKFLOW, home / name)
            target = xml.parent / DATA
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            os.link(data, target)
            return xml

        from recovery.jobs import clear, recover
        from recovery.tracking import runs
        with C.redis_for(home, args.redis) as (client, url), C.spark_session(home) as spark:
            # warm-up (not measured): Python workers started, classes imported
            small = home / "warm.csv"
            generate(str(small), 2000)
            s, _ = C.submit(spark, client, url, folder("warm", small), inject)
            recover.recover(spark, client, url, s.run_id)
            clear.clear(client, s.run_id)

            # the reference: a failure-free run
            s, clean_secs = C.submit(spark, client, url, folder("clean"), run_id="bench-clean")
            assert s.status == "completed", s.status
            ref = sinks_of(home / "clean")
            print(f"failure-free run: {clean_secs:.2f}s, "
                  f"{executions(runs.get(client, 'bench-clean'), False):,} executions", file=sys.stderr)
            clear.clear(client, "bench-clean")

            # the same failing run, once per strategy
            failing: dict[str, dict] = {}
            strategies = ("localized",) if args.no_root_replay else ("localized", "root-replay")
            for name in (*strategies, "full-rerun"):
                s, secs = C.submit(spark, client, url, folder(name), inject, run_id=f"bench-{name}")
                failed = sum(p.count for p in s.failed_positions)
                where = sorted({p.component for p in s.failed_positions})
                failing[name] = {"secs": secs, "failed": failed, "where": where,
                                 "status": s.status}
                print(f"failing run for {name}: {secs:.2f}s, {failed:,} tuples failed at "
                      f"{', '.join(where)}", file=sys.stderr)
            counts = {f["failed"] for f in failing.values()}
            if len(counts) != 1:
                print(f"warning: the failing runs differ: {failing}", file=sys.stderr)
            n_failed = failing["localized"]["failed"]

            results_by_strategy: dict[str, dict] = {}
            for strategy in strategies:
                run_id = f"bench-{strategy}"
                t0 = time.perf_counter()
                r = recover.recover(spark, client, url, run_id, strategy=strategy)
                secs = time.perf_counter() - t0
                rec = runs.get(client, run_id)
                dupes, missing = diff(sinks_of(home / strategy), ref)
                results_by_strategy[strategy] = {"secs": secs, "exec": executions(rec, True),
                                     "rounds": r.rounds, "status": r.status,
                                     "dupes": dupes, "missing": missing}
                print(f"{strategy}: {secs:.2f}s, {r.rounds} rounds, {r.status}", file=sys.stderr)
                clear.clear(client, run_id)

            # full rerun: a failure-free submit over the failed run's output folder, its parts
            # beside the failed run's (sink mode="append"; the default mode would refuse it)
            rerun = home / "full-rerun" / f"{WORKFLOW}.xml"
            rerun.write_text(rerun.read_text().replace('<sink type="jsonl"', '<sink type="jsonl" mode="append"'))
            s, secs = C.submit(spark, client, url, rerun, run_id="bench-full-rerun-2")
            rec = runs.get(client, "bench-full-rerun-2")
            dupes, missing = diff(sinks_of(home / "full-rerun"), ref)
            own_dupes, own_missing = diff(sinks_of(home / "full-rerun", "bench-full-rerun-2"), ref)
            results_by_strategy["full rerun"] = {"secs": secs, "exec": executions(rec, False), "rounds": 1,
                                     "status": s.status, "dupes": dupes, "missing": missing}
            print(f"full rerun: {secs:.2f}s", file=sys.stderr)
            for run_id in ("bench-full-rerun", "bench-full-rerun-2"):
                clear.clear(client, run_id)

        print()
        print(f"{WORKFLOW}, {n:,} roots, {args.rate:.0%} of tuples failing once at stage 4 "
              f"({STAGE4}): {n_failed:,} failed tuples; Spark local[2], "
              f"{'Redis ' + args.redis if args.redis else 'embedded Redis'}, {time.strftime('%Y-%m-%d')}")
        print(f"failing submit {C.median([f['secs'] for f in failing.values()]):.2f}s (median of "
              f"{len(failing)}), "
              f"failure-free submit {clean_secs:.2f}s")
        rows = []
        for name, r in results_by_strategy.items():
            rows.append([name, f"{r['exec']:,}", str(r["rounds"]), f"{r['secs']:.2f}",
                         f"{r['dupes']['main']:,} / {r['dupes']['archive']:,}",
                         f"{r['missing']['main']:,} / {r['missing']['archive']:,}", r["status"]])
        print(C.table(["strategy", "tuple executions", "rounds", "wall s",
                       "duplicates main / archive", "missing main / archive", "final status"], rows))
        print(f"full rerun: the failure-free run writes its own part files beside the failed run's "
              f"(sink parts are named by run), so its folder holds both; its own parts alone "
              f"differ from the reference by {sum(own_dupes.values()):,} duplicates and "
              f"{sum(own_missing.values()):,} missing (what a rerun into an emptied folder gives).")
        loc, full = results_by_strategy["localized"], results_by_strategy["full rerun"]
        ratios = [["localized / full rerun", ratio(loc["exec"], full["exec"]), ratio(loc["secs"], full["secs"])]]
        if "root-replay" in results_by_strategy:
            rr = results_by_strategy["root-replay"]
            ratios.insert(0, ["localized / root-replay", ratio(loc["exec"], rr["exec"]),
                              ratio(loc["secs"], rr["secs"])])
        print()
        print(C.table(["ratio", "executions", "wall time"], ratios))
        print(f"goal: localized recovery <= 0.05x a full rerun's wall time: "
              f"{loc['secs'] / full['secs']:.3f}x, {'met' if loc['secs'] <= 0.05 * full['secs'] else 'not met'}")
        results.write({
            "failed_tuples": n_failed,
            "failing_submit_s": round(C.median([f["secs"] for f in failing.values()]), 3),
            "clean_submit_s": round(clean_secs, 3),
            "localized_over_full_rerun_wall": round(loc["secs"] / full["secs"], 4),
            "strategies": {name: {"executions": r["exec"], "rounds": r["rounds"], "wall_s": round(r["secs"], 3),
                                  "duplicates": r["dupes"], "missing": r["missing"], "status": r["status"]}
                           for name, r in results_by_strategy.items()},
            "full_rerun_own_parts": {"duplicates": sum(own_dupes.values()), "missing": sum(own_missing.values())},
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
