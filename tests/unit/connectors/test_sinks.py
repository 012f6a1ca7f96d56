"""The built-in sinks' dispatcher (recovery/connectors/sinks.py): the class of each sink type, a
clear refusal of an unknown type, and the check at submit that looks at tables before folders."""
from __future__ import annotations

import pytest

from recovery.connectors import sinks
from recovery.connectors.capture_sink import CaptureSink
from recovery.connectors.delta import DeltaSink
from recovery.connectors.file_sinks import JsonlSink, ParquetSink
from recovery.connectors.postgres import PostgresSink
from recovery.connectors.redis_sink import RedisHashSink
from recovery.connectors.sink_base import BufferedSink, SinkFolderError, SinkTableError
from recovery.model.workflow import SinkImpl
from recovery.model.xml.parse import parse_string


def test_each_sink_type_is_its_class_in_the_order_the_xml_reference_lists_them():
    assert list(sinks.SINKS.items()) == [("jsonl", JsonlSink), ("parquet", ParquetSink), ("redis", RedisHashSink),
                                         ("postgres", PostgresSink), ("delta", DeltaSink), ("capture", CaptureSink)]
    assert all(issubclass(cls, BufferedSink) for cls in sinks.SINKS.values())


def test_make_sink_builds_the_types_class_and_refuses_an_unknown_type_naming_the_known_ones(tmp_path):
    sink = sinks.make_sink(SinkImpl(type="jsonl", params=(("path", "out"),)), str(tmp_path))
    assert type(sink) is JsonlSink and sink.base_dir == str(tmp_path)
    with pytest.raises(ValueError, match=r"^unknown sink type 'csv' \(known: jsonl, parquet, redis, postgres, delta, capture\)$"):
        sinks.make_sink(SinkImpl(type="csv"), ".")


XML = '''<workflow xmlns="urn:recovery:workflow:1" name="s">
  <spout id="src"><source type="file" path="in.txt"/><stream fields="line"/></spout>
  <bolt id="out"><sink type="jsonl" path="out"/><input from="src"/></bolt>
  <bolt id="lake"><sink type="delta" path="{lake}"/><input from="src"/></bolt>
</workflow>'''


def test_check_folders_refuses_a_table_that_cannot_take_the_run_before_looking_at_folders(tmp_path):
    (tmp_path / "lake").write_text("not a table")          # the delta sink's folder is a file
    (tmp_path / "out").write_text("not a folder")          # and so is the jsonl sink's
    wf = parse_string(XML.format(lake="lake"), base_dir=str(tmp_path))
    with pytest.raises(SinkTableError, match=r"sink 'lake' \(delta\): .*lake is a file, not a Delta table's folder"):
        sinks.check_folders(wf, "run-a")
    (tmp_path / "lake").unlink()
    with pytest.raises(SinkFolderError, match=r"^sink 'out' \(jsonl\): folder .*out is a file, not a folder$"):
        sinks.check_folders(wf, "run-a")
