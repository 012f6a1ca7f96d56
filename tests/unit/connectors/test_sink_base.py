"""The built-in sinks stream (recovery/connectors/sink_base.py): a task writes its input a
bounded chunk at a time into what its attempt owns, nothing is visible before its commit,
it acks from id arrays after the commit, and a part that cannot be written fails every tuple
of it, with its values, as before."""
from __future__ import annotations

import os

import msgpack
import pyarrow.parquet as pq
import pytest

from recovery import testing
from recovery.connectors import file_sinks
from recovery.connectors.delta import open_table
from recovery.connectors.sink_base import Journal, StreamingSink, Written
from recovery.connectors.sink_folders import part_files, read_jsonl_dir
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.runtime import task, wire
from recovery.tracking import keys, ledger
from recovery.tracking import queue as failed_queue

CHUNK = 10


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(StreamingSink, "chunk_records", CHUNK)


def workflow(tmp_path, sink: SinkImpl) -> Workflow:
    return Workflow(name="s", base_dir=str(tmp_path), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("n", "v")),)),
        Component(id="out", kind="bolt", impl=sink, inputs=(Input(source="src"),))))


def records(values: list, seen=None):
    """The sink task's input, two tuples a chunk; `seen(i)` is called before tuple i is read."""
    for start in range(0, len(values), 2):
        if seen is not None:
            seen(start)
        recs = [[i + 1, (i + 1,), "default", [i, values[i]]] for i in range(start, min(len(values), start + 2))]
        yield ("out", 0), wire.pack_rows("src", 0, recs)


def run_sink_task(tmp_path, fake_redis, sink: SinkImpl, values: list, seen=None) -> task.TaskRunner:
    wf = workflow(tmp_path, sink)
    spec = RunSpec("r", 0, wf.to_task_json(), "fake://", True, spill_dir=str(tmp_path / "spill"))
    with task.injected_client("fake://", fake_redis):
        runner = task.TaskRunner(spec, "out", 0)
        for _ in runner.run_bolt(records(values, seen)):
            pass
    return runner


def test_a_sink_task_writes_chunks_as_they_come_and_shows_nothing_before_its_commit(tmp_path, fake_redis):
    folder = tmp_path / "out"
    staged_sizes: list[int] = []

    def seen(i: int) -> None:
        if i == 3 * CHUNK:   # three chunks in: written to the attempt's staged file, not a part
            assert part_files(str(folder)) == []
            staged = [n for n in os.listdir(folder) if n.startswith(".tmp-")]
            assert len(staged) == 1
            staged_sizes.append((folder / staged[0]).stat().st_size)

    values = [f"v{i}" + "x" * 400 for i in range(35)]   # (three chunks: more than a file buffer's 8 KB)
    runner = run_sink_task(tmp_path, fake_redis, SinkImpl(type="jsonl", params=(("path", "out"),)), values, seen)
    assert staged_sizes and staged_sizes[0] > 8192
    assert sorted((r["n"], r["v"]) for r in read_jsonl_dir(str(folder))) == list(enumerate(values))
    assert sorted(os.listdir(folder)) == part_files(str(folder))          # the part, nothing staged left
    assert (runner.stats["acked"], runner.stats["failed"]) == (35, 0)
    assert runner.collector.outstanding == {}


def test_acks_from_id_arrays_fold_the_xors_the_per_tuple_acks_fold(tmp_path, fake_redis):
    runner = run_sink_task(tmp_path, fake_redis, SinkImpl(type="jsonl", params=(("path", "out"),)),
                           [f"v{i}" for i in range(25)])
    done = msgpack.unpackb(fake_redis.hget(keys.task_done("r", 0), "out:0"))
    assert done["acked"] == 25
    # tuple i + 1 of root i + 1: each root's contribution is its tuple's id
    roots, xors = ledger.combine([runner.collector.contributions()])
    assert dict(zip(roots.tolist(), xors.tolist())) == {i + 1: i + 1 for i in range(25)}


def test_a_chunk_write_that_raises_fails_every_tuple_of_the_part_with_its_values(tmp_path, fake_redis, monkeypatch):
    real = file_sinks.JsonlSink.write_chunk
    calls = []

    def second_fails(self, part, chunk):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        real(self, part, chunk)

    monkeypatch.setattr(file_sinks.JsonlSink, "write_chunk", second_fails)
    values = [f"v{i}" for i in range(35)]
    runner = run_sink_task(tmp_path, fake_redis, SinkImpl(type="jsonl", params=(("path", "out"),)), values)
    assert len(calls) == 2                                   # nothing written after the failure
    assert (runner.stats["acked"], runner.stats["failed"]) == (0, 35)
    assert os.listdir(tmp_path / "out") == []                # no part, no staged file
    queued = [msgpack.unpackb(v) for v in fake_redis.hvals(failed_queue.queue_key("r", "out", 1))]
    assert sorted((q["values"][0], q["values"][1]) for q in queued) == list(enumerate(values))
    assert {q["error"] for q in queued} == {"out.finish raised OSError: disk full"}


def test_a_parquet_part_widens_its_types_when_a_later_chunk_needs_it(tmp_path, fake_redis):
    values = [None] * CHUNK + list(range(CHUNK)) + [0.5] * 3     # nulls, then ints, then doubles
    run_sink_task(tmp_path, fake_redis, SinkImpl(type="parquet", params=(("path", "out"),)), values)
    (name,) = part_files(str(tmp_path / "out"))
    table = pq.read_table(tmp_path / "out" / name)
    assert str(table.schema.field("v").type) == "double"
    assert table.column("v").to_pylist() == values
    assert pq.ParquetFile(tmp_path / "out" / name).num_row_groups == 3   # one a chunk


def test_a_delta_part_of_several_chunks_is_one_commit_of_its_data_files(tmp_path, fake_redis):
    values = [f"v{i}" for i in range(25)]
    run_sink_task(tmp_path, fake_redis, SinkImpl(type="delta", params=(("path", "lake"),)), values)
    dt = open_table(str(tmp_path / "lake"))
    writes = [h for h in dt.history() if h["operation"] != "CREATE TABLE"]
    assert len(writes) == 1 and len(dt.file_uris()) == 3
    assert sorted(dt.to_pyarrow_table().column("v").to_pylist()) == sorted(values)
    assert dt.transaction_version("r:out:1") == 0


def test_written_keeps_ids_and_roots_as_arrays():
    w = Written()
    w.add(5, (1,))
    w.add(7, (1, 2, 3))
    w.add(2**64 - 1, ())
    ids, offsets, roots = w.arrays()
    assert ids.tolist() == [5, 7, 2**64 - 1] and offsets.tolist() == [0, 1, 4, 4] and roots.tolist() == [1, 1, 2, 3]


def test_the_journal_gives_back_its_pieces_in_order():
    j = Journal()
    assert list(j.pieces()) == []
    j.add([(1, "a")])
    j.add({"b": [2]})
    assert list(j.pieces()) == [[(1, "a")], {"b": [2]}]
    j.close()


def test_a_staged_file_names_its_part_and_a_killed_attempts_goes_when_the_task_commits(tmp_path, fake_redis):
    from recovery.connectors.sink_folders import staged_name
    folder = tmp_path / "out"
    folder.mkdir()
    seen_names: list[str] = []

    def seen(i: int) -> None:
        if i == 2 * CHUNK:
            seen_names.extend(n for n in os.listdir(folder) if n.startswith(".tmp-"))

    # what attempts killed before their commit left: this task's (of this round and of an earlier
    # one), another task's and another run's
    part = "part-r-r0000-out-t0001.jsonl"
    killed = [staged_name(part), staged_name("part-r-r0001-out-t0001.jsonl")]
    others = [staged_name("part-r-r0000-out-t0002.jsonl"), staged_name("part-r2-r0000-out-t0001.jsonl")]
    for name in killed + others:
        (folder / name).write_text("half a part")
    run_sink_task(tmp_path, fake_redis, SinkImpl(type="jsonl", params=(("path", "out"),)),
                  [f"v{i}" for i in range(35)], seen)
    assert part_files(str(folder)) == [part]
    ours = [n for n in seen_names if n not in killed + others]
    assert len(ours) == 1 and ours[0].startswith(f".tmp-{part}.")   # named by run, round, sink, task, attempt
    assert sorted(n for n in os.listdir(folder) if n.startswith(".tmp-")) == sorted(others)
