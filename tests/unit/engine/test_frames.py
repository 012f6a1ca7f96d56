"""How rows reach their stage's tasks: Spark's hash of a bigint, reproduced in Python, and the
routing keys whose hash lands on each task (checked against Spark itself in
tests/integration/test_engine.py)."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from recovery.engine import frames

# Spark's own answers: spark.range(6).selectExpr("hash(id)") and hash of the extremes
SPARK_HASHES = {0: -1670924195, 1: -1712319331, 2: -797927272, 3: 519220707, 4: 1344313940, 5: 1607884268}


def test_the_hash_of_a_bigint_is_sparks():
    assert {k: frames.spark_hash_long(k) for k in SPARK_HASHES} == SPARK_HASHES


@given(st.integers(min_value=1, max_value=300))
def test_each_task_gets_a_key_whose_hash_lands_on_it(p):
    keys = frames.routing_keys(p)
    assert len(keys) == p and len(set(keys)) == p
    assert [frames.spark_hash_long(k) % p for k in keys] == list(range(p))


def test_outputs_become_stage_rows_and_a_task_reads_its_index_from_them():
    consumers = {"count": (3, 4)}
    outputs = [(("count", i % 4), bytes([i])) for i in range(130)]
    batches = list(frames.output_batches(iter(outputs), consumers))
    assert sum(b.num_rows for b in batches) == 130 and max(b.num_rows for b in batches) <= frames.BATCH_CHUNKS
    rows = [r for b in batches for r in b.to_pylist()]
    assert {r["c"] for r in rows} == {3}
    assert [frames.spark_hash_long(r["k"]) % 4 for r in rows] == [i % 4 for i in range(130)]

    seen = {}

    def task(index, records):
        seen[index] = [chunk for _, chunk in records]
        return iter(())
    mine = [b for b in batches]
    marker = pa.RecordBatch.from_pylist([{"c": 3, "k": frames.routing_keys(4)[2], "chunk": b""}])
    assert list(frames.stage_function(task, consumers, 4)(iter([marker]))) == []
    assert seen == {2: []}   # a task no tuple went to still runs, and knows its index
    only_two = [pa.RecordBatch.from_pylist([r for r in b.to_pylist() if frames.spark_hash_long(r["k"]) % 4 == 2])
                for b in mine]
    list(frames.stage_function(task, consumers, 4)(iter([marker, *only_two])))
    assert seen[2] == [bytes([i]) for i in range(130) if i % 4 == 2]


def test_a_spouts_task_reads_its_index_from_its_range_row():
    seen = []

    def task(index, records):
        seen.append((index, list(records)))
        return iter(())
    list(frames.stage_function(task, {}, 3)(iter([pa.RecordBatch.from_pylist([{"id": 2}])])))
    assert seen == [(2, [])]


def test_a_task_ends_with_a_marker_row_for_every_task_of_each_stage_it_feeds():
    batch = pa.RecordBatch.from_pylist([{"id": 0}])
    out = list(frames.stage_function(lambda i, records: iter(()), {}, 1, ((4, 3), (5, 2)))(iter([batch])))
    rows = [r for b in out for r in b.to_pylist()]
    assert [(r["c"], frames.spark_hash_long(r["k"]) % (3 if r["c"] == 4 else 2)) for r in rows] == \
        [(4, 0), (4, 1), (4, 2), (5, 0), (5, 1)]
    assert all(r["chunk"] == b"" for r in rows)
