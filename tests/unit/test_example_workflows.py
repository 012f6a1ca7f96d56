"""The example workflows in workflows/: they validate, their data is what their generators
make, and their components do what they say when driven in-process, one task per
component (a small harness here, not the engine: no Spark, no Redis)."""
from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from recovery import BasicBolt, Bolt, Tuple
from recovery.model.graph import topological_order
from recovery.api.loader import check_classes, component_class
from recovery.model.workflow import ClassImpl, SinkImpl, SourceImpl, Workflow
from recovery.model.xml.parse import load, parse_string
from recovery.model.xml.write import to_xml
from recovery.api.runnable import validate_file

WORKFLOWS = Path(__file__).parent.parent.parent / "workflows"
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


class DictState:
    """The keyed-state API the engine installs: get(key, default) / put(key, value)."""

    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def put(self, key, value):
        import msgpack
        msgpack.packb(value)                 # values must be msgpack-serializable
        self.data[key] = value


class Collector:
    def __init__(self):
        self.emitted: list[tuple[str, list, tuple]] = []
        self.acked: list[int] = []
        self.failed: list[tuple[int, str | None]] = []

    def emit(self, component, values, stream, anchors, direct_task, message_id):
        self.emitted.append((stream, list(values), tuple(anchors)))
        return [1]

    def ack(self, tup):
        self.acked.append(tup.id)

    def fail(self, tup, error=None):
        self.failed.append((tup.id, error))

    def log(self, message, level):
        pass


def run_in_process(wf: Workflow, shuffle: random.Random | None = None):
    """Drive every component once, in topological order, with one task each. Returns
    (what each sink received, the failures per component, the acks per component).
    `shuffle` permutes each bolt's input: the arrival orders a recovery can produce."""
    streams: dict[tuple[str, str], list[list]] = collections.defaultdict(list)
    sinks: dict[str, list[list]] = {}
    failures: dict[str, list[str]] = collections.defaultdict(list)
    acks: dict[str, int] = collections.Counter()
    ids = iter(range(1, 10**9))
    for cid in topological_order(wf):
        c = wf.component(cid)
        if isinstance(c.impl, SourceImpl):
            assert c.impl.type == "file" and c.impl.param("format", "text") == "text"
            path = Path(wf.base_dir) / c.impl.param("path")
            streams[(cid, "default")] = [[line] for line in path.read_text().splitlines()]
            continue
        incoming = [(i, values) for i in c.inputs for values in streams[(i.source, i.stream)]]
        if shuffle is not None:
            shuffle.shuffle(incoming)
        if isinstance(c.impl, SinkImpl):
            sinks[cid] = [values for _, values in incoming]
            continue
        bolt = component_class(wf, c)()
        collector = Collector()
        bolt._collector, bolt.state, bolt.conf = collector, DictState(), wf.conf(cid)
        bolt.prepare(bolt.conf, None)
        for inp, values in incoming:
            fields = wf.component(inp.source).stream(inp.stream).fields
            tup = Tuple(next(ids), inp.source, inp.stream, 1, values, fields)
            mark = len(collector.emitted)
            try:
                bolt.process(tup)
            except Exception as err:             # a failed tuple: its emits do not flow on
                del collector.emitted[mark:]
                failures[cid].append(f"{type(err).__name__}: {err}")
                continue
            if bolt.auto_ack:
                collector.acked.append(tup.id)
            else:
                assert tup.id in collector.acked, f"{cid} did not ack {tup!r}"
            for stream, out, anchors in collector.emitted[mark:]:
                if not bolt.auto_anchor:
                    assert anchors == (tup,), f"{cid} emitted unanchored"
                assert len(out) == len(c.stream(stream).fields)
                streams[(cid, stream)].append(out)
        acks[cid] = len(collector.acked)
    return sinks, dict(failures), acks


def test_wordcount_counts_every_word():
    from wordcount.components import WORD
    wf = load(WORKFLOWS / "wordcount.xml")
    sinks, failures, _ = run_in_process(wf)
    assert failures == {}
    final: dict[str, int] = {}
    for word, count in sinks["out"]:
        assert count == final.get(word, 0) + 1         # running counts, one step at a time
        final[word] = count
    text = (WORKFLOWS / "data" / "sentences.txt").read_text()
    assert final == dict(collections.Counter(WORD.findall(text.lower())))


def test_cdn_logs_fail_where_the_record_is_bad_and_aggregate_the_rest():
    from cdn_logs.components import normalize, parse_line
    wf = load(WORKFLOWS / "cdn_logs.xml")
    sinks, failures, acks = run_in_process(wf)
    assert len(failures["split"]) == 10
    assert all(f.startswith("ValueError: unparsable log line") for f in failures["split"])
    assert failures["normalize"] == ["ValueError: invalid log: status code 0"] * 10
    assert set(failures) == {"split", "normalize"}
    assert acks["aggregate"] == 980
    # each request's share [key, 1, bytes]: summed per key, the aggregates
    assert all(requests == 1 for _, requests, _ in sinks["output"])
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for key, requests, size in sinks["output"]:
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


def _multiset(sinks: dict[str, list[list]]) -> dict[str, collections.Counter]:
    return {cid: collections.Counter(json.dumps(v) for v in rows) for cid, rows in sinks.items()}


@pytest.mark.parametrize("name", NAMES + ["bench_pipeline"])
def test_example_sinks_hold_the_same_records_whatever_the_arrival_order(name):
    """DESIGN 7.1: examples emit what is exact. A recovery replays failed tuples after the
    others, so a bolt sees its input in another order; what each sink receives (as a
    multiset: part files and their order differ anyway) must not depend on it."""
    wf = load(WORKFLOWS / f"{name}.xml")
    reference, _, _ = run_in_process(wf)
    for seed in range(3):
        sinks, _, _ = run_in_process(wf, random.Random(seed))
        assert _multiset(sinks) == _multiset(reference), f"{name}, arrival order {seed}"


def test_fanout_joins_both_branches():
    wf = load(WORKFLOWS / "fanout.xml")
    sinks, failures, acks = run_in_process(wf)
    assert failures == {}
    assert sorted(int(v[0]) for v in sinks["archive"]) == list(range(1, 301))
    joined = sinks["out"]
    assert sorted(joined) == [[n, n * n, n ** 3] for n in range(1, 301)]
    assert acks["join"] == 600                               # both halves acked


def test_fanout_join_completes_from_state_when_one_side_is_replayed():
    """As in a recovery round after `cube` failed: the square half is already in state."""
    from fanout.components import Join
    join, collector, state = Join(), Collector(), DictState()
    join._collector, join.state = collector, state
    join.process(Tuple(1, "square", "default", 6, [5, 25], ("n", "square")))
    assert collector.emitted == [] and collector.acked == [1]
    fresh = Join()                                 # a new task, same state
    fresh._collector, fresh.state = collector, state
    replayed = Tuple(2, "cube", "default", 6, [5, 125], ("n", "cube"))
    fresh.process(replayed)
    assert collector.emitted == [("default", [5, 25, 125], (replayed,))]
    assert collector.acked == [1, 2]


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
