"""ids.derive_many and ids.fields_hash_many equal the scalar functions bit for bit."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from recovery.tracking import ids

U64 = st.integers(0, 2**64 - 1)
EDGES = st.sampled_from([0, 1, 2**60 - 1, 2**60, 2**61 - 2, 2**61 - 1, 2**61, 2**63, 2**64 - 1])
PART = st.one_of(U64, EDGES)


@given(st.integers(2, 6).flatmap(lambda k: st.lists(st.tuples(*[PART] * k), min_size=1, max_size=30)))
def test_derive_many_is_derive_bit_for_bit(rows):
    columns = [np.array(c, dtype=np.uint64) for c in zip(*rows)]
    assert [int(x) for x in ids.derive_many(*columns)] == [ids.derive(*r) for r in rows]


@given(st.lists(st.tuples(PART, PART), min_size=1, max_size=30), PART)
def test_derive_many_takes_a_part_every_row_shares_as_an_int(rows, shared):
    a = np.array([r[0] for r in rows], dtype=np.uint64)
    b = np.array([r[1] for r in rows], dtype=np.uint64)
    assert [int(x) for x in ids.derive_many(a, shared, b)] == [ids.derive(x, shared, y) for x, y in rows]


VALUE = st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=8), st.floats(allow_nan=False),
                  st.booleans(), st.none(), st.binary(max_size=4))


@given(st.lists(st.tuples(VALUE, VALUE), min_size=1, max_size=30), st.integers(1, 2))
def test_fields_hash_many_is_fields_hash(rows, width):
    columns = [list(c) for c in zip(*rows)][:width]
    want = [ids.fields_hash(list(r)) for r in zip(*columns)]
    assert [int(x) for x in ids.fields_hash_many(columns)] == want


def test_fields_hash_many_tells_values_a_dict_would_confuse():
    column = [0.0, -0.0, 1, True, 1.0, "1", None, 0]
    assert [int(x) for x in ids.fields_hash_many([column])] == [ids.fields_hash([v]) for v in column]


@given(st.text(max_size=12), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=30))
def test_position_hashes_are_stable_hash_of_name_and_offset(name, offsets):
    got = ids.position_hashes(name, np.array(offsets, dtype=np.uint64))
    assert [int(x) for x in got] == [ids.stable_hash((name, o)) for o in offsets]


@given(PART, st.lists(PART, min_size=1, max_size=30))
def test_pair_hashes_are_stable_hash_of_the_pair(first, seconds):
    got = ids.pair_hashes(first, np.array(seconds, dtype=np.uint64))
    assert [int(x) for x in got] == [ids.stable_hash((first, s)) for s in seconds]


@given(st.one_of(st.lists(PART, min_size=1, max_size=30), st.lists(VALUE, min_size=1, max_size=30)))
def test_stable_hashes_are_stable_hash_of_each_value(values):
    assert [int(x) for x in ids.stable_hashes(values)] == [ids.stable_hash(v) for v in values]
