"""Derived ids and stable hashes: no two distinct message ids share a root, no two distinct
parts share an id (but for a genuine 64-bit collision), the same ids in every process."""
from __future__ import annotations

import json
import subprocess
import sys
import zlib

import fakeredis
import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery import Bolt, Spout
from recovery.model.run import RunSpec
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.testing import execute_round
from recovery.tracking import ids, ledger
from recovery.tracking import queue as failed_queue

# Found by brute force over "msg-" + 6 characters: same length, same crc32, so the old
# `crc32 | len << 32` gave both the same root id.
CRC_TWINS = ("msg-al98cu", "msg-apvdba")
M61 = (1 << 61) - 1      # CPython's hash(int) is the int mod this


def test_the_pair_collided_under_the_old_scheme_and_has_distinct_roots_now():
    a, b = (s.encode() for s in CRC_TWINS)
    assert len(a) == len(b) and zlib.crc32(a) == zlib.crc32(b)
    salt = ids.name_salt("spout")
    assert ids.stable_hash(CRC_TWINS[0]) != ids.stable_hash(CRC_TWINS[1])
    assert ids.root_id(salt, CRC_TWINS[0]) != ids.root_id(salt, CRC_TWINS[1])


def test_integer_ids_a_multiple_of_2_61_minus_1_apart_do_not_collide():
    salt = ids.name_salt("spout")
    for x, y in [(0, M61), (5, 5 + 2 * M61), (1, 1 + 7 * M61)]:
        assert ids.root_id(salt, x) != ids.root_id(salt, y)
        assert ids.derive(x, 3) != ids.derive(y, 3)
        assert ids.derive(9, x, 3) != ids.derive(9, y, 3)
        assert ids.derive(9, 1, x, 3) != ids.derive(9, 1, y, 3)


def test_values_of_different_types_never_share_a_hash():
    values = [0, False, None, "0", b"0", 0.0, -0.0, [0], [], {}, "", b"", 1, True, 1.0, -1,
              (1 << 64) - 1, 1 << 64, -(1 << 63) - 1, [None], [False], ["0"], [b"0"]]
    hashes = [ids.stable_hash(v) for v in values]
    assert len(set(hashes)) == len(values)


def test_what_msgpack_stores_alike_hashes_alike():
    assert ids.stable_hash(("f", 10)) == ids.stable_hash(["f", 10])
    assert ids.stable_hash({"a": 1, "b": [2, 3]}) == ids.stable_hash({"b": (2, 3), "a": 1})
    assert ids.stable_hash(bytearray(b"xy")) == ids.stable_hash(b"xy")
    assert ids.fields_hash(["w"]) == ids.stable_hash(["w"])
    assert ids.fields_hash(["w", 3]) == ids.stable_hash(("w", 3))
    assert ids.fields_hash(["w", 3, None]) == ids.stable_hash(("w", 3, None))
    for mid in [("f", 10), {"k": [1.5, None]}, "ü", -(1 << 63), (1 << 64) - 1]:
        stored = msgpack.unpackb(msgpack.packb(mid), strict_map_key=False)
        assert ids.stable_hash(stored) == ids.stable_hash(mid)


message_ids = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
    | st.binary(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


def _canonical(obj):
    """Equality as the ids see it: types matter (0 != False != 0.0), lists == tuples."""
    if isinstance(obj, (list, tuple)):
        return ("seq", tuple(_canonical(x) for x in obj))
    if isinstance(obj, dict):
        return ("map", frozenset((_canonical(k), _canonical(v)) for k, v in obj.items()))
    if isinstance(obj, float):
        return ("float", obj.hex())
    return (type(obj).__name__, obj)


@settings(max_examples=400, deadline=None)
@given(st.lists(message_ids, min_size=2, max_size=8))
def test_distinct_message_ids_never_merge_roots(mids):
    salt = ids.name_salt("spout")
    distinct = {_canonical(m): m for m in mids}
    roots = {ids.root_id(salt, m) for m in distinct.values()}
    assert len(roots) == len(distinct)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=2, max_size=4),
       st.lists(st.integers(0, (1 << 64) - 1), min_size=2, max_size=4))
def test_distinct_parts_derive_distinct_ids(p, q):
    if p != q:
        assert ids.derive(*p) != ids.derive(*q)


def test_the_builtin_tuple_hash_is_the_reference_algorithm():
    lanes = (0x0123456789ABCDEF, 0x0123456789ABCDEF >> 60, M61, M61 + 1, 1 << 63, 0)
    assert hash(lanes) & ids.MASK64 == ids._reference_tuple_hash(lanes)
    a, b = 0xFEDCBA9876543210, 42
    assert ids.derive(a, b) == ids._reference_tuple_hash((a, a >> 60, b, b >> 60))
    # pinned: a change of algorithm changes every stored id, and must be deliberate
    assert ids.derive(1, 2, 3) == 3316573887232243888
    assert ids.root_id(ids.name_salt("s"), ("f", 10)) == 1301525110908921288


CODE = ("import json; from recovery.tracking import ids; s = ids.name_salt('s'); print(json.dumps(["
        "ids.derive(1, 2, 3), ids.derive((1 << 64) - 1, 7), ids.root_id(s, ('f', 10)),"
        f" ids.root_id(s, {CRC_TWINS[0]!r}), ids.root_id(s, b'x'), ids.root_id(s, -5),"
        " ids.fields_hash(['word', 3, 1.5, None]), ids.stable_hash({'k': [1, 'v']})]))")


def test_ids_are_the_same_in_another_process_with_another_hash_seed():
    here: list = []
    exec(CODE.replace("print(json.dumps(", "here.extend(("), {"here": here})
    for seed in ("1", "4242"):
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin",
                                  "PYTHONPATH": ":".join(p for p in sys.path if p)})
        assert json.loads(out.stdout) == here


# --- end to end: both colliding messages fail, both are queued and both roots pending ------
class TwinSpout(Spout):
    def open(self, conf, context):
        self.left = list(CRC_TWINS)

    def next_tuple(self):
        if not self.left:
            return False
        mid = self.left.pop(0)
        self.emit([mid], tup_id=mid)


class FailingBolt(Bolt):
    def process(self, tup):
        self.fail(tup)


def test_both_colliding_messages_are_queued_and_pending_when_both_fail():
    wf = Workflow(name="twins", components=(
        Component(id="s", kind="spout", impl=ClassImpl(ref="tests.unit.tracking.test_ids:TwinSpout"),
                  streams=(StreamDef(fields=("m",)),)),
        Component(id="b", kind="bolt", impl=ClassImpl(ref="tests.unit.tracking.test_ids:FailingBolt"),
                  streams=(StreamDef(fields=("m",)),), inputs=(Input(source="s"),))))
    client = fakeredis.FakeRedis()
    execute_round(wf, RunSpec("r1", 0, wf.model_dump_json(), "fake://", True), client)
    for bucket in range(ledger.LEDGER_BUCKETS):
        ledger.resolve_bucket(client, "r1", bucket)
    assert len(ledger.pending_roots(client, "r1")) == 2
    [pos] = client.smembers(failed_queue.failed_key("r1"))
    comp, task = pos.decode().rsplit(":", 1)
    queued = [msgpack.unpackb(v) for v in client.hvals(failed_queue.queue_key("r1", comp, int(task)))]
    assert sorted(rec["values"][0] for rec in queued) == sorted(CRC_TWINS)


def _first_unanchored_id(wf: Workflow, component: str, round_no: int) -> int:
    from recovery.runtime.task import TaskRunner
    runner = TaskRunner(RunSpec("r1", round_no, wf.model_dump_json(), None, False), component, 0)
    runner.collector.emit(None, ["v"], "default", (), None, None)
    [[rec]] = runner.collector.out.values()
    return rec[0]


def test_a_later_round_emits_unanchored_tuples_under_new_ids():
    """A task re-executed in a recovery round counts its unanchored emits from 1 again, on other
    input: its tuples must not take the ids of the first round's (still queued, maybe)."""
    wf = Workflow(name="u", components=(
        Component(id="s", kind="spout", impl=ClassImpl(ref="tests.unit.tracking.test_ids:TwinSpout"),
                  streams=(StreamDef(fields=("m",)),)),
        Component(id="b", kind="bolt", impl=ClassImpl(ref="tests.unit.tracking.test_ids:FailingBolt"),
                  streams=(StreamDef(fields=("m",)),), inputs=(Input(source="s"),)),
        Component(id="c", kind="bolt", impl=ClassImpl(ref="tests.unit.tracking.test_ids:FailingBolt"),
                  inputs=(Input(source="b"),))))
    for component in ("s", "b"):
        assert _first_unanchored_id(wf, component, 0) == _first_unanchored_id(wf, component, 0)
        assert _first_unanchored_id(wf, component, 0) != _first_unanchored_id(wf, component, 1)


# --- the hot path's shortcuts give the reference functions' values ---------------------------
U64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=500, deadline=None)
@given(U64, U64, U64)
def test_derive2_and_derive3_equal_derive(a, b, c):
    assert ids.derive2(a, b) == ids.derive(a, b)
    assert ids.derive3(a, b, c) == ids.derive(a, b, c)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=40), U64, st.integers(-(1 << 70), 1 << 70)),
       st.one_of(U64, st.integers(-(1 << 70), 1 << 70), st.text(max_size=5)))
def test_a_pair_message_id_hashes_as_the_general_path_does(a, b):
    # (file, offset) and (partition, offset) take a shortcut in stable_hash; a list takes the
    # general path, and lists and tuples hash alike by design
    assert ids.stable_hash((a, b)) == ids.stable_hash([a, b])
    salt = ids.name_salt("spout")
    assert ids.root_id(salt, (a, b)) == ids.derive(salt, ids.stable_hash([a, b]))
