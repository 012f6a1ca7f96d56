"""Tracking overhead: the same workflow, in one process with one Spark
session (local[2]) and one Redis, run four ways, alternating per repeat:

  tracked                          jobs.submit(tracking_on=True): derived ids, XOR ledger,
                                   in-flight tuples and task commits, keyed state in Redis
  untracked                        jobs.submit(tracking_on=False): the same engine and
                                   runtime, no Redis
  component classes (no tracking)  a PySpark RDD pipeline of the same component classes
                                   (mapPartitions + partitionBy with the same parallelism and
                                   groupings; no recovery runtime)
  pyspark (hand-written)           cdn_logs only: the job someone would write by hand with the
                                   workflow's own functions: textFile(2) -> parse + normalize ->
                                   partitionBy(4) -> the per-key aggregate -> saveAsTextFile

Every run's keys are removed after it (jobs.clear). Prints each variant's median seconds, the
goals (tracked at most 1.5x the hand-written job in CPU and in wall, untracked at most 1.2x;
a cold submit of 1,000 lines in at most 5 s), each met or how far off, and writes them as JSON
(--json PATH; by default bench/results/tracking_overhead.json, or
tracking_overhead_<workflow>.json for another workflow) for bench/plot.py.

--workflow cdn_logs_batch (batch components) runs, on the same input, tracked, untracked and
`row`: the row workflow cdn_logs, tracked, in place of the baselines. Goals printed: batch
tracked at least 10x the row workflow's roots/s, identical sinks, tracked/untracked at most
1.1x.

    .venv/bin/python bench/tracking_overhead.py [--tuples 1000000] [--repeats 3]
        [--workflow cdn_logs|cdn_logs_batch|wordcount] [--invalid 0.0] [--redis URL] [--profile]
        [--no-cold] [--json PATH] [--note TEXT] [--busy-ok]

--tuples counts root tuples (log lines for cdn_logs, sentences for wordcount); the input is
generated into a temporary folder with the workflow's own generator. --profile then runs one
task of the heaviest bolt in-process under cProfile, untracked and tracked, and prints its
top functions. The cold submit (a new driver process, as a user runs it) comes first, before
this process starts its Spark session; --no-cold leaves it out.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402
from bench._env import fingerprint, generate_input, sink_folder  # noqa: E402, F401 (framework_cost imports them from here)

GOAL = 1.3                          # tracked / untracked, wall
HAND = "pyspark (hand-written)"     # the variants' names (and keys in the JSON)
COMPONENTS = "component classes (no tracking)"
TRACKED_GOAL, UNTRACKED_GOAL = 1.5, 1.2   # tracked, untracked / the hand-written job, CPU and wall


def profile_task(wf, spec_url: str, client, component: str, index: int) -> None:
    """Run one tracked task of `component` in-process under cProfile, fed with the records
    its upstream tasks produce (computed in-process too, untracked, not profiled)."""
    import cProfile
    import pstats

    from recovery.engine import rounds
    from recovery.jobs import clear
    from recovery.model.graph import topological_order
    from recovery.model.run import RunSpec
    from recovery.tracking import runs
    wf_json = wf.to_task_json()
    feed_spec = RunSpec("profile-feed", 0, wf_json, spec_url, tracking=False)
    outputs: dict[str, list] = {}
    order = topological_order(wf)
    for cid in order[:order.index(component)]:
        comp = wf.component(cid)
        recs = []
        for i in range(comp.parallelism):
            mine = [] if comp.is_spout else [kv for src in {x.source for x in comp.inputs}
                                             for kv in outputs[src] if kv[0] == (cid, i)]
            recs.extend(rounds._start(feed_spec, cid, i, iter(mine))[1])
        outputs[cid] = recs
    comp = wf.component(component)
    feed = [kv for src in {x.source for x in comp.inputs} for kv in outputs[src]
            if kv[0] == (component, index)]
    n_in = sum(1 for _ in feed)
    for tracking in (False, True):
        run_id = f"profile-{'on' if tracking else 'off'}"
        runs.create(client, run_id, "", wf_json, None, "local", tracking)
        spec = RunSpec(run_id, 0, wf_json, spec_url, tracking=tracking)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        out = list(rounds._start(spec, component, index, iter(feed))[1])
        prof.disable()
        took = time.perf_counter() - t0
        print(f"\n{component}[{index}] in-process, tracking {'on' if tracking else 'off'}: "
              f"{n_in} input chunks -> {len(out)} output chunks in {took:.2f}s (under cProfile)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
        clear.clear(client, run_id, force=True)


BATCH_SPEEDUP_GOAL, BATCH_OVERHEAD_GOAL = 10.0, 1.1


def print_batch_goals(ratios: dict[str, list[float]], cpu_ratios: dict[str, list[float]], same: bool) -> None:
    """The batch components' goals for cdn_logs_batch: met, or how far."""
    speedup, speedup_cpu = C.median(ratios["row/tracked"]), C.median(cpu_ratios["row/tracked"])
    rt, ct = C.median(ratios["tracked/untracked"]), C.median(cpu_ratios["tracked/untracked"])
    print(C.table(["ratio (median of per-repeat ratios)", "wall", "CPU", "goal"], [
        ["batch speed-up (row tracked / batch tracked)", f"{speedup:.2f}x", f"{speedup_cpu:.2f}x",
         f">= {BATCH_SPEEDUP_GOAL:g}x (wall: {'met' if speedup >= BATCH_SPEEDUP_GOAL else 'not met'})"],
        ["batch tracked / untracked", f"{rt:.2f}x", f"{ct:.2f}x",
         f"<= {BATCH_OVERHEAD_GOAL}x (wall: {'met' if rt <= BATCH_OVERHEAD_GOAL else 'not met'})"],
        ["identical sinks (row and batch)", "yes" if same else "NO", "", "yes"],
    ]))


def ratio_cell(a: float, goal: float) -> str:
    return f"{a:.2f}x, {C.verdict(a, goal)}"


def print_goals(ratios: dict[str, list[float]], cpu_ratios: dict[str, list[float]],
                cold: dict | None) -> list[dict]:
    """The goals against the hand-written job (and the cold submit's), each met or how far off."""
    goals = []
    rows = []
    for name, key, goal in (("tracked / pyspark (hand-written)", "tracked/hand-written", TRACKED_GOAL),
                            ("untracked / pyspark (hand-written)", "untracked/hand-written", UNTRACKED_GOAL)):
        if key not in ratios:
            continue
        cpu, wall = C.median(cpu_ratios[key]), C.median(ratios[key])
        rows.append([name, ratio_cell(cpu, goal), ratio_cell(wall, goal), f"<= {goal}x"])
        goals.append({"goal": f"{name} <= {goal}x in CPU and in wall", "cpu": round(cpu, 3), "wall": round(wall, 3),
                      "verdict": "met" if cpu <= goal and wall <= goal else "not met"})
    for name, key in (("component classes (no tracking) / pyspark (hand-written)", "components/hand-written"),
                      ("tracked / untracked (tracking's own cost)", "tracked/untracked"),
                      ("untracked / component classes (no tracking)", "untracked/components")):
        if key in ratios:
            rows.append([name, f"{C.median(cpu_ratios[key]):.2f}x", f"{C.median(ratios[key]):.2f}x",
                         f"<= {GOAL}x wall" if key == "tracked/untracked" else "-"])
    print(C.table(["ratio (median of per-repeat ratios)", "CPU", "wall", "goal"], rows))
    if cold is not None:
        print(C.print_cold_submit(cold))
        goals.append({"goal": f"cold submit of {cold['lines']:,} lines <= {C.COLD_GOAL_S:g} s wall",
                      "wall": cold["wall_s"], "verdict": "met" if cold["wall_s"] <= C.COLD_GOAL_S else "not met"})
    print("CPU = CPU seconds of this process, Spark's JVM, its Python workers and the Redis "
          "server; steadier than wall time when other work shares the machine.")
    return goals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=1_000_000, help="root tuples (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of each variant (default 3)")
    ap.add_argument("--workflow", default="cdn_logs", choices=("cdn_logs", "cdn_logs_batch", "wordcount"))
    ap.add_argument("--invalid", type=float, default=0.0,
                    help="cdn_logs: fraction of invalid lines (default 0: the success path)")
    ap.add_argument("--redis", default=None, help="a Redis URL (default: an embedded server)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one task of the heaviest bolt in-process, untracked and tracked")
    ap.add_argument("--no-cold", action="store_true", help="leave out the cold submit of 1,000 lines")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    C.add_result_args(ap, "tracking_overhead[_<workflow>]")
    args = ap.parse_args(argv)
    name = "tracking_overhead" if args.workflow == "cdn_logs" else f"tracking_overhead_{args.workflow}"
    results = C.Results(name, args, {"workflow": args.workflow, "roots": args.tuples,
                                     "repeats": args.repeats, "invalid": args.invalid,
                                     "master": "local[2]", "redis": "external" if args.redis else "embedded"})
    batch = args.workflow == "cdn_logs_batch"
    cold = None
    if not batch and not args.no_cold:
        cold = C.cold_submit(keep=args.keep)
        print(C.print_cold_submit(cold), file=sys.stderr)

    with C.bench_home(args.keep, "recovery-bench-overhead-") as home:
        folder = home / "wf"
        xml = C.copy_workflow(args.workflow, folder)
        row_xml = C.copy_workflow("cdn_logs", folder) if batch else None   # its components import cdn_logs's
        t0 = time.perf_counter()
        data = generate_input(args.workflow, folder, args.tuples, args.invalid)
        print(f"input: {args.tuples:,} root tuples of {args.workflow} ({data.stat().st_size / 1e6:.1f} MB), "
              f"generated in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        from recovery.jobs import clear
        wf = C.load_workflow(xml)
        out_dir = sink_folder(wf)
        hand_out = home / "out-hand-written"
        row_wf = C.load_workflow(row_xml) if row_xml else None
        times: dict[str, list[float]] = collections.defaultdict(list)
        cpus: dict[str, list[float]] = collections.defaultdict(list)
        ratios: dict[str, list[float]] = collections.defaultdict(list)
        cpu_ratios: dict[str, list[float]] = collections.defaultdict(list)
        load_before = os.getloadavg()
        redis_peak = 0
        if batch:
            kinds = ["tracked", "untracked", "row"]
        else:
            kinds = ["tracked", "untracked", COMPONENTS] + ([HAND] if args.workflow == "cdn_logs" else [])
        with C.redis_for(home, args.redis) as (client, url), C.spark_session(home) as spark:
            # warm-up: Python workers started, classes imported (not measured)
            warm = folder / "warm"
            C.copy_workflow(args.workflow, warm)
            if batch:
                C.copy_workflow("cdn_logs", warm)
            warm_data = generate_input(args.workflow, warm, min(args.tuples, 2000), args.invalid)
            s, _ = C.submit(spark, client, url, warm / f"{args.workflow}.xml", tracking=True)
            clear.clear(client, s.run_id)
            if not batch:
                C.run_plain(spark, C.load_workflow(warm / f"{args.workflow}.xml"))
            if HAND in kinds:
                C.run_handwritten(spark, warm, warm_data, warm / "out-hand-written")
            prints: dict[str, tuple[int, str]] = {}
            for rep in range(args.repeats):
                base = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]      # alternate who goes first
                # each variant with and without chaining, side by side (C.CHAINING); the
                # hand-written job is one way only
                modes = C.CHAIN_MODES if rep % 2 == 0 else C.CHAIN_MODES[::-1]
                order = [(b, m) for b in base for m in (modes if b != HAND else ("chained",))]
                this: dict[str, tuple[float, float]] = {}
                for kind, mode in order:
                    variant = kind if mode == "chained" else f"{kind} unchained"
                    variant_out = sink_folder(row_wf) if kind == "row" else hand_out if kind == HAND else out_dir
                    shutil.rmtree(variant_out, ignore_errors=True)
                    with C.CpuMeter(client) as cpu:
                        if kind == COMPONENTS:
                            secs = C.run_plain(spark, C.load_workflow(xml, C.CHAINING[mode]))
                        elif kind == HAND:
                            secs = C.run_handwritten(spark, folder, data, hand_out)
                        else:
                            with C.MemorySampler(url) as mem:
                                summary, secs = C.submit(spark, client, url, row_xml if kind == "row" else xml,
                                                         C.CHAINING[mode], tracking=(kind != "untracked"))
                    if kind not in (COMPONENTS, HAND):
                        if kind in ("tracked", "row"):
                            redis_peak = max(redis_peak, mem.peak)
                            if summary.status != "completed" and not args.invalid:
                                print(f"warning: tracked run ended {summary.status}", file=sys.stderr)
                        clear.clear(client, summary.run_id)
                    times[variant].append(secs)
                    cpus[variant].append(cpu.seconds)
                    this[variant] = (secs, cpu.seconds)
                    if rep == 0:
                        prints[variant] = fingerprint(args.workflow, variant_out)
                    print(f"repeat {rep + 1}/{args.repeats}  {variant:<9} {secs:7.2f}s wall "
                          f"{cpu.seconds:7.2f}s cpu  (load average {os.getloadavg()[0]:.1f})",
                          file=sys.stderr)
                pairs = {"tracked/untracked": ("tracked", "untracked")}
                if batch:
                    pairs["row/tracked"] = ("row", "tracked")
                else:
                    pairs["untracked/components"] = ("untracked", COMPONENTS)
                    pairs["tracked/components"] = ("tracked", COMPONENTS)
                for k, (a, b) in list(pairs.items()):
                    pairs[f"{k} unchained"] = (f"{a} unchained", f"{b} unchained")
                if HAND in kinds:
                    for k, a in (("tracked", "tracked"), ("untracked", "untracked"), ("components", COMPONENTS)):
                        pairs[f"{k}/hand-written"] = (a, HAND)
                for kind in base:   # what chaining saves, per variant
                    if kind != HAND:
                        pairs[f"{kind} chained/unchained"] = (kind, f"{kind} unchained")
                for k, (a, b) in pairs.items():
                    ratios[k].append(this[a][0] / this[b][0])
                    cpu_ratios[k].append(this[a][1] / this[b][1])
            if args.profile:
                heaviest = "normalize" if args.workflow == "cdn_logs" else "split"   # split: cdn_logs_batch's too
                profile_task(wf, url, client, heaviest, 0)
                from bench.profile_round import profile_round
                for tracking in (False, True):
                    profile_round(wf, url, client, tracking, args.tuples, "cprofile")

        n = args.tuples
        rows = []
        for v in times:
            m = C.median(times[v])
            rows.append([v, f"{m:.2f}", " ".join(f"{t:.2f}" for t in times[v]),
                         f"{C.median(cpus[v]):.2f}", f"{n / m:,.0f}", f"{prints[v][0]:,}",
                         prints[v][1]])
        print()
        print(f"{args.workflow}, {n:,} root tuples, {args.repeats} repeats, Spark local[2], "
              f"{'Redis ' + args.redis if args.redis else 'embedded Redis'}, {time.strftime('%Y-%m-%d %H:%M')}, "
              f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} at start, "
              f"{os.getloadavg()[0]:.1f} at end")
        print(C.table(["variant", "median wall s", "wall s per repeat", "median CPU s",
                       "roots/s", "sink records", "result digest"], rows))
        same = len({p[1] for p in prints.values()}) == 1
        print(f"\nsame final result in all variants, chained and not: {'yes' if same else 'NO'}")
        print("\nwith chaining (the workflow's chains; shuffle edges too) / without (one stage per component):")
        print(C.table(["variant", "wall chained / unchained", "CPU chained / unchained"], [
            [k.rsplit(" ", 1)[0], f"{C.median(ratios[k]):.2f}x", f"{C.median(cpu_ratios[k]):.2f}x"]
            for k in ratios if k.endswith("chained/unchained")]))
        print()
        if batch:
            print_batch_goals(ratios, cpu_ratios, same)
            goals: list[dict] = []
        else:
            goals = print_goals(ratios, cpu_ratios, cold)
        if redis_peak:
            print(f"\nRedis used_memory at its peak during a tracked run (above the level before it): "
                  f"{redis_peak / 1e6:.0f} MB")
        results.write({
            "variants": {v: {"wall_s": [round(x, 3) for x in times[v]], "cpu_s": [round(x, 3) for x in cpus[v]],
                             "median_wall_s": round(C.median(times[v]), 3),
                             "median_cpu_s": round(C.median(cpus[v]), 3),
                             "roots_per_s": round(n / C.median(times[v])),
                             "sink_records": prints[v][0], "digest": prints[v][1]} for v in times},
            "ratios": {k: {"wall": round(C.median(ratios[k]), 3), "cpu": round(C.median(cpu_ratios[k]), 3)}
                       for k in ratios},
            "same_result": same,
            "redis_peak_bytes": redis_peak,
            **({"goals": goals} if goals else {}),
            **({"cold_submit": cold} if cold else {}),
        })
    return 2 if results.refused else 0


if __name__ == "__main__":
    sys.exit(main())
