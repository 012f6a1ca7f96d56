"""Recovery synthesis: hand-written cases on a fan-out/join topology, then properties over
random DAG workflows. No Spark, no Redis."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.model.graph import TaskMap, downstream, topological_order
from recovery.model.synthesis import (
    REPLAY_STREAM,
    is_queue_spout,
    plan_marks,
    queue_spout_id,
    queue_tasks,
    recovery_components,
    synthesize,
    task_translation,
)
from recovery.model.workflow import (
    ClassImpl,
    Component,
    Grouping,
    Input,
    ShellImpl,
    SinkImpl,
    SourceImpl,
    StreamDef,
    Workflow,
)
from recovery.model.xml.parse import parse_string
from recovery.model.xml.write import to_xml

# --------------------------------------------------------------------------- fan-out / join
#
#   spout ─┬─> A ──> C ─┐
#          └─> B ───────┴─> D (join) ──> sink
#
# Storm numbering (sorted ids): A 1-2, B 3, C 4-5, D 6-8, sink 9, spout 10-11.

def _fanout() -> Workflow:
    return Workflow(
        name="fanout",
        config=(("topology.message.timeout.secs", "10"), ("recovery.max.attempts", "2")),
        base_dir="/data/fanout",
        components=(
            Component(id="spout", kind="spout", parallelism=2,
                      impl=SourceImpl(type="file", params=(("path", "in.txt"), ("format", "text"))),
                      streams=(StreamDef(fields=("line",)),)),
            Component(id="A", kind="bolt", parallelism=2, impl=ClassImpl(ref="m:A"),
                      inputs=(Input(source="spout", grouping=Grouping.SHUFFLE),),
                      streams=(StreamDef(fields=("key", "a")),)),
            Component(id="B", kind="bolt", parallelism=1,
                      impl=ShellImpl(command="python3", script="b.py"),
                      inputs=(Input(source="spout", grouping=Grouping.ALL),),
                      streams=(StreamDef(fields=("key", "b")),
                               StreamDef(id="side", fields=("x",)))),
            Component(id="C", kind="bolt", parallelism=2, impl=ClassImpl(ref="m:C"),
                      inputs=(Input(source="A", grouping=Grouping.FIELDS, fields=("key",)),),
                      streams=(StreamDef(fields=("key", "c")),),
                      config=(("topology.tick.tuple.freq.secs", "5"),)),
            Component(id="D", kind="bolt", parallelism=3, impl=ClassImpl(ref="m:Join"),
                      inputs=(Input(source="B", grouping=Grouping.FIELDS, fields=("key",)),
                              Input(source="C", grouping=Grouping.FIELDS, fields=("key",))),
                      streams=(StreamDef(fields=("key", "joined")),)),
            Component(id="sink", kind="bolt", parallelism=1,
                      impl=SinkImpl(type="jsonl", params=(("path", "out"),)),
                      inputs=(Input(source="D", grouping=Grouping.GLOBAL),)),
        ),
    )


def _ids(wf: Workflow) -> list[str]:
    return [c.id for c in wf.components]


def test_task_numbering_assumed_by_these_tests():
    tm = TaskMap.of(_fanout())
    assert tm.task_ids("A") == [1, 2] and tm.task_ids("C") == [4, 5]
    assert tm.task_ids("D") == [6, 7, 8] and tm.task_ids("spout") == [10, 11]


def test_failure_at_c_reruns_only_c_and_what_follows():
    wf = _fanout()
    rec = synthesize(wf, {"C": [5, 4]})
    assert _ids(rec) == ["replay-C", "C", "D", "sink"]
    assert rec.name == "fanout.recovery"
    assert rec.config == wf.config and rec.base_dir == "/data/fanout"

    q = rec.component("replay-C")
    assert q.kind == "spout" and q.parallelism == 1 and q.inputs == ()
    assert q.impl == SourceImpl(type="queue", params=(("component", "C"), ("tasks", "4 5")))
    assert q.streams == (StreamDef(id=REPLAY_STREAM, fields=(), direct=True),)

    c = rec.component("C")
    orig_c = wf.component("C")
    # C's input from A is gone (A does not re-run); the queue feeds it directly.
    assert c.inputs == (Input(source="replay-C", stream=REPLAY_STREAM, grouping=Grouping.DIRECT),)
    assert (c.impl, c.parallelism, c.streams, c.config) == (
        orig_c.impl, orig_c.parallelism, orig_c.streams, orig_c.config)

    # D keeps only its input from C (B does not re-run), with the same fields grouping.
    assert rec.component("D").inputs == (
        Input(source="C", grouping=Grouping.FIELDS, fields=("key",)),)
    assert rec.component("sink") == wf.component("sink")
    assert recovery_components(wf, {"C": [4]}) == {"C", "D", "sink"}


def test_failures_at_a_and_d_make_one_workflow_with_both_queues():
    wf = _fanout()
    rec = synthesize(wf, {"D": [7], "A": (2, 1)})
    # Queue spouts first (in the original order of their bolts), then the original order.
    assert _ids(rec) == ["replay-A", "replay-D", "A", "C", "D", "sink"]
    assert rec.component("replay-A").impl.param("tasks") == "1 2"
    assert rec.component("replay-D").impl.param("tasks") == "7"
    assert rec.component("A").inputs == (
        Input(source="replay-A", stream=REPLAY_STREAM, grouping=Grouping.DIRECT),)
    # D: its input from the re-running C, plus its own queue; not B's.
    assert rec.component("D").inputs == (
        Input(source="C", grouping=Grouping.FIELDS, fields=("key",)),
        Input(source="replay-D", stream=REPLAY_STREAM, grouping=Grouping.DIRECT),
    )
    assert rec.component("C").inputs == wf.component("C").inputs
    assert recovery_components(wf, {"D": [7], "A": [1]}) == {"A", "C", "D", "sink"}
    topological_order(rec)  # still a DAG


def test_failure_at_a_spout_replaces_it_with_its_queue():
    wf = _fanout()
    rec = synthesize(wf, {"spout": [11]})
    # Everything is downstream of the only spout; no extra queue spout.
    assert _ids(rec) == _ids(wf)
    s, orig = rec.component("spout"), wf.component("spout")
    assert s.kind == "spout" and s.id == "spout"
    assert (s.parallelism, s.streams, s.config) == (orig.parallelism, orig.streams, orig.config)
    assert s.impl == SourceImpl(type="queue", params=(("component", "spout"), ("tasks", "11")))
    for cid in ("A", "B", "C", "D", "sink"):
        assert rec.component(cid) == wf.component(cid)
    assert is_queue_spout(s) and queue_tasks(s) == ("spout", [11])


def test_spout_and_bolt_failures_together():
    wf = _fanout()
    rec = synthesize(wf, {"spout": [10], "C": [4]})
    assert _ids(rec) == ["replay-C"] + _ids(wf)
    assert rec.component("C").inputs == wf.component("C").inputs + (
        Input(source="replay-C", stream=REPLAY_STREAM, grouping=Grouping.DIRECT),)


def test_failed_component_keeps_its_groupings_downstream():
    wf = _fanout()
    rec = synthesize(wf, {"B": [3]})
    assert _ids(rec) == ["replay-B", "B", "D", "sink"]
    assert rec.component("D").inputs == (
        Input(source="B", grouping=Grouping.FIELDS, fields=("key",)),)
    assert rec.component("B").streams == wf.component("B").streams
    assert rec.component("sink").inputs == (Input(source="D", grouping=Grouping.GLOBAL),)


def test_failure_at_the_last_bolt():
    rec = synthesize(_fanout(), {"sink": [9]})
    assert _ids(rec) == ["replay-sink", "sink"]
    assert rec.component("sink").inputs == (
        Input(source="replay-sink", stream=REPLAY_STREAM, grouping=Grouping.DIRECT),)


def test_replay_id_taken_gets_a_suffix():
    assert queue_spout_id("C", set()) == "replay-C"
    assert queue_spout_id("C", {"replay-C"}) == "replay-C-2"
    assert queue_spout_id("C", {"replay-C", "replay-C-2", "replay-C-3"}) == "replay-C-4"

    # A user's component already named replay-C (a spout feeding nothing).
    user = Component(id="replay-C", kind="spout",
                     impl=SourceImpl(type="file", params=(("path", "x"),)),
                     streams=(StreamDef(fields=("v",)),))
    wf = _fanout().model_copy(update={"components": _fanout().components + (user,)})
    rec = synthesize(wf, {"C": [TaskMap.of(wf).task_ids("C")[0]]})
    assert _ids(rec)[0] == "replay-C-2"
    assert "replay-C" not in _ids(rec)
    assert rec.component("C").inputs[-1].source == "replay-C-2"


def test_synthesizing_from_a_recovery_workflow_does_not_stack_suffixes():
    rec = synthesize(_fanout(), {"C": [4]})
    again = synthesize(rec, {"D": TaskMap.of(rec).task_ids("D")[:1]})
    assert again.name == "fanout.recovery"
    assert _ids(again) == ["replay-D", "D", "sink"]


def test_task_translation_maps_recovery_tasks_back():
    wf = _fanout()
    rec = synthesize(wf, {"C": [5]})
    # recovery numbering: C 1-2, D 3-5, replay-C 6, sink 7
    tr = task_translation(wf, rec)
    assert tr == {1: 4, 2: 5, 3: 6, 4: 7, 5: 8, 7: 9}


@pytest.mark.parametrize("failed, message", [
    ({}, "nothing to recover"),
    ({"nope": [1]}, "'nope' is not in workflow"),
    ({"C": [1]}, "task 1 is not a task of component 'C'"),
    ({"C": [4, 6]}, "task 6 is not a task of component 'C'"),
    ({"sink": [0]}, "task 0 is not a task of component 'sink'"),
    ({"C": []}, "no failed task given for component 'C'"),
    ({"C": ["4"]}, "is not an integer"),
])
def test_bad_arguments_raise(failed, message):
    wf = _fanout()
    with pytest.raises(ValueError, match=message):
        synthesize(wf, failed)
    with pytest.raises(ValueError, match=message):
        recovery_components(wf, failed)


def test_plan_marks():
    wf = _fanout()
    marks, dim = plan_marks(wf, {("C", 4): 12, ("C", 5): 1, ("A", 1): 0})
    assert marks == {"A": "FAILED task 1: 0 tuples", "C": "FAILED task 4: 12 tuples, task 5: 1 tuple"}
    assert list(marks) == ["A", "C"]          # original order
    assert dim == {"spout", "B"}
    marks, dim = plan_marks(wf, {("sink", 9): 3})
    assert marks == {"sink": "FAILED task 9: 3 tuples"}
    assert dim == {"spout", "A", "B", "C", "D"}
    assert plan_marks(wf, {}) == ({}, set(_ids(wf)))
    with pytest.raises(ValueError, match="not a task"):
        plan_marks(wf, {("C", 9): 1})
    with pytest.raises(ValueError, match="not a count"):
        plan_marks(wf, {("C", 4): -1})


def test_queue_tasks_rejects_other_components():
    with pytest.raises(ValueError):
        queue_tasks(_fanout().component("spout"))


# --------------------------------------------------------------------------- random DAGs

FIELD_POOL = ("key", "value", "n", "ts", "word")
GROUPINGS = (Grouping.SHUFFLE, Grouping.FIELDS, Grouping.ALL, Grouping.GLOBAL,
             Grouping.LOCAL_OR_SHUFFLE)


@st.composite
def _streams(draw):
    fields = tuple(draw(st.lists(st.sampled_from(FIELD_POOL), min_size=1, max_size=3,
                                 unique=True)))
    streams = [StreamDef(fields=fields)]
    if draw(st.booleans()):
        streams.append(StreamDef(id="alt", fields=tuple(
            draw(st.lists(st.sampled_from(FIELD_POOL), min_size=1, max_size=2, unique=True)))))
    return tuple(streams)


@st.composite
def workflows(draw) -> Workflow:
    n_spouts = draw(st.integers(1, 3))
    n_bolts = draw(st.integers(1, 7))
    comps: list[Component] = []
    for i in range(n_spouts):
        comps.append(Component(
            id=f"s{i}", kind="spout", parallelism=draw(st.integers(1, 4)),
            impl=SourceImpl(type="file", params=(("path", f"in{i}.txt"),)),
            streams=draw(_streams())))
    for i in range(n_bolts):
        readable = [c.id for c in comps if c.streams]      # sinks declare no stream
        sources = draw(st.lists(st.sampled_from(readable), min_size=1,
                                max_size=min(3, len(readable)), unique=True))
        inputs = []
        for src in sources:
            stream = draw(st.sampled_from(next(c for c in comps if c.id == src).streams))
            g = draw(st.sampled_from(GROUPINGS))
            fields = (draw(st.sampled_from(stream.fields)),) if g is Grouping.FIELDS else ()
            inputs.append(Input(source=src, stream=stream.id, grouping=g, fields=fields))
        impl = draw(st.sampled_from([ClassImpl(ref=f"pkg.mod:B{i}"),
                                     ShellImpl(command="python3", script=f"b{i}.py"),
                                     SinkImpl(type="jsonl", params=(("path", f"out{i}"),))]))
        comps.append(Component(
            id=f"b{i}", kind="bolt", parallelism=draw(st.integers(1, 4)), impl=impl,
            inputs=tuple(inputs),
            streams=() if isinstance(impl, SinkImpl) else draw(_streams())))
    # XML order need not be topological order.
    order = draw(st.permutations(comps))
    return Workflow(name="random", config=(("recovery.max.attempts", "3"),),
                    components=tuple(order))


@st.composite
def workflow_and_failed(draw):
    wf = draw(workflows())
    tm = TaskMap.of(wf)
    chosen = draw(st.lists(st.sampled_from(_ids(wf)), min_size=1, unique=True))
    failed = {cid: draw(st.lists(st.sampled_from(tm.task_ids(cid)), min_size=1, unique=True))
              for cid in chosen}
    return wf, failed


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(workflow_and_failed())
def test_result_is_exactly_the_closure_plus_queue_spouts(case):
    wf, failed = case
    rec = synthesize(wf, failed)
    closure = downstream(wf, failed)
    assert recovery_components(wf, failed) == closure

    failed_bolts = {cid for cid in failed if not wf.component(cid).is_spout}
    queue = [c for c in rec.components if c.id not in closure]
    assert all(is_queue_spout(c) for c in queue)
    assert {queue_tasks(c)[0] for c in queue} == failed_bolts
    assert len(queue) == len(failed_bolts)
    # Nothing outside the closure from the original.
    assert {c.id for c in rec.components} - {c.id for c in queue} == closure
    assert len(_ids(rec)) == len(set(_ids(rec)))

    # Order: queue spouts first, then the original order.
    assert _ids(rec)[:len(queue)] == [c.id for c in queue]
    assert _ids(rec)[len(queue):] == [cid for cid in _ids(wf) if cid in closure]


@PROPS
@given(workflow_and_failed())
def test_every_failed_task_is_queued_and_fed_to_its_component(case):
    wf, failed = case
    rec = synthesize(wf, failed)
    queued: dict[str, list[int]] = {}
    for c in rec.components:
        if is_queue_spout(c) and c.impl.param("component") in failed:
            comp, tasks = queue_tasks(c)
            assert tasks == sorted(tasks)
            queued[comp] = tasks
            if c.id != comp:  # a failed bolt's queue spout
                assert c.parallelism == 1
                assert c.streams == (StreamDef(id=REPLAY_STREAM, fields=(), direct=True),)
                feeds = [(b.id, i) for b in rec.components for i in b.inputs if i.source == c.id]
                assert feeds == [(comp, Input(source=c.id, stream=REPLAY_STREAM,
                                              grouping=Grouping.DIRECT))]
    assert queued == {cid: sorted(set(ts)) for cid, ts in failed.items()}


@PROPS
@given(workflow_and_failed())
def test_kept_components_are_unchanged_but_for_inputs(case):
    wf, failed = case
    rec = synthesize(wf, failed)
    ids = set(_ids(rec))
    assert rec.name == "random.recovery" and rec.config == wf.config
    for c in rec.components:
        for i in c.inputs:
            assert i.source in ids
        if c.id not in _ids(wf):
            continue
        orig = wf.component(c.id)
        assert (c.kind, c.parallelism, c.streams, c.config) == (
            orig.kind, orig.parallelism, orig.streams, orig.config)
        if not (c.is_spout and c.id in failed):
            assert c.impl == orig.impl
        # Every original input from a re-running component is kept, in order, unchanged.
        assert [i for i in c.inputs if i.stream != REPLAY_STREAM] == [
            i for i in orig.inputs if i.source in ids]
    topological_order(rec)


@PROPS
@given(workflow_and_failed())
def test_plan_marks_agrees_with_synthesis(case):
    wf, failed = case
    counts = {(cid, t): t * 3 for cid, ts in failed.items() for t in ts}
    marks, dim = plan_marks(wf, counts)
    assert set(marks) == set(failed)
    assert dim == set(_ids(wf)) - recovery_components(wf, failed)
    for cid, ts in failed.items():
        for t in ts:
            assert f"task {t}: " in marks[cid]


# --------------------------------------------------------------------------- XML round trip
# parse_string runs the XSD and the graph checks a user's file goes through.

def test_fanout_recovery_round_trips_through_xml():
    for failed in ({"C": [4, 5]}, {"A": [1], "D": [6, 8]}, {"spout": [10]}, {"sink": [9]},
                   {"spout": [11], "B": [3], "D": [7]}):
        rec = synthesize(_fanout(), failed)
        back = parse_string(to_xml(rec), base_dir=rec.base_dir)
        assert back == rec


def test_recovery_xml_reads_like_a_workflow_file():
    text = to_xml(synthesize(_fanout(), {"C": [5, 4]}))
    assert 'name="fanout.recovery"' in text
    assert '<spout id="replay-C" parallelism="1">' in text
    assert '<source type="queue" component="C" tasks="4 5"/>' in text
    assert '<input from="replay-C" stream="__replay" grouping="direct"/>' in text
    assert '<stream id="__replay" direct="true"/>' in text
    assert 'id="A"' not in text and 'id="B"' not in text and 'id="spout"' not in text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflow_and_failed())
def test_random_recovery_round_trips_and_validates(case):
    wf, failed = case
    assert parse_string(to_xml(wf)) == wf        # the generator makes valid user workflows
    rec = synthesize(wf, failed)
    assert parse_string(to_xml(rec)) == rec


# --------------------------------------------------------------------------- drawing the plan

@pytest.mark.parametrize("fmt", ["text", "dot", "mermaid"])
def test_plan_marks_draw_with_render(fmt):
    from recovery.model.render import render
    wf = _fanout()
    marks, dim = plan_marks(wf, {("C", 4): 12, ("C", 5): 1})
    out = render(wf, fmt, marks=marks, dim=dim)
    assert "FAILED task 4: 12 tuples, task 5: 1 tuple" in out
    for cid in _ids(wf):
        assert cid in out
