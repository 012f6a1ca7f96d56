"""The batch runtime (runtime.batch) against the row runtime: the same ids, ledger,
routes, failed positions, queues and sinks, with failures isolated to the row by bisection."""
from __future__ import annotations

import fakeredis
import msgpack
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery import BasicBolt, BatchBolt, testing
from recovery.model.record import ComponentStats
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.testing.components import sink_key
from recovery.tracking import ledger

HERE = __name__ + ":"


def _poison(conf: dict) -> set[int]:
    return {int(v) for v in conf.get("test.poison", "").split()}


class RowDouble(BasicBolt):
    """n -> [n, 2n], and a second output [n, -n] when 3 divides n; a poison n raises."""

    def prepare(self, conf, context):
        self.poison = _poison(conf)

    def process(self, tup):
        n = tup["n"]
        if n in self.poison:
            raise ValueError(f"poison {n}")
        self.emit([n, n * 2])
        if n % 3 == 0:
            self.emit([n, -n])


class BatchDouble(BatchBolt):
    """RowDouble, a batch at a time: raises for the batch when it holds a poison row."""

    def prepare(self, conf, context):
        self.poison = _poison(conf)

    def process_batch(self, batch):
        n = batch.column("n").to_numpy()
        bad = [v for v in n.tolist() if v in self.poison]
        if bad:
            raise ValueError(f"poison {bad[0]}")
        self.emit_batch(pa.record_batch([pa.array(n), pa.array(n * 2)], names=["n", "d"]))
        thirds = np.flatnonzero(n % 3 == 0)
        self.emit_batch(pa.record_batch([pa.array(n[thirds]), pa.array(-n[thirds])], names=["n", "d"]),
                        anchors=thirds)


class BatchDoubleFailRows(BatchDouble):
    """BatchDouble with a per-row error instead of raising."""

    def process_batch(self, batch):
        n = batch.column("n").to_numpy()
        bad = [i for i, v in enumerate(n.tolist()) if v in self.poison]
        self.fail_rows(bad, [f"ValueError: poison {n[i]}" for i in bad])
        self.emit_batch(pa.record_batch([pa.array(n), pa.array(n * 2)], names=["n", "d"]))
        thirds = np.flatnonzero(n % 3 == 0)
        self.emit_batch(pa.record_batch([pa.array(n[thirds]), pa.array(-n[thirds])], names=["n", "d"]),
                        anchors=thirds)


class RowPair(BasicBolt):
    """[n, d] -> [n + d] (a row stage between batch stages)."""

    def process(self, tup):
        self.emit([tup["n"] + tup["d"]])


class BatchSum(BatchBolt):
    """[n, d] -> [n + d], a batch at a time."""

    def process_batch(self, batch):
        self.emit_batch(pa.record_batch([pa.array(batch.column("n").to_numpy() + batch.column("d").to_numpy())],
                                        names=["s"]))


def chain(*stages: tuple[str, str, tuple[str, ...], Grouping], poison: set[int] = frozenset(),
          batch_size: int = 1024, parallelism: int = 2) -> Workflow:
    """src (n) -> each stage in turn -> out (a ListSink); stage = (id, class, fields, grouping)."""
    comps = [Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT), parallelism=2,
                       streams=(StreamDef(fields=("n",)),))]
    prev, prev_fields = "src", ("n",)
    for cid, cls, fields, grouping in stages:
        inp = Input(source=prev, grouping=grouping, fields=prev_fields[:1] if grouping is Grouping.FIELDS else ())
        comps.append(Component(id=cid, kind="bolt", impl=ClassImpl(ref=HERE + cls), parallelism=parallelism,
                               streams=(StreamDef(fields=fields),), inputs=(inp,),
                               config=(("test.poison", " ".join(map(str, sorted(poison)))),)))
        prev, prev_fields = cid, fields
    comps.append(Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), parallelism=2,
                           inputs=(Input(source=prev, grouping=Grouping.FIELDS, fields=(stages[-1][2][0],)),)))
    return Workflow(name="batch", components=tuple(comps),
                    config=(("recovery.batch.size", str(batch_size)), ("recovery.retry.delay.period.ms", "0")))


def double(cls: str, **kw) -> Workflow:
    return chain(("dbl", cls, ("n", "d"), Grouping.SHUFFLE), **kw)


def observed(run: testing.LocalRun) -> dict:
    """What must be equal between a row and a batch run: the failed positions, every queued
    tuple (id, roots, values, error, attempt), the sinks' records by tuple id, the ledger."""
    queued = sorted((t.component, t.task, t.id, tuple(t.roots), tuple(t.values),
                     t.error.splitlines()[0], t.attempt) for t in run.failed_tuples())
    dead = sorted((t.component, t.task, t.id, tuple(t.roots), tuple(t.values),
                   t.error.splitlines()[0], t.attempt) for t in run.dead_tuples())
    sinks = {c.id: sorted((msgpack.unpackb(k), msgpack.unpackb(v)) for k, v in
                          run.client.hgetall(sink_key(run.run_id, c.id)).items())
             for c in run.workflow.components if c.id == "out"}
    positions = sorted((p.component, p.task, p.count) for p in run.failed_positions)
    return {"positions": positions, "queued": queued, "dead": dead, "sinks": sinks,
            "status": run.status}


def _stats(run: testing.LocalRun, component: str) -> ComponentStats:
    return run.summary.components[component]


def _run(wf: Workflow, items: list, recover: bool = False) -> testing.LocalRun:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return testing.run_local(wf, client, inputs={"src": items}, run_id="r", recover=recover)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), data=st.data(), batch_size=st.sampled_from([1, 3, 8, 1024]),
       cls=st.sampled_from(["BatchDouble", "BatchDoubleFailRows"]))
def test_a_batch_bolt_with_poison_rows_fails_and_recovers_exactly_as_the_row_bolt(n, data, batch_size, cls):
    poison = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    items = list(range(n))
    row = _run(double("RowDouble", poison=poison), items)
    batch = _run(double(cls, poison=poison, batch_size=batch_size), items)
    assert observed(batch) == observed(row)
    assert len(observed(row)["queued"]) == len(poison)
    testing.recover_local(row)
    testing.recover_local(batch)
    assert observed(batch) == observed(row)
    assert len(observed(row)["dead"]) == len(poison)


def test_transient_failures_are_replayed_through_the_batch_component_and_leave_exact_sinks():
    inject = {"recovery.inject.t.component": "dbl", "recovery.inject.t.rate": "0.3"}
    items = list(range(50))
    wf = double("BatchDouble", batch_size=8).with_config(inject)
    run = _run(wf, items)
    failed = observed(run)["queued"]
    assert failed and all("injected transient failure" in q[5] for q in failed)
    testing.recover_local(run)
    assert run.status == "completed"
    assert observed(run)["sinks"] == observed(_run(double("RowDouble"), items))["sinks"]
    assert ledger.pending_roots(run.client, "r") == set()


@pytest.mark.parametrize(("n", "bad"), [(64, [17]), (64, [0, 63]), (100, [3, 4, 5, 50, 99]), (1, [0])])
def test_bisection_isolates_k_poison_rows_and_counts_its_reexecutions(n, bad):
    run = _run(double("BatchDouble", poison=set(bad), batch_size=1024, parallelism=1), list(range(n)))
    stats = _stats(run, "dbl")
    assert sorted(q[4][0] for q in observed(run)["queued"]) == bad
    assert stats.failed == len(bad) and stats.acked == n - len(bad) and stats.executed == n
    assert stats.bisect_isolated == (len(bad) if n > 1 else 0)
    # each isolated row costs at most 2 runs per halving: <= 2 * k * ceil(log2 n) re-executions
    depth = int(np.ceil(np.log2(n))) if n > 1 else 0
    assert 0 < stats.bisect_runs <= 2 * len(bad) * depth or n == 1
    assert stats.bisect_rows <= n * depth     # each halving level runs at most the batch again


def test_without_a_failure_a_batch_runs_once():
    run = _run(double("BatchDouble", batch_size=16, parallelism=1), list(range(40)))
    stats = _stats(run, "dbl")
    assert stats.bisect_runs == 0 and stats.acked == 40


@pytest.mark.parametrize("kinds", [("row", "batch"), ("batch", "row"), ("batch", "batch"),
                                   ("row", "row")])
def test_row_and_batch_stages_mix_and_tuples_cross_unchanged(kinds):
    def stages(first, second):
        return (("dbl", "RowDouble" if first == "row" else "BatchDouble", ("n", "d"), Grouping.FIELDS),
                ("sum", "RowPair" if second == "row" else "BatchSum", ("s",), Grouping.ALL))
    items = list(range(30))
    want = observed(_run(chain(*stages("row", "row"), batch_size=4), items))
    got = observed(_run(chain(*stages(*kinds), batch_size=4), items))
    assert got == want and got["status"] == "completed"


def test_the_xor_ledger_completes_every_root_of_a_batch_run():
    run = _run(double("BatchDouble", batch_size=5, poison={4}), list(range(23)))
    assert ledger.pending_roots(run.client, "r") == {observed(run)["queued"][0][3][0]}


class BatchKeys(BatchBolt):
    """[n] -> [key, n] with keys of awkward kinds: nulls, floats that a dict confuses, lists."""

    KEYS = [None, 0.0, -0.0, 1.5, None, 2.5]

    def process_batch(self, batch):
        n = batch.column("n").to_pylist()
        kind = self.conf.get("test.keys", "float")
        keys = [[v % 3, v % 2] for v in n] if kind == "list" else [self.KEYS[v % 6] for v in n]
        self.emit_batch(pa.record_batch([pa.array(keys), pa.array(n)], names=["n", "d"]))


class RowKeys(BasicBolt):
    def process(self, tup):
        v = tup["n"]
        self.emit([[v % 3, v % 2] if self.conf.get("test.keys", "float") == "list" else BatchKeys.KEYS[v % 6], v])


@pytest.mark.parametrize("kind", ["float", "list"])
def test_fields_grouping_on_keys_arrow_encodes_routes_as_the_row_path(kind):
    def wf(cls):
        w = chain(("keys", cls, ("n", "d"), Grouping.SHUFFLE), ("sum", "RowPair" if kind == "float" else "Pass",
                  ("n", "d"), Grouping.FIELDS), batch_size=16)
        return w.with_config({"test.keys": kind})
    items = list(range(40))
    assert observed(_run(wf("BatchKeys"), items)) == observed(_run(wf("RowKeys"), items))


class Pass(BasicBolt):
    def process(self, tup):
        self.emit(list(tup.values))


def test_tuples_between_batch_components_travel_as_arrow_and_to_row_components_as_msgpack(fake_redis):
    from recovery.model.run import RunSpec
    from recovery.runtime import wire
    wf = testing.with_list_sinks(testing.feed(
        chain(("dbl", "BatchDouble", ("n", "d"), Grouping.SHUFFLE), ("sum", "BatchSum", ("s",), Grouping.FIELDS),
              batch_size=8), "src", list(range(30))))
    received = testing.execute_round(wf, RunSpec("r", 0, wf.model_dump_json(), "fake://", True), fake_redis)
    into = {cid: [blob[:len(wire.MAGIC)] == wire.MAGIC for (c, _), blobs in received.items()
                  if c == cid for blob in blobs] for cid in ("dbl", "sum", "out")}
    assert into["dbl"] and not any(into["dbl"])     # from a row spout: msgpack
    assert into["sum"] and all(into["sum"])         # batch to batch: Arrow
    assert into["out"] and not any(into["out"])     # to a row sink: msgpack
    src, src_task, stream, rb = wire.decode_chunk(
        next(b for (c, _), bs in received.items() if c == "sum" for b in bs))
    assert (src, stream) == ("dbl", "default") and rb.schema.names == ["__id", "__roots", "n", "d"]
