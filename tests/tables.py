"""What the table sinks' tests share: a small workflow (src -> enrich -> postgres and/or delta
sinks), the components it runs (written into the workflow's folder, so that Spark's Python
workers import them from there, as they import any workflow's package), and the tables read
back as multisets of rows.

enrich emits, per number n, values of every kind a table sink maps: an int, a string, a float
or null, a boolean, a list and a map (`enriched`).
"""
from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

FIELDS = ("n", "word", "score", "even", "tags", "info")
WORDS = ["alpha", "beta", "gamma", "delta", "épsilon"]
MODULE = "tablecomps"

COMPONENTS = '''
"""Components of the table sinks' tests (tests/tables.py)."""
import os

import pyarrow as pa

from recovery import BasicBolt, BatchBolt
from recovery.connectors.delta import DeltaSink
from recovery.connectors.postgres import PostgresSink
from recovery.model.workflow import SinkImpl

FIELDS = ("n", "word", "score", "even", "tags", "info")
WORDS = ["alpha", "beta", "gamma", "delta", "épsilon"]


def enriched(n):
    return [n, WORDS[n % 5], n * 1.5 if n % 7 else None, n % 2 == 0, [WORDS[n % 5], str(n)], {"len": n % 4}]


class Enrich(BasicBolt):
    def process(self, tup):
        self.emit(enriched(int(tup["n"])))


class EnrichBatch(BatchBolt):
    def process_batch(self, batch):
        rows = [dict(zip(FIELDS, enriched(int(n)))) for n in batch.column("n").to_pylist()]
        self.emit_batch(pa.RecordBatch.from_pylist(rows))


def first_spark_attempt():
    from pyspark import TaskContext
    ctx = TaskContext.get()
    return ctx is not None and ctx.attemptNumber() == 0


class _DiesAfterWriting:
    """A built-in sink whose task test.die.task, on Spark's first attempt, dies right after its
    part is written and acked, before the task's commit in Redis: test.die.marker says it did."""

    def __init__(self):
        pass   # the sink's attributes come from the component's config, in prepare

    def prepare(self, conf, context):
        params = tuple((k[len("test.sink."):], v) for k, v in conf.items() if k.startswith("test.sink."))
        self.sink_class.__init__(self, SinkImpl(type=self.sink_type, params=params), ".")

    def finish(self):
        super().finish()
        if self.context.task_id == int(self.conf["test.die.task"]) and first_spark_attempt():
            open(self.conf["test.die.marker"], "a").close()
            os._exit(17)


class PostgresThenDie(_DiesAfterWriting, PostgresSink):
    sink_type, sink_class = "postgres", PostgresSink


class DeltaThenDie(_DiesAfterWriting, DeltaSink):
    sink_type, sink_class = "delta", DeltaSink
'''


def write_components(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{MODULE}.py").write_text(COMPONENTS)


def write_input(folder: Path, n: int) -> Path:
    path = folder / "numbers.txt"
    path.write_text("".join(f"{i}\n" for i in range(n)))
    return path


def enriched(n: int) -> list[Any]:
    return [n, WORDS[n % 5], n * 1.5 if n % 7 else None, n % 2 == 0, [WORDS[n % 5], str(n)], {"len": n % 4}]


def expected(n: int) -> collections.Counter:
    """The rows a failure-free run writes for the numbers 0..n-1, as a multiset."""
    return collections.Counter(canonical(dict(zip(FIELDS, enriched(i)))) for i in range(n))


def canonical(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def workflow_xml(folder: Path, sinks: str, *, n: int = 200, parallelism: int = 2, enrich: str = "Enrich",
                 config: dict[str, str] | None = None, name: str = "tables") -> Path:
    """folder/tables.xml: a file source of the numbers 0..n-1 -> enrich -> `sinks` (<bolt>
    elements reading from enrich), with the components and the input written beside it."""
    write_components(folder)
    write_input(folder, n)
    props = "".join(f'<property name="{k}" value="{v}"/>' for k, v in (config or {}).items())
    xml = folder / f"{name}.xml"
    xml.write_text(f'''<workflow xmlns="urn:recovery:workflow:1" name="{name}">
  <config>{props}</config>
  <spout id="src" parallelism="{parallelism}"><source type="file" path="numbers.txt"/><stream fields="n"/></spout>
  <bolt id="enrich" parallelism="{parallelism}" class="{MODULE}:{enrich}"><input from="src"/>
    <stream fields="{' '.join(FIELDS)}"/></bolt>
  {sinks}
</workflow>''')
    return xml


def postgres_bolt(url: str, table: str = "events", *, id: str = "pg", parallelism: int = 2, extra: str = "") -> str:
    return (f'<bolt id="{id}" parallelism="{parallelism}"><sink type="postgres" url="{url}" table="{table}"{extra}/>'
            f'<input from="enrich"/></bolt>')


def delta_bolt(path: str = "out/events", *, id: str = "lake", parallelism: int = 2, extra: str = "") -> str:
    return (f'<bolt id="{id}" parallelism="{parallelism}"><sink type="delta" path="{path}"{extra}/>'
            f'<input from="enrich"/></bolt>')


def postgres_rows(url: str, table: str = "events", drop: tuple[str, ...] = ()) -> collections.Counter:
    """The table's rows as a multiset (canonical JSON of each row's columns)."""
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(*table.split(".")))).fetchall()
    return collections.Counter(canonical({k: v for k, v in r.items() if k not in drop}) for r in rows)


def commit_rows(url: str, schema: str = "public") -> list[tuple]:
    """(run, sink, task, round, rows) of the commit table, sorted."""
    import psycopg
    from psycopg import sql
    with psycopg.connect(url) as conn:
        return sorted(conn.execute(sql.SQL("SELECT run_id, sink, task, round, rows FROM {}").format(
            sql.Identifier(schema, "recovery_commits"))).fetchall())


def delta_rows(path: Path | str, drop: tuple[str, ...] = ()) -> collections.Counter:
    """The Delta table's rows as a multiset, read with deltalake (no JVM)."""
    from deltalake import DeltaTable
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return collections.Counter(canonical({k: v for k, v in r.items() if k not in drop}) for r in rows)
