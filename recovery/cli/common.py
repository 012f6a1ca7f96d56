"""What the run commands share: option callbacks, the progress bars and the run summary's
tables."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from recovery.cli.options import Command, echo_json
from recovery.cli.safe_text import plain, rich_text
from recovery.engine.session import properties_file as session_properties
from recovery.errors import RecoveryError
from recovery.jobs import summary as jobs_summary
from recovery.jobs.summary import RunSummary
from recovery.tracking.keys import check_run_id

if TYPE_CHECKING:
    from rich.progress import Progress


def run_id_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A RUN argument or --run-id, checked as it is parsed: before Redis or Spark is touched."""
    return value if value is None else check_run_id(value)


def properties_file_option(f: Command) -> Command:
    """--properties-file FILE: Spark properties from a private file, as spark-submit takes them."""
    return click.option("--properties-file", default=None, metavar="FILE",
                        help="Spark properties, one a line (`spark.NAME VALUE` or `spark.NAME=VALUE`), "
                        "as spark-submit reads them: the place for secrets (spark.executorEnv.*), never "
                        "shown; the file must be mode 0600. --conf wins over it.")(f)


def remote_option(f: Command) -> Command:
    """--remote sc://HOST:PORT: a Spark Connect server, as `pyspark --remote` takes it."""
    return click.option("--remote", default=None, metavar="sc://HOST:PORT",
                        help="Run on this Spark Connect server (default: $SPARK_REMOTE, else a Spark "
                        "session of our own on --master); not with --master.")(f)


def spark_settings(conf_pairs: tuple[str, ...], properties_file: str | None) -> dict[str, str]:
    """The Spark settings of a command: its --properties-file's, then its --conf's, which win
    (as spark-submit's do). Read before anything starts: a refusal has no effect."""
    settings = session_properties(properties_file) if properties_file is not None else {}
    settings.update(key_values(conf_pairs, "--conf"))
    return settings


def key_values(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise RecoveryError(f"{what} {p!r}: expected KEY=VALUE")
        k, v = p.split("=", 1)
        out[k.strip()] = v
    return out


class RoundProgress:
    """Tasks committed / total, on stderr, while a round runs (quiet with --json). The bars
    start with the first round's first report, so a refusal before that prints nothing else."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress: Progress | None = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RoundProgress:
        return self

    def _bars(self) -> Progress | None:
        if self.enabled and self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            # a label holds component names: shown as text, never as markup
            self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("tasks"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=False)
            self._progress.__enter__()
        return self._progress

    def __call__(self, label: str, done: int, total: int) -> None:
        progress = self._bars()
        if progress is None:
            return
        if label not in self._tasks:
            self._tasks[label] = progress.add_task(plain(label), total=total)
        progress.update(self._tasks[label], completed=min(done, total), total=total)

    def note(self, text: str) -> None:
        """A line printed above the bars (so it lands in order with them); none with --json
        (spark-submit merges a command's stderr into the stdout that holds its JSON)."""
        progress = self._bars()
        if progress is not None:
            progress.console.print(rich_text(text), highlight=False)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def counts_line(s: RunSummary) -> str:
    """A summary's root counts, or why they are unknown (a round not settled)."""
    if not s.counts_known:
        n = s.unsettled_round
        why = (f"round {n} running" if s.status == "running"
               else f"round {n} not settled; run `recovery recover {s.run_id}`")
        return f"roots: unknown ({why})"
    return (f"roots {s.roots}: complete {s.complete}, pending {s.pending} "
            f"(failed {s.failed}, in flight {s.in_flight or 0}), dead {s.dead}")


def components_title(rounds: list[int]) -> str:
    if rounds == [0]:
        return "components (round 0)"
    if len(rounds) == 1:
        return f"components (round {rounds[0]})"
    return f"components (rounds {rounds[0]}-{rounds[-1]}, added up)"


def print_summary(s: RunSummary) -> None:
    """A run's summary as tables; every name and error from the run as plain text (safe_text)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    console = Console()
    console.print(Text.assemble("run ", rich_text(s.run_id, "bold"), "  status ", rich_text(s.status, "bold"),
                                "  ", rich_text(counts_line(s))), highlight=False)
    if s.dead_written or s.dead_dropped:
        console.print(Text(f"dead letters: {s.dead_tuples} in Redis, {s.dead_written or 0} written to the "
                           f"dead-letter sink, {s.dead_dropped or 0} dropped by recovery.dead.retention"))
    comps = s.components
    if comps:
        t = Table(title=components_title(s.components_rounds or [0]), show_edge=False)
        for col in ("component", "executed", "acked", "failed", "emitted", "roots", "seconds"):
            t.add_column(col, justify="left" if col == "component" else "right")
        for name, c in comps.items():
            t.add_row(rich_text(name), rich_text(c.executed), rich_text(c.acked), rich_text(c.failed),
                      rich_text(c.emitted), rich_text(c.roots), rich_text(c.seconds))
        console.print(t)
    if s.failed_positions:
        t = Table(title="failed positions", show_edge=False)
        for col in ("component", "task", "tuples", "sample error"):
            t.add_column(col)
        for p in s.failed_positions:
            t.add_row(rich_text(p.component), rich_text(p.task), rich_text(p.count),
                      rich_text(plain(p.sample_error or "")[:100]))
        console.print(t)


def show(summary: RunSummary, as_json: bool) -> None:
    """A run's summary: one JSON object, or the tables plus the log source's partition lines."""
    if as_json:
        echo_json(summary.to_json())
        return
    print_summary(summary)
    for line in jobs_summary.report_lines(summary):
        click.echo(plain(line))
