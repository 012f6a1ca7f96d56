"""A BatchSpout (recovery.api.batch) run by the batch runtime (runtime.batch): each row of its
batches a root tuple, with the root id, tuple ids, routes, ledger contributions, failed
positions, queues, fates and root replay of a row spout emitting the same message ids."""
from __future__ import annotations

import fakeredis
import msgpack
import numpy as np
import pyarrow as pa
import pytest

from recovery import BasicBolt, BatchBolt, BatchSpout, Spout, testing
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, SinkImpl, StreamDef, Workflow
from recovery.runtime import wire
from recovery.runtime.batch import BatchTaskRunner, is_batch_component
from recovery.runtime.batch.rows import pieces
from recovery.runtime.task import TaskRunner
from recovery.testing.components import sink_key
from recovery.tracking import ids, keys, ledger

HERE = __name__ + ":"


def _numbers(conf: dict, context) -> list[int]:
    """This task's share of 0..test.count-1 (n % parallelism == task index)."""
    p, index = len(context.component_tasks), context.task_index
    return [n for n in range(int(conf.get("test.count", "20"))) if n % p == index]


def _message_id(conf: dict, n: int) -> object:
    kind = conf.get("test.ids", "str")
    return f"m{n}" if kind == "str" else n * 10 if kind == "int" else None


class NumberBatches(BatchSpout):
    """Emits its numbers in batches of test.chunk rows; message id per test.ids ("str": "m<n>",
    "int": 10n, "default": none given, so (task index, position)). Records its fates."""

    ACKED: list = []
    FAILED: list = []

    def open(self, conf, context):
        self.todo = _numbers(conf, context)
        self.chunk = int(conf.get("test.chunk", "7"))

    def next_batch(self):
        part, self.todo = self.todo[:self.chunk], self.todo[self.chunk:]
        if not part:
            return
        mids = [_message_id(self.conf, n) for n in part]
        self.emit_batch(pa.record_batch([pa.array(part)], names=["n"]),
                        message_ids=None if mids[0] is None else mids)

    def ack(self, tup_id):
        NumberBatches.ACKED.append(tup_id)

    def fail(self, tup_id):
        NumberBatches.FAILED.append(tup_id)


class NumberRows(Spout):
    """NumberBatches' row twin: the same numbers, one emit each, the same message ids."""

    ACKED: list = []
    FAILED: list = []

    def open(self, conf, context):
        self.todo = _numbers(conf, context)
        self.index, self.position = context.task_index, 0

    def next_tuple(self):
        if not self.todo:
            return
        n = self.todo.pop(0)
        mid = _message_id(self.conf, n)
        self.emit([n], tup_id=(self.index, self.position) if mid is None else mid)
        self.position += 1

    def ack(self, tup_id):
        NumberRows.ACKED.append(tup_id)

    def fail(self, tup_id):
        NumberRows.FAILED.append(tup_id)


class RowPoison(BasicBolt):
    """[n] -> [n, 2n]; a poison n (test.poison) raises."""

    def process(self, tup):
        n = tup["n"]
        if str(n) in self.conf.get("test.poison", "").split():
            raise ValueError(f"poison {n}")
        self.emit([n, 2 * n])


class BatchPoison(BatchBolt):
    """RowPoison a batch at a time (the bisection isolates a poison row)."""

    def process_batch(self, batch):
        n = batch.column("n").to_numpy()
        bad = [v for v in n.tolist() if str(v) in self.conf.get("test.poison", "").split()]
        if bad:
            raise ValueError(f"poison {bad[0]}")
        self.emit_batch(pa.record_batch([pa.array(n), pa.array(2 * n)], names=["n", "d"]))


def workflow(spout: str, bolt: str = "RowPoison", poison: set[int] = frozenset(), ids_kind: str = "str",
             count: int = 20, grouping: Grouping = Grouping.SHUFFLE) -> Workflow:
    """src (the spout, 2 tasks) -> dbl (the bolt, 2 tasks) -> out (a ListSink)."""
    return Workflow(name="bspout", config=(
        ("test.count", str(count)), ("test.ids", ids_kind), ("test.poison", " ".join(map(str, sorted(poison)))),
        ("recovery.batch.size", "4"), ("recovery.retry.delay.period.ms", "0")), components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=HERE + spout),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="dbl", kind="bolt", parallelism=2, impl=ClassImpl(ref=HERE + bolt),
                  streams=(StreamDef(fields=("n", "d")),),
                  inputs=(Input(source="src", grouping=grouping, fields=("n",) if grouping is Grouping.FIELDS else ()),)),
        Component(id="out", kind="bolt", parallelism=2, impl=ClassImpl(ref=testing.LIST_SINK),
                  inputs=(Input(source="dbl", grouping=Grouping.FIELDS, fields=("n",)),))))


def observed(run: testing.LocalRun) -> dict:
    """What a batch spout's run must share with its row twin's: the failed positions, the
    queued and dead tuples (ids, roots, values, error), the sink's records by tuple id."""
    def rows(tuples):
        return sorted((t.component, t.task, t.id, tuple(t.roots), tuple(t.values), t.error.splitlines()[0],
                       t.attempt) for t in tuples)
    sink = sorted((msgpack.unpackb(k), msgpack.unpackb(v)) for k, v in
                  run.client.hgetall(sink_key(run.run_id, "out")).items())
    return {"queued": rows(run.failed_tuples()), "dead": rows(run.dead_tuples()), "sink": sink,
            "status": run.status, "roots": run.summary.roots}


def _run(wf: Workflow) -> testing.LocalRun:
    """The run of `wf`; its spout class's fates so far forgotten."""
    cls = NumberBatches if wf.component("src").impl.ref.endswith(":NumberBatches") else NumberRows
    cls.ACKED.clear()
    cls.FAILED.clear()
    return testing.run_local(wf, fakeredis.FakeRedis(server=fakeredis.FakeServer()), run_id="r")


def _fates(cls: type) -> tuple[list, list]:
    return sorted(map(repr, cls.ACKED)), sorted(map(repr, cls.FAILED))   # type: ignore[attr-defined]


def test_a_batch_spout_is_a_batch_component_and_its_consumers_get_arrow_chunks(fake_redis):
    wf = workflow("NumberBatches", "BatchPoison")
    assert is_batch_component(wf.component("src"), wf)
    assert not is_batch_component(workflow("NumberRows").component("src"), wf)
    received = testing.execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), fake_redis)
    into_dbl = [blob for (c, _), blobs in received.items() if c == "dbl" for blob in blobs]
    assert into_dbl and all(wire.is_arrow(b) for b in into_dbl)
    assert sum(len(rows) for rows in pieces((None, b) for b in into_dbl)) == 20


@pytest.mark.parametrize("ids_kind", ["str", "int", "default"])
@pytest.mark.parametrize("bolt", ["RowPoison", "BatchPoison"])
def test_a_batch_spout_runs_fails_and_recovers_exactly_as_its_row_twin(ids_kind, bolt):
    poison = {3, 8, 13}
    row = _run(workflow("NumberRows", bolt, poison, ids_kind))
    batch = _run(workflow("NumberBatches", bolt, poison, ids_kind))
    assert observed(batch) == observed(row)
    assert len(observed(batch)["queued"]) == 3 and observed(batch)["roots"] == 20
    # the complete roots are acked to their spouts when the round settles, with their message ids
    assert _fates(NumberBatches) == _fates(NumberRows) and len(NumberBatches.ACKED) == 17
    testing.recover_local(row)
    testing.recover_local(batch)
    assert observed(batch) == observed(row) and observed(batch)["status"] == "dead"
    # the poison rows' roots are dead: failed to their spouts, by message id
    assert _fates(NumberBatches) == _fates(NumberRows) and len(NumberBatches.FAILED) == 3
    want = ["'m3'", "'m8'", "'m13'"] if ids_kind == "str" else ["30", "80", "130"] if ids_kind == "int" else None
    if want is not None:
        assert sorted(_fates(NumberBatches)[1]) == sorted(want)


def test_transient_failures_of_a_batch_spouts_roots_are_replayed_and_acked():
    wf = workflow("NumberBatches", "BatchPoison").with_config(
        {"recovery.inject.t.component": "dbl", "recovery.inject.t.rate": "0.3"})
    run = _run(wf)
    failed = observed(run)["queued"]
    assert failed and all("injected transient failure" in q[5] for q in failed)
    testing.recover_local(run)
    assert run.status == "completed" and ledger.pending_roots(run.client, "r") == set()
    assert sorted(NumberBatches.ACKED) == sorted(f"m{n}" for n in range(20)) and NumberBatches.FAILED == []
    assert sorted(n for _, [n, _d] in observed(run)["sink"]) == list(range(20))


def _spout_output(runner_cls: type, wf: Workflow, spec: RunSpec) -> list[tuple]:
    """(consumer task, tuple id, roots, values) of each tuple a spout task's runner emits."""
    out = []
    for (consumer, i), blob in runner_cls(spec, "src", 0).run_spout(None):
        for rows in pieces([(None, blob)]):
            for j in range(len(rows)):
                out.append((consumer, i, int(rows.tids[j]), rows.roots_of(j), tuple(rows.python_values()[j])))
    return sorted(out)


@pytest.mark.parametrize("ids_kind", ["str", "default"])
def test_a_row_runtime_emits_a_batch_spouts_rows_one_by_one_with_the_same_ids(ids_kind):
    wf = workflow("NumberBatches", "BatchPoison", ids_kind=ids_kind)
    spec = RunSpec("r", 0, wf.model_dump_json(), None, False)
    by_rows = _spout_output(TaskRunner, wf, spec)       # next_tuple: the rows of next_batch's batches
    by_batches = _spout_output(BatchTaskRunner, wf, spec)
    assert by_rows == by_batches and len(by_rows) == 10
    salt = ids.name_salt("src")
    mids = [f"m{n}" for n in range(0, 20, 2)] if ids_kind == "str" else [(0, p) for p in range(10)]
    assert sorted(r for _, _, _, (r,), _ in by_rows) == sorted(ids.root_id(salt, m) for m in mids)


def test_a_root_replay_re_emits_only_the_failed_rows_of_its_batches(fake_redis):
    wf = workflow("NumberBatches")
    fake_redis.sadd(keys.root_replay_set("r", 1), *[ids.root_id(ids.name_salt("src"), f"m{n}") for n in (4, 10)])
    spec = RunSpec("r", 1, wf.to_task_json(), "fake://", True, root_replay=True, root_epoch=1, filter_epoch=0)
    received = testing.execute_round(wf, spec, fake_redis)
    values = sorted(v[0] for (c, _), blobs in received.items() if c == "dbl" for b in blobs
                    for rows in pieces([(None, b)]) for v in rows.python_values())
    assert values == [4, 10]
    stats = msgpack.unpackb(fake_redis.hget(keys.task_done("r", 1), "src:0"))
    assert stats["replayed_roots"] == 2 and stats["roots"] == 0


class TwiceBatches(BatchSpout):
    """Emits message id "same" twice, in one batch or in two."""

    def open(self, conf, context):
        self.left = 1 if conf.get("test.twice") == "one batch" else 2

    def next_batch(self):
        if self.left == 0:
            return
        self.left -= 1
        n = 2 if self.conf.get("test.twice") == "one batch" else 1
        self.emit_batch(pa.record_batch([pa.array(list(range(n)))], names=["n"]), message_ids=["same"] * n)


class MissingColumnBatches(BatchSpout):
    def next_batch(self):
        if not getattr(self, "done", False):
            self.done = True
            self.emit_batch(pa.record_batch([pa.array([1])], names=["m"]))


@pytest.mark.parametrize(("spout", "twice", "error"), [
    ("TwiceBatches", "one batch", "emitted message id 'same' twice in one task"),
    ("TwiceBatches", "two batches", "emitted message id 'same' twice in one task"),
    ("MissingColumnBatches", "", "has no column 'n' (fields: n)")])
def test_a_batch_spout_mistake_is_a_clear_error(fake_redis, spout, twice, error):
    wf = workflow(spout).with_config({"test.twice": twice})
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        testing.execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), fake_redis)


def test_a_batch_sink_fed_by_a_batch_spout_writes_its_rows_once(tmp_path):
    wf = Workflow(name="bsink", base_dir=str(tmp_path), config=(("test.ids", "int"),), components=(
        Component(id="src", kind="spout", parallelism=2, impl=ClassImpl(ref=HERE + "NumberBatches"),
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "out"),)),
                  inputs=(Input(source="src"),))))
    assert is_batch_component(wf.component("out"), wf)     # fed by batch components only
    NumberBatches.ACKED.clear()
    run = testing.run_local(wf, fakeredis.FakeRedis(server=fakeredis.FakeServer()), list_sinks=False, run_id="r")
    from recovery.connectors import sink_folders
    assert run.status == "completed"
    assert sorted(r["n"] for r in sink_folders.read_jsonl_dir(str(tmp_path / "out"))) == list(range(20))
    assert np.array_equal(np.sort(np.array(NumberBatches.ACKED)), np.arange(0, 200, 10))
