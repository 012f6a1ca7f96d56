"""The run API: `submit` a workflow (a `Topology` or a workflow file) and act on its run
(`Run`: status, plan, dead letters, recover, requeue, clear). The `recovery` command line is a
shell over these same calls.

    run = recovery.submit(t, spark=spark, redis="redis://127.0.0.1:6379")
    run.status().pending; run.recover(); run.clear()

With `spark=`, the session is the caller's (a notebook's, spark-submit's, a managed
platform's): used as it is (its master, conf and archives) and never stopped; on a cluster
its executors' Python is checked and the workflow's code shipped as for a session of ours
(docs/cluster.md). Without it, a session is started as the command line starts one. Without
`redis=`, the embedded server under RECOVERY_HOME.
"""
from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recovery.connectors import files
from recovery.controlplane import connection
from recovery.engine import connect
from recovery.engine.session import adopt, is_local_master, master_of, session
from recovery.environment import environment
from recovery.errors import RecoveryError, WorkflowError
from recovery.jobs import clear as jobs_clear
from recovery.jobs import dead_letters as jobs_dead
from recovery.jobs import follow as follow_mod
from recovery.jobs import follow_events, reports
from recovery.jobs import preview as jobs_preview
from recovery.jobs import recover as jobs_recover
from recovery.jobs import submit as jobs_submit
from recovery.jobs import trace as jobs_trace
from recovery.jobs import trace_tree as jobs_trace_tree
from recovery.jobs.recover import RecoveryRound
from recovery.jobs.reports import RecoveryPlan, RoundReport
from recovery.jobs.settle import Progress
from recovery.jobs.summary import RunSummary
from recovery.jobs.trace import RootTrace
from recovery.model import config as config_decl
from recovery.model.failed import FailedTuple
from recovery.model.workflow import Workflow
from recovery.model.xml import parse as workflow_xml
from recovery.topology import Topology
from recovery.tracking import keys, runs, spill

if TYPE_CHECKING:
    from redis import Redis

__all__ = ["RecoveryPlan", "RoundReport", "Run", "clear_all", "runs_list", "submit"]


def client_for(redis_url: str | None) -> tuple[Redis, str]:
    """A client of the given Redis (or the embedded server's, started on demand) and its URL."""
    url = connection.resolve_url(redis_url)
    return connection.connect(url), url


def start_session(master: str | None, conf: dict[str, str]) -> Any:
    """A Spark session of ours, as the command line starts one (engine/session.py)."""
    return session(master, conf)


def start_connect_session(remote: str, conf: dict[str, str]) -> Any:
    """A Spark Connect session, as `--remote` (or SPARK_REMOTE) starts one (engine/connect.py)."""
    return connect.connect_session(remote, conf)


def refuse_embedded_redis_on_cluster(redis_url: str | None, master: str | None) -> None:
    """The embedded Redis listens on a unix socket under RECOVERY_HOME: executors on other
    hosts cannot reach it. With a cluster's master, a Redis URL every executor reaches is
    required (docs/cluster.md)."""
    master = master or environment().spark_master
    if master and not is_local_master(master) and not (redis_url or environment().redis_url):
        where = (f"the Spark Connect server at {master}" if master.startswith("sc://") else f"master {master}")
        raise RecoveryError(f"{where} runs tasks on other hosts, which cannot reach the embedded Redis "
                            "(a unix socket under RECOVERY_HOME): give --redis redis://HOST:PORT (or "
                            f"${connection.URL_ENV}) of a Redis every executor reaches, its password in "
                            f"${connection.PASSWORD_FILE_ENV} or ${connection.PASSWORD_ENV} (docs/cluster.md)")


# spark-submit's session (the launcher puts it here): every command uses it, as `spark=` would
_ambient_spark: list[Any] = []


def use_session(spark: Any) -> None:
    """Make `spark` the session every later call without `spark=` uses (the launcher does, with
    spark-submit's session)."""
    _ambient_spark[:] = [spark]


@dataclass
class SparkChoice:
    """The caller's session, or how to start one (a master, or a Spark Connect server's URL,
    and settings), started on first use. Without either, Spark's own SPARK_REMOTE names a
    Connect server, as for `pyspark`."""
    given: Any = None
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    remote: str | None = None

    def __post_init__(self) -> None:
        if self.given is None and _ambient_spark:
            if self.master is not None or self.conf or self.remote is not None:
                raise RecoveryError("running inside spark-submit: its own flags (--master, --conf) choose the "
                                    "Spark session, not --master, --remote or --conf after the command")
            self.given = _ambient_spark[0]
        if self.given is not None:
            return
        if self.remote is not None and self.master is not None:
            raise RecoveryError("--remote and --master both given: a Spark Connect server runs on its own "
                                "master; give one of them")
        env_remote = os.environ.get(connect.REMOTE_ENV)
        if self.remote is None and env_remote:
            if self.master is not None:
                raise RecoveryError(f"--master {self.master} given while ${connect.REMOTE_ENV} names a Spark "
                                    f"Connect server ({env_remote}): unset one of them")
            self.remote = env_remote

    @property
    def effective_master(self) -> str:
        """The master the checks before Spark starts hold the run to: a Connect server's on this
        host counts as local (its executors share this host's files and Redis socket), any
        other as a cluster's."""
        if self.given is not None:
            return master_of(self.given)
        if self.remote is not None:
            return "local[*]" if connect.on_this_host(self.remote) else self.remote
        return self.master or environment().spark_master

    @property
    def recorded_master(self) -> str:
        """What the run record keeps as its master: a Connect server's URL, else the master."""
        if self.given is not None and connect.is_connect(self.given):
            return connect.remote_of(self.given)
        return self.remote or self.effective_master

    def session(self, redis_url: str | None = None) -> Any:
        """The session (started now if it was not); a Connect server is checked once to run
        recovery's tasks and reach `redis_url`."""
        if self.given is None:
            if self.remote is not None:
                self.given = start_connect_session(self.remote, self.conf)
            else:
                self.given = start_session(self.master, self.conf)
        return adopt(self.given, redis_url)


def _workflow_of(workflow: Topology | Workflow | str | os.PathLike[str]
                 ) -> tuple[Workflow, str, str | None]:
    """(model, XML, file) of what `submit` was given. A topology written in Python resolves its
    relative paths against the working directory now, as a shell would; the XML the run keeps
    says so in a comment, and the stored model carries that folder, so `recover` resolves
    them the same way wherever it runs from."""
    if isinstance(workflow, (str, os.PathLike)):
        file = os.fspath(workflow)
        wf = workflow_xml.load(file)
        with open(file, encoding="utf-8", errors="replace") as fh:
            return wf, fh.read(), file
    if isinstance(workflow, Workflow):
        workflow = Topology.from_workflow(workflow)
    if workflow.file is not None:   # read from a file and not changed since: that file, as the CLI reads it
        wf = workflow_xml.load(workflow.file)
        if Topology.from_workflow(wf) == workflow:
            with open(workflow.file, encoding="utf-8", errors="replace") as fh:
                return wf, fh.read(), workflow.file
    # (changed in Python after it was read: its paths still resolve against the file's folder)
    base = workflow.base_dir or os.getcwd()
    wf = workflow.workflow(base_dir=base)
    xml = workflow.to_xml()
    # (a comment may not hold "--")
    note = f"written by recovery.Topology; relative paths resolve against {base}".replace("--", "- -")
    head, sep, rest = xml.partition("?>\n")
    return wf, f"{head}{sep}<!-- {note} -->\n{rest}", None


@contextmanager
def _placed_in_python(workflow: Topology | Workflow | str | os.PathLike[str]) -> Iterator[None]:
    """An error about a component of a topology built in Python, placed at the line that
    added that component (the checks made at submit know the model, not the Python)."""
    try:
        yield
    except WorkflowError as err:
        if isinstance(workflow, Topology):
            raise workflow.placed(err) from None
        raise


def submit(workflow: Topology | Workflow | str | os.PathLike[str], *, spark: Any = None, redis: str | None = None,
           config: Mapping[str, Any] | Iterable[str] | None = None, follow: bool = False, master: str | None = None,
           spark_conf: Mapping[str, str] | None = None, remote: str | None = None,
           run_id: str | None = None, tracking: bool = True,
           spill_dir: str | None = None, progress: Progress | None = None,
           on_resumed: Callable[[RunSummary], None] | None = None,
           max_batches: int | None = None, idle_exit: float | None = None,
           on_event: follow_events.Event | None = None, config_option: str = "config",
           reset: str | None = None) -> Run:
    """Run `workflow` (a Topology, or the path of a workflow file) on Spark with every tuple
    tracked, and return its `Run` once its first round settled (`run.summary`). `config`:
    workflow properties set for this run (`-p`). With `follow`, keep reading its topics in
    micro-batches until stopped (`max_batches`, `idle_exit`, Ctrl-C). Every refusal comes
    before Spark starts: the workflow and the options first, then what Redis holds. `config`
    may also be "KEY=VALUE" strings, checked as `-p` (`config_option` names them in errors).
    `reset` ("earliest" or "latest"): where a kafka consumer whose committed offset the log no
    longer holds goes on (`--reset`); without it such a submit is refused."""
    wf, xml, file = _workflow_of(workflow)
    wf = wf.with_config(config_decl.parse_assignments(_assignments(config), config_option, dict(wf.config),
                                                      [c.id for c in wf.components]))
    choice = SparkChoice(spark, master, dict(spark_conf or {}), remote)
    refuse_embedded_redis_on_cluster(redis, choice.effective_master)
    if follow:
        with _placed_in_python(workflow):
            follow_plan = follow_mod.prepare(wf, xml, file, choice.effective_master, run_id, tracking, reset)
        if spill_dir is not None:
            raise RecoveryError("spill_dir (--spill-dir) does not apply to follow runs: set the workflow "
                                "property recovery.spill.dir instead")
        client, url = client_for(redis)
        follow_mod.check_redis(client, follow_plan)
        outcome = follow_mod.run(choice.session(url), client, url, follow_plan, max_batches=max_batches,
                                 idle_exit=idle_exit, on_event=on_event)
        # (no message came: no run was started, `run.summary` is None and its id "")
        rid = outcome.summary.run_id if outcome.summary is not None else (follow_plan.run_id or "")
        return Run(rid, client, url, choice, summary=outcome.summary, follow=outcome, redis_given=redis)
    with _placed_in_python(workflow):
        plan = jobs_submit.prepare(wf, xml, file, tracking_on=tracking, master=choice.effective_master,
                                   run_id=run_id, spill_dir=spill_dir, reset=reset)
    plan = dataclasses.replace(plan, master=choice.recorded_master)
    client, url = client_for(redis)
    jobs_submit.check_redis(client, plan)
    summary = follow_mod.submit_bounded(choice.session(url), client, url, plan, progress, on_resumed)
    return Run(summary.run_id, client, url, choice, summary=summary, redis_given=redis)


def _assignments(config: Mapping[str, Any] | Iterable[str] | None) -> tuple[str, ...]:
    if config is None:
        return ()
    if isinstance(config, Mapping):
        return tuple(f"{k}={config_decl_value(v)}" for k, v in config.items())
    return tuple(config)


def config_decl_value(value: Any) -> str:
    """A property's value as the XML and `-p` write it (True -> "true")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def runs_list(*, redis: str | None = None, status: str | None = None) -> list[reports.RunRow]:
    """The runs this Redis knows, newest first (`recovery runs`)."""
    return reports.run_rows(client_for(redis)[0], status)


def clear_all(*, redis: str | None = None, force: bool = False) -> dict[str, jobs_clear.Cleared]:
    """Clear every run this Redis knows (`recovery clear --all`)."""
    return jobs_clear.clear_all(client_for(redis)[0], force)


class Run:
    """A run this Redis knows: made by `submit`, or found by `Run.get(run_id)`."""

    def __init__(self, run_id: str, client: Redis, redis_url: str, spark: SparkChoice | None = None, *,
                 summary: RunSummary | None = None, follow: follow_mod.FollowOutcome | None = None,
                 redis_given: str | None = None):
        self.id = run_id
        self.client = client
        self.redis_url = redis_url
        self._redis_given = redis_given   # the URL the caller gave (None: the embedded server's)
        self._spark = spark or SparkChoice()
        self.summary = summary       # what the call that made this Run reported
        self.follow_outcome = follow

    @classmethod
    def get(cls, run_id: str, *, redis: str | None = None, spark: Any = None, master: str | None = None,
            spark_conf: Mapping[str, str] | None = None, must_exist: bool = True, remote: str | None = None) -> Run:
        """The run `run_id` (RunNotFound when this Redis has none, unless not `must_exist`:
        `clear` removes what a run left without its record too). `spark`, `master`, `remote`
        and `spark_conf` are for `recover`, as at `submit`."""
        keys.check_run_id(run_id)
        client, url = client_for(redis)
        if must_exist and not client.exists(runs.record_key(run_id)):   # (a report reads the record itself)
            raise runs.not_found(run_id)
        return cls(run_id, client, url, SparkChoice(spark, master, dict(spark_conf or {}), remote),
                   redis_given=redis)

    @property
    def run_id(self) -> str:
        return self.id

    @property
    def spark_choice(self) -> SparkChoice:
        """The session this run's `recover` uses, or how it starts one."""
        return self._spark

    # --- reports (read-only) ----------------------------------------------------------------
    def status(self) -> RunSummary:
        """Roots complete / pending / failed / dead, per-component counters, failed positions:
        what `recovery status --json` prints, as fields."""
        return reports.run_summary(self.client, self.id)

    def plan(self) -> RecoveryPlan:
        """The recovery workflow the next `recover` round would run."""
        return reports.plan(self.client, self.id)

    def rounds(self) -> list[RoundReport]:
        """Every round of the run, oldest first: its counters and what it replayed and recovered."""
        return reports.rounds(self.client, self.id).rounds

    def dead_letters(self, component: str | None = None) -> list[FailedTuple]:
        """Tuples that exhausted their retries, with their errors (`recovery dead`)."""
        return jobs_dead.dead_letters(self.client, self.id, component)

    def workflow(self) -> Workflow:
        return runs.get(self.client, self.id).original_workflow()

    def trace(self, root: int | str | None = None, tree: bool = False, *, message: str | None = None) -> RootTrace:
        """One root followed (`recovery trace`): its message id, state, failures, replays,
        requeues and dead letter. `root` is its id (as `dead_letters()` show in `roots`), or
        `message` its message id in its source's terms (FILE:OFFSET, PARTITION:OFFSET, an
        id-field value). `tree`: its tuple tree too, re-derived on Spark in a sandbox that
        writes nothing of the run, and checked against what the run recorded."""
        found = jobs_trace.trace(self.client, self.id, root, message)
        if tree:
            rec = runs.get(self.client, self.id)
            master = self._spark.effective_master
            refuse_embedded_redis_on_cluster(self._redis_given, master)
            files.check_paths_reach_executors(rec.original_workflow(), master, rec.file)
            derived = jobs_trace_tree.derive_tree(self._spark.session, self.client, self.redis_url, self.id,
                                                  found.root)
            found = found.model_copy(update={"tree": [n.model_dump() for n in derived.nodes],
                                             "nondeterministic": derived.nondeterministic})
        return found

    def preview(self, dead: bool = False, component: str | None = None, limit: int | None = None, *,
                progress: Progress | None = None) -> jobs_preview.Preview:
        """What the next `recover` round would do, with the code as it is now, run in a sandbox
        that writes nothing of the run: per failed position, how many queued tuples would
        succeed and how many fail again (their errors grouped); per sink, how many records it
        would get, with a sample. `dead`: the dead letters, as if requeued; `component`: only
        its positions; `limit`: at most that many tuples per position."""
        rec = runs.get(self.client, self.id)
        master = self._spark.effective_master
        refuse_embedded_redis_on_cluster(self._redis_given, master)
        files.check_paths_reach_executors(rec.original_workflow(), master, rec.file)
        spill.check_reaches_executors(None, rec.spill_dir, master)
        return jobs_preview.preview(lambda: self._spark.session(self.redis_url), self.client, self.redis_url,
                                    self.id, dead=dead, component=component, limit=limit, progress=progress)

    # --- actions ----------------------------------------------------------------------------
    def recover(self, *, max_rounds: int | None = None, strategy: str = "localized",
                config: Mapping[str, Any] | Iterable[str] | None = None, config_option: str = "config",
                force: bool = False, spill_dir: str | None = None, code_changed: bool = False,
                progress: Progress | None = None, on_round: Callable[[RecoveryRound], None] | None = None,
                on_prepared: Callable[[jobs_recover.RecoverPlan], None] | None = None) -> RunSummary:
        """Recovery rounds until the failed set is empty (or `max_rounds`); the final summary.
        `config`: properties of the run changed first (kept for later rounds), `force` takes
        the run over from a live driver, `code_changed` recovers with the workflow's code as it
        is now. `on_prepared` is told the checked plan before Spark starts."""
        master = self._spark.effective_master
        refuse_embedded_redis_on_cluster(self._redis_given, master)
        plan = jobs_recover.prepare(self.client, self.id, force, spill_dir, code_changed)
        original = plan.record.original_workflow()
        # a run submitted locally, recovered on a cluster: its relative paths are the driver's
        files.check_paths_reach_executors(original, master, plan.record.file)
        # and its spill folder: under RECOVERY_HOME on this host, unless spill_dir moves it
        spill.check_reaches_executors(spill_dir, plan.record.spill_dir, master)
        if on_prepared is not None:
            on_prepared(plan)
        if config:
            jobs_recover.reconfigure(self.client, self.id, config_decl.parse_assignments(
                _assignments(config), config_option, dict(original.config), [c.id for c in original.components]))
        spark = self._spark.session(self.redis_url)
        self.summary = jobs_recover.run(spark, self.client, self.redis_url, plan, max_rounds, strategy, progress,
                                        on_round)
        return self.summary

    def requeue(self, component: str | None = None, tuple_keys: Iterable[str] | None = None) -> int:
        """Put dead tuples back for another recovery (all, one component's, or those of
        `tuple_keys`, "COMPONENT:TASK:ID"); how many."""
        return jobs_dead.requeue_dead(self.client, self.id, component, list(tuple_keys or []) or None)

    def clear(self, force: bool = False) -> jobs_clear.Cleared:
        """Remove every key of the run (and its spill files), nothing else."""
        return jobs_clear.clear(self.client, self.id, force)

    # --- notebooks ----------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        """The status table and the topology with its failed positions, as the web view draws it."""
        try:
            return run_html(self.status(), self.workflow(), self.dead_letters())
        except RecoveryError as err:
            return f"<pre>{html.escape(str(err))}</pre>"

    def __repr__(self) -> str:
        return f"<Run {self.id!r}>"



def run_html(s: RunSummary, wf: Workflow, dead: list[FailedTuple]) -> str:
    """A run's summary as an HTML table, its components' counters, and its topology drawn by the
    web view's SVG renderer with failed and dead tuples marked. Every value is escaped."""
    from recovery.ui import svg

    def e(value: Any) -> str:
        return html.escape("" if value is None else str(value))
    failed: dict[str, dict[int, int]] = {}
    for p in s.failed_positions:
        failed.setdefault(p.component, {})[p.task] = p.count
    dead_by: dict[str, int] = {}
    for d in dead:
        dead_by[d.component] = dead_by.get(d.component, 0) + 1
    counts = ("roots", "complete", "pending", "failed", "in_flight", "dead")
    head = "".join(f"<th>{e(k)}</th>" for k in ("run_id", "status", "round", *counts))
    row = "".join(f"<td>{e(getattr(s, k))}</td>" for k in ("run_id", "status", "round", *counts))
    parts = [f'<div class="recovery-run"><table class="summary"><tr>{head}</tr><tr>{row}</tr></table>']
    if s.components:
        cols = ("executed", "acked", "failed", "emitted", "roots", "seconds")
        parts.append('<table class="components"><tr><th>component</th>'
                     + "".join(f"<th>{c}</th>" for c in cols) + "</tr>")
        for name, c in s.components.items():
            parts.append(f"<tr><td>{e(name)}</td>" + "".join(f"<td>{e(getattr(c, k))}</td>" for k in cols) + "</tr>")
        parts.append("</table>")
    if s.failed_positions:
        parts.append('<table class="failed"><tr><th>component</th><th>task</th><th>tuples</th>'
                     "<th>sample error</th></tr>")
        for p in s.failed_positions:
            parts.append(f"<tr><td>{e(p.component)}</td><td>{e(p.task)}</td><td>{e(p.count)}</td>"
                         f"<td>{e((p.sample_error or '')[:200])}</td></tr>")
        parts.append("</table>")
    parts.append(svg.topology(wf, svg.Marks(failed=failed, dead=dead_by)))
    parts.append("</div>")
    return "".join(parts)
