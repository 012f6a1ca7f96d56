"""The one XOR accumulator (tracking.xors): what a task's loops add, one id at a time or as
arrays, in any order and with folds at any point, comes out as the per-root XOR; the ledger
folds its pieces with the same function."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery.tracking import ledger, xors

ROOT = st.integers(1, 12)                  # few roots: they repeat, and some XOR to zero
ID = st.integers(0, 2**64 - 1)
ADD = st.one_of(st.tuples(st.just("one"), ROOT, ID),
                st.tuples(st.just("arrays"), st.lists(st.tuples(ROOT, ID), max_size=20)))


def _expected(adds: list) -> dict[int, int]:
    want: dict[int, int] = {}
    for kind, *rest in adds:
        pairs = [tuple(rest)] if kind == "one" else rest[0]
        for root, x in pairs:
            want[root] = want.get(root, 0) ^ x
    return want


@settings(max_examples=200, deadline=None)
@given(st.lists(ADD, max_size=30), st.integers(1, 16))
def test_whatever_comes_and_whenever_it_folds_the_result_is_each_roots_xor(adds, fold_pairs):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(xors, "FOLD_PAIRS", fold_pairs)
        acc = xors.XorAccumulator()
        for kind, *rest in adds:
            if kind == "one":
                root, x = rest
                acc.scalar[root] = acc.scalar.get(root, 0) ^ x
            else:
                pairs = rest[0]
                acc.add(np.array([r for r, _ in pairs], dtype=np.uint64), np.array([x for _, x in pairs], dtype=np.uint64))
            # the arrays held stay bounded by the fold policy
            assert acc._pending < max(fold_pairs, len(acc._folded[0])) + 20
        got = acc.result()
    want = _expected(adds)
    if isinstance(got, dict):   # nothing (left) from arrays: the dict, as the row mode made it
        assert got is acc.scalar and {r: x for r, x in got.items() if x} == {r: x for r, x in want.items() if x}
    else:
        roots, folded = got
        assert list(roots) == sorted(roots.tolist())
        assert dict(zip(roots.tolist(), folded.tolist())) == {r: x for r, x in want.items() if x}
    # the ledger's fold of the same contributions, packed as a commit packs them, agrees
    pieces = [b for b in ledger.pack_xors(got) if b]
    roots, folded = ledger.fold(pieces)
    assert dict(zip(roots.tolist(), folded.tolist())) == {r: x for r, x in want.items() if x}
