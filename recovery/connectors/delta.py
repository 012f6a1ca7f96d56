"""The Delta Lake sink: `<sink type="delta" path="out/table"/>`, written with deltalake (delta-rs;
no JVM).

`path` is a folder (relative to the XML's folder, like every path) or a URI that delta-rs
opens (`file://`, `s3://`, `gs://`, `az://`, ...; object stores take their settings and
credentials from the environment, e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
AWS_ENDPOINT_URL: never from the XML).

Exactly-once: a sink task's part of a round is written as data files in the table's folder,
one per chunk as its tuples come (invisible: no commit names them), then added in one Delta
commit (an append) carrying the application transaction `app_id(run, sink, task)` = "<run
id>:<sink id>:<task id>" at version = the round (`DeltaPart`). At the part's first chunk, and
again before the commit, the task reads the table's last version for its app id: one at or
past the round means the part is committed already (a Spark retry, a resumed crashed round, a
repeated round) and nothing is written. The commit is made against the snapshot that check
read, so a concurrent attempt of the same part (Spark speculation) that committed in between
makes delta-rs refuse it (a concurrent-transaction conflict); concurrent appends of other tasks
are retried by delta-rs, and any conflict by this sink, after reading the app id again (only
the commit is retried: its data files stay). A part's data files are named by run, round, sink,
task and attempt (`data_file_stem`): a task that dies before its commit leaves its data files
named by no commit, never read, and `recover` (at its end) and `clear` remove the run's
(`remove_uncommitted`). A plain `DeltaTable.vacuum()` removes only files a commit removed; files
no commit ever named are what `vacuum(full=True)` removes, once older than the retention.

A missing table is created by the first part (its columns' types from its first chunk's values, as
a parquet sink's: int64, double, string, bool, lists and structs; a column of nulls only is a
string); later parts are cast to the table's types (a value that does not fit fails the part).
App transactions stay in the table's log for good: `recovery clear RUN` cannot drop them, so a
run submitted again under a cleared run's id is refused while the table holds its commits
(`check`).
"""
from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from recovery.connectors.file_sinks import ParquetSink
from recovery.connectors.files import resolve as resolve_path
from recovery.connectors.sink_base import SinkTableError
from recovery.model.graph import TaskMap
from recovery.model.workflow import SinkImpl, Workflow

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 30   # conflicts a part's commit outlasts (each one: another task committed first)


def app_id(run_id: str, sink: str, task_id: int) -> str:
    """The application transaction id of a sink task's parts: "<run id>:<sink id>:<task id>"."""
    return f"{run_id}:{sink}:{task_id}"


def data_file_stem(run_id: str, round_no: int, sink: str, task_id: int) -> str:
    """The start of the names of a part's data files (each adds an attempt's token and a chunk
    number): whose a data file is, once its attempt died before its commit."""
    return f"part-{run_id}-r{round_no:04d}-{sink}-t{task_id:04d}"


def _run_data_files(run_id: str, sinks: Sequence[str]) -> re.Pattern[str]:
    comps = "|".join(re.escape(c) for c in sinks)
    return re.compile(rf"^part-{re.escape(run_id)}-r\d{{4,}}-(?:{comps})-t\d{{4,}}-[0-9a-f]{{16}}-\d+"
                      r"\.snappy\.parquet$")


def is_uri(path: str) -> bool:
    return "://" in path


def location(impl: SinkImpl, base_dir: str) -> str:
    """The table's URI, or its local folder resolved against the XML's folder."""
    path = impl.param("path") or ""
    return path if is_uri(path) else os.path.abspath(resolve_path(path, base_dir))


def _local_folder(uri: str) -> str | None:
    if not is_uri(uri):
        return uri
    return uri[len("file://"):] if uri.startswith("file://") else None


def open_table(uri: str) -> Any:
    """The table, or None when there is none yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError
    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        return None


def table_schema(dt: Any) -> Any:
    import pyarrow as pa
    return pa.schema(dt.schema().to_arrow())


def _new_table_types(part: Any) -> Any:
    """A first part's columns, with nulls-only columns as strings (Delta has no null type)."""
    import pyarrow as pa
    return pa.table([c.cast(pa.string()) if pa.types.is_null(c.type) else c for c in part.columns],
                    names=part.column_names)


def conform(part: Any, schema: Any, what: str, where: str) -> Any:
    """`part` with the table's columns and types (a column it lacks: nulls)."""
    import pyarrow as pa
    extra = [n for n in part.column_names if n not in schema.names]
    if extra:
        raise SinkTableError(f"{what}: table {where} has no column{'s' if len(extra) > 1 else ''} "
                             f"{', '.join(extra)} (its columns: {', '.join(schema.names) or 'none'})")
    columns = []
    for field in schema:
        if field.name in part.column_names:
            try:
                columns.append(part.column(field.name).cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise SinkTableError(f"{what}: column {field.name} of table {where} is {field.type}; "
                                     f"this part's values do not fit it: {err}") from None
        else:
            columns.append(pa.nulls(part.num_rows, field.type))
    return pa.table(columns, schema=schema)


class DeltaPart:
    """A part being written to a Delta table: its chunks as data files in the table's folder
    (invisible: no commit names them), then one commit adding them all with the part's app
    transaction (`commit`). `done`: the table holds the part already, nothing is written."""

    def __init__(self, uri: str, app: str, version: int, what: str, first: Any, stem: str = "part"):
        import secrets

        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.fs import DeltaStorageHandler
        from pyarrow import fs as pafs
        self.uri, self.app, self.version, self.what = uri, app, version, what
        self.adds: list[Any] = []
        self._names = f"{stem}-{secrets.token_hex(8)}"   # this attempt's data files: stem, token, chunk
        dt = open_table(uri)
        if dt is None:   # created empty first, so that the part's commit is checked against a snapshot
            try:
                DeltaTable.create(uri, _new_table_types(first).schema, mode="ignore")
            except CommitFailedError as err:   # another task created it first
                log.debug("%s: table %s created concurrently (%s)", what, uri, err)
            except (DeltaError, OSError) as err:
                raise SinkTableError(f"{what}: cannot create Delta table {uri}: {_one_line(err)}") from None
            dt = open_table(uri)
        done = dt.transaction_version(app)
        self.done = done is not None and done >= version   # (version 0 is falsy: compared, never tested)
        self.schema = table_schema(dt)
        self.fs = pafs.PyFileSystem(DeltaStorageHandler(uri))

    def write(self, chunk: Any) -> None:
        """One data file of the chunk's rows, cast to the table's types."""
        import json

        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction
        if self.done or chunk.num_rows == 0:
            return
        data = conform(chunk, self.schema, self.what, self.uri)
        name = f"{self._names}-{len(self.adds)}.snappy.parquet"
        with self.fs.open_output_stream(name) as stream:
            pq.write_table(data, stream, compression="snappy")
        size = self.fs.get_file_info(name).size
        stats = {"numRecords": data.num_rows, "nullCount": {
            f.name: data.column(f.name).null_count for f in data.schema if not _nested(f.type)}}
        self.adds.append(AddAction(name, size, {}, int(time.time() * 1000), True, json.dumps(stats)))

    def commit(self, metadata: dict[str, str] | None, fence: Callable[[], object] | None) -> bool:
        """One commit of every data file with the app transaction (app, version), unless the
        table holds that version of `app` already. True: committed; False: committed before.
        `fence` raises, before each try, when the task's driver no longer owns the run."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError, DeltaError
        if self.done:
            return False
        for attempt in range(COMMIT_ATTEMPTS):
            dt = open_table(self.uri)
            done = dt.transaction_version(self.app)
            if done is not None and done >= self.version:
                self.abort()   # another attempt's commit holds the part: ours are never read
                return False
            if fence is not None:
                fence()
            try:
                # against `dt`, the snapshot read above: a commit of `app` since then is a conflict
                dt.create_write_transaction(self.adds, "append", self.schema, commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id=self.app, version=self.version)], custom_metadata=metadata))
                return True
            except CommitFailedError as err:
                log.info("%s: commit of %s version %d conflicted (%s); reading the table again", self.what,
                         self.app, self.version, str(err).splitlines()[0])
                time.sleep(min(1.0, 0.01 * 2 ** min(attempt, 7)) * random.random())   # jittered backoff
            except DeltaError as err:
                raise SinkTableError(f"{self.what}: cannot write Delta table {self.uri}: {_one_line(err)}") from None
        raise SinkTableError(f"{self.what}: Delta table {self.uri}: commit of {self.app} version {self.version} "
                             f"still conflicted after {COMMIT_ATTEMPTS} attempts")

    def abort(self) -> None:
        """Best effort: the data files written, removed (no commit names them: never read;
        DeltaTable.vacuum removes what is left)."""
        for add in self.adds:
            try:
                self.fs.delete_file(add.path)
            except OSError as err:
                log.info("%s: data file %s of a dropped part not removed: %s", self.what, add.path, err)
        self.adds = []


def _nested(t: Any) -> bool:
    import pyarrow as pa
    return bool(pa.types.is_nested(t))


def commit_part(uri: str, part: Any, app: str, version: int, what: str,
                metadata: dict[str, str] | None = None, fence: Callable[[], object] | None = None) -> bool:
    """Append `part` (one Arrow table) in one commit carrying the app transaction (app,
    version), unless the table holds that version of `app` already. True: written; False:
    committed before. `fence` (the task context's) raises, before the commit, when the task's
    driver no longer owns the run."""
    writing = DeltaPart(uri, app, version, what, part)
    try:
        writing.write(part)
        return writing.commit(metadata, fence)
    except BaseException:
        writing.abort()
        raise


def _one_line(err: BaseException) -> str:
    return (" ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__)[:400]


class DeltaSink(ParquetSink):
    """The parquet sink's encodings (rows and Arrow batches become Arrow tables, a chunk at a
    time), written as data files and added in one Delta commit with the part's app
    transaction (module doc)."""

    def __init__(self, impl: SinkImpl, base_dir: str):
        super().__init__(impl, base_dir)
        self.uri = location(impl, base_dir)
        self.run_column = impl.param("run-column")

    def encode(self, tup: Any) -> Any:
        if not tup.fields:
            raise ValueError("a delta sink writes named fields: the input stream declares none")
        return tup.as_dict()

    def chunk_of(self, encoded: list[dict]) -> Any:
        """Rows of several inputs may name different fields: every row gets every column."""
        import pyarrow as pa
        columns = list(dict.fromkeys(c for row in encoded for c in row))
        return pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in encoded])

    def _what(self) -> str:
        return f"sink {self.context.component_id!r} (delta)"

    def _with_run(self, chunk: Any) -> Any:
        import pyarrow as pa
        if self.run_column:
            chunk = chunk.append_column(self.run_column, pa.array([self.context.run_id] * chunk.num_rows, pa.string()))
        return chunk

    def open_part(self, chunk: Any) -> DeltaPart:
        ctx = self.context
        from deltalake.exceptions import DeltaError
        try:
            stem = data_file_stem(ctx.run_id, ctx.round, ctx.component_id, ctx.task_id)
            return DeltaPart(self.uri, app_id(ctx.run_id, ctx.component_id, ctx.task_id), ctx.round, self._what(),
                             self._with_run(chunk), stem)
        except (DeltaError, OSError) as err:
            raise SinkTableError(f"{self._what()}: cannot open Delta table {self.uri}: {_one_line(err)}") from None

    def write_chunk(self, part: DeltaPart, chunk: Any) -> None:
        from deltalake.exceptions import DeltaError
        try:
            part.write(self._with_run(chunk))
        except (DeltaError, OSError) as err:
            raise SinkTableError(f"{self._what()}: cannot write Delta table {self.uri}: {_one_line(err)}") from None

    def commit_part(self, part: DeltaPart) -> None:
        ctx = self.context
        metadata = {"recovery_run": ctx.run_id, "recovery_sink": ctx.component_id,
                    "recovery_task": str(ctx.task_id), "recovery_round": str(ctx.round)}
        written = part.commit(metadata, ctx.fence)
        log.info("%s task %d round %d: %s", self._what(), ctx.task_id, ctx.round,
                 f"{len(part.adds)} data files committed to {self.uri}" if written else
                 "part committed already (a retry or a resumed round): nothing written")

    def abort_part(self, part: DeltaPart) -> None:
        part.abort()


# --- the driver's side -----------------------------------------------------------------------
def remove_uncommitted(uri: str, run_id: str, sinks: Sequence[str]) -> list[str]:
    """The data files of the run's `sinks` (by name, `data_file_stem`) that no commit of the
    table's log names: attempts that died before their commit. Only while no task of the run
    writes (the end of `recover`, `clear`). Files a commit removed since (time travel's) are the
    table's retention's, and any other writer's files are left alone. Returns their names."""
    from deltalake.fs import DeltaStorageHandler
    from pyarrow import fs as pafs
    dt = open_table(uri)
    if dt is None:
        return []
    # every file of the folder the log does not reference now, then those a commit removed
    unreferenced = set(dt.vacuum(dry_run=True, full=True, retention_hours=0, enforce_retention_duration=False))
    removed_by_commits = set(dt.vacuum(dry_run=True, retention_hours=0, enforce_retention_duration=False))
    ours = _run_data_files(run_id, sinks)
    stale = sorted(n for n in unreferenced - removed_by_commits if ours.match(n))
    fs = pafs.PyFileSystem(DeltaStorageHandler(uri))
    for name in stale:
        try:
            fs.delete_file(name)
        except FileNotFoundError:
            pass
    if stale:
        log.info("run %s: removed %d data files no commit names from Delta table %s", run_id, len(stale), uri)
    return stale


def check(wf: Workflow, component: str, impl: SinkImpl, fields: Sequence[str], run_id: str | None) -> None:
    """Before a run starts: the table's place can be written (no file in the way, a writable
    folder), an existing table has a column for every field (and the run column), and holds no
    app transaction of this run id (a cleared run submitted again: its commits would be taken
    for this run's and skipped)."""
    from deltalake.exceptions import DeltaError
    what = f"sink {component!r} (delta)"
    uri = location(impl, wf.base_dir or ".")
    folder = _local_folder(uri)
    if folder is not None:
        _check_folder(what, folder)
    try:
        dt = open_table(uri)
    except (DeltaError, OSError) as err:
        raise SinkTableError(f"{what}: cannot open Delta table {uri}: {_one_line(err)}") from None
    if dt is None:
        return
    run_column = impl.param("run-column")
    have = table_schema(dt).names
    missing = [f for f in [*fields, *([run_column] if run_column else [])] if f not in have]
    if missing:
        raise SinkTableError(f"{what}: table {uri} has no column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(missing)} for the input's fields (its columns: {', '.join(have) or 'none'})")
    if run_id is None:
        return
    held = [t for t in TaskMap.of(wf).task_ids(component)
            if dt.transaction_version(app_id(run_id, component, t)) is not None]
    if held:
        raise SinkTableError(f"{what}: Delta table {uri} already holds commits of run {run_id!r} (app "
                             f"transaction {app_id(run_id, component, held[0])}): a run submitted again "
                             "under a cleared run's id would skip them; submit under another run id")


def _check_folder(what: str, folder: str) -> None:
    """A local table's folder: a folder (or creatable: no file on its path) that can be written,
    and, when it is not a Delta table yet, empty."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise SinkTableError(f"{what}: {folder} is a file, not a Delta table's folder")
    existing = folder
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        raise SinkTableError(f"{what}: cannot create the Delta table's folder {folder}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SinkTableError(f"{what}: cannot write the Delta table's folder {folder}: {existing} is not writable")
    if existing == folder and not os.path.isdir(os.path.join(folder, "_delta_log")):
        others = [n for n in os.listdir(folder) if not n.startswith(".")]
        if others:
            raise SinkTableError(f"{what}: {folder} holds files but is not a Delta table (no _delta_log; "
                                 f"e.g. {sorted(others)[0]}): give an empty folder or a Delta table")
