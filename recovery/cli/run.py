"""`recovery submit | runs | status | plan | recover | dead | clear`: running workflows and
recovering what failed."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from redis import Redis

from recovery.cli import echo_json, json_option, redis_option
from recovery.engine.session import session
from recovery.errors import RecoveryError
from recovery.jobs import follow as follow_mod
from recovery.jobs import recover as jobs_recover
from recovery.jobs import reports
from recovery.jobs import submit as jobs_submit
from recovery.jobs import summary as jobs_summary
from recovery.jobs.driver import uses_log_source
from recovery.model import config, render
from recovery.model.run import check_run_id
from recovery.model.xml import parse as workflow_xml
from recovery.redis import connection
from recovery.tracking import runs

if TYPE_CHECKING:
    from rich.progress import Progress


def _client(redis_url: str | None) -> tuple[Any, str]:
    url = connection.resolve_url(redis_url)
    return connection.connect(url), url


def _run_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A RUN argument or --run-id, checked as it is parsed: before Redis or Spark is touched."""
    return value if value is None else check_run_id(value)


def _kv(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise RecoveryError(f"{what} {p!r}: expected KEY=VALUE")
        k, v = p.split("=", 1)
        out[k.strip()] = v
    return out


class _Progress:
    """Tasks committed / total, on stderr, while a round runs (quiet with --json)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress: Progress | None = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("tasks"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=False)
            self._progress.__enter__()
        return self

    def __call__(self, label: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total)
        self._progress.update(self._tasks[label], completed=min(done, total), total=total)

    def note(self, text: str) -> None:
        """A line printed above the bars (so it lands in order with them)."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)
        else:
            click.echo(text, err=True)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


_LAST: dict[str, Any] = {}


def last_summary() -> dict[str, Any]:
    """The summary the last submit/recover in this process printed (for the demo)."""
    return _LAST


def _with_chains_comment(xml: str, chains: list[list[str]]) -> str:
    """The recovery workflow's XML with its chains said in a comment after the declaration (as
    `recovery graph` shows them): a user reading it sees which components run as one stage."""
    if not chains:
        return xml
    note = "".join(f"\n  chain: {' -> '.join(c)} (one Spark stage)" for c in chains)
    comment = "<!--" + note.replace("--", "- -") + "\n-->"   # "--" may not appear in a comment
    head, sep, rest = xml.partition("?>")
    if sep and head.lstrip().startswith("<?xml"):
        return f"{head}?>\n{comment}{rest}"
    return f"{comment}\n{xml}"


def _spark(master: str | None, conf: dict[str, str]) -> Any:
    return session(master, conf)


def counts_line(s: dict[str, Any]) -> str:
    """A summary's root counts, or why they are unknown (a round not settled)."""
    if s.get("counts_known", True) is False:
        n = s.get("unsettled_round")
        why = (f"round {n} running" if s["status"] == "running"
               else f"round {n} not settled; run `recovery recover {s['run_id']}`")
        return f"roots: unknown ({why})"
    return (f"roots {s['roots']}: complete {s['complete']}, pending {s['pending']} "
            f"(failed {s['failed']}, in flight {s.get('in_flight', 0)}), dead {s['dead']}")


def components_title(rounds: list[int]) -> str:
    if rounds == [0]:
        return "components (round 0)"
    if len(rounds) == 1:
        return f"components (round {rounds[0]})"
    return f"components (rounds {rounds[0]}-{rounds[-1]}, added up)"


def print_summary(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    console.print(f"run [bold]{s['run_id']}[/bold]  status [bold]{s['status']}[/bold]  {counts_line(s)}",
                  highlight=False)
    comps = s.get("components") or {}
    if comps:
        t = Table(title=components_title(s.get("components_rounds") or [0]), show_edge=False)
        for col in ("component", "executed", "acked", "failed", "emitted", "roots", "seconds"):
            t.add_column(col, justify="left" if col == "component" else "right")
        for name, c in comps.items():
            t.add_row(name, *(str(c.get(k, 0)) for k in ("executed", "acked", "failed", "emitted", "roots", "seconds")))
        console.print(t)
    if s.get("failed_positions"):
        t = Table(title="failed positions", show_edge=False)
        for col in ("component", "task", "tuples", "sample error"):
            t.add_column(col)
        for p in s["failed_positions"]:
            t.add_row(p["component"], str(p["task"]), str(p["count"]), (p.get("sample_error") or "")[:100])
        console.print(t)


def show(summary: dict[str, Any], as_json: bool) -> None:
    """A run's summary: one JSON object, or the tables plus the log source's partition lines."""
    if as_json:
        echo_json(summary)
        return
    print_summary(summary)
    for line in follow_mod.report_lines(summary):
        click.echo(line)


def follow_and_report(plan: follow_mod.FollowPlan, client: Redis, url: str, make_spark: Callable[[], Any],
                      max_batches: int | None, idle_exit: float | None, as_json: bool) -> dict[str, Any]:
    """`submit --follow` (checked: `plan`): jobs.follow with its events printed to stderr (none
    with --json)."""

    def echo(kind: str, info: dict) -> None:
        if as_json:
            return
        if kind == "resumed":
            click.echo(f"resumed crashed run {info['run_id']} (round {info.get('resumed_round')}): "
                       f"pending {info['pending']}, dead {info['dead']}", err=True)
        elif kind == "continue":
            click.echo(f"continuing run {info['run_id']} after round {info['round']}", err=True)
        elif kind == "run":
            click.echo(f"run {info['run_id']}", err=True)
        elif kind == "batch":
            extra = f", trimmed {info['trimmed']}" if info["trimmed"] else ""
            click.echo(f"batch round {info['round']}: {info['messages']} messages, failed "
                       f"{info['failed']}{extra}; run pending {info['pending']}, dead {info['dead']} "
                       f"({info['seconds']:.1f}s)", err=True)
        elif kind == "recovery":
            click.echo(f"recovery: {info['rounds']} round(s); pending {info['pending']}, dead "
                       f"{info['dead']}", err=True)
        elif kind == "stopping":
            click.echo(f"{info['signal']}: stopping after this batch (again to abort)", err=True)
        elif kind == "retry":
            click.echo(f"round {info['round']} was interrupted ({info['error']}): finishing it",
                       err=True)
        sys.stderr.flush()

    spark = make_spark()
    return follow_mod.run(spark, client, url, plan, max_batches=max_batches, idle_exit=idle_exit, on_event=echo)


def register(main: click.Group) -> None:
    @main.command()
    @click.argument("file")
    @click.option("--master", default=None, help="Spark master URL (default local[*]).")
    @click.option("--conf", "spark_conf", multiple=True, metavar="K=V", help="A Spark setting (repeatable).")
    @click.option("--property", "-p", "props", multiple=True, metavar="K=V",
                  help="Set a workflow config property (repeatable; `recovery properties` "
                  "lists them), checked before anything runs.")
    @click.option("--no-tracking", is_flag=True, help="Run without tracking (no recovery possible).")
    @click.option("--run-id", default=None, callback=_run_id,
                  help="Use this run id instead of a generated one (1 to 128 letters, digits, '.', "
                  "'_' or '-', not starting with '.').")
    @click.option("--spill-dir", default=None, metavar="DIR|URI",
                  help="Where tasks spill in-flight outputs: a folder the driver and every executor "
                  "reach, or a file://, hdfs:// or s3:// URI (default: recovery.spill.dir, else "
                  "RECOVERY_HOME/spill). Kept in the run: recover and clear find it.")
    # --- log source (recovery/jobs/follow.py): continuous runs over redis-stream topics ---
    @click.option("--follow", is_flag=True, help="Keep reading the workflow's topics in micro-batches "
                  "until Ctrl-C/SIGTERM (finishes and commits the batch under way).")
    @click.option("--max-batches", type=click.IntRange(min=1), default=None, metavar="N",
                  help="With --follow: stop after N batches.")
    @click.option("--idle-exit", type=click.FloatRange(min=0), default=None, metavar="SECS",
                  help="With --follow: stop after SECS seconds without a new message.")
    # --- end log source ---
    @redis_option
    @json_option
    def submit(file: str, master: str | None, spark_conf: tuple[str, ...], props: tuple[str, ...],
               no_tracking: bool, run_id: str | None, spill_dir: str | None, follow: bool,
               max_batches: int | None, idle_exit: float | None, redis_url: str | None,
               as_json: bool) -> None:
        """Run the workflow FILE on Spark with every tuple tracked; prints a summary."""
        wf = workflow_xml.load(file)
        wf = wf.with_config(config.parse_assignments(props, "-p", dict(wf.config), [c.id for c in wf.components]))
        with open(file, encoding="utf-8", errors="replace") as fh:
            xml = fh.read()
        # every refusal before Spark starts (exit 2): first what the workflow and the options
        # decide, then, connected, what Redis holds
        if follow:   # --- log source (recovery/jobs/follow.py): continuous runs over topics ---
            follow_plan = follow_mod.prepare(wf, xml, file, master or "local[*]", run_id, not no_tracking)
            if spill_dir is not None:
                raise RecoveryError("--spill-dir does not apply to --follow runs: set the workflow "
                                    "property recovery.spill.dir instead")
            client, url = _client(redis_url)
            if run_id:   # a run of its own: the consumer's run goes on only without --run-id
                runs.check_absent(client, run_id)
            follow_mod.check_redis(client, follow_plan)
            summary = follow_and_report(follow_plan, client, url, lambda: _spark(master, _kv(spark_conf, "--conf")),
                                        max_batches, idle_exit, as_json)
            if as_json:
                echo_json(summary)
            elif summary.get("run_id"):
                print_summary(summary)
                for line in follow_mod.report_lines(summary):
                    click.echo(line)
            else:
                click.echo("no messages to read: no run was started")
            return
        plan = jobs_submit.prepare(wf, xml, file, tracking_on=not no_tracking, master=master or "local[*]",
                                   run_id=run_id, spill_dir=spill_dir)
        client, url = _client(redis_url)
        jobs_submit.check_redis(client, plan)
        spark = _spark(master, _kv(spark_conf, "--conf"))
        # --- log source: resume a crashed run of the same consumer first (recovery/jobs/follow.py) ---
        if uses_log_source(wf):
            for resumed in follow_mod.resume_crashed(spark, client, url, wf):
                click.echo(f"resumed crashed run {resumed['run_id']} of the same consumer first", err=True)
        # --- end log source ---
        with _Progress(not as_json) as progress:
            summary = jobs_submit.run(spark, client, url, plan, progress)
        _LAST.clear()
        _LAST.update(summary)
        if uses_log_source(wf):   # --- log source: partitions, lag, warnings (recovery/jobs/follow.py)
            summary = follow_mod.enrich(client, summary, wf)
        show(summary, as_json)
        if not as_json:
            if summary["failed_positions"]:
                click.echo(f"next: recovery plan {summary['run_id']}   then: recovery recover {summary['run_id']}")

    @main.command("runs")
    @redis_option
    @json_option
    def runs_cmd(redis_url: str | None, as_json: bool) -> None:
        """The runs this Redis knows."""
        client, _ = _client(redis_url)
        rows = reports.runs_list(client)["runs"]
        if as_json:
            echo_json({"runs": rows})
            return
        if not rows:
            click.echo("no runs")
        for r in rows:
            counts = (f"roots {r['roots']}  pending {r['pending']}  dead {r['dead']}" if r["counts_known"]
                      else f"roots unknown (round {r['unsettled_round']} not settled)")
            click.echo(f"{r['run_id']}  {r['status']:<9}  round {r['round']}  started {r['started']}  {counts}")

    @main.command()
    @click.argument("run_id", callback=_run_id)
    @redis_option
    @json_option
    def status(run_id: str, redis_url: str | None, as_json: bool) -> None:
        """Roots complete / pending / failed / dead, and the failed positions."""
        client, _ = _client(redis_url)
        show(reports.run_status(client, run_id), as_json)

    @main.command()
    @click.argument("run_id", callback=_run_id)
    @click.option("--format", "-f", "fmt", type=click.Choice(["xml", "text", "dot", "mermaid"]),
                  default="xml", show_default=True)
    @redis_option
    def plan(run_id: str, fmt: str, redis_url: str | None) -> None:
        """The recovery workflow `recover` would run next: as XML, or the original topology
        drawn with the failed positions marked and the part that re-runs set apart."""
        client, _ = _client(redis_url)
        p = reports.plan(client, run_id)
        if fmt != "xml":
            original = jobs_summary.original_workflow(runs.get(client, run_id))
            dim = {c.id for c in original.components} - set(p["rerun"])
            click.echo(render.render(original, fmt, p["marks"], dim, chains=p["chains"]))
            return
        if p["xml"] is None:
            raise RecoveryError(f"run {run_id} has no failed positions: nothing to recover")
        click.echo(_with_chains_comment(p["xml"], p["chains"]))

    @main.command()
    @click.argument("run_id", callback=_run_id)
    @click.option("--max-rounds", type=click.IntRange(min=1), default=None)
    @click.option("--strategy", type=click.Choice(["localized", "root-replay"]), default="localized",
                  show_default=True, help="root-replay replays failed roots from their spout (Storm).")
    @click.option("--master", default=None, help="Spark master URL (default local[*]).")
    @click.option("--conf", "spark_conf", multiple=True, metavar="K=V")
    @click.option("--property", "-p", "props", multiple=True, metavar="K=V",
                  help="Set a workflow config property of the run (repeatable); stored in "
                  "the run, used by this and later rounds.")
    @click.option("--force", is_flag=True, help="Take over a run whose driver still holds its lease "
                  "(a driver that hangs, or died on another host less than a lease ago).")
    @click.option("--spill-dir", default=None, metavar="DIR|URI",
                  help="Where the run's spill files are now (default: where its submit put them); "
                  "kept in the run for later rounds and clear.")
    @redis_option
    @json_option
    def recover(run_id: str, max_rounds: int | None, strategy: str, master: str | None,
                spark_conf: tuple[str, ...], props: tuple[str, ...], force: bool, spill_dir: str | None,
                redis_url: str | None, as_json: bool) -> None:
        """Run recovery rounds until the failed set is empty.

        With -p KEY=VALUE (repeatable), first change the run's configuration: each value is
        checked as at submit, stored in the run record, and used by this and every later
        round (a crashed round that resumes too). Use it to mend a bad value a run was
        submitted with, or to allow more attempts before `recovery dead --requeue`."""
        client, url = _client(redis_url)
        plan = jobs_recover.prepare(client, run_id, force, spill_dir)   # every refusal, before Spark starts
        if plan.driver_alive:   # (force)
            click.echo(f"warning: taking over run {run_id} from its {runs.describe_driver(plan.record)}; if "
                       "that driver is still working, it stops at its next write", err=True)
        if props:
            original = jobs_summary.original_workflow(plan.record)
            jobs_recover.reconfigure(client, run_id, config.parse_assignments(
                props, "-p", dict(original.config), [c.id for c in original.components]))
        spark = _spark(master, _kv(spark_conf, "--conf"))

        with _Progress(not as_json) as progress:
            def on_round(r: dict) -> None:
                s = r["summary"]
                progress.note(f"round {r['round']}: replayed {r['replayed']} tuples; "
                              f"roots pending {s['pending']}, dead {s['dead']}")
            summary = jobs_recover.run(spark, client, url, plan, max_rounds, strategy, progress, on_round)
        if as_json:
            echo_json(summary)
        else:
            show(summary, as_json=False)   # (with its warnings: roots no task will run)
            click.echo(f"rounds {summary['rounds']}, recovered {summary['recovered']} tuples, "
                       f"dead {summary['dead_tuples']} tuples, {summary['duration']:.1f}s"
                       + (" (resumed a crashed round first)" if summary.get("resumed") else ""))

    @main.command()
    @click.argument("run_id", callback=_run_id)
    @click.option("--requeue", is_flag=True, help="Put dead tuples back for another recovery.")
    @click.option("--component", default=None, help="Only this component's dead tuples.")
    @click.option("--tuple", "tuple_keys", multiple=True, metavar="COMPONENT:TASK:ID",
                  help="With --requeue: only this dead tuple (repeatable; the `key` of `dead --json`).")
    @redis_option
    @json_option
    def dead(run_id: str, requeue: bool, component: str | None, tuple_keys: tuple[str, ...],
             redis_url: str | None, as_json: bool) -> None:
        """Tuples that exhausted their retries, with their errors."""
        if tuple_keys and not requeue:
            raise RecoveryError("--tuple selects tuples to requeue: give --requeue too")
        client, _ = _client(redis_url)
        if requeue:
            result = reports.requeue(client, run_id, component, list(tuple_keys) or None)
            n = result["requeued"]
            if as_json:
                echo_json(result)
            else:
                click.echo(f"requeued {n} dead tuple{'s' if n != 1 else ''}; run `recovery recover {run_id}`")
            return
        result = reports.dead(client, run_id, component)
        rows = result["dead"]
        if as_json:
            echo_json(result)
            return
        if not rows:
            click.echo("no dead tuples")
        for r in rows:
            vals = r.get("values") if r.get("values") is not None else r.get("raw")
            if isinstance(vals, str):
                vals = vals.rstrip()
            click.echo(f"{r['component']} task {r['task']}  attempts {r.get('attempt')}  values {vals!r}\n"
                       f"    error: {r.get('error')}")

    @main.command()
    @click.argument("run_id", required=False, callback=_run_id)
    @click.option("--all", "all_runs", is_flag=True, help="Every run this Redis knows.")
    @click.option("--force", is_flag=True, help="Clear a run even if it is still running.")
    @redis_option
    @json_option
    def clear(run_id: str | None, all_runs: bool, force: bool, redis_url: str | None, as_json: bool) -> None:
        """Remove a run's cached state (every key of the run and nothing else)."""
        if bool(run_id) == all_runs:
            raise RecoveryError("give a RUN id or --all (not both)")
        client, _ = _client(redis_url)
        result = reports.clear(client, [run_id] if run_id else None, force)   # None: --all
        removed = result["removed"]
        if as_json:
            echo_json(result)
            return
        for rid, ks in removed.items():
            click.echo(f"cleared {rid}: {len(ks)} keys")
            for table in result["tables"].get(rid, []):   # a table sink's rows are never cleared
                click.echo(f"  sink {table['sink']} ({table['type']}): {table['note']}")
