"""Built-in sinks: bolts that make their input durable, then ack it (commit, then ack).

All are idempotent: a task writes one part per (round, task) under a deterministic name, so a
re-executed task overwrites its own part instead of appending, and a Redis hash sink sets
fields. A tuple that fails in a sink is never counted as written.

Table sinks (`postgres`, recovery/connectors/postgres.py; `delta`, recovery/connectors/delta.py)
append to a user's table: each part is one database transaction or Delta commit that records
(run, sink, task, round), so a replayed part writes nothing. Before a run, `check_tables`
checks on the driver that each table can take the run's rows; `clear_tables` is what
`recovery clear` does to them (never a user's row).

A file sink's folder belongs to runs through its part files' names (`part_name`). What a new
run does with other runs' parts follows Spark's writer modes (the sink's `mode`): `error`
refuses the submit (`check_folders`, on the driver, before anything is stored), `overwrite`
removes them once the run is complete (`replace_other_runs`: a run that fails or is left
pending has destroyed nothing), `append` keeps them. Recovery rounds of a run write that run's
own parts, so they never meet the check.

Without a mode= the default depends on what the workflow reads (SinkImpl.write_mode): `append`
when a spout reads a Redis-stream topic, since each bounded submit continues the stream from
its committed offsets into the same folder (Structured Streaming's file sink appends, too);
`error` when it reads files, where a second run would mix a rerun's output with the first's.
"""
from __future__ import annotations

import fcntl
import importlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from recovery.api.components import Bolt, Tuple
from recovery.connectors.files import resolve
from recovery.errors import RecoveryError
from recovery.model.workflow import FILE_SINK_TYPES, TABLE_SINK_TYPES, SinkImpl, Workflow
from recovery.tracking import keys

log = logging.getLogger(__name__)

# part-<run id>-r<round>-<component>-t<task>.<ext>; run ids and component ids may hold "-",
# so a name is matched against a known run and component, never split.
PART = re.compile(r"^part-.+-r\d{4,}-.+-t\d{4,}\.(?:jsonl|parquet)$")


class SinkFolderError(RecoveryError):
    """A file sink's folder cannot take this run's output (names the sink and the folder)."""


class SinkTableError(RecoveryError):
    """A table sink's database or table cannot take this run's rows (names the sink and the
    table): refused on the driver before a run starts; raised by a sink task's write, it fails
    the task's part (its tuples are queued for `recover`)."""


def part_name(run_id: str, round_no: int, component_id: str, task_id: int, ext: str) -> str:
    """One part per (run, round, task): a re-executed task overwrites its own part; another
    run of the same workflow writes beside it."""
    return f"part-{run_id}-r{round_no:04d}-{component_id}-t{task_id:04d}.{ext}"


def _part_name(context: Any, ext: str) -> str:
    return part_name(getattr(context, "run_id", "run"), getattr(context, "round", 0),
                     context.component_id, context.task_id, ext)


def _atomic_write(path: str, write: Callable[[Any], None], fence: Callable[[], None] | None = None) -> None:
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


def check_folders(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: every file sink's folder can take
    a new run's output. A folder holding another run's parts refuses it in mode `error`; one
    holding parts named like this run's (a run cleared, then submitted again under the same
    id) refuses it in every mode, since the new parts would mix with the old ones. `run_id`
    None: a run id not chosen yet (a new one, so no part can bear it). Table sinks are checked
    first (check_tables)."""
    check_tables(wf, run_id)
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


# --- tables (driver side) -------------------------------------------------------------------
@dataclass(frozen=True)
class TableSink:
    component: str
    type: str
    impl: SinkImpl
    fields: tuple[str, ...]   # the input streams' fields, in order (no repeats)

    @property
    def where(self) -> str:
        """The table as the XML names it."""
        return self.impl.param("table" if self.type == "postgres" else "path") or ""


def table_sinks(wf: Workflow) -> list[TableSink]:
    """The workflow's postgres and delta sinks, with the fields their inputs carry."""
    out = []
    for c in wf.components:
        impl = c.impl
        if isinstance(impl, SinkImpl) and impl.type in TABLE_SINK_TYPES:
            fields: list[str] = []
            for inp in c.inputs:
                try:
                    stream = wf.component(inp.source).stream(inp.stream)
                except KeyError:   # an input from outside this workflow (a recovery round's)
                    stream = None
                fields += stream.fields if stream else ()
            out.append(TableSink(c.id, impl.type, impl, tuple(dict.fromkeys(fields))))
    return out


def check_tables(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: each table sink's database answers
    and its table (when it exists) has a column for every field; a Delta table's place can be
    written and holds no commit of `run_id` (None: a new id, which none can hold)."""
    from recovery.connectors import delta, postgres  # lazy: they subclass this module's sinks
    for s in table_sinks(wf):
        log.debug("checking sink %r (%s): %s", s.component, s.type, s.where)
        if s.type == "postgres":
            postgres.check(s.component, s.impl, s.fields)
        else:
            delta.check(wf, s.component, s.impl, s.fields, run_id)


@dataclass
class TableClear:
    """What `recovery clear` did at a table sink (its user rows are never removed)."""
    component: str
    type: str
    table: str
    commit_table: str | None = None   # postgres: where the run's commit rows were
    commit_rows_removed: int | None = None
    note: str = ""
    error: str | None = None          # postgres: why the commit rows stayed (--force)

    def as_dict(self) -> dict[str, Any]:
        return {"sink": self.component, "type": self.type, "table": self.table, "rows_kept": True,
                "commit_table": self.commit_table, "commit_rows_removed": self.commit_rows_removed,
                "note": self.note, "error": self.error}


def clear_tables(wf: Workflow, run_id: str, force: bool = False, reach_only: bool = False) -> list[TableClear]:
    """`recovery clear RUN` at the run's table sinks: rows of a user's table are never deleted.
    PostgreSQL: the run's rows of the commit table go, so that a run submitted again under the
    same id writes again. Every database is connected to before any row goes: one that cannot
    be reached refuses the clear (SinkTableError) with nothing removed, unless `force`, where
    its commit rows stay and the result says so. Delta: app transactions cannot leave a
    table's log; a run submitted again under the same id is refused. `reach_only`: only
    connect (clear --all checks every run's databases before clearing any run)."""
    from contextlib import ExitStack

    from recovery.connectors import postgres  # lazy: it subclasses _BufferedSink (psycopg: lazy there)
    out: list[TableClear] = []
    with ExitStack() as stack:
        conns: dict[str, Any] = {}
        unreachable: dict[str, str] = {}
        for s in table_sinks(wf):
            if s.type != "postgres":
                continue
            what = f"sink {s.component!r} (postgres)"
            try:
                conns[s.component] = stack.enter_context(postgres.connect(s.impl.param("url") or "", what))
            except SinkTableError as err:
                if not force:
                    raise SinkTableError(f"{err}; nothing was cleared: clear run {run_id} again once the "
                                         "database answers, or with --force (its commit rows then stay)") from None
                unreachable[s.component] = str(err)
        if reach_only:
            return []
        for s in table_sinks(wf):
            run_col = s.impl.param("run-column")
            if s.type == "postgres":
                done = TableClear(s.component, s.type, s.where)
                how = (f"DELETE FROM {s.where} WHERE {run_col} = '{run_id}' removes them" if run_col else
                       "they carry no run id: the sink has no run-column")
                if s.component in unreachable:
                    done.error = unreachable[s.component]
                else:
                    try:
                        done.commit_table, done.commit_rows_removed = postgres.clear_commits(
                            conns[s.component], s.component, s.impl, run_id)
                    except SinkTableError as err:
                        if not force:
                            raise
                        done.error = str(err)
                if done.error is None:
                    done.note = (f"rows in table {s.where} kept ({how}); {done.commit_rows_removed} commit rows "
                                 f"of the run removed from {done.commit_table}: a run submitted again as "
                                 f"{run_id} writes its rows again")
                else:
                    done.note = (f"rows in table {s.where} kept ({how}); the run's commit rows stayed (the "
                                 f"database did not answer: --force): a run submitted again as {run_id} would "
                                 "skip the parts written before")
                    log.warning("run %s: sink %r: %s", run_id, s.component, done.error)
            else:
                how = (f"DeltaTable(path).delete(\"{run_col} = '{run_id}'\") removes them" if run_col else
                       "they carry no run id: the sink has no run-column")
                done = TableClear(s.component, s.type, s.where, note=(
                    f"rows in Delta table {s.where} kept ({how}); its log keeps the run's app transactions "
                    f"for good, so submitting again under run id {run_id} is refused"))
            out.append(done)
    return out


class _BufferedSink(Bolt):
    """Buffers the task's tuples, writes them once at the end of the input, then acks them.

    The batch path (runtime.batch.BatchTaskRunner.run_sink, when every input of the sink is a
    batch component) drives the same sink a chunk at a time: `encode_batch` encodes a record
    batch's rows as `encode` encodes each tuple, `chunk_of` makes a chunk of row encodings,
    and `write_chunks` writes the task's chunks as one part, the bytes `write` would."""

    def __init__(self, impl: SinkImpl, base_dir: str):
        self.impl = impl
        self.base_dir = base_dir
        self.pending: list[Tuple] = []
        self.encoded: list[Any] = []

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            return
        self.encoded.append(self.encode(tup))   # an unencodable tuple fails here, alone
        self.pending.append(tup)

    def encode(self, tup: Tuple) -> Any:
        return tup.as_dict() if tup.fields else {"values": tup.values}

    def finish(self) -> None:
        if self.pending:
            self.write(self.encoded)
        for tup in self.pending:
            self.ack(tup)
        self.pending, self.encoded = [], []

    def write(self, encoded: list[Any]) -> None:
        """Make the task's encoded tuples durable (before they are acked)."""
        raise NotImplementedError

    # -- the batch path ---------------------------------------------------------------------
    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        """(a chunk of the encodings of `batch`'s rows that encode, {row: the exception `encode`
        raises for it}). `batch` holds one tuple a row, its columns the tuples' values, `fields`
        their names. This default encodes row by row, as `process` does."""
        encoded: list[Any] = []
        errors: dict[int, BaseException] = {}
        for i, values in enumerate(_python_rows(batch)):
            try:
                encoded.append(self.encode(Tuple(0, "", "default", 0, values, fields, ())))
            except Exception as err:   # broad-except: whatever encode raises fails that row alone, as in process
                errors[i] = err
        return self.chunk_of(encoded), errors

    def chunk_of(self, encoded: list[Any]) -> Any:
        """A chunk of row encodings (what `encode` returned) for `write_chunks`."""
        return encoded

    def write_chunks(self, chunks: list[Any]) -> None:
        """`write` of the rows of `chunks`, in order."""
        self.write([e for chunk in chunks for e in chunk])


class JsonlSink(_BufferedSink):
    def encode(self, tup: Tuple) -> bytes:
        return json.dumps(super().encode(tup), ensure_ascii=False, sort_keys=True).encode() + b"\n"

    def write(self, encoded: list[bytes]) -> None:
        self.write_chunks([b"".join(encoded)])

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        if not fields:
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"\n")
        return _joined(lines), errors

    def chunk_of(self, encoded: list[bytes]) -> bytes:
        return b"".join(encoded)

    def write_chunks(self, chunks: list[Any]) -> None:
        folder = resolve(self.impl.param("path") or "out", self.base_dir)
        data = b"".join(chunks)
        _atomic_write(os.path.join(folder, _part_name(self.context, "jsonl")), lambda fh: fh.write(data),
                      getattr(self.context, "fence", None))


class ParquetSink(_BufferedSink):
    def write(self, encoded: list[dict]) -> None:
        import pyarrow as pa  # lazy: only parquet sinks need it, and it is slow to import
        self._write_table(pa.Table.from_pylist(encoded))

    def _write_table(self, table: Any) -> None:
        import pyarrow.parquet as pq
        folder = resolve(self.impl.param("path") or "out", self.base_dir)
        _atomic_write(os.path.join(folder, _part_name(self.context, "parquet")),
                      lambda fh: pq.write_table(table, fh), getattr(self.context, "fence", None))

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        """The columns as they are, with the types `Table.from_pylist` gives the row path's
        dicts (int64, double, string, null for a column of None...): encoding never fails."""
        import pyarrow as pa
        if not fields:
            return super().encode_batch(batch, fields)
        columns = dict(zip(fields, batch.columns))   # as Tuple.as_dict: a repeated name, its last value
        return pa.table([_pylist_typed(c) for c in columns.values()], names=list(columns)), {}

    def write_chunks(self, chunks: list[Any]) -> None:
        """One table for the part, the types `write` infers: tables of one schema are
        concatenated; otherwise (Python rows, or types that differ between chunks: int64 and
        double, say) every row goes through `Table.from_pylist` as in `write`."""
        import pyarrow as pa
        tables = [c for c in chunks if isinstance(c, pa.Table)]
        if len(tables) == len(chunks) and all(t.schema == tables[0].schema for t in tables):
            self._write_table(pa.concat_tables(tables).combine_chunks())
            return
        self.write([row for c in chunks for row in (c.to_pylist() if isinstance(c, pa.Table) else c)])


class RedisHashSink(_BufferedSink):
    """HSET <key> <tuple[key-field]> <the tuple as JSON>: a replay overwrites the same field."""

    def encode(self, tup: Tuple) -> tuple[str, str]:
        obj = _BufferedSink.encode(self, tup)
        field = self.impl.param("key-field") or (tup.fields[0] if tup.fields else None)
        key = tup[field] if field else tup.values[0]
        return str(key), json.dumps(obj, ensure_ascii=False, sort_keys=True)

    def write(self, encoded: list[tuple[str, str]]) -> None:
        client = self.context.redis
        if client is None:
            raise RuntimeError("the redis sink needs a Redis connection")
        key = self.impl.param("key") or keys.default_sink(self.context.component_id)
        mapping = dict(encoded)
        client.hset(key, mapping=mapping)

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        field = self.impl.param("key-field") or (fields[0] if fields else None)
        if not fields or field not in fields:   # no such field: each row fails as in encode
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"")
        key_column = dict(zip(fields, batch.columns))[field]
        return [(str(k), v.decode()) for k, v in zip(key_column.to_pylist(), lines.to_pylist())
                if v is not None], errors


# --- encoding Arrow columns as the row path encodes each tuple ---------------------------------
def _python_values(column: Any) -> list[Any]:
    """A column's values as a row sink gets them: to_pylist, then through msgpack as the
    chunks between stages carry them (a map's pairs become lists); as they are when msgpack
    cannot carry them (a row stage would have failed on them earlier)."""
    import msgpack
    values = column.to_pylist()
    try:
        return msgpack.unpackb(msgpack.packb(values))
    except (TypeError, ValueError, OverflowError):
        return values


def _python_rows(batch: Any) -> list[list[Any]]:
    columns = [_python_values(c) for c in batch.columns]
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(batch.num_rows)]


_FLOAT_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _json_column(column: Any, errors: dict[int, BaseException]) -> Any:
    """Each value of `column` as json.dumps(value, ensure_ascii=False, sort_keys=True) writes
    it (a pyarrow string array); a value json cannot encode is null, its exception in
    `errors` under its row (the first one per row is kept, as the row path raises once)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    t = column.type
    if pa.types.is_dictionary(t):
        return _json_column(column.dictionary, errors).take(column.indices) if len(column.dictionary) \
            else pa.array(["null"] * len(column), pa.string())
    if pa.types.is_null(t):
        return pa.array(["null"] * len(column), pa.string())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):   # Arrow's decimal digits, true/false: json's
        return pc.fill_null(pc.cast(column, pa.string()), "null")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        column = pc.cast(column, pa.string())
        escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
        quoted = pc.binary_join_element_wise('"', escaped, '"', "")
        control = pc.fill_null(pc.match_substring_regex(column, r"[\x00-\x1f]"), False)
        if pc.any(control).as_py():   # json's \n, \t, \u00XX...: rare, by json itself
            rows = pc.filter(column, control).to_pylist()
            quoted = pc.replace_with_mask(quoted, control, pa.array([json.dumps(v, ensure_ascii=False) for v in rows],
                                                                    pa.string()))
        return pc.fill_null(quoted, "null")
    if t in (pa.float32(), pa.float64()):   # float.__repr__, and NaN/Infinity, as json
        reprs = []
        for v in column.to_pylist():
            if v is None:
                reprs.append("null")
            else:
                r = float.__repr__(v)
                reprs.append(_FLOAT_SPECIAL.get(r, r))
        return pa.array(reprs, pa.string())
    out: list[str | None] = []
    for i, v in enumerate(_python_values(column)):   # nested and other types: json itself
        try:
            out.append(json.dumps(v, ensure_ascii=False, sort_keys=True))
        except Exception as err:   # broad-except: what json raises for a value fails its row alone
            errors.setdefault(i, err)
            out.append(None)
    return pa.array(out, pa.string())


def json_lines(batch: Any, fields: tuple[str, ...], end: bytes) -> tuple[Any, dict[int, BaseException]]:
    """(per row, json.dumps(dict(zip(fields, values)), ensure_ascii=False, sort_keys=True)
    followed by `end`, as a pyarrow binary array, null where the row cannot be encoded;
    {row: the exception json raised for it}): JsonlSink.encode's bytes, column by column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    columns = dict(zip(fields, batch.columns))   # as Tuple.as_dict: a repeated name, its last value
    errors: dict[int, BaseException] = {}
    parts: list[Any] = []
    prefix = "{"
    for name in sorted(columns):   # sort_keys; json raises for the first bad value in this order
        col_errors: dict[int, BaseException] = {}
        encoded = _json_column(columns[name], col_errors)
        for i, e in col_errors.items():
            errors.setdefault(i, e)
        parts += [prefix + json.dumps(name, ensure_ascii=False) + ": ", encoded]
        prefix = ", "
    lines = pc.binary_join_element_wise(*parts, "}" + end.decode(), "") if parts else \
        pa.array(["{}" + end.decode()] * batch.num_rows, pa.string())
    if errors:
        bad = [False] * len(lines)
        for i in errors:
            bad[i] = True
        lines = pc.if_else(pa.array(bad), pa.scalar(None, pa.string()), lines)
    return pc.cast(lines, pa.binary()), errors


def _joined(lines: Any) -> bytes:
    """The non-null values of a binary array, concatenated."""
    import pyarrow as pa
    import pyarrow.compute as pc
    present = pc.drop_null(lines)
    if len(present) == 0:
        return b""
    one: Any = pa.ListArray.from_arrays(pa.array([0, len(present)], pa.int32()), present)
    joined: Any = pc.binary_join(one, b"")
    return bytes(joined[0].as_py())


def _pylist_typed(column: Any) -> Any:
    """`column` with the type `pa.array(column.to_pylist())` infers (what Table.from_pylist
    gives the row sink's dicts), cast where Arrow can, inferred from Python values otherwise."""
    import pyarrow as pa
    t = column.type
    if column.null_count == len(column):
        return pa.nulls(len(column))
    if pa.types.is_dictionary(t):
        column, t = column.dictionary_decode(), t.value_type
    if pa.types.is_boolean(t) or t in (pa.int64(), pa.float64(), pa.string()):
        return column
    if (pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32())):
        return column.cast(pa.int64())
    if pa.types.is_floating(t):
        return column.cast(pa.float64())
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return column.cast(pa.string())
    return pa.array(_python_values(column))


class _SinkTypes(Mapping[str, Callable[[SinkImpl, str], _BufferedSink]]):
    """Sink type -> its class. The table sinks' classes live in their own modules, imported on
    first use: they subclass this module's sinks, and bring psycopg or deltalake."""

    def __init__(self, classes: dict[str, Callable[[SinkImpl, str], _BufferedSink]], lazy: dict[str, str]):
        self._classes, self._lazy = dict(classes), lazy
        self._order = [*classes, *lazy]

    def __getitem__(self, type_: str) -> Callable[[SinkImpl, str], _BufferedSink]:
        if type_ not in self._classes:
            module, name = self._lazy[type_].split(":")   # KeyError: no such type
            self._classes[type_] = getattr(importlib.import_module(module), name)
        return self._classes[type_]

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


SINKS = _SinkTypes({"jsonl": JsonlSink, "parquet": ParquetSink, "redis": RedisHashSink},
                   {"postgres": "recovery.connectors.postgres:PostgresSink",
                    "delta": "recovery.connectors.delta:DeltaSink"})


def make_sink(impl: SinkImpl, base_dir: str) -> Bolt:
    try:
        return SINKS[impl.type](impl, base_dir)
    except KeyError:
        raise ValueError(f"unknown sink type {impl.type!r} (known: {', '.join(SINKS)})") from None


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
