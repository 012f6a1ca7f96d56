"""Storm's groupings as the emitting task routes them, and derived ids."""
from __future__ import annotations

import collections
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery.model.graph import TaskMap
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.runtime.routing import Router
from recovery.tracking import ids


def _wf(grouping: Grouping, p: int = 4, direct: bool = False) -> Workflow:
    return Workflow(name="g", components=(
        Component(id="a", kind="spout", impl=ClassImpl(ref="m:S"),
                  streams=(StreamDef(fields=("k", "v"), direct=direct),)),
        Component(id="b", kind="bolt", parallelism=p, impl=ClassImpl(ref="m:B"),
                  inputs=(Input(source="a", grouping=grouping,
                                fields=("k",) if grouping == Grouping.FIELDS else ()),)),
    ))


def _router(grouping: Grouping, p: int = 4, direct: bool = False) -> tuple[Router, TaskMap]:
    wf = _wf(grouping, p, direct)
    tm = TaskMap.of(wf)
    return Router(wf, tm, "a"), tm


def test_fields_grouping_sends_equal_values_to_one_task_and_spreads_keys():
    r, tm = _router(Grouping.FIELDS)
    by_key = collections.defaultdict(set)
    for i in range(2000):
        key = f"key{i % 50}"
        [(consumer, idx, task, _)] = r.deliver("default", [key, i], ids.derive(i), None)
        assert consumer == "b" and task == tm.task_id("b", idx)
        by_key[key].add(task)
    assert all(len(tasks) == 1 for tasks in by_key.values())
    assert len({t for tasks in by_key.values() for t in tasks}) == 4


def test_all_grouping_sends_a_copy_with_its_own_id_to_every_task():
    r, tm = _router(Grouping.ALL)
    out = r.deliver("default", ["x", 1], ids.derive(7), None)
    assert sorted(t for _, _, t, _ in out) == tm.task_ids("b")
    assert len({tid for *_, tid in out}) == 4


def test_global_grouping_goes_to_the_lowest_task():
    r, tm = _router(Grouping.GLOBAL)
    tasks = {r.deliver("default", [str(i), i], ids.derive(i), None)[0][2] for i in range(100)}
    assert tasks == {min(tm.task_ids("b"))}


@pytest.mark.parametrize("g", [Grouping.SHUFFLE, Grouping.NONE, Grouping.LOCAL_OR_SHUFFLE])
def test_shuffle_spreads_evenly_and_deterministically(g):
    r, tm = _router(g)
    counts = collections.Counter(r.deliver("default", ["k", i], ids.derive(i, 99), None)[0][2] for i in range(8000))
    assert set(counts) == set(tm.task_ids("b"))
    assert max(counts.values()) < 1.15 * 2000 and min(counts.values()) > 0.85 * 2000
    again = [r.deliver("default", ["k", i], ids.derive(i, 99), None)[0][2] for i in range(100)]
    assert again == [r.deliver("default", ["k", i], ids.derive(i, 99), None)[0][2] for i in range(100)]


def test_direct_grouping_goes_to_the_named_task_only():
    r, tm = _router(Grouping.DIRECT, direct=True)
    t = tm.task_ids("b")[2]
    [(consumer, idx, task, _)] = r.deliver("default", ["k", 1], ids.derive(1), t)
    assert (consumer, idx, task) == ("b", 2, t)
    with pytest.raises(ValueError, match="does not subscribe"):
        r.deliver("default", ["k", 1], ids.derive(1), 999)


def test_undeclared_stream_is_an_error():
    r, _ = _router(Grouping.SHUFFLE)
    with pytest.raises(ValueError, match="undeclared stream"):
        r.deliver("nope", ["k", 1], 1, None)


def test_ids_are_derived_the_same_in_every_process():
    """Re-running the same input yields the same ids (PYTHONHASHSEED differs per process)."""
    code = ("from recovery.tracking import ids; print(ids.derive(1, 2, 3), ids.root_id(ids.name_salt('s'), ('f', 10)),"
            " ids.fields_hash(['word', 3, 1.5, None]))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin"}).stdout for seed in ("1", "2", "random")}
    assert len(outs) == 1
    assert ids.derive(0) != 0 and ids.derive(5, 6) != ids.derive(6, 5)


def _reference_copies(wf: Workflow, tm: TaskMap, stream_fields: tuple[str, ...], values: list,
                      base: int) -> list[tuple[str, int, int, int]]:
    """The groupings as docs/xml.md defines them, spelled out: what Router's shortcuts
    (precomputed keys, the one-shuffle-subscriber case) must give, copy for copy."""
    out = []
    for consumer in wf.components:
        for inp in consumer.inputs:
            p, first = consumer.parallelism, tm.first[consumer.id]
            if inp.grouping == Grouping.ALL:
                out += [(consumer.id, i, first + i, ids.derive(base, first + i)) for i in range(p)]
                continue
            if inp.grouping == Grouping.FIELDS:
                i = ids.fields_hash([values[stream_fields.index(f)] for f in inp.fields]) % p
            elif inp.grouping == Grouping.GLOBAL:
                i = 0
            else:
                i = base % p
            out.append((consumer.id, i, first + i, ids.derive(base, first + i)))
    return out


GROUPINGS = [Grouping.SHUFFLE, Grouping.FIELDS, Grouping.ALL, Grouping.GLOBAL, Grouping.LOCAL_OR_SHUFFLE]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(GROUPINGS), min_size=1, max_size=3), st.integers(1, 5),
       st.integers(1, (1 << 64) - 1), st.one_of(st.text(max_size=8), st.integers(-10, 10**12)),
       st.integers())
def test_routes_and_ids_equal_the_groupings_spelled_out(groupings, p, base, key, other):
    consumers = tuple(
        Component(id=f"b{n}", kind="bolt", parallelism=p + n, impl=ClassImpl(ref="m:B"),
                  inputs=(Input(source="a", grouping=g, fields=("k",) if g == Grouping.FIELDS else ()),))
        for n, g in enumerate(groupings))
    wf = Workflow(name="g", components=(
        Component(id="a", kind="spout", impl=ClassImpl(ref="m:S"), streams=(StreamDef(fields=("k", "v")),)),
        *consumers))
    tm = TaskMap.of(wf)
    got = Router(wf, tm, "a").deliver("default", [key, other], base, None)
    assert got == _reference_copies(wf, tm, ("k", "v"), [key, other], base)


@pytest.mark.parametrize("g", [Grouping.LOCAL_OR_SHUFFLE, Grouping.NONE, Grouping.SHUFFLE])
def test_a_chained_edge_sends_task_i_tuples_to_task_i_with_ids_derived_from_that_task(g):
    """Within a chain (model.graph.ChainPlan) the target of task i is task i of the next
    member; the copy's id is derived from that target task as for any edge."""
    wf = _wf(g, p=4)
    tm = TaskMap.of(wf)
    for index in range(4):
        r = Router(wf, tm, "a", index, frozenset({"b"}))
        for i in range(50):
            base = ids.derive(i)
            [(consumer, idx, task, tid)] = r.deliver("default", [str(i), i], base, None)
            assert (consumer, idx, task) == ("b", index, tm.task_id("b", index))
            assert tid == ids.derive2(base, task)
    # not chained: spread over the tasks as before
    spread = Router(wf, tm, "a", 0, frozenset())
    assert len({spread.deliver("default", [str(i), i], ids.derive(i), None)[0][1] for i in range(200)}) == 4


# --- one grouping kernel: the same task for an emit, whichever loop routes it ------------------
@st.composite
def _fanned_out(draw):
    """An emitter whose stream [k, v] feeds 1 to 3 consumers by drawn groupings (chained too),
    and emits drawn on it: keys of one type, as a column of a batch holds them."""
    groupings = [Grouping.SHUFFLE, Grouping.FIELDS, Grouping.LOCAL_OR_SHUFFLE, Grouping.ALL, Grouping.GLOBAL,
                 Grouping.NONE]
    consumers = []
    for c in range(draw(st.integers(1, 3))):
        g = draw(st.sampled_from(groupings))
        consumers.append(Component(id=f"c{c}", kind="bolt", parallelism=draw(st.integers(1, 5)),
                                   impl=ClassImpl(ref="m:B"),
                                   inputs=(Input(source="a", grouping=g, fields=("k",) if g == Grouping.FIELDS else ()),)))
    wf = Workflow(name="g", components=(Component(id="a", kind="spout", parallelism=2, impl=ClassImpl(ref="m:S"),
                                                  streams=(StreamDef(fields=("k", "v")),)), *consumers))
    chained = frozenset(c.id for c in consumers if draw(st.booleans()) and c.inputs[0].grouping == Grouping.LOCAL_OR_SHUFFLE
                        and c.parallelism == 2)
    keys = draw(st.one_of(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=30),
                          st.lists(st.text(max_size=6), min_size=1, max_size=30)))
    bases = draw(st.lists(st.integers(1, 2**64 - 1), min_size=len(keys), max_size=len(keys)))
    return wf, chained, keys, bases


@settings(max_examples=150, deadline=None)
@given(_fanned_out())
def test_every_loop_routes_an_emit_to_the_same_tasks_with_the_same_ids(drawn):
    import numpy as np
    import pyarrow as pa

    from recovery.runtime.batch.collector import BatchCollector
    wf, chained, keys, bases = drawn
    tm = TaskMap.of(wf)
    router = Router(wf, tm, "a", 1, chained)
    values = [[k, j] for j, k in enumerate(keys)]
    # the row mode: one emit at a time
    per_tuple = [sorted((t, tid) for _, t, tid in router.route("default", v, b, None)) for v, b in zip(values, bases)]
    # the chunk mode and the block sources: every emit at once
    arr = np.asarray(bases, dtype=np.uint64)
    many = [[] for _ in values]
    for keys_, idx, oids in router.route_many("default", arr, values):
        for e, (i, oid) in enumerate(zip(idx.tolist(), oids.tolist())):
            many[e].append((tm.first[keys_[i][0]] + keys_[i][1], oid))
    assert [sorted(m) for m in many] == per_tuple
    # the batch runtime: the keys hashed from an Arrow column
    out = pa.record_batch([pa.array(keys), pa.array(range(len(keys)))], names=["k", "v"])
    batch = [[] for _ in values]
    for r in router.routes["default"]:
        for idx in BatchCollector._targets(None, r, arr, out):   # (it reads nothing of its collector)
            tids = ids.derive_many(arr, (idx + r.first).astype(np.uint64))
            for e, (i, tid) in enumerate(zip(idx.tolist(), tids.tolist())):
                batch[e].append((r.first + i, tid))
    assert [sorted(b) for b in batch] == per_tuple
    # the targets that depend on no emit, as emit returns them
    fixed = router.fixed_targets("default")
    if fixed is not None:
        assert all(sorted(fixed) == [t for t, _ in row] for row in per_tuple)
