"""How a round's tuples travel between stages as DataFrame rows, the same on a classic session
and on Spark Connect (which has no RDDs).

A stage's output is a DataFrame of `STAGE_SCHEMA` rows, one per chunk (runtime.wire): `c`, the
consumer stage's number in the round; `k`, a routing key; `chunk`, its bytes. The consumer reads
the rows with its number (`filter`), and `repartition(p, "k")` sends each to its task: Spark's
hash partitioning puts a row in partition `pmod(murmur3(k), p)` (SQL's `pmod(hash(k), p)`), so
the emitting task writes, for target task i, a key k_i whose hash lands there
(`routing_keys(p)[i]`). A repartition with an explicit number is never coalesced by adaptive
query execution, so task i of the consumer is partition i.

The task index of a stage is its partition id (`TaskContext.partitionId()`); the in-process
test kit, which has no TaskContext, sets it by `partition_of`.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

STAGE_SCHEMA = "c int, k long, chunk binary"
RESULT_SCHEMA = "result binary"   # a driver's small job: one value per task

# an output batch is sealed at this many chunks or bytes, whichever comes first
BATCH_CHUNKS = 64
BATCH_BYTES = 8 << 20
# rows (chunks) per batch handed to a stage's task: a task holds one batch at a time
INPUT_BATCH_ROWS = "64"
ARROW_BATCH_SETTING = "spark.sql.execution.arrow.maxRecordsPerBatch"

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
_partition_override: list[int] = []


@contextlib.contextmanager
def partition_of(index: int) -> Iterator[None]:
    """While inside, partition_id() is `index` (the test kit's tasks, which have no TaskContext)."""
    _partition_override.append(index)
    try:
        yield
    finally:
        _partition_override.pop()


def partition_id() -> int:
    if _partition_override:
        return _partition_override[-1]
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("a stage's task runs inside a Spark task (no TaskContext here)")
    return ctx.partitionId()


# --- rows in, rows out ------------------------------------------------------------------------
def input_records(batches: Iterable[Any]) -> Iterator[tuple[None, bytes]]:
    """A stage's input rows as the runtime's (key, chunk) records, a batch at a time."""
    for batch in batches:
        column = batch.column(batch.schema.get_field_index("chunk"))
        for chunk in column.to_pylist():
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
                   consumers: dict[str, tuple[int, int]]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of a stage whose task `index` is `task(index, records)`."""
    return functools.partial(_run_stage, task, consumers)


def _run_stage(task: Callable[[int, Iterator[Any]], Iterable[tuple[Any, Any]]],
               consumers: dict[str, tuple[int, int]], batches: Iterator[Any]) -> Iterator[Any]:
    yield from output_batches(task(partition_id(), input_records(batches)), consumers)


def result_function(each: Callable[[int], bytes]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of a driver's small job: task i's one result is `each(i)`."""
    return functools.partial(_run_result, each)


def _run_result(each: Callable[[int], bytes], batches: Iterator[Any]) -> Iterator[Any]:
    for _ in batches:   # (its input is one row of spark.range: read, not used)
        pass
    import pyarrow as pa
    yield pa.RecordBatch.from_arrays([pa.array([each(partition_id())], pa.binary())], names=["result"])
