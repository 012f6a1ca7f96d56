"""The example workflows in workflows/: they validate, their data is what their generators
make, and their components do what they say when their tasks run through recovery.testing
(the engine's semantics, in-process, on fakeredis)."""
from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from recovery import BasicBolt, Bolt, testing
from recovery.api.loader import check_classes, component_class
from recovery.api.runnable import validate_file
from recovery.model.graph import topological_order
from recovery.model.workflow import ClassImpl, SinkImpl, SourceImpl
from recovery.model.xml.parse import load, parse_string
from recovery.model.xml.write import to_xml

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
NAMES = ["wordcount", "cdn_logs", "fanout"]


@pytest.fixture(scope="module", autouse=True)
def _workflows_on_path():
    sys.path.insert(0, str(WORKFLOWS))
    yield
    sys.path.remove(str(WORKFLOWS))


# ------------------------------------------------------------------ structure


@pytest.mark.parametrize("name", NAMES)
def test_example_validates_without_warnings(name):
    wf, warnings = validate_file(WORKFLOWS / f"{name}.xml")
    assert wf.name == name
    assert warnings == []
    assert check_classes(wf) == []
    assert parse_string(to_xml(wf), base_dir=wf.base_dir) == wf


@pytest.mark.parametrize("name", NAMES)
def test_example_layout(name):
    pkg = WORKFLOWS / name
    for f in ("__init__.py", "components.py", "generate.py"):
        assert (pkg / f).is_file()
    wf = load(WORKFLOWS / f"{name}.xml")
    for c in wf.components:
        if isinstance(c.impl, SourceImpl):
            data = WORKFLOWS / c.impl.param("path")
            assert data.is_file() and data.parent == WORKFLOWS / "data"
            assert 100 <= len(data.read_text().splitlines()) <= 2000
        if isinstance(c.impl, SinkImpl):
            assert c.impl.param("path").startswith("out/")      # git ignores out/
        if isinstance(c.impl, ClassImpl):
            assert c.impl.ref.startswith(f"{name}.components:")


def test_wordcount_shape():
    wf = load(WORKFLOWS / "wordcount.xml")
    assert topological_order(wf) == ["sentences", "split", "count", "out"]
    split, count, out = (wf.component(c) for c in ("split", "count", "out"))
    assert issubclass(component_class(wf, split), BasicBolt)
    cls = component_class(wf, count)
    assert issubclass(cls, Bolt) and not issubclass(cls, BasicBolt)
    assert count.inputs[0].grouping.value == "fields" and count.inputs[0].fields == ("word",)
    assert out.inputs[0].grouping.value == "global"
    assert count.streams[0].fields == ("word", "count")


def test_cdn_logs_shape_follows_seed_004():
    wf = load(WORKFLOWS / "cdn_logs.xml")
    assert topological_order(wf) == ["logs", "split", "normalize", "aggregate", "output"]
    assert wf.component("split").streams[0].fields == (
        "clientip", "time", "method", "host", "path", "protocol", "protocol-version", "code",
        "size", "dltime")
    agg = wf.component("aggregate")
    assert agg.inputs[0].grouping.value == "fields" and agg.inputs[0].fields == ("key",)
    assert agg.streams[0].fields == ("key", "requests", "bytes")


def test_fanout_shape_follows_seed_001():
    wf = load(WORKFLOWS / "fanout.xml")
    subs = collections.defaultdict(set)
    for c in wf.components:
        for i in c.inputs:
            subs[i.source].add(c.id)
    assert subs["numbers"] == {"fork", "archive"}            # one spout tuple, two bolts
    assert subs["fork"] == {"square", "cube"}                 # Bolt1 -> Bolt3, Bolt4
    assert {i.source for i in wf.component("join").inputs} == {"square", "cube"}   # join
    assert "archive" not in subs                              # Bolt2 emits nothing


# ------------------------------------------------------------------ generators


@pytest.mark.parametrize("name,data,kwargs", [
    ("wordcount", "sentences.txt", {}),
    ("cdn_logs", "cdn.log", {}),
    ("fanout", "numbers.txt", {}),
])
def test_committed_data_is_what_the_generator_makes(tmp_path, name, data, kwargs):
    mod = __import__(f"{name}.generate", fromlist=["generate"])
    out = tmp_path / data
    mod.generate(str(out), **kwargs)
    assert out.read_bytes() == (WORKFLOWS / "data" / data).read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_generators_are_deterministic_and_seeded(tmp_path, name):
    mod = __import__(f"{name}.generate", fromlist=["generate"])
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    mod.generate(str(a), 50, 7)
    mod.generate(str(b), 50, 7)
    mod.generate(str(c), 50, 8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert len(a.read_text().splitlines()) == 50


@pytest.mark.parametrize("name", NAMES)
def test_generators_run_as_modules_from_workflows(tmp_path, name):
    out = tmp_path / "data.txt"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-m", f"{name}.generate", "--n", "20", "--seed",
                           "3", "--out", str(out)], cwd=WORKFLOWS, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 20


def test_cdn_generator_invalid_fraction():
    from cdn_logs.components import normalize, parse_line
    from cdn_logs.generate import lines
    data = lines(400, seed=9, invalid=0.05)
    unparsable = code0 = 0
    for line in data:
        try:
            f = parse_line(line)
        except ValueError:
            unparsable += 1
            continue
        try:
            normalize(f[3], f[1], f[7], f[8], f[9])
        except ValueError:
            code0 += 1
    assert unparsable == 10 and code0 == 10
    assert lines(100, invalid=0) == [line for line in lines(100, invalid=0)]
    with pytest.raises(ValueError):
        lines(10, invalid=1.5)


# ------------------------------------------------------------------ running the components
# Through recovery.testing: the engine's own tasks, in-process, on fakeredis; sinks are ListSinks.

NO_BACKOFF = {"recovery.retry.delay.period.ms": "0"}   # recovery rounds need not wait here


def failures_by_component(run: testing.LocalRun) -> dict[str, list[str]]:
    out: dict[str, list[str]] = collections.defaultdict(list)
    for t in run.failed_tuples():
        out[t.component].append(t.error)
    return dict(out)


def test_wordcount_counts_every_word(fake_redis):
    from wordcount.components import WORD
    run = testing.run_local(load(WORKFLOWS / "wordcount.xml"), fake_redis)
    assert run.summary.status == "completed" and failures_by_component(run) == {}
    text = (WORKFLOWS / "data" / "sentences.txt").read_text()
    expected = collections.Counter(WORD.findall(text.lower()))
    # running counts, one step at a time: each word's 1, 2, ..., n, in some order
    assert collections.Counter(map(tuple, run.sinks["out"])) == collections.Counter(
        (word, k) for word, n in expected.items() for k in range(1, n + 1))


def test_cdn_logs_fail_where_the_record_is_bad_and_aggregate_the_rest(fake_redis):
    from cdn_logs.components import normalize, parse_line
    run = testing.run_local(load(WORKFLOWS / "cdn_logs.xml"), fake_redis)
    failures = failures_by_component(run)
    assert len(failures["split"]) == 10
    assert all(f.startswith("ValueError: unparsable log line") for f in failures["split"])
    assert failures["normalize"] == ["ValueError: invalid log: status code 0"] * 10
    assert set(failures) == {"split", "normalize"}
    assert run.summary.components["aggregate"].acked == 980
    assert run.summary.failed == 20 and run.summary.status == "pending"
    # each request's share [key, 1, bytes]: summed per key, the aggregates
    assert all(requests == 1 for _, requests, _ in run.sinks["output"])
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for key, requests, size in run.sinks["output"]:
        totals[key][0] += requests
        totals[key][1] += size
    final = {k: tuple(v) for k, v in totals.items()}
    expected: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for line in (WORKFLOWS / "data" / "cdn.log").read_text().splitlines():
        try:
            f = parse_line(line)
            key, *_rest = norm = normalize(f[3], f[1], f[7], f[8], f[9])
        except ValueError:
            continue
        expected[key][0] += 1
        expected[key][1] += norm[4]
    assert final == {k: tuple(v) for k, v in expected.items()}
    assert sum(r for r, _ in final.values()) == 980
    host, minute = next(iter(final)).split(" ")
    assert host.endswith((".com", ".net", ".org")) and minute.startswith("2026-11-22T10:")


@pytest.mark.parametrize("name", NAMES + ["bench_pipeline"])
def test_example_sinks_hold_the_same_records_whatever_the_arrival_order(fake_redis, name):
    """docs/guarantees.md: examples emit what is exact. A recovery replays failed tuples after the
    others, so a bolt sees its input in another order; what each sink receives (as a
    multiset: part files and their order differ anyway) must not depend on it."""
    wf = load(WORKFLOWS / f"{name}.xml")
    reference = testing.run_local(wf, fake_redis)
    for seed in range(3):
        shuffled = testing.run_local(wf, fake_redis, arrival=random.Random(seed))
        testing.assert_same_output(shuffled, reference)


def test_fanout_joins_both_branches(fake_redis):
    run = testing.run_local(load(WORKFLOWS / "fanout.xml"), fake_redis)
    assert run.summary.status == "completed" and failures_by_component(run) == {}
    assert sorted(int(v[0]) for v in run.sinks["archive"]) == list(range(1, 301))
    assert sorted(run.sinks["out"]) == [[n, n * n, n ** 3] for n in range(1, 301)]
    assert run.summary.components["join"].acked == 600              # both halves acked


def test_fanout_join_completes_from_state_when_one_side_is_replayed(fake_redis):
    """A recovery round after `cube` failed replays only the cube half: the square half is
    in Join's state from the original run, and the joined records are exact."""
    wf = load(WORKFLOWS / "fanout.xml")
    faults = {"recovery.inject.c.component": "cube", "recovery.inject.c.rate": "0.2", **NO_BACKOFF}
    run = testing.run_local(wf, fake_redis, config=faults)
    assert {p.component for p in run.failed_positions} == {"cube"}
    assert len(run.sinks["out"]) < 300
    testing.recover_local(run)
    assert run.summary.status == "completed" and run.summary.recovered > 0
    testing.assert_same_output(run, testing.failure_free_output(wf, fake_redis))


def test_cdn_parse_line_fields():
    from cdn_logs.components import normalize, parse_line
    line = ('61.135.2.17 - - [22/Nov/2026:10:15:32 +0800] "GET http://IMG.example.com/a/b.jpg '
            'HTTP/1.1" 200 5123 0.034')
    f = parse_line(line)
    assert f == ["61.135.2.17", "22/Nov/2026:10:15:32 +0800", "GET", "IMG.example.com",
                 "/a/b.jpg", "HTTP", "1.1", "200", "5123", "0.034"]
    assert normalize(f[3], f[1], f[7], f[8], f[9]) == [
        "img.example.com 2026-11-22T10:15+0800", "img.example.com", "2026-11-22T10:15+0800",
        200, 5123, 0.034]
    for bad in ("", "garbage", line.replace('" 200', '" -200'), line[:40]):
        with pytest.raises(ValueError, match="unparsable"):
            parse_line(bad)
    with pytest.raises(ValueError, match="status code 0"):
        normalize("h", f[1], "0", "0", "0.1")
    with pytest.raises(ValueError, match="status code 999"):
        normalize("h", f[1], "999", "0", "0.1")
    json.dumps(normalize(f[3], f[1], f[7], f[8], f[9]))       # sinks write it as JSON


@pytest.mark.parametrize("name", NAMES)
def test_recovery_workflows_of_the_examples_are_valid_workflow_files(name):
    """What `recovery plan` prints for any failed component is an ordinary workflow file:
    it passes the schema and every check, and reads back as the same model."""
    from lxml import etree

    from recovery.model.graph import TaskMap
    from recovery.model.synthesis import synthesize
    from recovery.model.xml.parse import schema

    wf = load(WORKFLOWS / f"{name}.xml")
    tasks = TaskMap.of(wf)
    for c in wf.components:
        plan = synthesize(wf, {c.id: tasks.task_ids(c.id)})
        text = to_xml(plan)
        assert schema().validate(etree.fromstring(text.encode())), schema().error_log
        assert parse_string(text, base_dir=wf.base_dir) == plan


# ------------------------------------------------------------------ cdn_logs_tables
# cdn_logs reading a Parquet dataset through Spark and writing a Delta table: the same topology
# and components, its own data (cdn.log's lines as Parquet part files) and sink.

PARQUET = WORKFLOWS / "data" / "cdn_logs.parquet"


def parquet_lines(folder: Path) -> list[list[str]]:
    """Each part file's lines, the files in name order."""
    import pyarrow.parquet as pq
    parts = sorted(p for p in folder.iterdir() if p.suffix == ".parquet")
    return [pq.read_table(p).column("line").to_pylist() for p in parts]


def test_cdn_logs_tables_validates_without_warnings():
    wf, warnings = validate_file(WORKFLOWS / "cdn_logs_tables.xml")
    assert wf.name == "cdn_logs_tables"
    assert warnings == [] and check_classes(wf) == []
    assert parse_string(to_xml(wf), base_dir=wf.base_dir) == wf


def test_cdn_logs_tables_is_cdn_logs_reading_parquet_with_spark_into_delta():
    tables, logs = load(WORKFLOWS / "cdn_logs_tables.xml"), load(WORKFLOWS / "cdn_logs.xml")
    assert topological_order(tables) == topological_order(logs)
    assert tables.config == logs.config
    for cid in ("split", "normalize", "aggregate"):      # the same components, wired the same way
        assert tables.component(cid) == logs.component(cid)
    spout, sink = tables.component("logs"), tables.component("output")
    assert isinstance(spout.impl, SourceImpl) and spout.impl.type == "spark"
    assert dict(spout.impl.params) == {"format": "parquet", "path": "data/cdn_logs.parquet"}   # default ids
    assert spout.impl.options == (("spark.sql.files.maxPartitionBytes", "1mb"),)   # a partition per part file
    assert spout.streams == logs.component("logs").streams and spout.parallelism == 2
    assert isinstance(sink.impl, SinkImpl) and sink.impl.type == "delta"
    assert sink.impl.param("path") == "out/cdn_logs_tables"
    assert sink.inputs == logs.component("output").inputs


def test_committed_parquet_dataset_is_cdn_logs_lines_in_several_parts(tmp_path):
    """The dataset the example reads is the generator's: cdn.log's lines, in order, in four
    part files (so that Spark reads it in several partitions). Compared by content: the
    files' bytes name the pyarrow version that wrote them."""
    from cdn_logs.generate import generate_parquet
    committed = parquet_lines(PARQUET)
    assert len(committed) == 4 and all(committed)
    assert [line for part in committed for line in part] == (WORKFLOWS / "data" / "cdn.log").read_text().splitlines()
    assert generate_parquet(str(tmp_path / "pq")) == 20
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == sorted(p.name for p in PARQUET.iterdir())
    assert parquet_lines(tmp_path / "pq") == committed


def test_parquet_generator_splits_the_same_lines_and_replaces_a_previous_dataset(tmp_path):
    from cdn_logs.generate import generate_parquet, lines
    folder = tmp_path / "pq"
    generate_parquet(str(folder), n=10, seed=5, parts=7)
    (folder / "keep.txt").write_text("not a part file")
    generate_parquet(str(folder), n=11, seed=6, invalid=0.2, parts=3)
    assert sorted(p.name for p in folder.iterdir()) == [
        "keep.txt", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    got = parquet_lines(folder)
    assert [len(p) for p in got] == [4, 4, 3]
    assert [line for part in got for line in part] == lines(11, seed=6, invalid=0.2)
    with pytest.raises(ValueError):
        generate_parquet(str(folder), parts=0)


def test_generator_module_writes_the_parquet_dataset_on_request(tmp_path):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    args = [sys.executable, "-m", "cdn_logs.generate", "--n", "30", "--seed", "3", "--out", str(tmp_path / "cdn.log")]
    proc = subprocess.run([*args, "--parquet", str(tmp_path / "pq"), "--parts", "2"], cwd=WORKFLOWS, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [line for part in parquet_lines(tmp_path / "pq") for line in part] == (
        tmp_path / "cdn.log").read_text().splitlines()
    assert len(parquet_lines(tmp_path / "pq")) == 2
    proc = subprocess.run([*args, "--parquet", str(tmp_path / "bad"), "--parts", "0"], cwd=WORKFLOWS, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--parts must be at least 1" in proc.stderr
    assert not (tmp_path / "bad").exists()


def test_cdn_logs_tables_components_on_the_parquet_rows_write_what_cdn_logs_writes(fake_redis):
    """Fed the dataset's rows (the test kit has no Spark), the example fails the same poison
    records where cdn_logs does and its sink receives the same records."""
    rows = [line for part in parquet_lines(PARQUET) for line in part]
    tables = testing.run_local(load(WORKFLOWS / "cdn_logs_tables.xml"), fake_redis, inputs={"logs": rows})
    logs = testing.run_local(load(WORKFLOWS / "cdn_logs.xml"), fake_redis)
    assert {c: len(f) for c, f in failures_by_component(tables).items()} == {"split": 10, "normalize": 10}
    assert len(tables.sinks["output"]) == 980
    testing.assert_same_output(tables, logs)
