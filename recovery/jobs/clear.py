"""Clearing runs: every key a run owns, refused while the run is alive unless forced.

A run's file sinks keep their committed parts (the user's output); its staged files in a local
folder go, and at a URI folder the objects of the run's attempts that no marker names and their
unfinished uploads (recovery/connectors/sink_objects.py); so do the data files of its Delta
sinks that no commit names. A run's
table sinks keep their rows: `clear` never deletes rows of a user's table. It drops the
run's rows of a PostgreSQL sink's commit table (first, so that a database that cannot be
reached refuses the clear before anything is removed; `force` clears the keys anyway and says
the commit rows stayed), so that a run submitted again under the same id writes again. A Delta
table's log keeps the run's app transactions for good: submitting again under that id is
refused (recovery/connectors/delta.py). Each table sink's outcome is in `Cleared.tables`.

The zip of a run's shipped code (RECOVERY_HOME/code, engine/shipping.py) goes with the last run
of this Redis that records its digest; `clear --all` removes every zip no remaining run records.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from recovery.connectors import sink_folders, table_sinks
from recovery.connectors.table_sinks import TableClear
from recovery.controlplane.connection import scan_keys
from recovery.engine import shipping
from recovery.errors import RunBusy, RunError
from recovery.model.record import RunRecord
from recovery.model.workflow import Workflow
from recovery.tracking import keys, runs, scratch, spill

log = logging.getLogger(__name__)


@dataclass
class Cleared:
    """What clearing one run removed: its keys, and what happened at each of its table sinks."""
    keys: list[str]
    tables: list[TableClear] = field(default_factory=list)


def _table_sinks_of(rec: RunRecord | None) -> Workflow | None:
    if rec is None:
        return None
    try:
        # (its dead-letter sink's commit rows go as well)
        return rec.original_workflow().with_dead_letter_sink()
    except ValueError as err:   # a damaged record: no table sink is known
        log.warning("run %s: no workflow in its record (%s); its table sinks (if any) are not cleared",
                    rec.run_id, err)
        return None


def _code_in_use(client: Redis) -> set[str]:
    """The digests of the code the runs of this Redis shipped (their records')."""
    used = set()
    for rid in runs.list_ids(client):
        try:
            digest = runs.get(client, rid).code_digest
        except RunError:   # gone meanwhile, or a damaged record: it names no code
            continue
        if digest:
            used.add(digest)
    return used


def clear(client: Redis, run_id: str, force: bool = False, code_archives: bool = True) -> Cleared:
    """Remove every key of the run (its record too) and its spill folder, and nothing else; keys
    left under the run's prefix without a record (orphans) go too. Its table sinks: commit rows
    dropped, user rows kept (module doc). A running run is refused unless `force`."""
    try:
        rec: RunRecord | None = runs.get(client, run_id)
    except RunError:   # no run, or a record that does not parse: its keys still go
        rec = None
    if rec is not None and runs.status_of(rec) == runs.RUNNING and not force:
        raise RunBusy(f"run {run_id} is still running ({runs.describe_driver(rec)}); "
                      "use --force to clear it anyway")
    removed = [k.decode() for k in scan_keys(client, keys.run_pattern(run_id))
               if k.decode() != runs.record_key(run_id)]
    if rec is None and not removed and client.zscore(runs.index_key(), run_id) is None:
        raise runs.not_found(run_id)
    wf = _table_sinks_of(rec)
    # before any key goes: a database that cannot be reached refuses the clear (unless force)
    tables = table_sinks.clear_tables(wf, run_id, force) if wf is not None else []
    # the record first: a driver still working on the run sees it gone and writes nothing more
    client.delete(runs.record_key(run_id))
    for i in range(0, len(removed), 500):
        client.delete(*removed[i:i + 500])
    client.zrem(runs.index_key(), run_id)
    # the files after the keys: a task still writing finds its run gone and removes its own file
    spill.SpillStore.at(spill.run_location(rec)).remove_run(run_id)
    if wf is not None:   # the run's staged files, objects and data files no commit names (its output stays)
        sink_folders.remove_uncommitted(wf, run_id)
        table_sinks.remove_uncommitted_data(wf, run_id)
    if code_archives and rec is not None and rec.code_digest:   # its code's zip, unless another run shipped it too
        if not any(d[:16] == rec.code_digest[:16] for d in _code_in_use(client)):
            shipping.remove_archives([rec.code_digest])
    # the scratch runs a preview of this run left (a killed one's; a live one's only with force)
    for sid in scratch.scratch_ids(client, run_id):
        if force or scratch.stale(client, sid):
            removed += clear(client, sid, force=True, code_archives=False).keys
    log.info("run %s cleared: %d keys and its spill folder removed%s", run_id, len(removed) + (rec is not None),
             " (its driver was running: --force)" if rec is not None and runs.status_of(rec) == runs.RUNNING else "")
    return Cleared(([runs.record_key(run_id)] if rec is not None else []) + sorted(removed), tables)


def clear_all(client: Redis, force: bool = False) -> dict[str, Cleared]:
    """`clear --all`: every run this Redis knows, then any key left under the runs' prefix
    (orphans of runs whose record is gone), grouped by the run id they name."""
    listed = runs.list_ids(client)
    # an id no command accepts (stored by a version before run ids were checked): its keys go
    # as orphans below, its index entry here
    unsafe = [rid for rid in listed if not keys.is_run_id(rid)]
    for rid in listed:   # every run's databases answer before any run is cleared
        if rid in unsafe:
            continue
        try:
            wf = _table_sinks_of(runs.get(client, rid))
        except RunError:   # gone meanwhile
            continue
        if wf is not None:
            table_sinks.clear_tables(wf, rid, force, reach_only=True)
    cleared = {rid: clear(client, rid, force, code_archives=False) for rid in runs.list_ids(client)
               if rid not in unsafe}
    removed = {rid: c.keys for rid, c in cleared.items()}
    if unsafe:
        client.zrem(runs.index_key(), *unsafe)
        removed.update({rid: [] for rid in unsafe})
    # scratch runs (listed nowhere) whose run is gone: with their spill files; a live preview's
    # only with force
    for sid in scratch.all_ids(client):
        if force or scratch.stale(client, sid):
            removed.setdefault(sid, []).extend(clear(client, sid, force=True, code_archives=False).keys)
    known = [rid for rid in runs.list_ids(client) if keys.is_run_id(rid)]   # runs created meanwhile stay
    known += [sid for sid in scratch.all_ids(client) if sid not in removed]   # a live preview's
    orphans: dict[str, list[str]] = {}
    for raw in scan_keys(client, keys.runs_pattern()):
        name = raw.decode()
        rid = keys.run_of_key(name) or ""
        if rid in known:
            continue
        orphans.setdefault(rid, []).append(name)
    for rid, names in orphans.items():
        client.delete(*names)
        spill.SpillStore.at(spill.location()).remove_run(rid)   # no record: the default location
        removed.setdefault(rid, []).extend(sorted(names))
    shipping.remove_archives(shipping.archives_except(_code_in_use(client)))   # runs created meanwhile keep theirs
    return {rid: Cleared(ks, cleared[rid].tables if rid in cleared else []) for rid, ks in removed.items()}


def report(cleared: Mapping[str, Cleared]) -> dict[str, Any]:
    """What `clear` or `clear_all` removed, as `recovery clear --json` and DELETE /api/v1/runs/ID
    return it: the keys per run, and per run with table sinks each one's outcome (rows kept,
    commit rows removed, a note)."""
    return {"removed": {rid: c.keys for rid, c in cleared.items()},
            "tables": {rid: [t.as_dict() for t in c.tables] for rid, c in cleared.items() if c.tables}}
