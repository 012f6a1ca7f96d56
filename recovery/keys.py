"""Every Redis key the project writes, in one place, under one prefix.

Everything a run owns lives under `<prefix>run:<run_id>:` (plus its record
`<prefix>run:<run_id>` and its entry in `<prefix>runs`), so clearing a run is a SCAN of one
pattern and touches no other run. Topics and committed offsets outlive runs.
"""
from __future__ import annotations

import os

PREFIX = os.environ.get("RECOVERY_KEY_PREFIX", "recovery:")


def runs_index() -> str:
    """Sorted set: run id -> start time."""
    return f"{PREFIX}runs"


def run_record(run_id: str) -> str:
    """Hash: xml, status, counters, start/end times, driver pid."""
    return f"{PREFIX}run:{run_id}"


def run_prefix(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}:"


def run_key(run_id: str, *parts: object) -> str:
    return run_prefix(run_id) + ":".join(str(p) for p in parts)


def topic_meta(topic: str) -> str:
    return f"{PREFIX}topic:{topic}"


def topic_partition(topic: str, partition: int) -> str:
    return f"{PREFIX}topic:{topic}:{partition}"


def offsets(consumer: str, topic: str) -> str:
    """Hash: partition -> committed offset, for one consumer (workflow + spout)."""
    return f"{PREFIX}offsets:{consumer}:{topic}"
