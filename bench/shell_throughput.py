"""Tuples per second through one shell bolt (a pystorm pass-through bolt, need_task_ids false)
against a Python recovery Bolt doing the same (emit anchored to the input, ack), both driven
by the same minimal harness collector (no Spark, no Redis). The figures are written as JSON
too (--json PATH; default bench/results/shell_throughput.json) for bench/plot.py.

    .venv/bin/python bench/shell_throughput.py [--tuples 100000] [--json PATH] [--note TEXT]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _common as C  # noqa: E402
from recovery.api.components import Bolt, Tuple  # noqa: E402
from recovery.model.graph import ComponentContext  # noqa: E402
from recovery.model.workflow import Component, Input, ShellImpl, StreamDef, Workflow  # noqa: E402
from recovery.multilang.bolt import ShellBolt  # noqa: E402

PROGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "tests", "multilang_programs")


class Harness:
    """Counts what a runtime's collector would route."""

    def __init__(self) -> None:
        self.emitted = self.acked = self.failed = 0

    def emit(self, component, values, stream, anchors, direct_task, message_id):
        self.emitted += 1
        return [direct_task] if direct_task is not None else [5, 6]

    def ack(self, tup):
        self.acked += 1

    def fail(self, tup, error=None):
        self.failed += 1

    def log(self, message, level):
        pass


class PassThrough(Bolt):
    def process(self, tup):
        self.emit(tup.values, anchors=tup)
        self.ack(tup)


def workflow(impl) -> Workflow:
    return Workflow(name="bench", components=(
        Component(id="src", kind="spout", impl=ShellImpl(command="true"),
                  streams=(StreamDef(fields=("word", "n")),)),
        Component(id="pass", kind="bolt", impl=impl, inputs=(Input(source="src"),),
                  streams=(StreamDef(fields=("word", "n")),)),
    ))


def cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run(bolt, wf: Workflow, tuples: list[Tuple]) -> tuple[float, float, float]:
    """Wall seconds from the first process() to finish() returning, and the CPU seconds
    this process (all its threads) and its children (the shell program) spent."""
    harness = Harness()
    bolt._collector = harness
    bolt.prepare(wf.conf("pass"), ComponentContext(wf, "pass", 1))
    host0, child0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for tup in tuples:
        bolt.process(tup)
    bolt.finish()
    elapsed = time.perf_counter() - start
    host = cpu(resource.RUSAGE_SELF) - host0
    bolt.cleanup()                            # reaps the child: its CPU time is counted now
    child = cpu(resource.RUSAGE_CHILDREN) - child0
    assert harness.acked == len(tuples) and harness.emitted == len(tuples), vars(harness)
    return elapsed, host, child


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=100_000)
    C.add_result_args(parser, "shell_throughput")
    args = parser.parse_args(argv)
    results = C.Results("shell_throughput", args, {"tuples": args.tuples, "shell": "pystorm 3.1.4 pass-through"})
    tuples = [Tuple(i, "src", "default", 1, [f"word{i % 1000}", i], fields=("word", "n"),
                    source_task=2) for i in range(args.tuples)]
    impl = ShellImpl(command=sys.executable, script="pystorm_bolt.py", args=("passthrough",))
    shell_s, host, child = run(ShellBolt(impl, PROGRAMS), workflow(impl), tuples)
    py_impl = ShellImpl(command="true")      # the model needs one; the Bolt is plain Python
    py_s, py_host, _ = run(PassThrough(), workflow(py_impl), tuples)
    n = len(tuples)
    us = 1e6 / n
    print(f"tuples:                     {n}")
    print(f"shell bolt (pystorm 3.1.4): {n / shell_s:12,.0f} tuples/s  ({shell_s:.2f} s; CPU per "
          f"tuple: host {host * us:.1f} us, pystorm {child * us:.1f} us)")
    print(f"python Bolt:                {n / py_s:12,.0f} tuples/s  ({py_s:.2f} s; CPU per "
          f"tuple: {py_host * us:.1f} us)")
    print(f"python / shell:             {shell_s / py_s:12.1f}x")
    results.write({
        "shell": {"tuples_per_s": round(n / shell_s), "seconds": round(shell_s, 3),
                  "host_cpu_us_per_tuple": round(host * us, 2), "child_cpu_us_per_tuple": round(child * us, 2)},
        "python": {"tuples_per_s": round(n / py_s), "seconds": round(py_s, 3),
                   "cpu_us_per_tuple": round(py_host * us, 2)},
        "python_over_shell": round(shell_s / py_s, 2),
    })


if __name__ == "__main__":
    main()
