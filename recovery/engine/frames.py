"""How a round's tuples travel between stages as DataFrame rows, the same on a classic session
and on Spark Connect (which has no RDDs).

A stage's output is a DataFrame of `STAGE_SCHEMA` rows, one per chunk (runtime.wire): `c`, the
consumer stage's number in the round; `k`, a routing key; `chunk`, its bytes. The consumer reads
the rows with its number (`filter`), and `repartition(p, "k")` sends each to its task: Spark's
hash partitioning puts a row in partition `pmod(murmur3(k), p)` (SQL's `pmod(hash(k), p)`), so
the emitting task writes, for target task i, a key k_i whose hash lands there
(`routing_keys(p)[i]`). A repartition with an explicit number is never coalesced by adaptive
query execution, so task i of the consumer is partition i.

A stage's task learns its index from its input, never from `TaskContext.partitionId()`: Spark
pipelines a stage's mapInArrow into the union that feeds the next stage, and there the
partition id is the union's (the second input's tasks would be p..2p-1). A spout's input is
`spark.range(0, p, 1, p)`, whose partition i holds the one row i; a bolt's is its upstream rows,
among them one marker row (key k_i, no chunk) from each upstream task for each of its tasks,
so that a task no tuple goes to still runs, and every row of partition i has
`pmod(hash(k), p) = i`. A spark source's spout tasks get theirs from `markers`, rows made in
the JVM (a dataset may have fewer partitions than the spout has tasks).
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

STAGE_SCHEMA = "c int, k long, chunk binary"
RESULT_SCHEMA = "result binary"   # a driver's small job: one value per task


@functools.cache
def schema_of(ddl: str) -> Any:
    """`ddl` ("name type, ...", of the types used here) as a StructType: a DDL string given to
    mapInArrow is parsed by the JVM at every call, a few of them per stage of every round."""
    from pyspark.sql import types  # lazy: the command line imports the engine, not pyspark
    kinds = {"int": types.IntegerType(), "long": types.LongType(), "binary": types.BinaryType()}
    return types.StructType([types.StructField(name, kinds[kind])
                             for name, kind in (column.split() for column in ddl.split(","))])

# an output batch is sealed at this many chunks or bytes, whichever comes first
BATCH_CHUNKS = 64
BATCH_BYTES = 8 << 20
# rows (chunks) per batch handed to a stage's task: a task holds one batch at a time
INPUT_BATCH_ROWS = "64"
ARROW_BATCH_SETTING = "spark.sql.execution.arrow.maxRecordsPerBatch"
# The adaptive planner runs a plan one shuffle at a time, a Spark job each, and may merge or
# split the partitions a round routes to: a round's plan is fixed, so it runs as one job.
ADAPTIVE_SETTING = "spark.sql.adaptive.enabled"
# Compiling each stage's generated code costs more than a round's few rows gain from it (a
# spark source's own scan keeps it)
CODEGEN_SETTING = "spark.sql.codegen.wholeStage"

_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    return (_rotl(k1, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of a bigint (Murmur3 x86 32-bit, seed 42), as a signed 32-bit int."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed, _mix_k1(v & _MASK))
    h1 = _mix_h1(h1, _mix_k1(v >> 32))
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@functools.cache
def routing_keys(partitions: int) -> tuple[int, ...]:
    """For each task index i of a stage of `partitions` tasks, the smallest k >= 0 whose
    `pmod(hash(k), partitions)` is i."""
    found: dict[int, int] = {}
    k = 0
    while len(found) < partitions:
        found.setdefault(spark_hash_long(k) % partitions, k)
        k += 1
    return tuple(found[i] for i in range(partitions))


# --- the task index ---------------------------------------------------------------------------
def partition_id() -> int:
    """The Spark partition this task computes (a reader's partition of a spark source)."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("a stage's task runs inside a Spark task (no TaskContext here)")
    return ctx.partitionId()


def markers(spark: Any, stage: int, partitions: int) -> Any:
    """One STAGE_SCHEMA row per task of a stage, with no chunk, made in the JVM (a DataFrame of
    local rows would be a Python RDD on a classic session)."""
    keys = ", ".join(f"CAST({k} AS BIGINT)" for k in routing_keys(partitions))
    return spark.range(0, partitions, 1, 1).selectExpr(
        f"CAST({stage} AS INT) AS c", f"element_at(array({keys}), CAST(id AS INT) + 1) AS k",
        "CAST(X'' AS BINARY) AS chunk")


def marker_batch(feeds: Iterable[tuple[int, int]]) -> Any:
    """A batch of one marker row for every task of each (stage, parallelism) in `feeds`."""
    cs: list[int] = []
    ks: list[int] = []
    for stage, partitions in feeds:
        cs.extend([stage] * partitions)
        ks.extend(routing_keys(partitions))
    return _stage_batch(cs, ks, [b""] * len(cs))


def _task_index(first: Any, partitions: int) -> int:
    """The task index a stage's first input batch says (module doc)."""
    names = first.schema.names
    if "k" in names:
        return spark_hash_long(first.column(names.index("k"))[0].as_py()) % partitions
    return int(first.column(names.index("id"))[0].as_py())


# --- rows in, rows out ------------------------------------------------------------------------
def input_records(batches: Iterable[Any]) -> Iterator[tuple[None, bytes]]:
    """A stage's input rows as the runtime's (key, chunk) records, a batch at a time (a
    spout's range row and the task markers carry no chunk)."""
    for batch in batches:
        if "chunk" not in batch.schema.names:
            continue
        for chunk in batch.column(batch.schema.get_field_index("chunk")).to_pylist():
            if chunk:
                yield None, chunk


def output_batches(outputs: Iterable[tuple[Any, Any]], consumers: dict[str, tuple[int, int]]
                   ) -> Iterator[Any]:
    """The runtime's ((consumer, task index), chunk) outputs as STAGE_SCHEMA batches.
    `consumers`: consumer component -> (its stage's number, its stage's parallelism)."""
    cs: list[int] = []
    ks: list[int] = []
    chunks: list[bytes] = []
    size = 0
    for (consumer, index), chunk in outputs:
        stage, p = consumers[consumer]
        cs.append(stage)
        ks.append(routing_keys(p)[index])
        chunks.append(chunk)
        size += len(chunk)
        if len(chunks) >= BATCH_CHUNKS or size >= BATCH_BYTES:
            yield _stage_batch(cs, ks, chunks)
            cs, ks, chunks, size = [], [], [], 0
    if chunks:
        yield _stage_batch(cs, ks, chunks)


def _stage_batch(cs: list[int], ks: list[int], chunks: list[bytes]) -> Any:
    import pyarrow as pa  # lazy: the command line imports the engine, not always Arrow
    return pa.RecordBatch.from_arrays([pa.array(cs, pa.int32()), pa.array(ks, pa.int64()),
                                       pa.array(chunks, pa.binary())], names=["c", "k", "chunk"])


def stage_function(task: Callable[[int, Iterator[Any]], Iterable[tuple[Any, Any]]],
                   consumers: dict[str, tuple[int, int]], partitions: int,
                   feeds: tuple[tuple[int, int], ...] = ()) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of a stage of `partitions` tasks whose task `index` is
    `task(index, records)`, and which feeds the (stage, parallelism) of `feeds`."""
    return functools.partial(_run_stage, task, consumers, partitions, feeds)


def _run_stage(task: Callable[[int, Iterator[Any]], Iterable[tuple[Any, Any]]],
               consumers: dict[str, tuple[int, int]], partitions: int, feeds: tuple[tuple[int, int], ...],
               batches: Iterator[Any]) -> Iterator[Any]:
    first = next((b for b in batches if b.num_rows), None)
    if first is None:   # (every task has a row: a marker, or its range row)
        raise RuntimeError("a stage's task got no input row to tell its index")
    records = input_records(itertools.chain([first], batches))
    yield from output_batches(task(_task_index(first, partitions), records), consumers)
    if feeds:
        yield marker_batch(feeds)
    # PySpark reuses a worker only once it has read its input to the end (a spout's task reads
    # one range row); a worker left mid-stream exits, and the next task pays a new one's start
    for _ in batches:
        pass


def result_function(each: Callable[[int], bytes]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of a driver's small job: task i's one result is `each(i)`."""
    return functools.partial(_run_result, each)


def _run_result(each: Callable[[int], bytes], batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa
    for batch in batches:   # (its input is spark.range: task i's one row is i)
        for i in batch.column(0).to_pylist():
            yield pa.RecordBatch.from_arrays([pa.array([each(int(i))], pa.binary())], names=["result"])
