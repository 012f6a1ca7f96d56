"""recovery.connectors.delta: Delta tables in temporary folders, read back with deltalake, pyarrow
and pandas (no JVM). Runs go through recovery.testing with the real sink (no Spark; the engine's
own task runner): row and batch inputs, transient failures then recovery, a driver crash then
resume, replayed parts, concurrent writers (threads and processes), and the driver's checks.
tests/integration/test_table_sinks.py runs the sink on Spark."""
from __future__ import annotations

import collections
import json
import multiprocessing
import threading
from pathlib import Path

import fakeredis
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recovery import BasicBolt, BatchBolt, testing
from recovery.connectors import delta
from recovery.connectors.delta import app_id, commit_part
from recovery.connectors.sink_base import SinkTableError
from recovery.connectors.sinks import check_folders
from recovery.errors import WorkflowError
from recovery.model.graph import TaskMap
from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
from recovery.model.xml.parse import parse_string
from recovery.runtime import batch as batch_runtime
from tests.tables import FIELDS, enriched

HERE = __name__ + ":"
N = 60


class Enrich(BasicBolt):
    def process(self, tup):
        self.emit(enriched(tup["n"]))


class EnrichBatch(BatchBolt):
    def process_batch(self, batch):
        rows = [dict(zip(FIELDS, enriched(n))) for n in batch.column("n").to_pylist()]
        self.emit_batch(pa.RecordBatch.from_pylist(rows))


def workflow(base: Path, cls: str = "Enrich", parallelism: int = 2, config: dict[str, str] | None = None,
             **params: str) -> Workflow:
    """src (n) -> enrich (FIELDS) -> out (a delta sink at out/t)."""
    return Workflow(name="delta", base_dir=str(base), components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT), parallelism=parallelism,
                  streams=(StreamDef(fields=("n",)),)),
        Component(id="enrich", kind="bolt", impl=ClassImpl(ref=HERE + cls), parallelism=parallelism,
                  streams=(StreamDef(fields=FIELDS),), inputs=(Input(source="src"),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="delta", params=tuple({"path": "out/t", **params}.items())),
                  parallelism=parallelism, inputs=(Input(source="enrich"),)),
    ), config=tuple({"recovery.retry.delay.period.ms": "0", **(config or {})}.items()))


def run(wf: Workflow, items: list | None = None, **kw) -> testing.LocalRun:
    return testing.run_local(wf, fakeredis.FakeRedis(server=fakeredis.FakeServer()),
                             inputs={"src": list(range(N)) if items is None else items}, list_sinks=False, **kw)


def table_rows(path: Path, drop: tuple[str, ...] = ()) -> collections.Counter:
    """The table's rows as a multiset of canonical JSON, read with deltalake."""
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return collections.Counter(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in rows)


def expected() -> collections.Counter:
    return collections.Counter(json.dumps(dict(zip(FIELDS, enriched(n))), sort_keys=True) for n in range(N))


def test_a_run_writes_the_fields_as_columns_one_commit_per_part_read_by_deltalake_pyarrow_and_pandas(tmp_path):
    r = run(workflow(tmp_path), run_id="r1")
    assert r.summary.status == "completed"
    table = tmp_path / "out" / "t"
    assert table_rows(table) == expected()
    dt = DeltaTable(str(table))
    assert dt.schema().to_arrow().names == list(FIELDS)   # no run column unless asked
    assert dt.to_pandas()["n"].sort_values().tolist() == list(range(N))
    assert sorted(dt.to_pyarrow_dataset().to_table().column("n").to_pylist()) == list(range(N))
    tasks = TaskMap.of(r.workflow).task_ids("out")
    assert [dt.transaction_version(app_id("r1", "out", t)) for t in tasks] == [0, 0]   # round 0 each
    commits = [h for h in dt.history() if h.get("recovery_run") == "r1"]
    assert sorted((h["recovery_task"], h["recovery_round"]) for h in commits) == sorted((str(t), "0") for t in tasks)


def test_batch_inputs_write_the_rows_row_inputs_write(tmp_path):
    wf = workflow(tmp_path / "batch", cls="EnrichBatch")
    assert batch_runtime.is_batch_sink(wf.component("out"), wf)
    r = run(wf)
    assert r.summary.status == "completed"
    assert table_rows(tmp_path / "batch" / "out" / "t") == expected()


def test_transient_failures_then_recover_hold_exactly_a_failure_free_runs_rows(tmp_path):
    clean = run(workflow(tmp_path / "clean"))
    inject = {"recovery.inject.e.component": "enrich", "recovery.inject.e.rate": "0.1",
              "recovery.inject.o.component": "out", "recovery.inject.o.rate": "0.1",
              "recovery.inject.o.attempts": "2"}
    failing = run(workflow(tmp_path / "failing", config=inject), run_id="f1")
    assert failing.summary.status == "pending"
    assert {p.component for p in failing.summary.failed_positions} == {"enrich", "out"}
    testing.recover_local(failing)
    assert clean.summary.status == failing.summary.status == "completed"
    assert failing.summary.rounds >= 2
    want = table_rows(tmp_path / "clean" / "out" / "t")
    assert want == expected()
    assert table_rows(tmp_path / "failing" / "out" / "t") == want
    dt = DeltaTable(str(tmp_path / "failing" / "out" / "t"))   # recovery rounds' parts, at their rounds
    assert max(dt.transaction_version(app_id("f1", "out", t)) or 0 for t in TaskMap.of(failing.workflow).task_ids("out")) >= 2


def test_a_driver_crash_mid_run_then_recover_writes_each_row_once(tmp_path):
    items = list(range(N // 2)) + [testing.CRASH] + list(range(N // 2, N))
    r = run(workflow(tmp_path, **{"run-column": "run_id"}), items, run_id="c1")
    assert r.interrupted == "crash"
    testing.recover_local(r)
    assert r.summary.status == "completed"
    assert table_rows(tmp_path / "out" / "t", drop=("run_id",)) == expected()
    assert set(DeltaTable(str(tmp_path / "out" / "t")).to_pandas()["run_id"]) == {"c1"}


def test_data_files_of_attempts_killed_before_their_commit_go_at_recover_and_at_clear(tmp_path):
    import pyarrow.parquet as pq

    from recovery.jobs import clear
    items = list(range(N // 2)) + [testing.CRASH] + list(range(N // 2, N))
    r = run(workflow(tmp_path), items, run_id="c1")
    table = tmp_path / "out" / "t"
    table.mkdir(parents=True, exist_ok=True)   # (the crash may come before the table's first commit)
    task = TaskMap.of(r.workflow).task_ids("out")[0]

    def killed_attempt(run_id: str, round_no: int) -> Path:
        """A data file as an attempt killed before its commit leaves it: named by run, round,
        sink, task and attempt, in no commit."""
        path = table / f"{delta.data_file_stem(run_id, round_no, 'out', task)}-{'ab' * 8}-0.snappy.parquet"
        pq.write_table(pa.table({"n": [1]}), path)
        return path

    ours, other_run, foreign = killed_attempt("c1", 0), killed_attempt("c2", 0), table / "not-ours.parquet"
    pq.write_table(pa.table({"n": [1]}), foreign)
    testing.recover_local(r)
    assert r.summary.status == "completed"
    assert not ours.exists() and other_run.exists() and foreign.exists()
    assert table_rows(table) == expected()       # every committed file is there
    assert all(Path(u).name.startswith(("part-c1-r0000-out-t", "part-c1-r0001-out-t"))
               for u in DeltaTable(str(table)).file_uris())   # a part's files: named by run, round, sink, task
    later = killed_attempt("c1", 1)
    clear.clear(r.client, "c1")
    assert not later.exists() and other_run.exists() and foreign.exists()
    assert table_rows(table) == expected()       # the rows stay


def test_a_replayed_part_writes_nothing_version_0_included(tmp_path):
    uri = str(tmp_path / "t")
    part = pa.table({"n": [1, 2]})
    assert commit_part(uri, part, "run:out:1", 0, "test") is True
    assert commit_part(uri, part, "run:out:1", 0, "test") is False    # version 0: committed, though falsy
    assert commit_part(uri, part, "run:out:2", 0, "test") is True     # another task
    assert commit_part(uri, part, "run:out:1", 1, "test") is True     # the task's next round
    assert commit_part(uri, part, "run:out:1", 1, "test") is False
    assert sorted(DeltaTable(uri).to_pyarrow_table().column("n").to_pylist()) == [1, 1, 1, 2, 2, 2]


def _write_parts(uri: str, apps: list[str], start: threading.Barrier | None = None) -> list[bool]:
    if start is not None:
        start.wait()
    return [commit_part(uri, pa.table({"app": [a] * 3}), a, 0, "test") for a in apps]


def _race_in_process(uri: str, app: str) -> bool:
    return commit_part(uri, pa.table({"app": [app] * 3}), app, 0, "test")


def _check_parts(uri: str, apps: list[str]) -> None:
    """Every app id's part is in the table once: 3 rows each, none lost, none twice."""
    dt = DeltaTable(uri)
    assert collections.Counter(dt.to_pyarrow_table().column("app").to_pylist()) == {a: 3 for a in set(apps)}
    assert all(dt.transaction_version(a) == 0 for a in apps)


def test_concurrent_writers_in_threads_lose_no_commit_and_double_none(tmp_path):
    uri = str(tmp_path / "t")                     # no table yet: the writers race to create it too
    apps = [f"r:out:{t}" for t in range(8)] + ["r:out:0", "r:out:0", "r:out:3"]   # some attempts of one part
    start = threading.Barrier(len(apps))
    results: list[bool] = []
    threads = [threading.Thread(target=lambda a=a: results.extend(_write_parts(uri, [a], start))) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == len(apps) and results.count(True) == 8   # one attempt per part wrote
    _check_parts(uri, apps)


def test_concurrent_writers_in_processes_lose_no_commit_and_double_none(tmp_path):
    uri = str(tmp_path / "t")
    apps = [f"r:out:{t}" for t in range(6)] + ["r:out:1", "r:out:1"]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(_race_in_process, [(uri, a) for a in apps])
    assert results.count(True) == 6
    _check_parts(uri, apps)


# --- the driver's checks -----------------------------------------------------------------------
def test_a_path_that_cannot_hold_a_table_is_refused_before_the_run(tmp_path):
    (tmp_path / "file").write_text("in the way")
    for path, message in (("file/t", "cannot create the Delta table's folder .* is a file"),
                          ("file", "is a file, not a Delta table's folder")):
        with pytest.raises(SinkTableError, match=rf"^sink 'out' \(delta\): .*{message}"):
            check_folders(workflow(tmp_path, path=path), "run")
    (tmp_path / "notdelta").mkdir()
    (tmp_path / "notdelta" / "data.csv").write_text("a,b\n")
    with pytest.raises(SinkTableError, match="holds files but is not a Delta table"):
        check_folders(workflow(tmp_path, path="notdelta"), "run")
    check_folders(workflow(tmp_path, path="new/folder/t"), "run")   # created by the first part


class EnrichThenBlock(Enrich):
    """Enrich, which first puts a file where the sink's table goes (test.block), once: the sink
    tasks then cannot write what the driver's check found writable."""

    def prepare(self, conf, context):
        block = Path(conf["test.block"])
        if not block.exists() and not block.with_suffix(".once").exists():
            block.write_text("in the way")
            block.with_suffix(".once").write_text("")


def test_a_sink_task_that_cannot_write_fails_its_tuples_and_recover_writes_them(tmp_path):
    wf = workflow(tmp_path, cls="EnrichThenBlock", path="blocked/t")
    enrich = wf.component("enrich").model_copy(update={"config": (("test.block", str(tmp_path / "blocked")),)})
    wf = wf.model_copy(update={"components": tuple(enrich if c.id == "enrich" else c for c in wf.components)})
    r = run(wf, run_id="b1")
    assert r.summary.status == "pending"
    failed = r.failed_tuples()
    assert {(t.component, t.attempt) for t in failed} == {("out", 1)} and len(failed) == N
    assert all("sink 'out' (delta): cannot create Delta table" in t.error for t in failed)
    (tmp_path / "blocked").unlink()   # the cause gone: recover writes the part
    testing.recover_local(r)
    assert r.summary.status == "completed"
    assert table_rows(tmp_path / "blocked" / "t") == expected()


def test_an_existing_tables_columns_must_hold_the_fields(tmp_path):
    DeltaTable.create(str(tmp_path / "out" / "t"), pa.schema([("n", pa.int64()), ("other", pa.string())]))
    with pytest.raises(SinkTableError, match=r"^sink 'out' \(delta\): table .*out/t has no columns word, score, "
                                             r"even, tags, info for the input's fields \(its columns: n, other\)"):
        check_folders(workflow(tmp_path), "run")


def test_a_tables_types_are_kept_and_a_value_that_does_not_fit_fails_the_part(tmp_path):
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, pa.schema([("x", pa.float64()), ("y", pa.int64())]))
    assert commit_part(uri, pa.table({"x": [1, 2], "y": [None, None]}), "a", 0, "test")   # ints into doubles
    assert DeltaTable(uri).to_pyarrow_table().to_pylist() == [{"x": 1.0, "y": None}, {"x": 2.0, "y": None}]
    with pytest.raises(SinkTableError, match="column y of table .* is int64; this part's values do not fit it"):
        commit_part(uri, pa.table({"x": [1.0], "y": [1.5]}), "b", 0, "test")


def test_a_run_id_whose_commits_the_table_holds_is_refused(tmp_path):
    r = run(workflow(tmp_path), run_id="again")
    assert r.summary.status == "completed"
    check_folders(workflow(tmp_path), "other")
    check_folders(workflow(tmp_path), None)
    first = TaskMap.of(r.workflow).task_ids("out")[0]
    with pytest.raises(SinkTableError, match=rf"already holds commits of run 'again' \(app transaction again:out:{first}\)"):
        check_folders(workflow(tmp_path), "again")


# --- the XML -----------------------------------------------------------------------------------
XML = '''<workflow xmlns="urn:recovery:workflow:1" name="s">
  <spout id="src"><source type="file" path="in.txt"/><stream fields="id word"/></spout>
  <bolt id="out"><sink type="delta" path="{path}"{extra}/><input from="src"/></bolt>
</workflow>'''


@pytest.mark.parametrize("path", ["out/t", "/abs/t", "file:///abs/t", "s3://bucket/t"])
def test_the_sink_parses_and_its_path_is_a_folder_relative_to_the_xml_or_a_uri(tmp_path, path):
    wf = parse_string(XML.format(path=path, extra=' run-column="run"'), base_dir=str(tmp_path))
    impl = wf.component("out").impl
    assert isinstance(impl, SinkImpl) and impl.write_mode(reads_topics=False) == "append" and impl.param("run-column") == "run"
    want = str(tmp_path / "out" / "t") if path == "out/t" else path
    assert delta.location(impl, str(tmp_path)) == want


def test_the_sink_type_is_registered():
    from recovery.connectors.sinks import SINKS
    assert "delta" in SINKS and SINKS["delta"] is delta.DeltaSink and list(SINKS)[-3:-1] == ["postgres", "delta"]


def test_a_mode_other_than_append_is_refused_with_file_and_line():
    with pytest.raises(WorkflowError, match=r'^w\.xml:3: bolt \'out\': <sink type="delta"> appends to its table'):
        parse_string(XML.format(path="t", extra=' mode="overwrite"'), file="w.xml")
