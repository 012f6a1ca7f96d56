"""`make demo`: the whole story on the embedded defaults (embedded Redis, local Spark).

Runs workflows/cdn_logs (the topology of shared/seeds/004) with transient failures injected
at `aggregate` on top of the data's own poison records, shows the failed positions and the
recovery plan, recovers, and checks the output against a failure-free run.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from recovery.cli import main
from recovery.sinks import read_jsonl_dir

REPO = Path(__file__).resolve().parent.parent
INJECT = ["-p", "recovery.inject.flaky.component=aggregate", "-p", "recovery.inject.flaky.rate=0.02",
          "-p", "recovery.retry.delay.period.ms=50"]


def say(text: str) -> None:
    click.secho(f"\n== {text}", fg="cyan", bold=True)


def run(*args: str) -> None:
    click.secho("$ recovery " + " ".join(args), fg="green")
    try:
        main.main(list(args), prog_name="recovery", standalone_mode=False)
    except SystemExit as e:   # a command's own exit code
        if e.code:
            raise


def final_aggregates(folder: Path) -> dict[str, tuple]:
    """The last running aggregate per key (the one with the most requests)."""
    best: dict[str, tuple] = {}
    for r in read_jsonl_dir(str(folder)):
        row = (r["requests"], r["bytes"])
        if r["key"] not in best or row > best[r["key"]]:
            best[r["key"]] = row
    return best


def copy_example(dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy(REPO / "workflows" / "cdn_logs.xml", dest)
    shutil.copytree(REPO / "workflows" / "cdn_logs", dest / "cdn_logs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "workflows" / "data", dest / "data")
    return dest / "cdn_logs.xml"


def run_id_of(xml: Path, *extra: str) -> str:
    from recovery.cli.run import last_summary
    run("submit", str(xml), *extra)
    return last_summary()["run_id"]


def main_demo() -> None:
    work = REPO / "out" / "demo"
    reference_xml = copy_example(work / "reference")
    demo_xml = copy_example(work / "run")

    say("1. The workflow: CDN logs (shared/seeds/004), validated and drawn")
    run("validate", str(demo_xml))
    run("graph", str(demo_xml))

    say("2. A failure-free reference (no injected failures; the data's 20 poison lines fail and stay queued)")
    ref_id = run_id_of(reference_xml)

    say("3. The same workflow with 2% transient failures injected at `aggregate`")
    demo_id = run_id_of(demo_xml, *INJECT)

    say("4. What `recover` will run: only the failed processors and what is downstream of them")
    run("plan", demo_id, "--format", "text")

    say("5. Recover: rounds until the failed set is empty (poison records end dead after 3 attempts)")
    run("recover", demo_id)

    say("6. Dead letters: the records no retry can fix")
    run("dead", demo_id)

    say("7. The output equals the failure-free run's (each key's final aggregate)")
    run("recover", ref_id)      # the reference's poison lines end dead too: same valid output
    got = final_aggregates(demo_xml.parent / "out" / "cdn_logs")
    want = final_aggregates(reference_xml.parent / "out" / "cdn_logs")
    same = got == want
    click.secho(f"{len(got)} keys in the recovered output, {len(want)} in the failure-free run: "
                f"{'IDENTICAL' if same else 'DIFFERENT'}", fg="green" if same else "red", bold=True)
    click.echo(f"\nExplore: recovery runs | recovery status {demo_id} | recovery clear --all | "
               f"recovery server stop\nOutput: {demo_xml.parent / 'out' / 'cdn_logs'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main_demo()
