"""The Spark engine: turns a Workflow into a Spark job and runs one round of it, with the
DataFrame API only, so that a classic SparkSession and a Spark Connect session run it alike.

One chain of components (most chains are one component) is one stage, a mapInArrow; its
parallelism is its number of Spark partitions (= Storm tasks). A stage's output read by
several stages is persisted, so it is computed once however many subscribe to it; one read by
a single stage is not (Spark computes it once in the job anyway). Routing happens in the
emitting task (runtime.Router), so a consumer's input is the upstream rows (filtered by
consumer where they feed several) hash-partitioned to their target tasks (engine/frames.py).
The driver only sees counters: sources are read by tasks, tuples move through Spark's shuffle.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import pickle
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import msgpack
from redis import Redis

from recovery.api.components import Spout, Tuple
from recovery.connectors import sources
from recovery.controlplane import connection
from recovery.engine import frames, session, shipping
from recovery.engine.executor_watch import ExecutorWatch, executor_ids
from recovery.errors import ExecutorsLost
from recovery.model.graph import ChainPlan, ComponentContext
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow
from recovery.runtime import factory, task
from recovery.runtime import stage as runtime_stage
from recovery.tracking import keys, ledger, runs, spill
from recovery.tracking import queue as failed_queue

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

log = logging.getLogger(__name__)


# --- task entry points (pickled into Spark tasks: module-level functions) --------------
def _start(spec: RunSpec, component_id: str, index: int, it: Any) -> tuple[task.TaskRunner, Iterator[Any]]:
    """One component's task, by its execution mode (runtime.stage)."""
    return runtime_stage.start(spec, component_id, index, it)


def _stage_task(spec: RunSpec, members: tuple[str, ...], index: int, it: Any) -> Iterator[Any]:
    """Task `index` of a stage: one component's task, or a chain's (runtime.stage)."""
    return runtime_stage.stage_task(spec, members, index, it)


def _resolve_bucket(spec: RunSpec, bucket: int) -> ledger.RootCounts:
    client = task.redis_of(spec)
    pending = ledger.fold_bucket(client, spec.run_id, bucket, spec.generation)
    return ledger.count_bucket(client, spec.run_id, bucket, pending)


def _supersede_bucket(spec: RunSpec, bucket: int) -> int:
    return ledger.supersede_bucket(task.redis_of(spec), spec.run_id, bucket, spec.round, spec.generation)


class Stage(NamedTuple):
    """One stage of a round (a chain of components): its name and its output DataFrame."""
    name: str
    frame: Any


class RoundGraph(NamedTuple):
    """The stages of one round (one per chain)."""
    leaves: list[Stage]       # the stages nothing reads: the round's job runs them
    outputs: list[Stage]      # every other stage, in topological order
    persisted: list[Stage]    # of `outputs`, those read by more than one stage


def _consumers(wf: Workflow, plan: ChainPlan) -> dict[str, tuple[int, int]]:
    """Every component -> (its stage's number, its parallelism): where a chunk for it goes."""
    number = {chain.head: n for n, chain in enumerate(plan.chains)}
    return {c.id: (number[plan.chain_of(c.id).head], c.parallelism) for c in wf.components}


def build(spark: SparkSession, wf: Workflow, spec: RunSpec) -> RoundGraph:
    """The DataFrames of one round. One stage per chain (model.graph.ChainPlan; most chains are
    one component): its head reads the stage's input, and only what its members send out of
    the chain leaves it. Each stage is a mapInArrow over its input: the upstream stages' rows
    for it (their tasks' marker rows among them), hash-partitioned to their target tasks (a
    spout's: one range row per task; engine/frames.py)."""
    plan = ChainPlan.of_workflow(wf)
    consumers = _consumers(wf, plan)
    outputs: dict[str, Stage] = {}     # chain head -> the stage
    leaves, persisted = [], []
    for chain in plan.chains:
        cid = chain.head
        comp = wf.component(cid)
        p = comp.parallelism
        # (every task of each stage this one feeds gets a marker row from each of its tasks)
        feeds = tuple(consumers[reader] for reader in plan.consumers[cid])
        run_task = frames.stage_function(functools.partial(_stage_task, spec, chain.members), consumers, p, feeds)
        if sources.reads_with_spark(comp):
            # the reader's partitions are read by tasks; partition i's chunks go to spout task
            # i mod p (connectors.spark_source keys them so), through one shuffle; a marker row
            # per task, as a dataset may have fewer partitions than the spout has tasks
            reader = sources.read_partitions(spark, wf, comp, frames.routing_keys(p), frames.partition_id)
            frame = reader.unionByName(frames.markers(spark, consumers[cid][0], p)).repartition(p, "k")
        elif comp.is_spout:
            frame = spark.range(0, p, 1, p)
        else:
            # (an upstream stage that feeds only this one sends it every row it has)
            parts = [outputs[src].frame if len(plan.consumers[src]) == 1
                     else outputs[src].frame.filter(f"c = {consumers[cid][0]}")
                     for src in dict.fromkeys(plan.chain_of(i.source).head for i in comp.inputs)]
            frame = functools.reduce(lambda a, b: a.unionByName(b), parts).repartition(p, "k")
        out = Stage(chain.name, frame.mapInArrow(run_task, frames.schema_of(frames.STAGE_SCHEMA)))
        if not plan.consumers[cid]:
            leaves.append(out)
            continue
        outputs[cid] = out
        if len(plan.consumers[cid]) > 1:   # (each reader is a chain's head: one stage each)
            out.frame.persist(_memory_and_disk())
            persisted.append(out)
    return RoundGraph(leaves, list(outputs.values()), persisted)


def _memory_and_disk() -> Any:
    from pyspark import StorageLevel  # lazy: the CLI imports the engine; pyspark costs seconds
    return StorageLevel.MEMORY_AND_DISK


def run_round(spark: SparkSession, wf: Workflow, spec: RunSpec,
              on_progress: Callable[[int, int], None] | None = None) -> None:
    """Run one round to the end, as one Spark action (its counters are in the tasks' commits)."""
    spec = shipping.with_code(spark, wf, spec)
    leaves, _, persisted = build(spark, wf, spec)
    total_tasks = sum(c.parallelism for c in wf.components)
    stop = threading.Event()
    watcher = None
    if on_progress is not None and spec.tracking:
        client = connection.connect(spec.redis_url, start=False)

        def watch() -> None:
            while not stop.wait(0.5):
                try:
                    on_progress(client.hlen(keys.task_done(spec.run_id, spec.round)), total_tasks)
                except Exception as err:   # progress only: the round itself reports failures
                    log.debug("progress of run %s: %s", spec.run_id, err)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    tag = f"recovery-{spec.run_id}-round-{spec.round}"   # what cancels the round's jobs
    executors = _executor_watch(spark, wf, spec, tag)
    job = functools.reduce(lambda a, b: a.unionByName(b), [s.frame for s in leaves])
    try:
        with session.job_tag(spark, tag, f"recovery {spec.run_id} round {spec.round}"), \
                _round_settings(spark, wf, spec), executors or contextlib.nullcontext():
            job.write.format("noop").mode("overwrite").save()
    except Exception:
        if executors is not None and executors.failure is not None:   # cancelled by the watch: say why
            raise ExecutorsLost(executors.failure) from None
        raise
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
        for stage in persisted:
            stage.frame.unpersist()
    if on_progress is not None:
        on_progress(total_tasks, total_tasks)


def _round_settings(spark: SparkSession, wf: Workflow, spec: RunSpec) -> contextlib.AbstractContextManager[None]:
    """The session settings while a round runs: its tasks are handed their input a few chunks
    at a time (a task holds one batch); its plan runs as planned, in one job (no adaptive
    planning), without generated code unless it reads a spark source; and its spark sources'
    partitions are planned as the submitted workflow says
    (connectors.spark_source.planning_settings_of: the same in every round, whichever of its
    spouts a round runs)."""
    settings = {frames.ARROW_BATCH_SETTING: frames.INPUT_BATCH_ROWS, frames.ADAPTIVE_SETTING: "false"}
    if not any(sources.reads_with_spark(c) for c in wf.components):
        settings[frames.CODEGEN_SETTING] = "false"
    original = Workflow.from_task_json(spec.original_json) if spec.original_json else wf
    settings.update(sources.planning_settings_of(original))
    return session.settings(spark, settings)


def _executor_watch(spark: Any, wf: Workflow, spec: RunSpec, tag: str) -> ExecutorWatch | None:
    """The watch of a round's executors on a cluster (engine/executor_watch.py); None in local
    mode, whose executors are the driver's own threads, and under Spark Connect, whose client
    cannot see the server's executors."""
    if not session.is_classic(spark) or session.is_local_master(session.master_of(spark)):
        return None
    sc = spark.sparkContext   # (a classic session's, from here on)
    client = connection.connect(spec.redis_url, start=False) if spec.redis_url else None

    def on_state(line: str | None) -> None:   # what `status` shows while the round waits
        if client is not None:
            runs.update(client, spec.run_id, spec.generation, executors_waiting=line or "")
    return ExecutorWatch(f"run {spec.run_id} round {spec.round}", wf.settings().executors_wait_secs,
                         lambda: executor_ids(sc), functools.partial(session.interrupt, spark, tag), on_state)


def collect_stats(client: Redis, run_id: str, round_no: int) -> dict[str, dict]:
    per: dict[str, dict] = {}
    for field, raw in client.hgetall(keys.task_done(run_id, round_no)).items():
        comp = cast(bytes, field).decode().rsplit(":", 1)[0]
        s = msgpack.unpackb(cast(bytes, raw))
        agg = per.setdefault(comp, {})
        for k, v in s.items():
            if k == "seconds":
                agg[k] = max(agg.get(k, 0), v)
            else:
                agg[k] = agg.get(k, 0) + v
    return per


def resolve_ledger(spark: SparkSession, client: Redis, spec: RunSpec) -> ledger.RootCounts:
    """The acker's verdict of the round: the roots still pending, and of them the dead and the
    failed (queued) ones. The round's last task to commit counted them already, under this
    driver's generation (tracker.count_round_when_done): they are read, and the round costs no
    second Spark job. Otherwise (that task died before counting, or this driver resumes a round
    another one ran) Spark tasks count them, one per ledger bucket, each folding its bucket;
    the driver only adds the buckets' counts up."""
    counted = ledger.counted_round(client, spec.run_id, spec.round, spec.generation)
    if counted is not None:
        return counted
    return sum(_per_bucket(spark, functools.partial(_resolve_bucket, spec)), ledger.RootCounts())


def supersede_failed_roots(spark: SparkSession, spec: RunSpec) -> int:
    """Root replay's selection, in Spark tasks (one per ledger bucket): the queued tuples'
    roots go into the round's replay set and their ledger entries are superseded (see
    ledger.supersede_bucket); returns how many roots were added."""
    return sum(_per_bucket(spark, functools.partial(_supersede_bucket, spec)))


def prepare_root_replay(spark: SparkSession, client: Redis, spec: RunSpec) -> None:
    """Before a root-replay round runs: its tasks select the failed roots (the queued tuples'
    roots, superseded in the ledger, into the round's replay set), then the driver drops the
    queues by key. Once per round (a record field says it was done): a driver killed in the
    middle does it again on resume, which the per-bucket tasks make idempotent; after the drop
    no queue entry of the round's own failures can be taken for an old one."""
    record = runs.record_key(spec.run_id)
    if client.hget(record, "root_replay_prepared") == str(spec.round).encode():
        return
    added = supersede_failed_roots(spark, spec)

    # the queues first (each in its own slot), then, in the run's slot, the failed set and the
    # mark that this is done: a driver killed in between does both again (the queues' roots
    # are superseded already, so the per-bucket tasks skip them)
    dropped = failed_queue.clear(client, spec.run_id, spec.generation,
                                 also=lambda pipe: pipe.hset(record, "root_replay_prepared", spec.round))
    log.info("run %s round %d: root replay of %d failed roots (selected by %d ledger tasks); "
             "%d failed positions' queues dropped", spec.run_id, spec.round, added,
             ledger.LEDGER_BUCKETS, dropped)


def _per_bucket(spark: SparkSession, each: Callable[[int], Any]) -> list[Any]:
    """`each(bucket)` in one Spark task per ledger bucket; their results, in bucket order."""
    return small_job(spark, ledger.LEDGER_BUCKETS, each)


def small_job(spark: SparkSession, n: int, each: Callable[[int], Any]) -> list[Any]:
    """`each(i)` for i in range(n), in one Spark task each (a driver's small job: what comes
    back is a small value per task, pickled as an RDD's collect pickles it); the results in
    task order."""
    function = frames.result_function(functools.partial(_pickled, each))
    rows = spark.range(0, n, 1, n).mapInArrow(function, frames.schema_of(frames.RESULT_SCHEMA)).collect()
    return [pickle.loads(row[0]) for row in rows]


def _pickled(each: Callable[[int], Any], i: int) -> bytes:
    return pickle.dumps(each(i))


def clear_round(client: Redis, run_id: str, round_no: int, spill_dir: str | None = None,
                generation: str | None = None, root_replay: bool = False) -> None:
    """A settled round's in-flight tuples and done markers are no longer needed: its spill
    references, done markers, the counts its last task stored (and a root replay's replay set and attempts)
    go in one transaction fenced by the run's `generation`, and only once that proved this
    driver still owns the run does its spill folder go (orphans of dead attempts included). A
    driver taken over (or a run cleared) meanwhile removes nothing: RunTakenOver (RunCleared).
    Idempotent: a resumed driver repeats it."""
    def drop(pipe: Any) -> None:
        pipe.delete(keys.task_spill(run_id, round_no), keys.task_done(run_id, round_no),
                    keys.task_commits(run_id, round_no), keys.round_counts(run_id, round_no))
        if root_replay:   # its spouts read it; nothing does once the round is settled
            pipe.delete(keys.root_replay_set(run_id, round_no), keys.root_replay_attempts(run_id, round_no))
    if not ledger.fenced_transaction(client, run_id, generation, drop):
        raise runs.fenced_out(client, run_id, generation)
    spill.SpillStore.at(spill_dir).remove_round(run_id, round_no)


class _FateCollector:
    """The collector of a spout that is only told fates: it emits nothing further."""

    def emit(self, component: Any, values: Sequence[Any], stream: str, anchors: tuple[Tuple, ...],
             direct_task: int | None, message_id: Any) -> list[int]:
        return []

    def ack(self, tup: Tuple) -> None:
        pass

    def fail(self, tup: Tuple, error: str | None = None) -> None:
        pass

    def log(self, message: str, level: str = "info") -> None:
        pass

    def spout_record(self, message_id: Any, decode: Callable[[], list | None], raw: Any,
                     stream: str = "default", fmt: str = "", attempt: int = 1,
                     replayed: bool = False, root: int | None = None) -> None:
        pass


def _tell_spout(spec: RunSpec, component_id: str, field: str) -> int:
    """Tell one spout task the fates now known: ack for complete roots, fail for dead ones;
    roots still pending (queued for recovery) wait for a later round. The task reads what it
    needs itself: its waiting roots, which of them the ledger holds, which are dead."""
    client = task.redis_of(spec)
    wf, tm, _ = task.workflow_of(spec)
    key = keys.spout_messages(spec.run_id, component_id)
    with client.pipeline(transaction=False) as pipe:
        pipe.hget(key, field)
        pipe.hget(runs.record_key(spec.run_id), "generation")
        raw, generation = pipe.execute()
    if raw is None:
        return 0
    if spec.generation is not None and generation != spec.generation.encode():
        return 0   # the run was taken over (or cleared): its new driver tells the spouts
    messages = msgpack.unpackb(cast(bytes, raw))
    roots = [int(root) for root, _ in messages]
    pending = ledger.pending_among(client, spec.run_id, roots)
    dead = failed_queue.dead_among(client, spec.run_id, roots)
    waiting, told = [], 0
    index = int(field.split(":")[1])
    spout = cast(Spout, factory.build(wf.component(component_id), wf))   # a <spout>: a Spout
    context = ComponentContext(wf, component_id, tm.task_id(component_id, index), tm)
    spout.bind(_FateCollector(), wf.conf(component_id), context)
    spout.open(spout.conf, spout.context)
    try:
        for root, message_id in messages:
            mid = tuple(message_id) if isinstance(message_id, list) else message_id
            if root in dead:
                spout.fail(mid)
            elif root not in pending:
                spout.ack(mid)
            else:
                waiting.append([root, message_id])
                continue
            told += 1
    finally:
        spout.close()
    blob = msgpack.packb(waiting) if waiting else None
    written = ledger.fenced_transaction(
        client, spec.run_id, spec.generation,
        lambda pipe: pipe.hset(key, field, blob) if blob is not None else pipe.hdel(key, field))
    return told if written else 0


def tell_spouts(spark: SparkSession, client: Redis, spec: RunSpec) -> int:
    """Deliver acks and fails to the spouts (Python and shell) whose roots' fates are known,
    in Spark tasks, one per spout task with messages waiting (nothing per root is shipped)."""
    wf, _, original = task.workflow_of(spec)
    jobs_ = []
    for comp in original.spouts:
        if comp.impl.kind in ("class", "shell"):
            for field in client.hkeys(keys.spout_messages(spec.run_id, comp.id)):
                jobs_.append((comp.id, cast(bytes, field).decode()))
    if not jobs_:
        return 0
    # tasks run against the submitted workflow, where the spouts are
    base = RunSpec(spec.run_id, spec.round, spec.original_json or spec.workflow_json, spec.redis_url, True,
                   generation=spec.generation)
    base = shipping.with_code(spark, original, base)
    return sum(small_job(spark, len(jobs_), lambda i: _tell_spout(base, *jobs_[i])))
