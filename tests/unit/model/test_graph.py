"""recovery.model.graph: topological order, downstream/upstream closure, Storm's task numbering,
the context a component (and a multilang program) is given."""
from __future__ import annotations

from pathlib import Path

import pytest

from recovery.model.graph import (
    ChainPlan,
    ComponentContext,
    TaskMap,
    downstream,
    subscribers,
    topological_order,
    upstream,
)
from recovery.model.workflow import ClassImpl, Component, Grouping, Input, StreamDef, Workflow
from recovery.model.xml.parse import load

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"


def spout(cid: str, p: int = 1, streams=(StreamDef(fields=("x",)),)) -> Component:
    return Component(id=cid, kind="spout", parallelism=p, impl=ClassImpl(ref="m:S"),
                     streams=tuple(streams))


def bolt(cid: str, *sources: str, p: int = 1, fields=("x",)) -> Component:
    return Component(id=cid, kind="bolt", parallelism=p, impl=ClassImpl(ref="m:B"),
                     streams=(StreamDef(fields=fields),),
                     inputs=tuple(Input(source=s) for s in sources))


@pytest.fixture(scope="module")
def fanout():
    return load(WORKFLOWS / "fanout.xml")


def test_topological_order_of_the_examples(fanout):
    assert topological_order(fanout) == ["numbers", "fork", "archive", "square", "cube",
                                         "join", "out"]
    assert topological_order(load(WORKFLOWS / "cdn_logs.xml")) == [
        "logs", "split", "normalize", "aggregate", "output"]
    assert topological_order(load(WORKFLOWS / "wordcount.xml")) == [
        "sentences", "split", "count", "out"]


def test_topological_order_ignores_document_order_and_keeps_ties_in_it():
    wf = Workflow(name="w", components=(bolt("d", "b", "c"), bolt("c", "a"), bolt("b", "a"),
                                        spout("a"), spout("z")))
    assert topological_order(wf) == ["a", "z", "c", "b", "d"]


def test_topological_order_of_an_empty_workflow():
    assert topological_order(Workflow(name="w")) == []


def test_topological_order_refuses_a_cycle():
    # the model alone (not the XML parser) can hold a cycle
    wf = Workflow(name="w", components=(spout("s"), bolt("a", "s", "b"), bolt("b", "a")))
    with pytest.raises(ValueError, match="cycle through component 'a'"):
        topological_order(wf)


def test_downstream_closure(fanout):
    assert downstream(fanout, ["cube"]) == {"cube", "join", "out"}
    assert downstream(fanout, ["cube"], include_start=False) == {"join", "out"}
    assert downstream(fanout, ["fork"]) == {"fork", "square", "cube", "join", "out"}
    assert downstream(fanout, ["numbers"]) == {c.id for c in fanout.components}
    assert downstream(fanout, ["archive", "join"]) == {"archive", "join", "out"}
    assert downstream(fanout, []) == set()
    assert downstream(fanout, ["out"], include_start=False) == set()


def test_upstream_closure(fanout):
    assert upstream(fanout, "join") == {"square", "cube", "fork", "numbers"}
    assert upstream(fanout, "archive") == {"numbers"}
    assert upstream(fanout, "numbers") == set()


def test_subscribers_in_document_order(fanout):
    assert [(c.id, i.stream) for c, i in subscribers(fanout, "fork")] == [
        ("square", "left"), ("cube", "right")]
    assert [c.id for c, _ in subscribers(fanout, "numbers")] == ["fork", "archive"]
    assert subscribers(fanout, "out") == []


def test_task_map_numbers_tasks_as_storm_does():
    # Storm: components sorted by id, task ids from 1, consecutive within a component
    wf = Workflow(name="w", components=(spout("spout", p=2), bolt("split", "spout", p=3),
                                        bolt("count", "split", p=2), bolt("Zed", "count")))
    tm = TaskMap.of(wf)
    assert tm.task_ids("Zed") == [1]               # "Z" sorts before lower case, as in Java
    assert tm.task_ids("count") == [2, 3]
    assert tm.task_ids("split") == [4, 5, 6]
    assert tm.task_ids("spout") == [7, 8]
    assert tm.task_id("split", 2) == 6
    assert tm.index("split", 5) == 1
    assert tm.component_of(7) == "spout"
    assert tm.task_to_component == {1: "Zed", 2: "count", 3: "count", 4: "split", 5: "split",
                                    6: "split", 7: "spout", 8: "spout"}
    with pytest.raises(KeyError):
        tm.index("split", 7)
    with pytest.raises(KeyError):
        tm.component_of(9)
    with pytest.raises(KeyError):
        tm.component_of(0)


def test_task_map_of_the_fanout_example(fanout):
    tm = TaskMap.of(fanout)
    assert {cid: tm.task_ids(cid) for cid in sorted(tm.first)} == {
        "archive": [1], "cube": [2, 3], "fork": [4, 5], "join": [6, 7], "numbers": [8],
        "out": [9], "square": [10, 11]}


def test_task_context(fanout):
    ctx = ComponentContext(fanout, "join", 7)
    assert ctx.task_index == 1
    assert ctx.component_tasks == [6, 7]
    storm = ctx.to_storm()
    assert storm["taskid"] == 7 and storm["componentid"] == "join"
    assert storm["task->component"]["8"] == "numbers"
    assert storm["streams"] == ["default"]
    assert storm["stream->outputfields"] == {"default": ["n", "square", "cube"]}
    assert storm["source->stream->grouping"] == {
        "square": {"default": {"type": "FIELDS", "fields": ["n"]}},
        "cube": {"default": {"type": "FIELDS", "fields": ["n"]}}}
    assert storm["source->stream->fields"] == {"square": {"default": ["n", "square"]},
                                               "cube": {"default": ["n", "cube"]}}
    assert storm["stream->target->grouping"] == {"default": {"out": {"type": "GLOBAL"}}}
    fork = ComponentContext(fanout, "fork", 4).to_storm()
    assert fork["stream->target->grouping"] == {"left": {"square": {"type": "SHUFFLE"}},
                                                "right": {"cube": {"type": "SHUFFLE"}}}


def test_task_context_for_a_task_of_another_component(fanout):
    with pytest.raises(KeyError):
        ComponentContext(fanout, "join", 1).task_index


def test_grouping_values_are_storms_names():
    assert {g.value for g in Grouping} == {"shuffle", "fields", "all", "global", "none",
                                           "direct", "local_or_shuffle"}


# --- chains ------------------------------------------------------------------------------
def _wf(*components: Component, **config: str) -> Workflow:
    return Workflow(name="w", components=tuple(components), config=tuple(config.items()))


def _joined(cid: str, source: str, grouping: Grouping, p: int = 2) -> Component:
    return Component(id=cid, kind="bolt", parallelism=p, impl=ClassImpl(ref="m:B"),
                     streams=(StreamDef(fields=("x",)),),
                     inputs=(Input(source=source, grouping=grouping, fields=("x",) if grouping is Grouping.FIELDS else ()),))


def _chains(wf: Workflow) -> list[tuple[str, ...]]:
    return [c.members for c in ChainPlan.of_workflow(wf).chains]


def test_local_or_shuffle_and_none_chain_components_of_equal_parallelism():
    wf = _wf(spout("s", 2), _joined("a", "s", Grouping.LOCAL_OR_SHUFFLE), _joined("b", "a", Grouping.NONE),
             _joined("c", "b", Grouping.SHUFFLE), _joined("d", "c", Grouping.LOCAL_OR_SHUFFLE))
    assert _chains(wf) == [("s", "a", "b"), ("c", "d")]
    plan = ChainPlan.of_workflow(wf)
    assert plan.chain_of("b").head == "s" and plan.chain_of("b").name == "s -> a -> b"
    assert plan.consumers["s"] == ("c",) and plan.consumers["c"] == ()
    assert plan.readers(wf, "a") == ["c:0", "c:1"]


def test_shuffle_edges_chain_only_with_the_property_and_chaining_can_be_turned_off():
    parts = (spout("s", 2), _joined("a", "s", Grouping.SHUFFLE), _joined("b", "a", Grouping.LOCAL_OR_SHUFFLE))
    assert _chains(_wf(*parts)) == [("s",), ("a", "b")]
    assert _chains(_wf(*parts, **{"recovery.chain.shuffle": "true"})) == [("s", "a", "b")]
    assert _chains(_wf(*parts, **{"recovery.chain": "false"})) == [("s",), ("a",), ("b",)]


@pytest.mark.parametrize("grouping", [Grouping.FIELDS, Grouping.ALL, Grouping.GLOBAL, Grouping.DIRECT])
def test_other_groupings_never_chain(grouping):
    wf = _wf(spout("s", 2, streams=(StreamDef(fields=("x",), direct=grouping is Grouping.DIRECT),)),
             _joined("a", "s", grouping), **{"recovery.chain.shuffle": "true"})
    assert _chains(wf) == [("s",), ("a",)]


def test_a_chain_needs_equal_parallelism_and_one_input():
    unequal = _wf(spout("s", 2), _joined("a", "s", Grouping.LOCAL_OR_SHUFFLE, p=3))
    assert _chains(unequal) == [("s",), ("a",)]
    join = Component(id="j", kind="bolt", parallelism=2, impl=ClassImpl(ref="m:B"),
                     streams=(StreamDef(fields=("x",)),),
                     inputs=(Input(source="s", grouping=Grouping.LOCAL_OR_SHUFFLE),
                             Input(source="t", grouping=Grouping.LOCAL_OR_SHUFFLE)))
    assert _chains(_wf(spout("s", 2), spout("t", 2), join)) == [("s",), ("t",), ("j",)]


def test_a_chain_may_branch_every_member_keeps_its_one_upstream():
    wf = _wf(spout("s", 2), _joined("a", "s", Grouping.LOCAL_OR_SHUFFLE), _joined("b", "s", Grouping.NONE),
             _joined("c", "a", Grouping.FIELDS))
    assert _chains(wf) == [("s", "a", "b"), ("c",)]
    assert ChainPlan.of_workflow(wf).consumers["s"] == ("c",)


def test_the_examples_chain_where_storm_users_write_local_or_shuffle():
    for name in ("cdn_logs", "cdn_logs_batch"):
        wf = load(WORKFLOWS / f"{name}.xml", check_paths=False)
        assert [c.members for c in ChainPlan.of_workflow(wf).chained] == [("logs", "split", "normalize")]


def test_component_context_is_exported_and_its_former_name_still_works_with_a_warning():
    import recovery
    from recovery.api import components
    assert recovery.ComponentContext is components.ComponentContext is ComponentContext
    import recovery.model.graph as graph
    with pytest.warns(DeprecationWarning, match="ComponentContext"):
        assert graph.TaskContext is ComponentContext
    with pytest.raises(AttributeError):
        graph.NoSuchName  # noqa: B018
