"""recovery.connectors.postgres without a server: table names, the column types a missing table
gets from the values, how values go into columns, the tuples refused at encode, and the sink's
XML (required attributes, no password, append only). tests/integration/test_postgres_sink.py
writes to a real PostgreSQL."""
from __future__ import annotations

import json

import pytest

from recovery.api.components import Tuple
from recovery.connectors import postgres
from recovery.connectors.postgres import PostgresSink, TableName, column_type, column_types, converter
from recovery.connectors.sinks import SINKS, make_sink
from recovery.errors import WorkflowError
from recovery.model.workflow import SinkImpl
from recovery.model.xml.parse import parse_string
from recovery.model.xml.write import to_xml

URL = "postgresql://me@127.0.0.1:5432/db"
XML = '''<workflow xmlns="urn:recovery:workflow:1" name="s">
  <spout id="src"><source type="file" path="in.txt"/><stream fields="id word"/></spout>
  <bolt id="out" parallelism="2">
    <sink type="postgres" url="{url}" table="{table}"{extra}/>
    <input from="src"/>
  </bolt>
</workflow>'''


def workflow(url: str = URL, table: str = "events", extra: str = ""):
    return parse_string(XML.format(url=url, table=table, extra=extra), file="w.xml")


@pytest.mark.parametrize("text,schema,name", [("events", None, "events"), ("audit.events", "audit", "events"),
                                              ("Mixed.Case", "Mixed", "Case")])
def test_a_table_is_a_name_or_a_schema_qualified_name(text, schema, name):
    assert TableName.parse(text) == TableName(schema, name)
    assert str(TableName.parse(text)) == text


@pytest.mark.parametrize("text", ["a.b.c", ".t", "s.", ""])
def test_other_table_names_are_refused(text):
    with pytest.raises(ValueError, match="name or schema.name"):
        TableName.parse(text)


@pytest.mark.parametrize("values,want", [
    ([1, 2, None], "bigint"),
    ([True, False], "boolean"),
    ([1, 2.5], "double precision"),
    ([0.5], "double precision"),
    (["a", None], "text"),
    ([None, None], "text"),                   # a column of nulls only
    ([], "text"),
    ([[1, 2], ["a"]], "jsonb"),               # lists
    ([{"k": 1}, None], "jsonb"),              # maps
    ([1, "a"], "jsonb"),                      # kinds mixed: JSON holds them all
    ([True, 1], "jsonb"),                     # a boolean is not a number here
    ([2 ** 63], "numeric"),                   # past bigint
    ([1, -(2 ** 63) - 1], "numeric"),
    ([2 ** 70, 0.5], "double precision"),
    ([b"\x00\x01"], "bytea"),
])
def test_a_missing_tables_column_types_come_from_the_values(values, want):
    assert column_type(values) == want


def test_column_types_cover_every_column_of_the_part_even_one_a_row_lacks():
    rows = [{"a": 1, "b": "x"}, {"a": 2.5}]
    assert column_types(rows, ["a", "b", "c"]) == {"a": "double precision", "b": "text", "c": "text"}


def test_values_go_into_json_and_text_columns_as_json_and_into_others_as_they_are():
    to_jsonb, to_text, to_int = converter("jsonb"), converter("character varying(20)"), converter("bigint")
    assert to_jsonb({"b": [1, 2], "a": "é"}) == json.dumps({"a": "é", "b": [1, 2]}, ensure_ascii=False)
    assert to_jsonb("s") == '"s"' and to_jsonb(None) is None and to_jsonb(True) == "true"
    assert to_text("s") == "s" and to_text(True) == "true" and to_text([1]) == "[1]" and to_text(None) is None
    assert to_int(5) == 5 and to_int(None) is None and to_int({"a": 1}) == '{"a": 1}'
    with pytest.raises(ValueError):
        to_jsonb([float("nan")])              # JSON has no NaN: the part fails, not silently


def sink(**params: str) -> PostgresSink:
    s = make_sink(SinkImpl(type="postgres", params=tuple({"url": URL, "table": "t", **params}.items())), ".")
    assert isinstance(s, PostgresSink)
    return s


def test_the_sink_type_is_registered_and_encodes_a_tuple_as_its_fields():
    assert "postgres" in SINKS and SINKS["postgres"] is PostgresSink
    s = sink()
    tup = Tuple(1, "src", "default", 3, [7, "x", [1, {"k": None}]], ("id", "word", "more"), ())
    assert s.encode(tup) == {"id": 7, "word": "x", "more": [1, {"k": None}]}


@pytest.mark.parametrize("value", ["a\x00b", ["ok", "\x00"], {"k\x00": 1}, {"k": ["\x00"]}])
def test_a_value_postgresql_cannot_store_fails_its_tuple_alone_at_encode(value):
    with pytest.raises(ValueError, match=r"field 'word' holds a NUL character"):
        sink().encode(Tuple(1, "src", "default", 3, [1, value], ("id", "word"), ()))


def test_a_tuple_without_fields_is_refused_at_encode():
    with pytest.raises(ValueError, match="writes named fields"):
        sink().encode(Tuple(1, "src", "default", 3, [1], (), ()))


# --- the XML -----------------------------------------------------------------------------------
def test_the_sink_parses_with_its_attributes_appends_by_default_and_round_trips():
    wf = workflow(table="audit.events", extra=' run-column="run_id"')
    impl = wf.component("out").impl
    assert isinstance(impl, SinkImpl) and impl.type == "postgres" and impl.mode is None
    assert impl.write_mode(reads_topics=False) == "append"
    assert dict(impl.params) == {"url": URL, "table": "audit.events", "run-column": "run_id"}
    assert parse_string(to_xml(wf)) == wf
    assert workflow(extra=' mode="append"').component("out").impl.write_mode(reads_topics=False) == "append"


@pytest.mark.parametrize("url", ["postgresql://me:s3cr3t@127.0.0.1/db", "postgres://:s3cr3t@h/db",
                                 "postgresql://me@h/db?sslmode=require&amp;password=s3cr3t"])
def test_a_url_with_a_password_is_refused_with_file_and_line(url):
    with pytest.raises(WorkflowError, match=r"^w\.xml:4: bolt 'out': <sink type=\"postgres\"> url holds a password") as info:
        workflow(url=url)
    assert "s3cr3t" not in str(info.value)   # the message does not repeat it


@pytest.mark.parametrize("mode", ["error", "overwrite"])
def test_a_mode_other_than_append_is_refused_with_file_and_line(mode):
    with pytest.raises(WorkflowError, match=rf'^w\.xml:4: .*appends to its table: mode= can only be "append" \(got "{mode}"\)'):
        workflow(extra=f' mode="{mode}"')


def test_the_commit_table_the_docs_name_is_the_one_written():
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    assert postgres.COMMIT_TABLE == "recovery_commits" and "`recovery_commits`" in readme
