"""recovery.Topology: the builder writes the model the XML parser builds, to_xml/from_xml are
interchangeable, and its errors name the component and the line of Python that added it."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from lxml import etree

import recovery
from recovery import Topology
from recovery.errors import WorkflowError
from recovery.model.workflow import ClassImpl, ShellImpl, SinkImpl, SourceImpl, Workflow
from recovery.model.xml.parse import load, parse_string
from recovery.model.xml.write import to_xml
from tests.unit.model.test_xml import workflows

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
HERE = __file__


def cdn_logs_as_the_issue_writes_it() -> Topology:
    t = Topology("cdn_logs", config={"recovery.max.attempts": 3})
    logs = t.spout("logs", source={"type": "file", "path": "data/cdn.log", "format": "text"}, fields="line",
                   parallelism=2)
    split = t.bolt("split", "cdn_logs.components:SplitLog",
                   fields="clientip time method host path protocol protocol-version code size dltime",
                   parallelism=2).input(logs, "local_or_shuffle")
    agg = t.bolt("aggregate", "cdn_logs.components:AggregateLog", fields="key requests bytes",
                 parallelism=4).input(split, "shuffle")
    t.bolt("output", sink={"type": "jsonl", "path": "out/cdn_logs"}).input(agg, "shuffle")
    t.bolt("len", shell={"command": "python3", "script": "len.py"}, fields="id n").input(logs)
    return t


def test_workflows_cdn_logs_py_builds_the_model_of_cdn_logs_xml():
    t = runpy.run_path(str(WORKFLOWS / "cdn_logs.py"))["t"]
    from_xml = load(WORKFLOWS / "cdn_logs.xml")
    assert t.workflow(base_dir=from_xml.base_dir) == from_xml
    assert Topology.from_xml(WORKFLOWS / "cdn_logs.xml") == t
    assert Topology.from_xml(str(WORKFLOWS / "cdn_logs.xml")).to_xml() == t.to_xml()


def test_every_builder_call_lands_in_the_model_and_the_default_grouping_is_shuffle():
    t = cdn_logs_as_the_issue_writes_it()
    wf = t.workflow(check_classes=False)   # (its classes live in workflows/, not on the path)
    assert [c.id for c in wf.components] == ["logs", "split", "aggregate", "output", "len"]
    assert wf.config == (("recovery.max.attempts", "3"),)
    logs, split, agg, out, length = wf.components
    assert logs.impl == SourceImpl(type="file", params=(("path", "data/cdn.log"), ("format", "text")))
    assert logs.parallelism == 2 and logs.streams[0].fields == ("line",)
    assert split.impl == ClassImpl(ref="cdn_logs.components:SplitLog") and split.inputs[0].grouping.value == \
        "local_or_shuffle"
    assert agg.parallelism == 4 and agg.streams[0].fields == ("key", "requests", "bytes")
    assert out.impl == SinkImpl(type="jsonl", params=(("path", "out/cdn_logs"),)) and out.streams == ()
    assert length.impl == ShellImpl(command="python3", script="len.py")
    assert length.inputs[0].source == "logs" and length.inputs[0].grouping.value == "shuffle"
    # the XML reads back to the same model, and to an equal topology
    assert parse_string(t.to_xml()) == wf
    assert Topology.from_xml(t.to_xml()) == t
    assert Topology.from_xml(t.to_xml().encode()) == t


def test_streams_config_resources_spark_options_and_sink_modes():
    t = Topology("full", config={"topology.message.timeout.secs": 30, "recovery.tracking": True},
                 resources={"include": ["lookup.csv"], "exclude": ["*.tmp"]})
    src = t.spout("rows", source={"type": "spark", "format": "csv", "path": "data/rows",
                                  "options": {"header": "true", "sep": ";"}}, fields="id name")
    split = t.bolt("route", "m.c:Route", fields="id", config={"recovery.max.attempts": 5}).input(src, "fields",
                                                                                                  fields="id")
    split.stream("errors", fields="id reason").stream("picked", fields="id", direct=True)
    t.bolt("errs", sink={"type": "parquet", "path": "out/errs", "mode": "overwrite"}).input(split, "global",
                                                                                          stream="errors")
    t.bolt("pick", "m.c:Pick").input("route", "direct", stream="picked")
    t.bolt("all", "m.c:All").input(src, "all").input(split, "none")
    wf = t.workflow(check_classes=False)
    assert wf.config == (("topology.message.timeout.secs", "30"), ("recovery.tracking", "true"))
    assert wf.resources.include == ("lookup.csv",) and wf.resources.exclude == ("*.tmp",)
    assert wf.component("rows").impl.options == (("header", "true"), ("sep", ";"))
    assert wf.component("route").config == (("recovery.max.attempts", "5"),)
    assert [s.id for s in wf.component("route").streams] == ["default", "errors", "picked"]
    assert wf.component("errs").impl.mode == "overwrite"
    assert [(i.source, i.grouping.value) for i in wf.component("all").inputs] == [("rows", "all"), ("route", "none")]
    assert Topology.from_xml(t.to_xml()) == t and parse_string(t.to_xml()) == wf


def _line_of(text: str) -> int:
    """The line of this file that holds `text` (where a call below sits)."""
    for n, line in enumerate(Path(HERE).read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(text)


def test_errors_name_the_component_and_the_python_line_that_added_it():
    t = Topology("w")
    t.spout("s", source={"type": "file", "path": "x"}, fields="a")
    t.bolt("b", "m:C", fields="x").input("s", "fields", fields="zz")   # the bad input
    with pytest.raises(WorkflowError) as info:
        t.workflow()
    assert info.value.file == HERE and info.value.line == _line_of("# the bad input")
    assert "bolt 'b' groups by field 'zz', which stream 'default' of 's' does not declare" in str(info.value)

    t2 = Topology("w")
    t2.spout("s", source={"type": "file", "path": "x"}, fields="a")
    t2.bolt("lost", "m:C").input("nowhere")   # reads a component that does not exist
    with pytest.raises(WorkflowError, match="'lost'") as info:
        t2.workflow()
    assert info.value.line == _line_of("# reads a component that does not exist")

    t3 = Topology("w", config={"recovery.max.attempts": "many"})   # a bad property
    t3.spout("s", "m:S")
    with pytest.raises(WorkflowError, match="recovery.max.attempts") as info:
        t3.workflow()
    assert info.value.line == _line_of("# a bad property")


def test_a_class_that_does_not_import_is_named_at_the_line_that_added_it():
    t = Topology("w")
    t.spout("s", source={"type": "file", "path": "x"}, fields="a")
    t.bolt("b", "nosuch_mod:Nope", fields="x").input("s")   # a module that does not exist
    with pytest.raises(WorkflowError) as info:
        t.workflow()
    assert (info.value.file, info.value.line) == (HERE, _line_of("# a module that does not exist"))
    assert str(info.value) == (f"{HERE}:{info.value.line}: component 'b': class 'nosuch_mod:Nope': "
                               "no module named 'nosuch_mod'")
    # submit refuses it the same way, before Redis or Spark is reached
    with pytest.raises(WorkflowError) as info:
        recovery.submit(t, redis="redis://127.0.0.1:1")
    assert (info.value.file, info.value.line) == (HERE, _line_of("# a module that does not exist"))
    # a workflow whose code is importable elsewhere only is still built when asked
    assert t.workflow(check_classes=False).component("b").impl == ClassImpl(ref="nosuch_mod:Nope")


def test_a_check_made_at_submit_names_the_line_that_added_the_component():
    t = Topology("w")
    t.spout("s", source={"type": "file", "path": "in.txt"}, fields="a")   # a path a cluster cannot reach
    t.bolt("b", "recovery.testing.components:ListSink").input("s")
    with pytest.raises(WorkflowError, match="spout 's' .*relative to the workflow's folder") as info:
        recovery.submit(t, master="spark://127.0.0.1:1", redis="redis://127.0.0.1:1")
    assert (info.value.file, info.value.line) == (HERE, _line_of("# a path a cluster cannot reach"))


def test_mistakes_made_in_one_call_are_refused_by_that_call():
    t = Topology("w")
    t.spout("s", "m:S", fields="a")
    with pytest.raises(WorkflowError, match=r"bolt 'c' has 2 implementations \(cls and sink\)") as info:
        t.bolt("c", "m:C", sink={"type": "jsonl", "path": "o"})   # two implementations
    assert info.value.line == _line_of("# two implementations")
    with pytest.raises(WorkflowError, match="has no implementation"):
        t.bolt("c")
    with pytest.raises(WorkflowError, match="invalid component id 'c d'"):
        t.bolt("c d", "m:C")
    with pytest.raises(WorkflowError, match="parallelism must be at least 1"):
        t.bolt("c", "m:C", parallelism=0)
    with pytest.raises(WorkflowError, match="duplicate component id 's' \\(first added at .*test_topology.py:"):
        t.bolt("s", "m:C")
    b = t.bolt("b", "m:C").input("s")
    with pytest.raises(WorkflowError, match="reads stream 'default' of 's' twice"):
        b.input("s", "global")
    with pytest.raises(WorkflowError, match="unknown grouping 'hash'"):
        b.input("s", "hash")
    with pytest.raises(WorkflowError, match="a spout reads no input"):
        t["s"].input(b)
    with pytest.raises(WorkflowError, match="shell= takes command"):
        t.bolt("sh", shell={"script": "x.py"})


def _rebuilt(wf: Workflow) -> Topology:
    """`wf` written again through the builder's own calls (spout, bolt, stream, input)."""
    t = Topology(wf.name, config=dict(wf.config))
    for c in wf.components:
        impl = c.impl
        common = {"parallelism": c.parallelism, "config": dict(c.config)}
        cls = impl.ref if isinstance(impl, ClassImpl) else None
        shell = ({"command": impl.command, "script": impl.script, "args": list(impl.args)}
                 if isinstance(impl, ShellImpl) else None)
        if c.kind == "spout":
            source = ({"type": impl.type, **dict(impl.params), "options": dict(impl.options)}
                      if isinstance(impl, SourceImpl) else None)
            h = t.spout(c.id, cls, source=source, shell=shell, **common)
        else:
            sink = ({"type": impl.type, **dict(impl.params), **({"mode": impl.mode} if impl.mode else {})}
                    if isinstance(impl, SinkImpl) else None)
            h = t.bolt(c.id, cls, sink=sink, shell=shell, **common)
        for s in c.streams:
            h.stream(s.id, s.fields, s.direct)
        for i in c.inputs:
            h.input(i.source, i.grouping.value, fields=i.fields or None, stream=i.stream)
    return t


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows())
def test_a_random_topology_round_trips_through_its_xml(wf):
    # (params the builder's dicts give their own meaning: a source's options, a sink's mode)
    assume(not any(k in ("options", "mode") for c in wf.components
                   for k, _ in getattr(c.impl, "params", ())))
    t = _rebuilt(wf)
    assert t.workflow(check_classes=False) == wf
    assert t.to_xml() == to_xml(wf)
    back = Topology.from_xml(t.to_xml())
    assert back == t and back.workflow(check_classes=False) == wf and back.to_xml() == t.to_xml()


def test_a_topology_draws_itself_as_well_formed_escaped_html():
    t = Topology("w")
    t.spout("s", source={"type": "file", "path": "<script>alert(1)</script>&x"}, fields="a")
    t.bolt("b", "m:C").input("s")
    page = t._repr_html_()
    root = etree.fromstring(page)   # well-formed: parses as XML
    assert root.tag == "div" and root[0].tag == "{http://www.w3.org/2000/svg}svg"
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert {n.get("data-component") for n in root.iter("{http://www.w3.org/2000/svg}g")
            if n.get("data-component")} == {"s", "b"}
    # a topology that does not check shows its error, escaped
    t.bolt("x", "m:C").input("<none>")
    page = t._repr_html_()
    assert etree.fromstring(page).tag == "pre" and "&lt;none&gt;" in page


def test_a_topology_read_from_a_file_keeps_its_folder_and_can_grow():
    t = Topology.from_xml(WORKFLOWS / "cdn_logs.xml")
    assert t.file == str(WORKFLOWS / "cdn_logs.xml") and t.base_dir == str(WORKFLOWS)
    assert t.workflow() == load(WORKFLOWS / "cdn_logs.xml")
    t.bolt("count", "cdn_logs.components:Count").input("aggregate", "fields", fields="host")   # no such field
    with pytest.raises(WorkflowError, match="groups by field 'host'") as info:
        t.workflow()
    assert info.value.file == HERE and info.value.line == _line_of("# no such field")
