"""runtime.wire: row chunks (msgpack) and Arrow chunks, told apart by their first bytes, and
split into one-tuple chunks of the same encoding."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from recovery.runtime import wire

ids_ = st.integers(1, 2**64 - 1)
record = st.tuples(ids_, st.lists(ids_, max_size=3), st.sampled_from(["default", "other"]),
                   st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3))


@given(records=st.lists(record, max_size=6), replayed=st.booleans())
def test_a_row_chunk_holds_its_records_and_splits_into_one_record_chunks(records, replayed):
    recs = [[tid, roots, stream, values] + ([2] if replayed else []) for tid, roots, stream, values in records]
    blob = wire.pack_rows("src", 3, recs)
    assert not wire.is_arrow(blob)
    assert wire.unpack_rows(blob) == ("src", 3, recs)
    parts = wire.split(blob)
    assert [wire.unpack_rows(p) for p in parts] == [("src", 3, [rec]) for rec in recs]


@given(rows=st.lists(st.tuples(ids_, st.lists(ids_, max_size=3), st.integers(-100, 100), st.text(max_size=5)),
                     min_size=1, max_size=6))
def test_an_arrow_chunk_holds_ids_roots_and_columns_and_splits_into_one_row_chunks(rows):
    tids = np.array([r[0] for r in rows], dtype=np.uint64)
    root_off = np.r_[0, np.cumsum([len(r[1]) for r in rows])].astype(np.int64)
    root_flat = np.array([x for r in rows for x in r[1]], dtype=np.uint64)
    values = pa.record_batch([pa.array([r[2] for r in rows]), pa.array([r[3] for r in rows])], names=["n", "s"])
    blob = wire.encode_chunk("src", 4, "default", tids, root_off, root_flat, values)
    assert blob.startswith(wire.MAGIC) and wire.is_arrow(blob)
    src, src_task, stream, batch = wire.decode_chunk(blob)
    assert (src, src_task, stream) == ("src", 4, "default")
    assert batch.schema.names == ["__id", "__roots", "n", "s"]
    assert batch.column(0).to_pylist() == [r[0] for r in rows]
    assert batch.column(1).to_pylist() == [r[1] for r in rows]
    assert batch.column(2).to_pylist() == [r[2] for r in rows]
    parts = wire.split(blob)
    assert len(parts) == len(rows) and all(wire.is_arrow(p) for p in parts)
    for part, (tid, roots, n, s) in zip(parts, rows):
        src, src_task, stream, one = wire.decode_chunk(part)
        assert (src, src_task, stream) == ("src", 4, "default")
        assert one.to_pylist() == [{"__id": tid, "__roots": roots, "n": n, "s": s}]
