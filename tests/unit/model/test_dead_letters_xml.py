"""`<dead-letters><sink .../></dead-letters>` in the workflow XML: parsed into the model, written
back, and refused with a line number when its sink cannot take dead letters."""
from __future__ import annotations

import pytest

from recovery.errors import WorkflowError
from recovery.model.workflow import DEAD_LETTER_SINK_ID, SinkImpl
from recovery.model.xml.parse import parse_string
from recovery.model.xml.write import to_xml

BODY = """  <spout id="words" class="m:Words"><stream fields="word"/></spout>
  <bolt id="out"><sink type="jsonl" path="out/w"/><input from="words"/></bolt>
"""


def doc(dead: str, body: str = BODY) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="w">
  <config><property name="recovery.dead.retention" value="7d"/></config>
{dead}
{body}</workflow>
"""


@pytest.mark.parametrize("sink, impl", [
    ('<sink type="jsonl" path="dead"/>', SinkImpl(type="jsonl", params=(("path", "dead"),))),
    ('<sink type="parquet" path="dead" mode="append"/>', SinkImpl(type="parquet", mode="append",
                                                                  params=(("path", "dead"),))),
    ('<sink type="postgres" url="postgresql://u@h/db" table="dead_letters"/>',
     SinkImpl(type="postgres", params=(("url", "postgresql://u@h/db"), ("table", "dead_letters")))),
    ('<sink type="delta" path="s3://b/dead"/>', SinkImpl(type="delta", params=(("path", "s3://b/dead"),))),
])
def test_a_dead_letter_sink_is_parsed_and_written_back(sink, impl):
    wf = parse_string(doc(f"  <dead-letters>{sink}</dead-letters>"))
    assert wf.dead_letters == impl
    assert parse_string(to_xml(wf)) == wf
    full = wf.with_dead_letter_sink()
    assert full.component(DEAD_LETTER_SINK_ID).impl == impl and len(full.components) == 4


def test_without_dead_letters_the_model_has_none_and_the_xml_no_element():
    wf = parse_string(doc(""))
    assert wf.dead_letters is None and "dead-letters" not in to_xml(wf) and wf.with_dead_letter_sink() is wf


@pytest.mark.parametrize("dead, message", [
    ('<dead-letters><sink type="redis" key="k"/></dead-letters>', "redis"),
    ('<dead-letters><sink type="jsonl"/></dead-letters>', "needs a non-empty path= attribute"),
    ('<dead-letters><sink type="postgres" url="postgresql://u:secret@h/db" table="t"/></dead-letters>',
     "url holds a password"),
    ('<dead-letters><sink type="delta" path="d" mode="error"/></dead-letters>', "appends to its table"),
    ('<dead-letters/>', "sink"),
])
def test_a_dead_letter_sink_that_cannot_take_them_is_refused_with_its_line(dead, message):
    with pytest.raises(WorkflowError, match=message) as err:
        parse_string(doc("  " + dead), file="w.xml")
    assert "w.xml" in str(err.value) and "w.xml:4:" in str(err.value)


def test_a_component_named_as_the_dead_letter_sink_is_refused():
    body = BODY.replace('bolt id="out"', f'bolt id="{DEAD_LETTER_SINK_ID}"')
    with pytest.raises(WorkflowError, match="dead-letter sink's"):
        parse_string(doc('  <dead-letters><sink type="jsonl" path="d"/></dead-letters>', body), file="w.xml")


def test_validate_refuses_a_dead_letter_sink_without_its_path_in_one_line(tmp_path):
    from click.testing import CliRunner

    from recovery.cli import main
    xml = tmp_path / "w.xml"
    xml.write_text(doc('  <dead-letters><sink type="parquet" path=" "/></dead-letters>'))
    res = CliRunner().invoke(main, ["validate", str(xml)])
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0 and "w.xml:4" in res.stderr and "path=" in res.stderr
