"""A batch task's input tuples by column (Rows), read from its input chunks, row or Arrow."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from recovery.api.tuples import Tuple
from recovery.runtime import wire


class Rows:
    """Input tuples of one (source, stream), by column: ids, roots (flat, with offsets), the
    values (a record batch, or Python lists when they came as msgpack), attempts (0: not a
    replay) and source tasks."""

    __slots__ = ("src", "stream", "tids", "root_off", "root_flat", "values", "pyvalues", "attempts",
                 "src_tasks")

    def __init__(self, src: str, stream: str, tids: np.ndarray, root_off: np.ndarray, root_flat: np.ndarray,
                 values: Any, pyvalues: list[list] | None, attempts: np.ndarray, src_tasks: np.ndarray):
        self.src, self.stream = src, stream
        self.tids, self.root_off, self.root_flat = tids, root_off, root_flat
        self.values, self.pyvalues = values, pyvalues
        self.attempts, self.src_tasks = attempts, src_tasks

    @classmethod
    def from_records(cls, src: str, src_task: int, stream: str, recs: list[list]) -> Rows:
        n = len(recs)
        lens = np.fromiter((len(r[1]) for r in recs), dtype=np.int64, count=n)
        return cls(src, stream, np.fromiter((r[0] for r in recs), dtype=np.uint64, count=n),
                   np.r_[0, np.cumsum(lens)].astype(np.int64),
                   np.fromiter((x for r in recs for x in r[1]), dtype=np.uint64, count=int(lens.sum())),
                   None, [r[3] for r in recs],
                   np.fromiter((r[4] if len(r) > 4 else 0 for r in recs), dtype=np.int64, count=n),
                   np.full(n, src_task, dtype=np.int64))

    @classmethod
    def from_arrow(cls, src: str, src_task: int, stream: str, batch: Any) -> Rows:
        roots = batch.column(1)
        n = batch.num_rows
        return cls(src, stream, batch.column(0).to_numpy(), roots.offsets.to_numpy().astype(np.int64),
                   roots.values.to_numpy(), batch.select(list(range(2, batch.num_columns))), None,
                   np.zeros(n, dtype=np.int64), np.full(n, src_task, dtype=np.int64))

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        offs, base = [np.zeros(1, dtype=np.int64)], 0
        for p in parts:
            offs.append(p.root_off[1:] - p.root_off[0] + base)
            base += int(p.root_off[-1] - p.root_off[0])
        values, pyvalues = None, None
        if all(p.values is not None for p in parts):
            import pyarrow as pa
            try:
                values = pa.Table.from_batches([p.values for p in parts]).combine_chunks().to_batches()[0]
            except (pa.ArrowInvalid, pa.ArrowTypeError):   # column types differ: as Python values
                values = None
        if values is None:
            pyvalues = [v for p in parts for v in p.python_values()]
        return Rows(first.src, first.stream, np.concatenate([p.tids for p in parts]), np.concatenate(offs),
                    np.concatenate([p.root_flat[p.root_off[0]:p.root_off[-1]] for p in parts]), values, pyvalues,
                    np.concatenate([p.attempts for p in parts]), np.concatenate([p.src_tasks for p in parts]))

    def __len__(self) -> int:
        return len(self.tids)

    def part(self, lo: int, hi: int) -> Rows:
        return Rows(self.src, self.stream, self.tids[lo:hi], self.root_off[lo:hi + 1], self.root_flat,
                    self.values.slice(lo, hi - lo) if self.values is not None else None,
                    self.pyvalues[lo:hi] if self.pyvalues is not None else None,
                    self.attempts[lo:hi], self.src_tasks[lo:hi])

    def take(self, idx: np.ndarray) -> Rows:
        """The rows at positions `idx` (ascending), in that order."""
        k = self.root_off[1:][idx] - self.root_off[:-1][idx]
        pos = np.repeat(self.root_off[:-1][idx] - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
        pyvalues = self.pyvalues
        return Rows(self.src, self.stream, self.tids[idx], np.r_[0, np.cumsum(k)].astype(np.int64),
                    self.root_flat[pos], self.values.take(idx) if self.values is not None else None,
                    [pyvalues[i] for i in idx.tolist()] if pyvalues is not None else None,
                    self.attempts[idx], self.src_tasks[idx])

    def python_values(self) -> list[list]:
        if self.pyvalues is None:
            columns = [c.to_pylist() for c in self.values.columns]
            self.pyvalues = [list(r) for r in zip(*columns)] if columns else [[] for _ in range(len(self))]
        return self.pyvalues

    def roots_of(self, i: int) -> tuple[int, ...]:
        return tuple(self.root_flat[self.root_off[i]:self.root_off[i + 1]].tolist())

    def as_tuple(self, i: int, task: int, fields: tuple[str, ...]) -> Tuple:
        """Row i as the Tuple a row bolt at task `task` would get."""
        return Tuple(int(self.tids[i]), self.src, self.stream, task, self.python_values()[i], fields,
                     self.roots_of(i), int(self.src_tasks[i]), int(self.attempts[i]) or 1)


def pieces(records: Iterable[tuple[Any, wire.Chunk]]) -> Iterator[Rows]:
    """A task's input chunks, row or Arrow, as Rows of one (source, stream) each."""
    for _, blob in records:
        if wire.is_arrow(blob):
            src, src_task, stream, batch = wire.decode_chunk(blob)
            if batch.num_rows:
                yield Rows.from_arrow(src, src_task, stream, batch)
            continue
        src, src_task, recs = wire.unpack_rows(blob)
        if not recs:
            continue
        stream = recs[0][2]
        if all(r[2] == stream for r in recs):
            yield Rows.from_records(src, src_task, stream, recs)
        else:
            by_stream: dict[str, list] = {}
            for r in recs:
                by_stream.setdefault(r[2], []).append(r)
            for st, rs in by_stream.items():
                yield Rows.from_records(src, src_task, st, rs)


def occurrences(anchors: np.ndarray) -> np.ndarray:
    """Per position, how many earlier positions hold the same value (a stable cumcount)."""
    n = len(anchors)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(anchors, kind="stable")
    s = anchors[order]
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    occ = np.empty(n, dtype=np.int64)
    occ[order] = np.arange(n) - run_start
    return occ
