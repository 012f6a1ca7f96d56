"""Built-in sinks fed by batch components take the Arrow chunks as they are
(runtime.batch.sink, connectors' sinks' encode_batch): for the same records
they write the bytes the row sinks write, fail the same rows alone with the same errors, and
keep the sinks' guarantees (one part per (round, task), written after the whole input, a
re-executed task's part replaced)."""
from __future__ import annotations

import json

import fakeredis
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery import BasicBolt, BatchBolt, testing
from recovery.connectors.sink_folders import part_files
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.runtime import batch as batch_runtime
from recovery.runtime import wire
from recovery.tracking import ledger

HERE = __name__ + ":"
TYPES = {"int": pa.int64(), "int8": pa.int8(), "float": pa.float64(), "float32": pa.float32(),
         "text": pa.string(), "large_text": pa.large_string(), "bool": pa.bool_(),
         "floats": pa.list_(pa.float64()), "nested": pa.list_(pa.list_(pa.int64())),
         "struct": pa.struct([("b", pa.string()), ("a", pa.float64())]), "binary": pa.binary()}


def _column(conf: dict) -> pa.Array:
    """The test's values (test.values, JSON) as an Arrow column of type test.type."""
    return pa.array(json.loads(conf["test.values"]), TYPES[conf["test.type"]]) if conf["test.type"] != "binary" \
        else pa.array([None if v is None else v.encode() for v in json.loads(conf["test.values"])], pa.binary())


class RowValues(BasicBolt):
    """n -> [n, the n-th value as Arrow gives it to Python] (what the batch twin emits, by row)."""

    def prepare(self, conf, context):
        self.column = _column(conf)

    def process(self, tup):
        self.emit([tup["n"], self.column[tup["n"]].as_py()])


class BatchValues(BatchBolt):
    """RowValues, a batch at a time."""

    def prepare(self, conf, context):
        self.column = _column(conf)

    def process_batch(self, batch):
        n = batch.column("n")
        self.emit_batch(pa.record_batch([n, self.column.take(n)], names=["n", "v é\""]))


def workflow(cls: str, sink: str, values: list, type_: str, *, parallelism: int = 1,
             batch_size: int = 7, **params: str) -> Workflow:
    """src (n) -> values (n, value) -> out (a built-in sink of type `sink`)."""
    params = {"path": "out/x", **params} if sink != "redis" else params
    return Workflow(name="sinks", components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT), parallelism=parallelism,
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="values", kind="bolt", impl=ClassImpl(ref=HERE + cls), parallelism=parallelism,
                  streams=(StreamDef(fields=("n", "v é\"")),), inputs=(Input(source="src"),),
                  config=(("test.values", json.dumps(values)), ("test.type", type_))),
        Component(id="out", kind="bolt", impl=SinkImpl(type=sink, params=tuple(params.items())),
                  parallelism=parallelism, inputs=(Input(source="values"),)),
    ), config=(("recovery.batch.size", str(batch_size)), ("recovery.retry.delay.period.ms", "0")))


def run(tmp_path, name: str, wf: Workflow, n: int, client=None, **kw) -> testing.LocalRun:
    folder = tmp_path / name
    folder.mkdir()
    # the sink fed by the batch bolt takes its Arrow chunks; the one fed by the row bolt, msgpack
    assert batch_runtime.is_batch_component(wf.component("out"), wf) == (wf.component("values").impl.ref ==
                                                                        HERE + "BatchValues")
    client = client or fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return testing.run_local(wf.model_copy(update={"base_dir": str(folder)}), client, inputs={"src": list(range(n))},
                             list_sinks=False, run_id="r", **kw)


def parts(tmp_path, name: str) -> dict[str, bytes]:
    folder = tmp_path / name / "out" / "x"
    return {p: (folder / p).read_bytes() for p in part_files(str(folder))}


def failures(r: testing.LocalRun) -> list[tuple]:
    return sorted((t.component, t.task, t.id, tuple(t.roots), repr(t.values), t.error.splitlines()[0], t.attempt)
                  for t in r.failed_tuples())


text = st.one_of(st.sampled_from(['"', "\\", "\n\x00\x1f", "é\u2028\U0001f600", "\x7f"]),
                 st.text(st.characters(codec="utf-8"), max_size=8))
# json writes these its own way (NaN, Infinity, 1e+16, -0.0): drawn often, not by luck
floats = st.one_of(st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 1e16, 1e-7, 0.1, 2.0]),
                   st.floats())
VALUES = {
    "int": st.integers(-2**63, 2**63 - 1), "int8": st.integers(-128, 127), "float": floats,
    "float32": st.one_of(st.sampled_from([float("nan"), -float("inf"), 0.1]), st.floats(width=32)),
    "text": text, "large_text": text, "bool": st.booleans(),
    "floats": st.lists(st.one_of(st.none(), floats), max_size=3),
    "nested": st.lists(st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=3), max_size=3),
    "struct": st.fixed_dictionaries({"b": st.one_of(st.none(), text), "a": floats}),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), type_=st.sampled_from(sorted(VALUES)), n=st.integers(1, 30))
def test_the_batch_jsonl_sink_writes_the_bytes_the_row_sink_writes(tmp_path_factory, data, type_, n):
    values = data.draw(st.lists(st.one_of(st.none(), VALUES[type_]), min_size=n, max_size=n))
    tmp_path = tmp_path_factory.mktemp("jsonl")
    row = run(tmp_path, "row", workflow("RowValues", "jsonl", values, type_), n)
    got = run(tmp_path, "batch", workflow("BatchValues", "jsonl", values, type_), n)
    assert row.status == got.status == "completed"
    assert parts(tmp_path, "batch") == parts(tmp_path, "row") and parts(tmp_path, "row")
    assert ledger.pending_roots(got.client, "r") == set()


@pytest.mark.parametrize("type_", ["text", "floats", "struct", "int8"])
def test_the_batch_parquet_sink_writes_the_bytes_the_row_sink_writes(tmp_path, type_):
    values = {"text": ["a", None, "é\n", ""], "floats": [[1.5, None], None, [], [float("inf")]],
              "struct": [{"b": "x", "a": 1.0}, None, {"b": None, "a": -0.0}, {"b": "y", "a": 2.5}],
              "int8": [1, None, -3, 127]}[type_] * 5
    row = run(tmp_path, "row", workflow("RowValues", "parquet", values, type_), len(values))
    got = run(tmp_path, "batch", workflow("BatchValues", "parquet", values, type_), len(values))
    assert row.status == got.status == "completed"
    assert parts(tmp_path, "batch") == parts(tmp_path, "row") and parts(tmp_path, "row")


def test_the_batch_redis_sink_sets_the_fields_the_row_sink_sets(tmp_path):
    values = ["a\"", None, "é", "x"] * 3
    hashes = []
    for name, cls in (("row", "RowValues"), ("batch", "BatchValues")):
        r = run(tmp_path, name, workflow(cls, "redis", values, "text", key="h", **{"key-field": "v é\""}), len(values))
        assert r.status == "completed"
        hashes.append(r.client.hgetall("h"))
    assert hashes[0] == hashes[1] and len(hashes[0]) == 4


@pytest.mark.parametrize("sink", ["jsonl", "redis"])
def test_a_value_json_cannot_encode_fails_alone_with_the_row_sinks_error(tmp_path, sink):
    """bytes are carried between stages but json cannot write them: the row sink fails each such
    tuple at the sink; the batch sink fails the same rows, with the same error, writes the rest."""
    values = [None, "poison", None, None, "poison2"] + [None] * 12
    params = {"key": "h", "key-field": "n"} if sink == "redis" else {}
    runs = {}
    for name, cls in (("row", "RowValues"), ("batch", "BatchValues")):
        runs[name] = run(tmp_path, name, workflow(cls, sink, values, "binary", parallelism=2, **params), len(values))
    row, got = runs["row"], runs["batch"]
    assert failures(got) == failures(row)
    assert [f[5] for f in failures(row)] == ["TypeError: Object of type bytes is not JSON serializable"] * 2
    assert sorted(f[4] for f in failures(row)) == ["[1, b'poison']", "[4, b'poison2']"]
    assert got.summary.components["out"].failed == 2 and got.summary.components["out"].acked == 15
    if sink == "jsonl":
        assert parts(tmp_path, "batch") == parts(tmp_path, "row")
        assert sum(p.count(b"\n") for p in parts(tmp_path, "batch").values()) == 15
    else:
        assert row.client.hgetall("h") == got.client.hgetall("h") and len(got.client.hgetall("h")) == 15
    assert ledger.pending_roots(got.client, "r") == ledger.pending_roots(row.client, "r")


def test_an_injected_fault_at_the_batch_sink_fails_its_rows_alone_and_recovery_writes_them(tmp_path):
    values = [f"v{i}" for i in range(40)]
    inject = {"recovery.inject.t.component": "out", "recovery.inject.t.rate": "0.2"}
    runs = {}
    for name, cls in (("row", "RowValues"), ("batch", "BatchValues")):
        runs[name] = run(tmp_path, name, workflow(cls, "jsonl", values, "text", parallelism=2).with_config(inject), 40)
    assert failures(runs["batch"]) == failures(runs["row"]) and failures(runs["row"])
    assert parts(tmp_path, "batch") == parts(tmp_path, "row")
    for r in runs.values():
        testing.recover_local(r)
        assert r.status == "completed"
    assert parts(tmp_path, "batch") == parts(tmp_path, "row")
    lines = sorted(line for p in parts(tmp_path, "batch").values() for line in p.splitlines())
    assert lines == sorted(json.dumps({"n": i, "v é\"": v}, ensure_ascii=False, sort_keys=True).encode()
                           for i, v in enumerate(values))


def test_a_reexecuted_batch_sink_task_replaces_its_part(tmp_path, fake_redis):
    """Spark re-runs a task whose attempt died before its commit: the part an earlier attempt
    wrote (complete: parts are renamed into place) is replaced, never appended to."""
    values = [f"v{i}" for i in range(20)]
    wf = testing.feed(workflow("BatchValues", "jsonl", values, "text", parallelism=2), "src", list(range(20)))
    wf = wf.model_copy(update={"base_dir": str(tmp_path)})
    spec = RunSpec("r", 0, wf.to_task_json(), "fake://", False)
    received = testing.execute_round(wf, spec, fake_redis)
    assert all(blob.startswith(wire.MAGIC) for (c, _), blobs in received.items() if c == "out"
               for blob in blobs)                    # from the batch bolt: Arrow chunks
    once = parts(tmp_path, "")
    assert len(once) == 2 and sum(p.count(b"\n") for p in once.values()) == 20
    stale = tmp_path / "out" / "x" / sorted(once)[0]
    stale.write_bytes(b'{"left": "by an attempt that died before its commit"}\n')
    testing.execute_round(wf, spec, fake_redis)     # every task again, as a retried stage
    assert parts(tmp_path, "") == once
    assert sorted(p.name for p in (tmp_path / "out" / "x").iterdir()) == sorted(once)   # no temporary file left
