"""`make demo`: the whole story on the embedded defaults (embedded Redis, local Spark).

Runs workflows/cdn_logs (the stalled KafkaSpout topology of docs/references.md) with transient failures injected
at `aggregate` on top of the data's own poison records, shows the failed positions and the
recovery plan, recovers, and checks the output against a failure-free run: every record of
the sink (as a multiset: part files and their order differ between runs) and the final
aggregates in `aggregate`'s keyed state. Then the same logs as a table: workflows/
cdn_logs_tables reads them from a Parquet dataset through Spark and writes a Delta table;
with the same failures injected, recovered, the table read back with deltalake is compared
with the failure-free run's records in the same way. Everything runs in this process, so
one Spark session serves every command.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import click
import msgpack
from deltalake import DeltaTable
from redis import Redis

from recovery.cli import main
from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.controlplane import connection
from recovery.tracking import runs
from recovery.tracking.state import state_key

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


def sink_records(folder: Path) -> collections.Counter[str]:
    """Every record of a jsonl sink folder (all its part files), as a multiset of canonical
    JSON lines."""
    return collections.Counter(json.dumps(r, sort_keys=True) for r in read_jsonl_dir(str(folder)))


def table_records(path: Path) -> collections.Counter[str]:
    """Every row of a Delta table, read with deltalake (no Spark), as a multiset of canonical
    JSON lines: comparable with sink_records."""
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return collections.Counter(json.dumps(r, sort_keys=True) for r in rows)


def keyed_state(client: Redis, run_id: str, component: str) -> dict[Any, Any]:
    """A bolt's keyed state as the run left it (Redis)."""
    return {msgpack.unpackb(cast(bytes, k), strict_map_key=False): msgpack.unpackb(cast(bytes, v), strict_map_key=False)
            for k, v in client.hgetall(state_key(run_id, component)).items()}


def totals_per_key(records: collections.Counter[str]) -> dict[str, list[int]]:
    """cdn_logs' sink records [key, requests, bytes] summed per key."""
    out: dict[str, list[int]] = {}
    for line, n in records.items():
        r = json.loads(line)
        t = out.setdefault(r["key"], [0, 0])
        t[0] += r["requests"] * n
        t[1] += r["bytes"] * n
    return out


@dataclass
class Comparison:
    records: int            # in the recovered run's sink
    want_records: int       # in the failure-free run's
    missing: int            # records the failure-free run wrote and the recovered one did not
    extra: int              # records the recovered run wrote twice, or that are not the reference's
    keys: int
    same_state: bool        # the final aggregates (keyed state) agree, and agree with the sink

    @property
    def same(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.same_state


def compare(got: collections.Counter[str], want: collections.Counter[str],
            got_state: dict, want_state: dict) -> Comparison:
    """The recovered run against the failure-free one: every sink record, each as many times."""
    return Comparison(records=sum(got.values()), want_records=sum(want.values()),
                      missing=sum((want - got).values()), extra=sum((got - want).values()),
                      keys=len(got_state),
                      same_state=got_state == want_state == totals_per_key(got))


def copy_example(dest: Path, name: str = "cdn_logs") -> Path:
    """workflows/NAME.xml with the cdn_logs components and the data, into a fresh dest (its
    sinks then write under dest/out); returns the XML's path."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy(REPO / "workflows" / f"{name}.xml", dest)
    shutil.copytree(REPO / "workflows" / "cdn_logs", dest / "cdn_logs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "workflows" / "data", dest / "data")
    return dest / f"{name}.xml"


def report(result: Comparison, what: str) -> None:
    click.secho(f"{result.records} records in {what}, {result.want_records} in the "
                f"failure-free run's: {result.missing} missing, {result.extra} extra; "
                f"{result.keys} keys' final aggregates {'equal' if result.same_state else 'DIFFERENT'}: "
                f"{'IDENTICAL' if result.same else 'DIFFERENT'}",
                fg="green" if result.same else "red", bold=True)


def show_table(path: Path, rows: int = 5) -> None:
    """A few rows of a Delta table and its row count, as a user reads it back."""
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    click.secho(f">>> DeltaTable({shown!r}).to_pandas()", fg="green")
    df = DeltaTable(str(path)).to_pandas()
    click.echo(df.head(rows).to_string())
    click.echo(f"... {len(df)} rows")


def run_id_of(xml: Path, *extra: str) -> str:
    """Submits the workflow under a new run id, and returns it."""
    run_id = runs.new_run_id(xml.stem)
    run("submit", str(xml), "--run-id", run_id, *extra)
    return run_id


def main_demo() -> None:
    work = REPO / "out" / "demo"
    reference_xml = copy_example(work / "reference")
    demo_xml = copy_example(work / "run")

    say("1. The workflow: CDN logs (docs/references.md), validated and drawn")
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

    say("7. The output equals the failure-free run's: every sink record, and the final aggregates")
    run("recover", ref_id)      # the reference's poison lines end dead too: same valid output
    client = connection.connect(connection.resolve_url(None))
    want, want_state = sink_records(reference_xml.parent / "out" / "cdn_logs"), keyed_state(client, ref_id, "aggregate")
    result = compare(sink_records(demo_xml.parent / "out" / "cdn_logs"), want,
                     keyed_state(client, demo_id, "aggregate"), want_state)
    report(result, "the recovered output")

    say("8. The same logs as tables (cdn_logs_tables.xml): a Parquet dataset read by Spark, each request's "
        "record into a Delta table; the same failures injected")
    tables_xml = copy_example(work / "tables", "cdn_logs_tables")
    tables_id = run_id_of(tables_xml, *INJECT)

    say("9. Recover, read the Delta table back (deltalake, no Spark), compare it with step 2's failure-free run")
    run("recover", tables_id)
    table = tables_xml.parent / "out" / "cdn_logs_tables"
    show_table(table)
    tables = compare(table_records(table), want, keyed_state(client, tables_id, "aggregate"), want_state)
    report(tables, "the recovered Delta table")

    click.echo(f"\nExplore: recovery runs | recovery status {demo_id} | recovery clear --all | "
               f"recovery server stop\nOutput: {demo_xml.parent / 'out' / 'cdn_logs'} (JSON lines), "
               f"{table} (Delta)")
    if not (result.same and tables.same):
        sys.exit(1)


if __name__ == "__main__":
    main_demo()
