"""The sink types come from one registry: the model's SINK_TYPES (attributes, kind, dead
letters), connectors/sinks.py's classes and the schema's lists name the same types, and each
class is built from a `<sink>` holding only its required attributes."""
from __future__ import annotations

from lxml import etree

from recovery.connectors.files import PATH_SINKS
from recovery.connectors.sink_base import BufferedSink
from recovery.connectors.sinks import SINKS, make_sink
from recovery.model.workflow import FILE_SINK_TYPES, SINK_TYPES, TABLE_SINK_TYPES, SinkImpl
from recovery.model.xml import build
from recovery.model.xml.document import SCHEMA_RESOURCE

XS = "{http://www.w3.org/2001/XMLSchema}"


def schema_enumeration(type_name: str) -> list[str]:
    tree = etree.parse(str(SCHEMA_RESOURCE))
    [simple] = [t for t in tree.iter(f"{XS}simpleType") if t.get("name") == type_name]
    return [e.get("value") for e in simple.iter(f"{XS}enumeration")]


def test_the_schema_the_model_and_the_classes_name_the_same_sink_types():
    assert schema_enumeration("sinkTypeName") == list(SINK_TYPES) == list(SINKS)


def test_the_schema_lists_the_dead_letter_sinks_the_model_has():
    assert schema_enumeration("deadLetterSinkTypeName") == [n for n, t in SINK_TYPES.items() if t.dead_letters]


def test_what_the_parser_and_the_checks_use_comes_from_the_registry():
    assert {n: t.required for n, t in SINK_TYPES.items()} == build.SINK_REQUIRED
    assert set(FILE_SINK_TYPES) == {n for n, t in SINK_TYPES.items() if t.kind == "path"}
    assert set(TABLE_SINK_TYPES) == {n for n, t in SINK_TYPES.items() if t.kind == "table"}
    assert set(PATH_SINKS) == {n for n, t in SINK_TYPES.items() if "path" in t.required}


def test_each_class_is_built_from_its_required_attributes():
    for name, t in SINK_TYPES.items():
        params = tuple((a, "postgresql://u@h/db" if a == "url" else "x") for a in t.required)
        sink = make_sink(SinkImpl(type=name, params=params), ".")
        assert isinstance(sink, BufferedSink) and sink.impl.type == name
