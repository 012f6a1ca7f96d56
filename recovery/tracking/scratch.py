"""Scratch runs: a copy of a run under another run id, for running one round that the run itself
never sees (`recovery preview`'s sandbox, jobs/sandbox.py).

A scratch run of run R is named `preview-<12 hex digits of R's sha256>-<6 random hex digits>`, so
the scratch runs of R are found by one SCAN, whoever left them. Its record is outside the runs'
index and names R in `sandbox_of`; its lease says whether the process that made it still works on
it, so a scratch run whose process was killed is recognised (`stale`) and cleared by the next
preview of R or by `clear R`.

What is copied (`copy_keys`): every key of R but its record and lease, its ledger (a scratch
round's acks are nobody's verdict) and its queues and dead letters (the sandbox queues what it
previews itself): keyed state, the spouts' waiting message ids, a log source's ranges. DUMP and
RESTORE, key by key, so R's keys are only read."""
from __future__ import annotations

import hashlib
import secrets
from typing import Any

from redis import Redis

from recovery.controlplane.connection import scan_keys
from recovery.errors import RunError
from recovery.model.record import RunRecord
from recovery.tracking import keys, ledger, runs
from recovery.tracking import queue as failed_queue

PREFIX = "preview-"


def prefix_of(run_id: str) -> str:
    """What the id of every scratch run of `run_id` starts with."""
    return f"{PREFIX}{hashlib.sha256(run_id.encode()).hexdigest()[:12]}-"


def new_id(run_id: str) -> str:
    return prefix_of(run_id) + secrets.token_hex(3)


def is_scratch(rec: RunRecord) -> bool:
    """Whether `rec` is a scratch run's record."""
    return bool(getattr(rec, "sandbox_of", None)) and rec.run_id.startswith(PREFIX)


def scratch_ids(client: Redis, run_id: str) -> list[str]:
    """The scratch runs of `run_id` this Redis holds keys of (their records, or keys left
    without one), sorted."""
    pattern = keys.runs_base() + "{" + prefix_of(keys.check_run_id(run_id)) + "*"
    found = {keys.run_of_key(k.decode()) for k in scan_keys(client, pattern)}
    return sorted(r for r in found if r and r.startswith(prefix_of(run_id)))


def all_ids(client: Redis) -> list[str]:
    """Every scratch run this Redis holds keys of, of any run, sorted."""
    found = {keys.run_of_key(k.decode()) for k in scan_keys(client, keys.runs_base() + "{" + PREFIX + "*")}
    return sorted(r for r in found if r and r.startswith(PREFIX))


def stale(client: Redis, scratch_id: str) -> bool:
    """A scratch run no live process works on: its lease gone (or its record gone)."""
    try:
        rec = runs.get(client, scratch_id)
    except RunError:
        return True
    return runs.status_of(rec) != runs.RUNNING


def create(client: Redis, rec: RunRecord, scratch_id: str, workflow_json: str, round_no: int) -> runs.Lease:
    """The scratch run's record (the run's, under `scratch_id`, with `workflow_json` as its
    submitted workflow) and its lease, held by this process (not yet refreshed)."""
    fields: dict[str, Any] = {
        "sandbox_of": rec.run_id, "xml": "", "workflow_json": workflow_json, "file": rec.file,
        "master": rec.master, "tracking": True, "round": round_no, "root_epoch": rec.root_epoch,
        "root_epochs": list(rec.root_epochs), "spill_dir": rec.spill_dir, "stats": {}, "rounds": []}
    return runs.create_unlisted(client, scratch_id, fields)


def copy_keys(client: Redis, run_id: str, scratch_id: str) -> int:
    """Copy the run's keys (module doc says which) under `scratch_id`. Returns the keys copied."""
    skip = {runs.record_key(run_id), runs.lease_key(run_id),
            *(ledger.bucket_key(run_id, b) for b in range(keys.LEDGER_BUCKETS))}
    src, dst = keys.runs_base() + "{" + run_id, keys.runs_base() + "{" + keys.check_run_id(scratch_id)
    n = 0
    for raw in scan_keys(client, keys.run_pattern(run_id)):
        key = raw.decode()
        if key in skip or failed_queue.holds_failures(run_id, key) or not key.startswith(src):
            continue
        dumped = client.dump(key)
        if dumped is None:   # gone meanwhile (a round's in-flight key)
            continue
        client.restore(dst + key[len(src):], 0, dumped, replace=True)
        n += 1
    return n
