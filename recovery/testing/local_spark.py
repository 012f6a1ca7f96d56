"""An in-process stand-in for the few SparkSession/DataFrame calls the engine makes, so that
the engine's own code (engine.build, run_round, resolve_ledger, tell_spouts) runs without a
JVM: `range`, `mapInArrow`, `filter` on the consumer column,
`repartition(n, "k")` (Spark's hash partitioning: a row goes to `pmod(hash(k), n)`),
`unionByName`, `persist`/`unpersist`, `collect` and the `noop` write that runs a round.

It keeps the semantics the engine relies on: a partition is computed by one call of its
function; a persisted frame is computed once; `repartition` is a barrier (every parent partition is computed before
any consumer task runs, as a shuffle map stage is); an exception in a task fails the job.
Tasks run one after another, in partition order: no retries, no parallelism.
"""
from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

from recovery.engine import frames
from recovery.errors import JobFailed
from recovery.runtime import wire

Rows = list[tuple]
Partition = Callable[[], Rows]


class LocalJobFailed(JobFailed):
    """A task raised: the job fails, as a Spark job whose task failed for good does."""


def _columns(schema: Any) -> list[str]:
    """The column names of a DDL schema string ("c int, k long, chunk binary") or a StructType."""
    if not isinstance(schema, str):
        return list(schema.names)
    return [part.split()[0] for part in schema.split(",")]


class LocalFrame:
    def __init__(self, ctx: LocalSession, parts: list[Partition], columns: list[str], name: str = "frame"):
        self.ctx = ctx
        self._parts = parts
        self.columns = columns
        self._cache: list[Rows] | None = None
        self._persist = False
        self.name = name

    # -- evaluation ------------------------------------------------------------------------
    def _partition(self, i: int) -> Rows:
        if self._persist:
            if self._cache is None:
                self._cache = [self._run_task(j, p) for j, p in enumerate(self._parts)]
            return self._cache[i]
        return self._run_task(i, self._parts[i])

    def _run_task(self, index: int, compute: Partition) -> Rows:
        if not self.ctx.wrap_failures:
            return compute()
        try:
            return compute()
        except LocalJobFailed:   # an upstream task's failure, named once
            raise
        except Exception as err:
            raise LocalJobFailed(f"task {index} of {self.name} failed: {type(err).__name__}: {err}") from err

    @property
    def num_partitions(self) -> int:
        return len(self._parts)

    @property
    def is_cached(self) -> bool:
        return self._persist

    # -- transformations -------------------------------------------------------------------
    def _derived(self, part: Callable[[int], Rows], columns: list[str] | None = None) -> LocalFrame:
        return LocalFrame(self.ctx, [functools.partial(part, i) for i in range(len(self._parts))],
                          columns or self.columns, self.name)

    def mapInArrow(self, f: Callable[[Iterator[Any]], Iterator[Any]], schema: Any) -> LocalFrame:
        import pyarrow as pa
        columns = _columns(schema)

        def part(i: int) -> Rows:
            rows = self._partition(i)
            batch = pa.RecordBatch.from_pylist([dict(zip(self.columns, r)) for r in rows]) if rows else None
            out: Rows = []
            for got in f(iter([batch] if batch is not None else [])):
                out.extend(tuple(row[c] for c in columns) for row in got.to_pylist())
            return out
        return self._derived(part, columns)

    def filter(self, condition: str) -> LocalFrame:
        match = re.fullmatch(r"\s*(\w+)\s*=\s*(-?\d+)\s*", condition)
        if match is None:
            raise ValueError(f"the test kit's filter takes `column = number`, not {condition!r}")
        at, value = self.columns.index(match[1]), int(match[2])

        def part(i: int) -> Rows:
            return [r for r in self._partition(i) if r[at] == value]
        return self._derived(part)

    def repartition(self, n: int, column: str) -> LocalFrame:
        at = self.columns.index(column)
        buckets: list[Rows] | None = None

        def bucket(i: int) -> Rows:
            nonlocal buckets
            if buckets is None:   # the shuffle: every parent partition first
                buckets = [[] for _ in range(n)]
                for j in range(len(self._parts)):
                    for row in self._partition(j):
                        buckets[frames.spark_hash_long(row[at]) % n].append(row)
                if self.ctx.arrival is not None:
                    buckets = [self.ctx.permute(b, self.columns) for b in buckets]
            return buckets[i]
        return LocalFrame(self.ctx, [functools.partial(bucket, i) for i in range(n)], self.columns, self.name)

    def unionByName(self, other: LocalFrame) -> LocalFrame:
        parts: list[Partition] = ([functools.partial(self._partition, i) for i in range(len(self._parts))]
                                  + [functools.partial(other._partition, i) for i in range(len(other._parts))])
        return LocalFrame(self.ctx, parts, self.columns, "union")

    def persist(self, _level: Any = None) -> LocalFrame:
        self._persist = True
        return self

    def unpersist(self, *_: Any) -> LocalFrame:
        self._persist, self._cache = False, None
        return self

    # -- actions ---------------------------------------------------------------------------
    def collect(self) -> Rows:
        return [r for i in range(len(self._parts)) for r in self._partition(i)]

    @property
    def write(self) -> _NoopWriter:
        return _NoopWriter(self)


class _NoopWriter:
    """`frame.write.format("noop").mode(...).save()`: every partition computed, nothing kept."""

    def __init__(self, frame: LocalFrame):
        self.frame = frame

    def format(self, name: str) -> _NoopWriter:
        if name != "noop":
            raise ValueError(f"the test kit writes only the noop format, not {name!r}")
        return self

    def mode(self, _: str) -> _NoopWriter:
        return self

    def save(self) -> None:
        self.frame.collect()


class LocalSession:
    """What the engine uses of a SparkSession, in this process (module doc)."""
    master = "local"   # (its tasks run in this process: no executor to lose)

    def __init__(self, arrival: random.Random | None = None, wrap_failures: bool = True):
        self.arrival = arrival
        # a failed task fails the job as LocalJobFailed (what Spark raises has the same
        # one-line reason); False: the task's own exception, for tests of the runtime
        self.wrap_failures = wrap_failures

    def range(self, start: int, end: int | None = None, step: int = 1, numPartitions: int | None = None
              ) -> LocalFrame:
        if end is None:
            start, end = 0, start
        items = list(range(start, end, step))
        n = max(1, numPartitions or 1)
        # Spark's slicing: partition i holds items [i*len/n, (i+1)*len/n)
        bounds = [len(items) * i // n for i in range(n + 1)]

        def part(i: int) -> Rows:
            return [(x,) for x in items[bounds[i]:bounds[i + 1]]]
        return LocalFrame(self, [functools.partial(part, i) for i in range(n)], ["id"], "range")

    def permute(self, rows: Rows, columns: list[str]) -> Rows:
        """Another arrival order of one consumer task's input, tuple by tuple: each chunk
        (runtime.wire: a row chunk or an Arrow chunk) is split into one-tuple chunks."""
        assert self.arrival is not None
        at = columns.index("chunk")
        single = [row[:at] + (one,) + row[at + 1:] for row in rows
                  for one in (wire.split(row[at]) if row[at] else [row[at]])]   # (a task marker: kept)
        self.arrival.shuffle(single)
        return single
