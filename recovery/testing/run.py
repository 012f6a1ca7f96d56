"""Runs a workflow in this process, without Spark, against an injected Redis client, with the
Spark engine's semantics: `jobs.submit` and `jobs.recover` drive it, `engine` builds each
round's stages and `runtime.TaskRunner` runs every task, exactly as under Spark; only the
SparkSession is replaced (local_spark.LocalSession: partitions computed one after another)."""
from __future__ import annotations

import collections
import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from redis import Redis

from recovery.engine import frames, rounds
from recovery.errors import RunError
from recovery.faults import PREFIX as INJECT_PREFIX
from recovery.jobs import dead_letters, submit
from recovery.jobs import recover as jobs_recover
from recovery.jobs import summary as jobs_summary
from recovery.jobs.summary import RunSummary
from recovery.model.failed import FailedTuple
from recovery.model.graph import ChainPlan
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Workflow
from recovery.model.xml.write import to_xml
from recovery.runtime import task
from recovery.testing.components import (
    ABORT,
    CRASH,
    ITEMS_PROPERTY,
    DriverCrash,
    decode_items,
    encode_items,
    read_list_sink,
)
from recovery.testing.local_spark import LocalSession
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TESTING_SPOUT = "recovery.testing:TestingSpout"
LIST_SINK = "recovery.testing:ListSink"


# --- shaping a workflow for a test ----------------------------------------------------------
def _replace(wf: Workflow, comp: Component) -> Workflow:
    return wf.model_copy(update={"components": tuple(comp if c.id == comp.id else c for c in wf.components)})


def feed(wf: Workflow, component_id: str, items: list[Any]) -> Workflow:
    """`wf` with spout `component_id` replaced by a TestingSpout emitting `items` on its
    default stream (same id, parallelism and streams; sentinels allowed)."""
    comp = wf.component(component_id)
    if not comp.is_spout:
        raise ValueError(f"feed: {component_id!r} is a bolt, not a spout")
    config = dict(comp.config)
    config[ITEMS_PROPERTY] = encode_items(items)
    return _replace(wf, comp.model_copy(update={"impl": ClassImpl(ref=TESTING_SPOUT),
                                                "config": tuple(config.items())}))


def with_list_sinks(wf: Workflow) -> Workflow:
    """`wf` with every built-in sink replaced by a ListSink (same id, inputs, parallelism)."""
    for comp in wf.components:
        if comp.impl.kind == "sink":
            wf = _replace(wf, comp.model_copy(update={"impl": ClassImpl(ref=LIST_SINK)}))
    return wf


def without_failures(wf: Workflow) -> Workflow:
    """`wf` with no fault injection and no ABORT or CRASH in its TestingSpouts (EOF stays: it
    decides what the input is)."""
    wf = wf.model_copy(update={"config": tuple((k, v) for k, v in wf.config if not k.startswith(INJECT_PREFIX))})
    for comp in wf.components:
        config = dict(comp.config)
        if ITEMS_PROPERTY in config:
            items = [i for i in decode_items(config[ITEMS_PROPERTY]) if i is not ABORT and i is not CRASH]
            config[ITEMS_PROPERTY] = encode_items(items)
        config = {k: v for k, v in config.items() if not k.startswith(INJECT_PREFIX)}
        wf = _replace(wf, comp.model_copy(update={"config": tuple(config.items())}))
    return wf


# --- running ---------------------------------------------------------------------------------
@dataclass
class LocalRun:
    """One run driven in this process. `summary` is what `jobs.submit`/`jobs.recover` returned
    (the shape of `jobs.summarize`; after an interruption, `jobs.summarize` of the stored run).
    `interrupted`: None, "error" (a task failed for good, e.g. at ABORT: the run is in `error`)
    or "crash" (CRASH: the run is `crashed`); either way `recover_local` resumes it."""
    workflow: Workflow
    client: Redis
    run_id: str
    redis_url: str
    summary: RunSummary
    interrupted: str | None = None
    error: str | None = None
    arrival: random.Random | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        return runs.status_of(runs.get(self.client, self.run_id))

    @property
    def sinks(self) -> dict[str, list[list]]:
        """What reached each ListSink, read now from Redis (every round's records so far)."""
        return {c.id: read_list_sink(self.client, self.run_id, c.id)
                for c in self.workflow.components if c.impl.kind == "class" and c.impl.ref == LIST_SINK}

    @property
    def failed_positions(self) -> list[jobs_summary.FailedPosition]:
        """The run's failed positions holding queued tuples (`jobs.failed_positions`)."""
        return [p for p in jobs_summary.failed_positions(self.client, self.run_id) if p.count > 0]

    def failed_tuples(self) -> list[FailedTuple]:
        """Every tuple queued for recovery (component, task, values, error, attempt, ...)."""
        # a test kit reads them all (a small test's failures); the engine's driver never does
        return [t for p in self.failed_positions
                for t in failed_queue.sample(self.client, self.run_id, p.component, p.task)]

    def dead_tuples(self) -> list[FailedTuple]:
        """Every tuple that ran out of attempts (the dead letters)."""
        return dead_letters.dead_letters(self.client, self.run_id)


def _url(client: Redis) -> str:
    """The name tasks look their client up by (runtime.injected_client); one per client."""
    return f"testing://in-process/{id(client):x}"


def _drive(run: LocalRun, action: Any) -> LocalRun:
    """Run `action(session)` (a jobs.submit or jobs.recover) with the client injected; an
    interruption leaves the run as a failed job or a dead driver would."""
    session = LocalSession(run.arrival)
    with task.injected_client(run.redis_url, run.client):
        try:
            run.summary = action(session)
            run.interrupted = run.error = None
            return run
        except DriverCrash as crash:
            run.interrupted, run.error = "crash", str(crash)
        except RunError as err:
            if runs.status_of(runs.get(run.client, run.run_id)) != runs.ERROR:
                raise   # not a failed round: a refused submit, a cleared run...
            run.interrupted, run.error = "error", str(err)
    run.summary = jobs_summary.summarize(run.client, runs.get(run.client, run.run_id))
    return run


def run_local(workflow: Workflow, redis_client: Redis, *, inputs: dict[str, list[Any]] | None = None,
              list_sinks: bool = True, recover: bool = False, max_rounds: int | None = None,
              strategy: str = "localized", run_id: str | None = None, tracking: bool = True,
              config: dict[str, str] | None = None, arrival: random.Random | None = None) -> LocalRun:
    """Submit `workflow` in this process against `redis_client` (fakeredis or a real Redis)
    and return the LocalRun. `inputs` feeds spouts from lists (see `feed`); `list_sinks`
    replaces built-in sinks by ListSinks, whose records `LocalRun.sinks` returns; `config`
    sets workflow properties (as `submit -p`); `recover=True` then runs recovery rounds (and
    resumes an interrupted round) until nothing is queued or `max_rounds` ran; `arrival`
    permutes every bolt task's input with this generator (the orders a recovery can cause)."""
    wf = workflow.with_config(config or {})
    for cid, items in (inputs or {}).items():
        wf = feed(wf, cid, items)
    if list_sinks:
        wf = with_list_sinks(wf)
    if not tracking and any(c.impl.kind == "class" and c.impl.ref == LIST_SINK for c in wf.components):
        # a ListSink's records are its keyed state, which only tracking stores
        raise ValueError("run_local: ListSinks need tracking on; pass list_sinks=False (and no "
                         "ListSink in the workflow) to run with tracking off")
    run_id = runs.new_run_id(wf.name) if run_id is None else keys.check_run_id(run_id)
    # (the summary until the submit returns one)
    before = RunSummary(run_id=run_id, workflow=wf.name, status=runs.RUNNING, round=0, counts_known=False)
    run = LocalRun(wf, redis_client, run_id, _url(redis_client), before, arrival=arrival)
    xml = to_xml(wf)
    _drive(run, lambda spark: submit.submit(spark, redis_client, run.redis_url, wf, xml, None,
                                          tracking_on=tracking, master="in-process", run_id=run_id))
    if recover and tracking and (run.interrupted or run.summary.status != runs.COMPLETED):
        recover_local(run, max_rounds=max_rounds, strategy=strategy)
    return run


def recover_local(run: LocalRun, max_rounds: int | None = None, strategy: str = "localized",
                  force: bool = False) -> LocalRun:
    """`recovery recover` of `run` in this process: resumes an interrupted round, then runs
    recovery rounds until nothing is queued (or `max_rounds`). Updates and returns `run`;
    `run.summary` is jobs.recover's (rounds, recovered, ...)."""
    return _drive(run, lambda spark: jobs_recover.recover(spark, run.client, run.redis_url, run.run_id,
                                                  max_rounds=max_rounds, strategy=strategy, force=force))


def execute_round(wf: Workflow, spec: RunSpec, client: Redis, arrival: random.Random | None = None
                  ) -> dict[tuple[str, int], list[bytes]]:
    """One round's tasks through the engine's stages (engine.build), nothing settled: for tests
    of the runtime itself. Returns the chunks each (component, task index) received; a task's
    exception propagates as it is."""
    session = LocalSession(arrival, wrap_failures=False)
    received: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
    plan = ChainPlan.of_workflow(wf)
    heads = [chain.head for chain in plan.chains]
    with task.injected_client(spec.redis_url, client):
        # LocalSession stands in for the SparkSession: it has the part of its API build uses
        leaves, outputs, _ = rounds.build(cast("SparkSession", session), wf, spec)
        for stage in outputs:   # (each stage's tasks run once: its output is read here and downstream)
            stage.frame.persist()
        for stage in outputs + leaves:
            for consumer, key, blob in stage.frame.collect():
                if not blob:   # (a task marker: no tuples)
                    continue
                head = heads[consumer]
                index = frames.routing_keys(wf.component(head).parallelism).index(key)
                received[(head, index)].append(blob)
    return received


# --- comparing with a failure-free run ---------------------------------------------------------
Output = dict[str, collections.Counter]


def sink_multisets(run: LocalRun | dict[str, list[list]]) -> Output:
    """Each sink's records as a multiset (canonical JSON), the exactness of docs/guarantees.md: part
    files, tasks and rounds order records differently; which records, and how many times, not."""
    sinks = run.sinks if isinstance(run, LocalRun) else run
    return {cid: collections.Counter(json.dumps(v, sort_keys=True) for v in rows) for cid, rows in sinks.items()}


def failure_free_output(workflow: Workflow, redis_client: Redis | None = None, **kwargs: Any) -> Output:
    """The sinks of a failure-free run of `workflow` (fault injection and ABORT/CRASH taken
    out; the same `inputs`, also stripped), on `redis_client` or a fresh fakeredis."""
    if redis_client is None:
        import fakeredis  # a test dependency: imported only when no client is given
        redis_client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    kwargs.pop("recover", None)
    inputs = kwargs.pop("inputs", None) or {}
    clean = {cid: [i for i in items if i is not ABORT and i is not CRASH] for cid, items in inputs.items()}
    run = run_local(without_failures(workflow), redis_client, inputs=clean, **kwargs)
    if run.interrupted or run.summary.status != runs.COMPLETED:
        raise AssertionError(f"the failure-free run {run.run_id} did not complete: "
                             f"{run.error or run.summary.status}")
    return sink_multisets(run)


Records = LocalRun | Output | dict[str, list[list]]


def _as_output(records: Records) -> Output:
    if isinstance(records, dict) and all(isinstance(v, collections.Counter) for v in records.values()):
        return cast(Output, records)
    return sink_multisets(cast("LocalRun | dict[str, list[list]]", records))


def assert_same_output(run: Records, expected: Records) -> None:
    """Every sink holds the same records, each as many times, as in `expected`. Each side is a
    LocalRun, a failure_free_output, or {sink: [values, ...]} (read_list_sink of a Spark
    run's ListSink, say). The message names the sink and a few records missing or extra."""
    got, want = _as_output(run), _as_output(expected)
    problems = []
    for cid in sorted(set(got) | set(want)):
        g, w = got.get(cid, collections.Counter()), want.get(cid, collections.Counter())
        if g != w:
            missing, extra = list((w - g).elements()), list((g - w).elements())
            problems.append(f"sink {cid!r}: {len(missing)} missing {missing[:3]}, "
                            f"{len(extra)} extra {extra[:3]}")
    if problems:
        raise AssertionError("outputs differ: " + "; ".join(problems))
