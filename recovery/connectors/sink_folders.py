"""A file sink's folder: its part files (their names, their atomic writes) and, on the driver,
which runs they belong to.

The folder is a local path (relative to the workflow file), a `file://` URI, or a URI that
pyarrow.fs opens (s3://, gs://, hdfs://): a local folder's parts are renamed into place
(`atomic_write`), a URI folder's are committed by marker (recovery/connectors/sink_objects.py).
Read either through `committed_parts` or `read_jsonl_dir`, which see committed parts only.

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
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recovery.connectors.files import resolve
from recovery.connectors.sink_base import SinkFolderError
from recovery.connectors.sink_objects import ObjectFolder
from recovery.model.graph import ComponentContext
from recovery.model.workflow import FILE_SINK_TYPES, SinkImpl, Workflow
from recovery.tracking.spill_files import error_text, local_path, location_secrets, redact

log = logging.getLogger(__name__)

# part-<run id>-r<round>-<component>-t<task>.<ext>; run ids and component ids may hold "-",
# so a name is matched against a known run and component, never split.
PART = re.compile(r"^part-.+-r\d{4,}-.+-t\d{4,}\.(?:jsonl|parquet)$")


def part_name(run_id: str, round_no: int, component_id: str, task_id: int, ext: str) -> str:
    """One part per (run, round, task): a re-executed task overwrites its own part; another
    run of the same workflow writes beside it."""
    return f"part-{run_id}-r{round_no:04d}-{component_id}-t{task_id:04d}.{ext}"


def part_name_of(context: ComponentContext, ext: str) -> str:
    """The part name of a sink task (its task context's run, round, component and task)."""
    return part_name(context.run_id, context.round, context.component_id, context.task_id, ext)


def folder_of(impl: SinkImpl, base_dir: str | None) -> str:
    """A file sink's folder: a local one absolute (resolved against the workflow's folder), a
    URI as written (its query, pyarrow's options, too)."""
    where = resolve(impl.param("path") or "out", base_dir or ".")
    local = local_path(where)
    return os.path.abspath(local) if local is not None else where


STAGED_PREFIX = ".tmp-"   # hidden: readers skip names starting with "." or "_"


def staged_name(part: str) -> str:
    """The staged file of one attempt at `part`: the part's name (run, round, sink, task) and a
    token of the attempt's own, so whose it is can be told after the attempt died."""
    return f"{STAGED_PREFIX}{part}.{secrets.token_hex(8)}"


def staged_of(run_id: str, components: list[str], task_id: int | None = None) -> re.Pattern[str]:
    """The names of the staged files of the run's `components` (of one task of theirs: `task_id`)."""
    comps = "|".join(re.escape(c) for c in components)
    task = f"{task_id:04d}" if task_id is not None else r"\d{4,}"
    return re.compile(rf"^{re.escape(STAGED_PREFIX)}part-{re.escape(run_id)}-r\d{{4,}}-(?:{comps})-t{task}"
                      r"\.(?:jsonl|parquet)\.[0-9a-f]{16}$")


class StagedFile:
    """A part being written into a local folder as its chunks come: a hidden file of the part's
    folder named by the part and the attempt (staged_name), which `atomic_write` renames over
    the part, or `discard` removes. `stale`: the names of the task's other staged files (of
    attempts that were killed before they could remove theirs), removed once the part is in."""

    def __init__(self, folder: str, part: str, stale: re.Pattern[str] | None = None):
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.stale = stale
        self.path = os.path.join(folder, staged_name(part))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self.file = os.fdopen(fd, "wb")

    def discard(self) -> None:
        self.file.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def remove_stale(self) -> list[str]:
        """The task's other staged files (`stale`), once its part is in: an attempt at it that
        still runs has nothing left to publish (the part is written, the same on every attempt)."""
        if self.stale is None:
            return []
        mine = os.path.basename(self.path)
        gone = [n for n in os.listdir(self.folder) if self.stale.match(n) and n != mine]
        for name in gone:
            try:
                os.unlink(os.path.join(self.folder, name))
            except FileNotFoundError:   # its attempt removed it meanwhile
                pass
        return gone


def atomic_write(path: str, write: Callable[[Any], None] | StagedFile,
                 fence: Callable[[], object] | None = None) -> None:
    """`write(file)` into a hidden temporary file of the part's folder (or `write`, a staged
    file the part was written into already), then rename it over the part: a reader never sees
    half a part. `fence` (the task context's) raises unless the task's driver still owns the
    run; it is checked and the part renamed under a lock on the folder, so a task of a driver
    that was taken over can never put its part over the one its successor's task wrote after it."""
    folder = os.path.dirname(path)
    staged = write if isinstance(write, StagedFile) else StagedFile(folder, os.path.basename(path))
    try:
        with staged.file as fh:
            if not isinstance(write, StagedFile):
                write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if fence is None:
            os.replace(staged.path, path)
        else:
            lock = os.open(folder, os.O_RDONLY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                fence()
                os.replace(staged.path, path)
            finally:
                os.close(lock)   # (drops the lock)
    except BaseException:
        staged.discard()
        raise
    staged.remove_stale()
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
    folder: str      # folder_of: an absolute path or a URI

    @property
    def shown(self) -> str:
        return redact(self.folder)


def file_sinks(wf: Workflow) -> list[FileSink]:
    """The workflow's jsonl and parquet sinks, with their folders resolved."""
    out = []
    reads_topics = wf.reads_topics
    for c in wf.components:
        impl = c.impl
        if isinstance(impl, SinkImpl) and impl.type in FILE_SINK_TYPES:
            out.append(FileSink(c.id, impl.type, impl.write_mode(reads_topics), folder_of(impl, wf.base_dir)))
    return out


def part_files(folder: str) -> list[str]:
    """The names of the parts committed in `folder` (a path or a URI), of any run (sorted): a
    local folder's part files, a URI folder's markers."""
    local = local_path(folder)
    if local is None:
        return ObjectFolder(folder).markers(PART.match)
    try:
        return sorted(n for n in os.listdir(local) if PART.match(n))
    except FileNotFoundError:
        return []


def _own(run_id: str, components: list[str], attempts: bool = False) -> re.Pattern[str]:
    """The names of the run's parts (`attempts`: of its attempts' objects at a URI folder)."""
    comps = "|".join(re.escape(c) for c in components)
    token = "-[0-9a-f]{16}" if attempts else ""
    return re.compile(rf"^part-{re.escape(run_id)}-r\d{{4,}}-(?:{comps})-t\d{{4,}}{token}\.(?:jsonl|parquet)$")


def check_file_folders(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: every file sink's folder can take
    a new run's output. A folder holding another run's parts refuses it in mode `error`; one
    holding parts named like this run's (a run cleared, then submitted again under the same
    id) refuses it in every mode, since the new parts would mix with the old ones. `run_id`
    None: a run id not chosen yet (a new one, so no part can bear it)."""
    sinks = file_sinks(wf)
    own = _own(run_id or "", [s.component for s in sinks])
    for s in sinks:
        where = f"sink {s.component!r} ({s.type}): folder {s.shown}"
        log.debug("checking %s (mode %s)", where, s.mode)
        local = local_path(s.folder)
        try:
            if local is not None and os.path.exists(local) and not os.path.isdir(local) \
                    or local is None and ObjectFolder(s.folder).is_file():
                raise SinkFolderError(f"{where} is a file, not a folder")
            parts = part_files(s.folder)
        except (OSError, ValueError, ImportError) as err:   # (pyarrow's ArrowInvalid is a ValueError)
            raise SinkFolderError(f"{where} cannot be read: {error_text(err, location_secrets(s.folder))}") from None
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
    wf = wf.with_dead_letter_sink()   # (its dead-letter sink is a file sink too)
    sinks = file_sinks(wf)
    own = _own(run_id, [s.component for s in sinks])
    removed: list[str] = []
    for folder in sorted({s.folder for s in sinks if s.mode == "overwrite"}):
        if local_path(folder) is None:
            removed += _replace_at_uri(folder, own, _own(run_id, [s.component for s in sinks], attempts=True))
            continue
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


def _replace_at_uri(folder: str, own: re.Pattern[str], own_attempts: re.Pattern[str]) -> list[str]:
    """replace_other_runs at a URI folder: other runs' markers, the objects they name and any
    other object of theirs (an attempt never committed)."""
    at = ObjectFolder(folder)
    try:
        attempts = [n for n in at.attempts() if not own_attempts.match(n)]
        removed = at.remove_parts(lambda n: PART.match(n) and not own.match(n), attempts)
    except (OSError, ValueError) as err:   # the round is settled: `recover` finishes it once this can go
        raise SinkFolderError(f"overwrite sink folder {at.shown}: cannot remove the parts of other "
                              f"runs: {at.why(err)}") from None
    return [f"{at.shown}/{n}" for n in removed]


def remove_uncommitted(wf: Workflow, run_id: str) -> list[str]:
    """For `recovery clear RUN`: in each local folder of the workflow's file sinks, the run's
    staged files (of attempts killed before their part was renamed into place); at each URI
    folder, the run's objects that no counting marker names (attempts that died before their
    commit, or that a retry replaced), its markers that do not count (written by a driver taken
    over) and its attempts' unfinished uploads. Committed parts are the user's output and stay.
    Returns what it removed."""
    sinks = file_sinks(wf)
    own = _own(run_id, [s.component for s in sinks])
    own_attempts = _own(run_id, [s.component for s in sinks], attempts=True)
    removed: list[str] = []
    staged = staged_of(run_id, [s.component for s in sinks])
    for folder in sorted({local for s in sinks if (local := local_path(s.folder)) is not None}):
        try:
            names = [n for n in os.listdir(folder) if staged.match(n)]
        except FileNotFoundError:
            continue
        for name in names:
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass
            except OSError as err:
                raise SinkFolderError(f"sink folder {folder}: cannot remove run {run_id}'s staged file "
                                      f"{name}: {err.strerror} (remove it by hand)") from None
            removed.append(os.path.join(folder, name))
    for folder in sorted({s.folder for s in sinks if local_path(s.folder) is None}):
        at = ObjectFolder(folder)
        try:
            stale = at.remove_uncounted(own.match, own_attempts.match)
            stale += at.abort_uploads(f"part-{run_id}-", own_attempts.match)
        except (OSError, ValueError) as err:
            raise SinkFolderError(f"sink folder {at.shown}: cannot remove run {run_id}'s uncommitted "
                                  f"parts: {at.why(err)} (remove them by hand)") from None
        removed += [f"{at.shown}/{n}" for n in stale]
    if removed:
        log.info("run %s: removed %d staged files and objects of uncommitted sink parts", run_id, len(removed))
    return removed


def committed_parts(folder: str) -> tuple[Any, list[str]]:
    """The files holding a file sink's committed output, to read them with any reader:
    (None, their local paths) for a local folder; (the pyarrow filesystem, their paths in it)
    for a URI folder, the objects its markers name (never an uncommitted attempt's). E.g.
    `pyarrow.dataset.dataset(paths, filesystem=fs, format="parquet")`."""
    local = local_path(folder)
    if local is not None:
        return None, [os.path.join(local, n) for n in part_files(local)]
    at = ObjectFolder(folder)
    return at.fs, [at.path(n) for _, n in sorted(at.committed(PART.match).items())]


def read_jsonl_dir(path: str) -> list[dict]:
    """A jsonl sink's contents: every record of every committed part under `path` (a folder
    or a URI; in a local folder, every `.jsonl` file not hidden)."""
    out: list[dict] = []
    local = local_path(path)
    if local is None:
        fs, files = committed_parts(path)
        for name in files:
            if name.endswith(".jsonl"):
                with fs.open_input_stream(name) as fh:
                    out.extend(json.loads(line) for line in fh.read().decode("utf-8").splitlines() if line.strip())
        return out
    if not os.path.isdir(local):
        return out
    for name in sorted(os.listdir(local)):
        if name.endswith(".jsonl") and not name.startswith("."):
            with open(os.path.join(local, name), encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh if line.strip())
    return out
