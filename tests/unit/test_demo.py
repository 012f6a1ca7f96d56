"""recovery/demo.py's comparison, on small tables and folders written here (the demo itself
runs Spark: `make demo`; tests/integration/test_sinks.py and test_cdn_logs_tables.py run its
comparison after real recoveries): a Delta table read back with deltalake is the same
multiset as a jsonl sink holding the same records, and a record lost or written twice shows."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from recovery import demo

RECORDS = [{"key": "a 10:00", "requests": 1, "bytes": 100}, {"key": "a 10:00", "requests": 1, "bytes": 100},
           {"key": "b 10:01", "requests": 1, "bytes": 7}]
STATE = {"a 10:00": [2, 200], "b 10:01": [1, 7]}


def delta_table(path: Path, *parts: list[dict]) -> Path:
    for part in parts:      # one commit per part, as a sink task's rounds write them
        write_deltalake(str(path), pa.Table.from_pylist(part), mode="append")
    return path


def jsonl_folder(path: Path, records: list[dict]) -> Path:
    path.mkdir()
    (path / "part-r-r0000-output-t0001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_delta_table_compares_equal_with_a_sink_holding_the_same_records(tmp_path):
    table = delta_table(tmp_path / "table", RECORDS[2:], RECORDS[:2])
    got, want = demo.table_records(table), demo.sink_records(jsonl_folder(tmp_path / "jsonl", RECORDS))
    assert got == want and sum(got.values()) == 3
    result = demo.compare(got, want, dict(STATE), dict(STATE))
    assert result.same and (result.records, result.want_records, result.missing, result.extra, result.keys) == (
        3, 3, 0, 0, 2)


def test_a_record_written_twice_or_lost_makes_the_comparison_fail(tmp_path):
    want = demo.sink_records(jsonl_folder(tmp_path / "jsonl", RECORDS))
    twice = demo.table_records(delta_table(tmp_path / "twice", RECORDS, RECORDS[2:]))
    result = demo.compare(twice, want, dict(STATE), dict(STATE))
    assert (result.extra, result.missing, result.same) == (1, 0, False)
    assert not result.same_state          # the table's sums per key no longer match the state
    lost = demo.table_records(delta_table(tmp_path / "lost", RECORDS[1:]))
    result = demo.compare(lost, want, dict(STATE), dict(STATE))
    assert (result.extra, result.missing, result.same) == (0, 1, False)


def test_show_table_prints_rows_and_the_count_with_the_path_as_the_user_types_it(tmp_path, capsys, monkeypatch):
    table = delta_table(tmp_path / "out" / "table", RECORDS)
    monkeypatch.chdir(tmp_path)
    demo.show_table(table, rows=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ">>> DeltaTable('out/table').to_pandas()"       # relative to where the demo runs
    assert lines[1].split() == ["key", "requests", "bytes"] and len(lines) == 5
    assert lines[-1] == "... 3 rows"
    monkeypatch.chdir(tmp_path / "out" / "table" / "_delta_log")
    demo.show_table(table, rows=2)
    assert capsys.readouterr().out.splitlines()[0] == f">>> DeltaTable({str(table)!r}).to_pandas()"
