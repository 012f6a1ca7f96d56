"""A file sink's folder: its part files (their names, their atomic writes) and, on the driver,
which runs they belong to.

A task writes one part per (round, task) under a deterministic name (`part_name`), so a
re-executed task overwrites its own part instead of appending. A folder belongs to runs through
its part files' names. What a new run does with other runs' parts follows Spark's writer modes
(the sink's `mode`): `error` refuses the submit (`check_file_folders`, on the driver, before
anything is stored), `overwrite` removes them once the run is complete (`replace_other_runs`: a
run that fails or is left pending has destroyed nothing), `append` keeps them. Recovery rounds
of a run write that run's own parts, so they never meet the check.

Without a mode= the default depends on what the workflow reads (SinkImpl.write_mode): `append`
when a spout reads a Redis-stream topic, since each bounded submit continues the stream from
its committed offsets into the same folder (Structured Streaming's file sink appends, too);
`error` when it reads files, where a second run would mix a rerun's output with the first's.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recovery.connectors.files import resolve
from recovery.connectors.sink_base import SinkFolderError
from recovery.model.graph import TaskContext
from recovery.model.workflow import FILE_SINK_TYPES, SinkImpl, Workflow

log = logging.getLogger(__name__)

# part-<run id>-r<round>-<component>-t<task>.<ext>; run ids and component ids may hold "-",
# so a name is matched against a known run and component, never split.
PART = re.compile(r"^part-.+-r\d{4,}-.+-t\d{4,}\.(?:jsonl|parquet)$")


def part_name(run_id: str, round_no: int, component_id: str, task_id: int, ext: str) -> str:
    """One part per (run, round, task): a re-executed task overwrites its own part; another
    run of the same workflow writes beside it."""
    return f"part-{run_id}-r{round_no:04d}-{component_id}-t{task_id:04d}.{ext}"


def part_name_of(context: TaskContext, ext: str) -> str:
    """The part name of a sink task (its task context's run, round, component and task)."""
    return part_name(context.run_id, context.round, context.component_id, context.task_id, ext)


def atomic_write(path: str, write: Callable[[Any], None], fence: Callable[[], None] | None = None) -> None:
    """`write(file)` into a hidden temporary file of the part's folder, then rename it over the
    part: a reader never sees half a part (readers skip names starting with "." or "_").
    `fence` (the task context's) raises unless the task's driver still owns the run; it is
    checked and the part renamed under a lock on the folder, so a task of a driver that was
    taken over can never put its part over the one its successor's task wrote after it."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if fence is None:
            os.replace(tmp, path)
        else:
            lock = os.open(folder, os.O_RDONLY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                fence()
                os.replace(tmp, path)
            finally:
                os.close(lock)   # (drops the lock)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    """Make a rename or unlink in `folder` durable before the tuples are acked."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- a folder's runs (driver side) ---------------------------------------------------------
@dataclass(frozen=True)
class FileSink:
    component: str
    type: str
    mode: str
    folder: str


def file_sinks(wf: Workflow) -> list[FileSink]:
    """The workflow's jsonl and parquet sinks, with their folders resolved."""
    out = []
    reads_topics = wf.reads_topics
    for c in wf.components:
        impl = c.impl
        if isinstance(impl, SinkImpl) and impl.type in FILE_SINK_TYPES:
            folder = os.path.abspath(resolve(impl.param("path") or "out", wf.base_dir or "."))
            out.append(FileSink(c.id, impl.type, impl.write_mode(reads_topics), folder))
    return out


def part_files(folder: str) -> list[str]:
    """The names of the part files in `folder`, of any run (sorted)."""
    try:
        return sorted(n for n in os.listdir(folder) if PART.match(n))
    except FileNotFoundError:
        return []


def _own(run_id: str, components: list[str]) -> re.Pattern[str]:
    comps = "|".join(re.escape(c) for c in components)
    return re.compile(rf"^part-{re.escape(run_id)}-r\d{{4,}}-(?:{comps})-t\d{{4,}}\.(?:jsonl|parquet)$")


def check_file_folders(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: every file sink's folder can take
    a new run's output. A folder holding another run's parts refuses it in mode `error`; one
    holding parts named like this run's (a run cleared, then submitted again under the same
    id) refuses it in every mode, since the new parts would mix with the old ones. `run_id`
    None: a run id not chosen yet (a new one, so no part can bear it)."""
    sinks = file_sinks(wf)
    own = _own(run_id or "", [s.component for s in sinks])
    for s in sinks:
        where = f"sink {s.component!r} ({s.type}): folder {s.folder}"
        log.debug("checking %s (mode %s)", where, s.mode)
        if os.path.exists(s.folder) and not os.path.isdir(s.folder):
            raise SinkFolderError(f"{where} is a file, not a folder")
        try:
            parts = part_files(s.folder)
        except OSError as err:
            raise SinkFolderError(f"{where} cannot be read: {err.strerror}") from None
        same_id = [p for p in parts if run_id is not None and own.match(p)]
        if same_id:
            raise SinkFolderError(f"{where} already holds {len(same_id)} part files of an earlier "
                                  f"run with the same id {run_id!r} (e.g. {same_id[0]}): remove "
                                  "them, or submit under another run id")
        if parts and s.mode == "error":
            raise SinkFolderError(f"{where} already holds another run's output ({len(parts)} part "
                                  f'files, e.g. {parts[0]}): remove them, or give the <sink> '
                                  'mode="overwrite" (replace them when this run completes) or '
                                  'mode="append" (keep them)')


def replace_other_runs(wf: Workflow, run_id: str, original_json: str | None = None) -> list[str]:
    """Once a run is complete (nothing left to recover): in each `overwrite` sink's folder,
    remove the part files of other runs. Idempotent, so a driver that dies here repeats it.
    `wf` is the round's workflow; `original_json` the submitted one when they differ (a
    recovery round runs only some of the sinks). Returns the paths removed."""
    if original_json:
        wf = Workflow.from_task_json(original_json)
    sinks = file_sinks(wf)
    own = _own(run_id, [s.component for s in sinks])
    removed = []
    for folder in sorted({s.folder for s in sinks if s.mode == "overwrite"}):
        others = [os.path.join(folder, n) for n in part_files(folder) if not own.match(n)]
        for path in others:
            try:
                os.unlink(path)
            except FileNotFoundError:   # removed already (by a driver that died after it)
                pass
            except OSError as err:      # the round is settled: `recover` finishes it once this can go
                raise SinkFolderError(f"overwrite sink folder {folder}: cannot remove {path}, a part "
                                      f"of another run: {err.strerror}") from None
        if others:
            _fsync_dir(folder)
        removed += others
    if removed:
        log.info("run %s: removed %d part files of other runs from overwrite sinks", run_id, len(removed))
    return removed


def read_jsonl_dir(path: str) -> list[dict]:
    """A jsonl sink's contents: every record of every part file under `path`."""
    out: list[dict] = []
    if not os.path.isdir(path):
        return out
    for name in sorted(os.listdir(path)):
        if name.endswith(".jsonl") and not name.startswith("."):
            with open(os.path.join(path, name), encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh if line.strip())
    return out
