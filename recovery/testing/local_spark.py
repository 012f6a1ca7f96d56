"""An in-process stand-in for the few SparkContext/RDD calls the engine makes, so that the
engine's own code (engine.build, run_round, resolve_ledger, tell_spouts) runs without a JVM.

It keeps the semantics the engine relies on: a partition is computed by one call of its
function; a persisted RDD is computed once; `partitionBy` is a barrier (every parent partition
is computed before any consumer task runs, as a shuffle map stage is); an exception in a task
fails the job. Tasks run one after another, in partition order: no retries, no parallelism.
"""
from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from recovery.errors import JobFailed
from recovery.runtime import wire

Partition = Callable[[], list]


class LocalJobFailed(JobFailed):
    """A task raised: the job fails, as a Spark job whose task failed for good does."""


def _run_task(ctx: LocalContext, rdd_name: str, index: int, compute: Partition) -> list:
    if not ctx.wrap_failures:
        return compute()
    try:
        return compute()
    except LocalJobFailed:   # an upstream task's failure, named once
        raise
    except Exception as err:
        raise LocalJobFailed(f"task {index} of {rdd_name} failed: {type(err).__name__}: {err}") from err


class LocalRDD:
    def __init__(self, ctx: LocalContext, parts: list[Partition], name: str = "rdd"):
        self.ctx = ctx
        self._parts = parts
        self._cache: list[list] | None = None
        self._persist = False
        self.name = name

    # -- evaluation ------------------------------------------------------------------------
    def _partition(self, i: int) -> list:
        if self._persist:
            if self._cache is None:
                self._cache = [_run_task(self.ctx, self.name, j, p) for j, p in enumerate(self._parts)]
            return self._cache[i]
        return _run_task(self.ctx, self.name, i, self._parts[i])

    def getNumPartitions(self) -> int:
        return len(self._parts)

    # -- transformations -------------------------------------------------------------------
    def _derived(self, part: Callable[[int], list]) -> LocalRDD:
        """An RDD with as many partitions, partition i computed by part(i)."""
        return LocalRDD(self.ctx, [functools.partial(part, i) for i in range(len(self._parts))], self.name)

    def mapPartitionsWithIndex(self, f: Callable[[int, Iterator], Iterable]) -> LocalRDD:
        def part(i: int) -> list:
            return list(f(i, iter(self._partition(i))))
        return self._derived(part)

    def map(self, f: Callable[[Any], Any]) -> LocalRDD:
        def part(i: int) -> list:
            return [f(x) for x in self._partition(i)]
        return self._derived(part)

    def filter(self, f: Callable[[Any], bool]) -> LocalRDD:
        def part(i: int) -> list:
            return [x for x in self._partition(i) if f(x)]
        return self._derived(part)

    def partitionBy(self, n: int, partition_func: Callable[[Any], int]) -> LocalRDD:
        buckets: list[list] | None = None

        def bucket(i: int) -> list:
            nonlocal buckets
            if buckets is None:   # the shuffle: every parent partition first
                buckets = [[] for _ in range(n)]
                for j in range(len(self._parts)):
                    for kv in self._partition(j):
                        buckets[partition_func(kv[0]) % n].append(kv)
                if self.ctx.arrival is not None:
                    buckets = [self.ctx.permute(b) for b in buckets]
            return buckets[i]
        return LocalRDD(self.ctx, [functools.partial(bucket, i) for i in range(n)], self.name)

    def setName(self, name: str) -> LocalRDD:
        self.name = name
        return self

    def persist(self, _level: Any = None) -> LocalRDD:
        self._persist = True
        return self

    def unpersist(self, *_: Any) -> LocalRDD:
        self._persist, self._cache = False, None
        return self

    # -- actions ---------------------------------------------------------------------------
    def collect(self) -> list:
        return [x for i in range(len(self._parts)) for x in self._partition(i)]

    def foreach(self, f: Callable[[Any], None]) -> None:
        for x in self.collect():
            f(x)


class LocalContext:
    master = "local"   # (its tasks run in this process: no executor to lose)

    def __init__(self, arrival: random.Random | None = None, wrap_failures: bool = True):
        self.arrival = arrival
        # a failed task fails the job as LocalJobFailed (what Spark raises has the same
        # one-line reason); False: the task's own exception, for tests of the runtime
        self.wrap_failures = wrap_failures
        self.job_description: str | None = None

    def parallelize(self, data: Iterable, num_slices: int) -> LocalRDD:
        items = list(data)
        n = max(1, num_slices)
        # Spark's slicing: partition i holds items [i*len/n, (i+1)*len/n)
        bounds = [len(items) * i // n for i in range(n + 1)]

        def part(i: int) -> list:
            return items[bounds[i]:bounds[i + 1]]
        return LocalRDD(self, [functools.partial(part, i) for i in range(n)])

    def union(self, rdds: list[LocalRDD]) -> LocalRDD:
        parts: list[Partition] = [functools.partial(r._partition, i) for r in rdds for i in range(len(r._parts))]
        return LocalRDD(self, parts, "union")

    def setJobDescription(self, text: str) -> None:
        self.job_description = text

    def permute(self, records: list) -> list:
        """Another arrival order of one consumer task's input, tuple by tuple: each chunk
        (runtime.wire: a row chunk or an Arrow chunk) is split into one-tuple chunks."""
        assert self.arrival is not None
        single = [(key, one) for key, blob in records for one in wire.split(blob)]
        self.arrival.shuffle(single)
        return single


class LocalSession:
    """What the engine uses of a SparkSession: its `sparkContext`."""

    def __init__(self, arrival: random.Random | None = None, wrap_failures: bool = True):
        self.sparkContext = LocalContext(arrival, wrap_failures)
