"""Derived 64-bit tuple ids and stable hashes.

Ids are derived, never random: a hash of the anchors' ids, the emitting component and stream,
the emit's index and the target task. Re-running the same input at the same task (a Spark task
retry, a recovery round) therefore yields the same ids, which is what makes both idempotent.
Python's hash of ints and tuples of ints is not salted per process (only str/bytes hashing is),
so `hash((a, b, c))` is stable across the driver and every worker of one Python build; strings
go through crc32/blake2b instead.
"""
from __future__ import annotations

import hashlib
import zlib
from typing import Any

import msgpack

MASK64 = (1 << 64) - 1


def name_salt(*names: str) -> int:
    """A stable 63-bit number for component/stream names."""
    digest = hashlib.blake2b("\x1f".join(names).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def stable_hash(obj: Any) -> int:
    """A hash of a message id or a grouping key that is the same in every process."""
    if isinstance(obj, bool) or obj is None:
        return int(bool(obj))
    if isinstance(obj, int):
        return obj & MASK64
    if isinstance(obj, str):
        return zlib.crc32(obj.encode("utf-8", "surrogatepass")) | (len(obj) << 32)
    if isinstance(obj, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in obj):
        return hash(tuple(obj)) & MASK64
    return int.from_bytes(hashlib.blake2b(msgpack.packb(obj, default=repr), digest_size=8).digest(), "big")


def fields_hash(values: list) -> int:
    """Storm's fields grouping: equal values -> equal hash, in every process."""
    h = 0
    for v in values:
        h = hash((h, v if isinstance(v, int) else stable_hash(v)))
    return h & MASK64


def derive(*parts: int) -> int:
    """A non-zero 64-bit id from ints (zero would vanish from an XOR ledger)."""
    return (hash(parts) & MASK64) or 1


def root_id(spout_salt: int, message_id: Any) -> int:
    return derive(spout_salt, stable_hash(message_id))
