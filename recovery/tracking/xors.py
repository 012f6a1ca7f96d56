"""The one XOR accumulator: per root, the XOR of ids (Storm's acker values), kept by every task
loop for its commit (runtime.collector, runtime.batch.collector) and folded by the ledger
(tracking.ledger) with the same function, `fold`.

A task's contributions come two ways: one id at a time (the row mode's emits and acks: a dict
update, the cheapest for one) and as arrays (a chunk's, a block's, a batch's, the acks of a
sink's commit: one (roots, xors) pair each). The arrays are kept as they come and folded per
root in bulk by one policy: once the pairs waiting are at least FOLD_PAIRS and at least as many
as the folded roots, so that folding costs O(log n) a pair amortized and the arrays held stay
within about twice the task's roots (plus FOLD_PAIRS).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

FOLD_PAIRS = 1 << 18   # (root, id) pairs waiting before a fold: 4 MB of arrays

Pairs = tuple[np.ndarray, np.ndarray]   # (roots, xors), uint64, one entry per root once folded
Contributions = dict[int, int] | Pairs   # what a task's commit packs (ledger.pack_xors)

_EMPTY = np.zeros(0, dtype=np.uint64)


def as_arrays(contrib: Contributions) -> Pairs:
    """Per-root contributions, a dict or (roots, xors) arrays, as the arrays."""
    if isinstance(contrib, tuple):
        return contrib
    return (np.fromiter(contrib.keys(), dtype=np.uint64, count=len(contrib)),
            np.fromiter(contrib.values(), dtype=np.uint64, count=len(contrib)))


def fold(parts: Iterable[Pairs]) -> Pairs:
    """(roots, xors) pairs XORed per root: the roots sorted, one entry each, those whose XOR is
    zero (their trees complete between the parts) left out."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _EMPTY, _EMPTY
    roots = np.concatenate([p[0] for p in parts])
    xors = np.concatenate([p[1] for p in parts])
    order = np.argsort(roots, kind="stable")
    roots, xors = roots[order], xors[order]
    starts = np.flatnonzero(np.r_[True, roots[1:] != roots[:-1]])
    folded = np.bitwise_xor.reduceat(xors, starts)
    roots = roots[starts]
    keep = folded != 0
    return roots[keep], folded[keep]


class XorAccumulator:
    """One task's contributions per root. `scalar` is the dict the row mode's emits and acks
    XOR into directly (`d[root] = d.get(root, 0) ^ tid`); `add` takes arrays."""

    __slots__ = ("scalar", "_parts", "_pending", "_folded")

    def __init__(self) -> None:
        self.scalar: dict[int, int] = {}
        self._parts: list[Pairs] = []
        self._pending = 0              # pairs in _parts
        self._folded: Pairs = (_EMPTY, _EMPTY)

    def add(self, roots: np.ndarray, xors: np.ndarray) -> None:
        """XOR `xors[i]` into root `roots[i]`'s contribution, for every i."""
        if not len(roots):
            return
        self._parts.append((roots, xors))
        self._pending += len(roots)
        if self._pending >= FOLD_PAIRS and self._pending >= len(self._folded[0]):
            self._folded = fold([self._folded, *self._parts])
            self._parts, self._pending = [], 0

    def result(self) -> Contributions:
        """The task's contributions as its commit packs them: the dict alone when nothing came
        as arrays (its roots in the order they came), else everything folded."""
        if not self._parts and not len(self._folded[0]):
            return self.scalar
        return fold([as_arrays(self.scalar), self._folded, *self._parts])

    def __bool__(self) -> bool:
        return bool(self.scalar) or bool(self._parts) or bool(len(self._folded[0]))


def combine(contribs: Iterable[Any]) -> Pairs:
    """Several tasks' contributions (dicts or arrays) folded into one (roots, xors)."""
    return fold(as_arrays(c) for c in contribs)
