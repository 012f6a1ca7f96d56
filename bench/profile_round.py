"""Where the CPU of a round goes, per root: a whole round of a workflow run in this process,
stage task by stage task as Spark would run them (the workflow's chains; each task fed with
its upstream tasks' chunks), untracked then tracked, first as it is (its CPU per root), then
under a profiler, whose shares split that CPU by group of code (PROFILE_GROUPS) and by
function.

    .venv/bin/python bench/profile_round.py [--roots 200000] [--workflow cdn_logs]
        [--with py-spy|cprofile] [--unchained] [--redis URL] [--keep]
    .venv/bin/python bench/profile_round.py --against DIR [--repeats 3] [--roots 50000]

`--against DIR` compares two checkouts side by side in one run: the round's CPU per root,
untracked and tracked, without a profiler (the least of --runs rounds), in a new process per
measure, alternating between
DIR's code (another checkout of the repository, with this bench/ in it) and this one's, then
the median ratios this / DIR. `--cpu-only` is one such measure (a JSON line).

py-spy (the default; `pip install py-spy`) samples this process from outside, 250 times a
second, and costs the profiled code almost nothing; a sample is charged to the innermost
Python function (a builtin's time to its caller). cProfile instruments every call, timed by
this process's CPU clock (the machine may be shared): it inflates code of many small calls.
Neither sees what a Spark run adds: the JVM, the shuffle, the Python workers' pickling. For
cdn_logs the same functions in one Python loop come first (the least any engine spends in
Python).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402
from bench._env import generate_input, sink_folder  # noqa: E402

# where the CPU of a round goes, by the code it is spent in: the first group whose marks one
# of a function's file or name holds
PROFILE_GROUPS = (
    ("the workflow's own functions (parse_line, normalize, the aggregate)", ("cdn_logs/", "wordcount/",
                                                                             "bench_pipeline/")),
    ("regular expressions, strptime (called by those functions)", ("re/", "_strptime", "sre_", "<re.", "datetime")),
    ("tuples (recovery/api)", ("recovery/api/",)),
    ("chunk path: the row loop, emits into columns, ids, routes and ledger by chunk", ("runtime/chunks.py",)),
    ("collector: emit, ack, anchoring, output buffers", ("runtime/collector.py",)),
    ("task loop: execute, unpack, chain transport", ("runtime/task.py", "runtime/chain.py", "runtime/wire.py",
                                                     "engine/rounds.py")),
    ("routing and ids", ("runtime/routing.py", "tracking/ids.py")),
    ("msgpack (chunks), zstandard (spill)", ("msgpack", "zstandard")),
    ("tracking: spill files, commit, ledger, keyed state, Redis", ("recovery/tracking/", "redis/", "hiredis")),
    ("sources and sinks (reading lines, encoding JSON)", ("recovery/connectors/", "json/")),
)
OTHER = "other (bench loop, builtins called from it, ...)"


def group_of(where: str) -> str:
    return next((g for g, marks in PROFILE_GROUPS if any(m in where for m in marks)), OTHER)


def run_round_in_process(wf: Any, spec: Any) -> None:
    """A whole round of `wf` in this process, stage task by stage task as Spark would run them
    (the workflow's chains, each task fed with its upstream tasks' chunks)."""
    from recovery.engine import rounds
    from recovery.model.graph import ChainPlan
    plan = ChainPlan.of_workflow(wf)
    inbox: dict[tuple[str, int], list] = collections.defaultdict(list)
    for chain in plan.chains:
        head = wf.component(chain.head)
        for i in range(head.parallelism):
            feed = inbox.pop((chain.head, i), []) if not head.is_spout else []
            for key, blob in rounds._stage_task(spec, chain.members, i, iter(feed)):
                inbox[(key[0], key[1])].append((key, blob))


def functions_loop_cpu(wf: Any) -> float:
    """CPU seconds of cdn_logs' functions alone in one Python loop over the input: parse_line,
    normalize, the per-key aggregate, json.dumps of each record (bench/_common.run_handwritten's
    functions)."""
    from recovery.connectors.files import resolve
    path = resolve(wf.component("logs").impl.param("path"), wf.base_dir)
    t0 = time.process_time()
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for _ in C.aggregate_records(C.parse_normalize(str(wf.base_dir), iter(lines))):
        pass
    return time.process_time() - t0


class PySpy:
    """py-spy sampling this process (raw, collapsed stacks) while inside."""

    def __init__(self, out: Path, rate: int = 250):
        self.out, self.rate = out, rate

    def __enter__(self) -> PySpy:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = subprocess.Popen([exe, "record", "--pid", str(os.getpid()), "--rate", str(self.rate),
                                      "--format", "raw", "--output", str(self.out), "--nonblocking"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)   # py-spy attaches (no event to wait for; a late start only loses samples)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)

    def groups(self) -> tuple[collections.Counter, collections.Counter]:
        """(samples per group, samples per function), each sample charged to its innermost
        frame of the round (the sampling thread's own frames are left out)."""
        groups: collections.Counter = collections.Counter()
        functions: collections.Counter = collections.Counter()
        for line in self.out.read_text(encoding="utf-8", errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if "run_round_in_process" not in stack:
                continue
            leaf = stack.rsplit(";", 1)[-1]
            groups[group_of(leaf)] += int(count)
            name, _, where = leaf.partition(" (")
            functions[f"{name} ({where.rsplit(':', 1)[0]})"] += int(count)   # the function, all its lines
        return groups, functions


def profile_round(wf: Any, spec_url: str, client: Any, tracking: bool, roots: int, sampler: str = "py-spy",
                  scratch: Path | None = None) -> dict[str, Any]:
    """The round of `wf`, once as it is, once under `sampler`; prints and returns where its CPU
    goes per root."""
    import cProfile
    import pstats

    from recovery.jobs import clear
    from recovery.model.run import RunSpec
    from recovery.tracking import runs
    wf_json = wf.to_task_json()
    label = f"profile-round-{'on' if tracking else 'off'}"
    cpus = []
    prof = cProfile.Profile(time.process_time)
    spy = PySpy((scratch or Path(tempfile.gettempdir())) / f"{label}.txt")
    for attempt, profiled in enumerate((False, True)):
        run_id = f"{label}-{attempt}"
        if tracking:
            runs.create(client, run_id, "", wf_json, None, "local", tracking)
        shutil.rmtree(sink_folder(wf), ignore_errors=True)
        spec = RunSpec(run_id, 0, wf_json, spec_url, tracking=tracking)
        cpu0 = time.process_time()
        if not profiled:
            run_round_in_process(wf, spec)
        elif sampler == "cprofile":
            prof.enable()
            run_round_in_process(wf, spec)
            prof.disable()
        else:
            with spy:
                run_round_in_process(wf, spec)
        cpus.append(time.process_time() - cpu0)
        if tracking:
            clear.clear(client, run_id, force=True)
    cpu = cpus[0]
    if sampler == "cprofile":
        stats = pstats.Stats(prof)
        groups: collections.Counter = collections.Counter()
        functions: collections.Counter = collections.Counter()
        for (filename, _, name), v in stats.stats.items():   # type: ignore[attr-defined]
            groups[group_of(f"{filename} {name}")] += v[2]       # tottime
            functions[f"{name} ({filename})"] += v[2]
    else:
        groups, functions = spy.groups()
    total = sum(groups.values()) or 1
    per_root = cpu / roots * 1e6
    print(f"\na round in-process, tracking {'on' if tracking else 'off'}: {roots:,} roots, {cpu:.2f} CPU s, "
          f"{per_root:.1f} us per root ({cpus[1] / roots * 1e6:.1f} under {sampler})")
    print(C.table([f"where the CPU goes ({sampler}'s shares)", "us per root", "share"],
                  [[g, f"{t / total * per_root:.1f}", f"{t / total:.0%}"] for g, t in groups.most_common()]))
    print(C.table(["function (innermost Python frame)", "us per root", "share"],
                  [[f[:110], f"{t / total * per_root:.2f}", f"{t / total:.1%}"]
                   for f, t in functions.most_common(25)]))
    return {"cpu_us_per_root": round(per_root, 2),
            "groups": {g: round(t / total * per_root, 2) for g, t in groups.most_common()}}


def cpu_only(wf: Any, url: str, client: Any, tracking: bool, roots: int, runs_: int = 5) -> float:
    """CPU microseconds per root of a round in this process, no profiler: the least of
    `runs_` rounds (on a shared machine, other processes' work inflates a round's CPU time
    through the caches they share; the least disturbed round is the closest to the code's)."""
    from recovery.jobs import clear
    from recovery.model.run import RunSpec
    from recovery.tracking import runs
    wf_json = wf.to_task_json()
    best = float("inf")
    for attempt in range(runs_):
        run_id = f"cpu-{'on' if tracking else 'off'}-{attempt}"
        if tracking:
            runs.create(client, run_id, "", wf_json, None, "local", tracking)
        shutil.rmtree(sink_folder(wf), ignore_errors=True)
        cpu0 = time.process_time()
        run_round_in_process(wf, RunSpec(run_id, 0, wf_json, url, tracking=tracking))
        best = min(best, time.process_time() - cpu0)
        if tracking:
            clear.clear(client, run_id, force=True)
    return best / roots * 1e6


def against(args: argparse.Namespace) -> int:
    """--against DIR: this checkout's round against DIR's, alternating, a process per measure."""
    import json
    other = Path(args.against).resolve()
    mine = Path(__file__).resolve().parents[1]
    per: dict[str, dict[str, list[float]]] = {str(t): {"untracked": [], "tracked": []} for t in (other, mine)}
    cmd_tail = ["--cpu-only", "--roots", str(args.roots), "--workflow", args.workflow, "--runs", str(args.runs),
                *(["--unchained"] if args.unchained else [])]
    for rep in range(args.repeats):
        for tree in ((other, mine) if rep % 2 == 0 else (mine, other)):
            out = subprocess.run([sys.executable, str(tree / "bench" / "profile_round.py"), *cmd_tail],
                                 capture_output=True, text=True, check=True, cwd=str(tree))
            got = json.loads(out.stdout.strip().splitlines()[-1])
            for k in ("untracked", "tracked"):
                per[str(tree)][k].append(got[k])
            print(f"repeat {rep + 1}: {tree}: untracked {got['untracked']:.1f}, tracked {got['tracked']:.1f} "
                  f"us per root", file=sys.stderr)
    rows = []
    for k in ("untracked", "tracked"):
        a, b = per[str(mine)][k], per[str(other)][k]
        ratios = [x / y for x, y in zip(a, b)]
        rows.append([k, f"{C.median(b):.1f}", f"{C.median(a):.1f}", f"{C.median(ratios):.3f}x"])
    print(f"{args.workflow}, {args.roots:,} roots, {'unchained' if args.unchained else 'chained'}, a round "
          f"in-process, CPU us per root, {args.repeats} repeats alternating")
    print(C.table(["", f"{other}", f"{mine}", "this / that (median of per-repeat ratios)"], rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roots", type=int, default=200_000, help="root tuples (default 200,000)")
    ap.add_argument("--workflow", default="cdn_logs", choices=("cdn_logs", "cdn_logs_batch", "wordcount"))
    ap.add_argument("--with", dest="sampler", default="py-spy", choices=("py-spy", "cprofile"))
    ap.add_argument("--unchained", action="store_true", help="one stage per component (recovery.chain=false)")
    ap.add_argument("--redis", default=None, help="a Redis URL (default: an embedded server)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--against", default=None, metavar="DIR", help="compare with another checkout's code")
    ap.add_argument("--repeats", type=int, default=3, help="--against: measures of each (default 3)")
    ap.add_argument("--cpu-only", action="store_true", help="one measure, no profiler: a JSON line")
    ap.add_argument("--runs", type=int, default=5, help="--cpu-only: rounds per measure, the least kept (default 5)")
    args = ap.parse_args(argv)
    if args.against:
        return against(args)
    if args.cpu_only:
        import json
        with C.bench_home(False, "recovery-bench-cpu-") as home:
            xml = C.copy_workflow(args.workflow, home / "wf")
            generate_input(args.workflow, home / "wf", args.roots, 0.0)
            wf = C.load_workflow(xml, C.CHAINING["unchained" if args.unchained else "chained"])
            with C.redis_for(home, args.redis) as (client, url):
                got = {k: cpu_only(wf, url, client, k == "tracked", args.roots, args.runs)
                       for k in ("untracked", "tracked")}
        print(json.dumps(got))
        return 0
    print(f"{args.workflow}, {args.roots:,} roots, {'unchained' if args.unchained else 'chained'}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}")
    with C.bench_home(args.keep, "recovery-bench-profile-") as home:
        folder = home / "wf"
        xml = C.copy_workflow(args.workflow, folder)
        if args.workflow == "cdn_logs_batch":
            C.copy_workflow("cdn_logs", folder)
        generate_input(args.workflow, folder, args.roots, 0.0)
        wf = C.load_workflow(xml, C.CHAINING["unchained" if args.unchained else "chained"])
        if args.workflow == "cdn_logs":
            loop = functions_loop_cpu(wf)
            print(f"cdn_logs' functions in one Python loop: {loop:.2f} CPU s, "
                  f"{loop / args.roots * 1e6:.1f} us per root")
        with C.redis_for(home, args.redis) as (client, url):
            for tracking in (False, True):
                profile_round(wf, url, client, tracking, args.roots, args.sampler, home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
