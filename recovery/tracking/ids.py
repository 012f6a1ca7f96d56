"""Derived 64-bit tuple ids and stable hashes.

Ids are derived, never random: a hash of the anchors' ids, the emitting component and stream,
the emit's index and the target task. Re-running the same input at the same task (a Spark task
retry, a recovery round) therefore yields the same ids, which is what makes both idempotent.

The mixer, and why it is safe to rely on: every id and every stable hash is CPython's tuple
hash (the xxHash64-based one of CPython >= 3.8 on 64-bit builds) of a tuple of *lanes*, ints
in [0, 2**64); strings, bytes and ints beyond 64 bits are first hashed with blake2b (one
personalisation per type). It runs in C (a derive ~0.15 us, the same in pure Python ~2 us),
is not salted per process (only str/bytes hashing is), and is plain uint64 arithmetic
(multiply, rotate, add, and `hash(int)` = the int mod 2**61-1), so numpy can compute the
same ids vectorized. `_reference_tuple_hash` is that algorithm in pure Python; at import the
builtin is compared with it on fixed vectors and the import fails with a clear message on a
Python whose hash differs (a 32-bit build, PyPy, a future CPython), instead of deriving ids
that differ from the rest of the cluster.

Injectivity: `hash(int)` reduces mod 2**61-1, so a 64-bit part `p` alone would collide with
`p ± k(2**61-1)`. Each part therefore goes in as two lanes `(p, p >> 60)`, which together
determine `p` (for p < 2**64). Stable hashes are type-tagged: 0, False, None, 0.0, "0", b"0"
and [0] hash different lane tuples (or different blake2b personalisations), so two values
share a hash only by a genuine 64-bit collision. What msgpack stores alike hashes alike, so a
message id read back from a queue yields its root again: lists and tuples, bytes and
bytearray, equal dicts whatever their order, and a type msgpack cannot pack hashes like its
repr (what `msgpack.packb(..., default=repr)` stores for it).
"""
from __future__ import annotations

import hashlib
import struct
import sys
from typing import Any

import msgpack

MASK64 = (1 << 64) - 1
_HI = 60                     # a part p enters as lanes (p, p >> _HI): injective for p < 2**64

# Type tags of stable_hash's lanes: distinct by construction.
_T_NONE, _T_BOOL, _T_UINT, _T_NEGINT, _T_FLOAT, _T_HASHED, _T_SEQ, _T_MAP = range(1, 9)
_STABLE = 0x5EED             # first lane of every stable_hash tuple (apart from derive's)
_STR_MEMO_MAX = 1 << 14      # string hashes remembered per process (grouping keys repeat)
_str_memo: dict[str, int] = {}


def name_salt(*names: str) -> int:
    """A stable 63-bit number for component/stream names."""
    digest = hashlib.blake2b("\x1f".join(names).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _blake(data: bytes, person: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little")


def _str_hash(s: str) -> int:
    h = _str_memo.get(s)
    if h is None:
        if len(_str_memo) >= _STR_MEMO_MAX:
            _str_memo.clear()
        h = _str_memo[s] = _blake(s.encode("utf-8", "surrogatepass"), b"recovery:str")
    return h


def _lanes(obj: Any) -> tuple[int, int, int]:
    """(tag, value, value >> 60): one element of a list, dict or grouping key."""
    t = type(obj)
    if t is int or (isinstance(obj, int) and t is not bool):
        if 0 <= obj <= MASK64:
            return _T_UINT, obj, obj >> _HI
        if obj >= -(1 << 63):
            u = obj & MASK64
            return _T_NEGINT, u, u >> _HI
    elif t is str:
        h = _str_hash(obj)
        return _T_HASHED, h, h >> _HI
    elif obj is None:
        return _T_NONE, 0, 0
    elif t is bool:
        return _T_BOOL, int(obj), 0
    elif isinstance(obj, float):
        bits = struct.unpack("<Q", struct.pack("<d", obj))[0]
        return _T_FLOAT, bits, bits >> _HI
    h = stable_hash(obj)
    return _T_HASHED, h, h >> _HI


def stable_hash(obj: Any) -> int:
    """A 64-bit hash of a message id or a grouping key, the same in every process; distinct
    values (of any type msgpack can store) share one only by a genuine 64-bit collision."""
    t = type(obj)
    if t is tuple and len(obj) == 2:
        # (file, offset), (partition, offset): a built-in source's message id, once per root;
        # the same lanes as the general path below, without its calls
        a, b = obj
        if type(b) is int and 0 <= b <= MASK64:
            ta = type(a)
            if ta is str:
                h = _str_hash(a)
                return hash((_STABLE, _T_SEQ, 2, _T_HASHED, h, h >> _HI, _T_UINT, b, b >> _HI)) & MASK64
            if ta is int and 0 <= a <= MASK64:
                return hash((_STABLE, _T_SEQ, 2, _T_UINT, a, a >> _HI, _T_UINT, b, b >> _HI)) & MASK64
    if t is str:
        return _str_hash(obj)
    if t is int and 0 <= obj <= MASK64:
        return hash((_STABLE, _T_UINT, obj, obj >> _HI)) & MASK64
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _blake(bytes(obj), b"recovery:bytes")
    if isinstance(obj, (list, tuple)):
        if len(obj) == 2:   # (partition, offset), (file, offset): the common message ids
            return hash((_STABLE, _T_SEQ, 2, *_lanes(obj[0]), *_lanes(obj[1]))) & MASK64
        flat: list[int] = [_STABLE, _T_SEQ, len(obj)]
        for x in obj:
            flat += _lanes(x)
        return hash(tuple(flat)) & MASK64
    if isinstance(obj, dict):
        flat = [_STABLE, _T_MAP, len(obj)]
        for k, v in sorted((_lanes(k), _lanes(v)) for k, v in obj.items()):
            flat += k
            flat += v
        return hash(tuple(flat)) & MASK64
    if isinstance(obj, int) and t is not bool and not -(1 << 63) <= obj <= MASK64:
        size = (obj.bit_length() + 8) // 8
        return _blake(obj.to_bytes(size, "little", signed=True), b"recovery:int")
    if isinstance(obj, str):
        return _str_hash(str(obj))
    if obj is None or isinstance(obj, (int, float)):
        return hash((_STABLE, *_lanes(obj))) & MASK64
    if isinstance(obj, (msgpack.ExtType, msgpack.Timestamp)):
        return _blake(msgpack.packb(obj), b"recovery:ext")
    return _str_hash(repr(obj))


def fields_hash(values: list) -> int:
    """Storm's fields grouping: equal values -> equal hash, in every process."""
    if len(values) == 1:   # the common case: one grouping field
        v = values[0]
        if type(v) is int and 0 <= v <= MASK64:
            return hash((_STABLE, _T_SEQ, 1, _T_UINT, v, v >> _HI)) & MASK64
        return hash((_STABLE, _T_SEQ, 1, *_lanes(v))) & MASK64
    if len(values) == 2:
        return hash((_STABLE, _T_SEQ, 2, *_lanes(values[0]), *_lanes(values[1]))) & MASK64
    return stable_hash(values)


def derive(*parts: int) -> int:
    """A non-zero 64-bit id from ints in [0, 2**64) (zero would vanish from an XOR ledger).
    Distinct part tuples give distinct ids but for a genuine 64-bit collision."""
    n = len(parts)
    if n == 2:
        a, b = parts
        h = hash((a, a >> _HI, b, b >> _HI))
    elif n == 3:
        a, b, c = parts
        h = hash((a, a >> _HI, b, b >> _HI, c, c >> _HI))
    else:
        h = hash(tuple(x for p in parts for x in (p, p >> _HI)))
    return (h & MASK64) or 1


def derive2(a: int, b: int) -> int:
    """derive(a, b), the same value: the hot path's shape (an emit's base id from its
    anchor and stream salt, a copy's id from the base and target task) without the varargs."""
    return (hash((a, a >> _HI, b, b >> _HI)) & MASK64) or 1


def derive3(a: int, b: int, c: int) -> int:
    """derive(a, b, c), the same value, without the varargs."""
    return (hash((a, a >> _HI, b, b >> _HI, c, c >> _HI)) & MASK64) or 1


def root_id(spout_salt: int, message_id: Any) -> int:
    return derive2(spout_salt, stable_hash(message_id))


# --- the guard: the builtin tuple hash is the algorithm the ids are defined by ------------
_XXPRIME_1 = 11400714785074694791
_XXPRIME_2 = 14029467366897019727
_XXPRIME_5 = 2870177450012600261
_MODULUS = (1 << 61) - 1


def _reference_tuple_hash(lanes: tuple[int, ...]) -> int:
    """CPython >= 3.8's tuplehash (Objects/tupleobject.c, 64-bit) of non-negative ints, as
    uint64: the definition of every id here, and the one a vectorized version must match."""
    acc = _XXPRIME_5
    for lane in lanes:
        acc = (acc + (lane % _MODULUS) * _XXPRIME_2) & MASK64
        acc = ((acc << 31) | (acc >> 33)) & MASK64
        acc = (acc * _XXPRIME_1) & MASK64
    acc = (acc + (len(lanes) ^ (_XXPRIME_5 ^ 3527539))) & MASK64
    return 1546275796 if acc == MASK64 else acc


def _check_builtin_hash() -> None:
    vectors = [(), (0,), (1, 2, 3), (MASK64, MASK64 >> _HI, _MODULUS, 1),
               (0x0123456789ABCDEF, 0x0123456789ABCDEF >> _HI, 7, 0, _MODULUS - 1, 1 << 63)]
    for v in vectors:
        if hash(v) & MASK64 != _reference_tuple_hash(v):
            raise ImportError(
                f"recovery.ids: this Python ({sys.implementation.name} {sys.version.split()[0]}, "
                f"hash width {sys.hash_info.width}) hashes tuples unlike 64-bit CPython >= 3.8, "
                "so its tuple ids would differ from the rest of the cluster's; run recovery "
                "on 64-bit CPython 3.8 or later")


_check_builtin_hash()


# --- vectorized: the same ids for arrays of parts (batch components) ----------------------
# numpy is imported lazily: the row path and the CLI never need it.
def _np_tuple_hash(lanes: list[Any]) -> Any:
    """`_reference_tuple_hash` over columns: lanes[k] is a uint64 array (or a Python int for a
    lane every row shares); returns the uint64 array of the rows' tuple hashes."""
    import numpy as np
    with np.errstate(over="ignore"):
        acc: Any = None
        for lane in lanes:
            term = np.asarray(lane, dtype=np.uint64) % np.uint64(_MODULUS) * np.uint64(_XXPRIME_2)
            acc = (np.uint64(_XXPRIME_5) if acc is None else acc) + term
            acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
            acc = acc * np.uint64(_XXPRIME_1)
        if acc is None:
            acc = np.uint64(_XXPRIME_5)
        acc = acc + np.uint64(len(lanes) ^ (_XXPRIME_5 ^ 3527539))
        acc = np.atleast_1d(np.asarray(acc, dtype=np.uint64))
        return np.where(acc == np.uint64(MASK64), np.uint64(1546275796), acc)


def derive_many(*parts: Any) -> Any:
    """`derive` over columns, bit for bit: each part a uint64 array or an int shared by every
    row (all arrays of one length); returns a uint64 array of non-zero ids."""
    import numpy as np
    lanes: list[Any] = []
    for p in parts:
        if isinstance(p, int):
            lanes += [p, p >> _HI]
        else:
            arr = np.asarray(p, dtype=np.uint64)
            lanes += [arr, arr >> np.uint64(_HI)]
    h = _np_tuple_hash(lanes)
    return np.where(h == 0, np.uint64(1), h)


def fields_hash_many(columns: list[list]) -> Any:
    """`fields_hash` of each row of a fields grouping's key columns (Python lists of one
    length), as a uint64 array. Keys repeat (that is why they group), so each distinct key is
    hashed once by the scalar function, which defines the value."""
    import numpy as np
    rows = columns[0] if len(columns) == 1 else list(zip(*columns))
    memo: dict[Any, int] = {}
    out = np.empty(len(rows), dtype=np.uint64)
    single = len(columns) == 1
    for i, key in enumerate(rows):
        # the memo key tells 1 from True from 1.0 (equal in a dict, hashed apart here); floats
        # are not memoized (0.0 == -0.0, hashed by their bits)
        mk: Any = (type(key), key) if single else tuple((type(v), v) for v in key)
        h = None
        if (type(key) is not float) if single else all(type(v) is not float for v in key):
            try:
                h = memo.get(mk)
            except TypeError:   # an unhashable value (a list): no memo
                mk = None
        else:
            mk = None
        if h is None:
            h = fields_hash([key] if single else list(key))
            if mk is not None:
                memo[mk] = h
        out[i] = h
    return out


def position_hashes(name: str, offsets: Any) -> Any:
    """`stable_hash((name, offset))` for each offset (uint64 array): a file source's message
    ids, whose root ids are `derive(spout salt, this)`."""
    import numpy as np
    h = _str_hash(name)
    offs = np.asarray(offsets, dtype=np.uint64)
    return _np_tuple_hash([_STABLE, _T_SEQ, 2, _T_HASHED, h, h >> _HI, _T_UINT, offs, offs >> np.uint64(_HI)])


def pair_hashes(first: int, seconds: Any) -> Any:
    """`stable_hash((first, s))` for each s of `seconds` (uint64 array), `first` an int in
    [0, 2**64): a BatchSpout's default message ids (task index, position)."""
    import numpy as np
    s = np.asarray(seconds, dtype=np.uint64)
    return _np_tuple_hash([_STABLE, _T_SEQ, 2, _T_UINT, first, first >> _HI, _T_UINT, s, s >> np.uint64(_HI)])


def stable_hashes(values: list) -> Any:
    """`stable_hash` of each value (message ids of a batch), as a uint64 array; ints in
    [0, 2**64), the common message ids, vectorized."""
    import numpy as np
    if values and all(type(v) is int and 0 <= v <= MASK64 for v in values):
        arr = np.fromiter(values, dtype=np.uint64, count=len(values))
        return _np_tuple_hash([_STABLE, _T_UINT, arr, arr >> np.uint64(_HI)])
    return np.fromiter((stable_hash(v) for v in values), dtype=np.uint64, count=len(values))
