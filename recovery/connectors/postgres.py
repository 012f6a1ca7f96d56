"""The PostgreSQL sink: `<sink type="postgres" url="postgresql://user@host:port/db" table="[schema.]name"/>`.

The input stream's fields go into the table's columns of the same names (plus, with
`run-column="name"`, the run id into that column). A sink task writes its part (its tuples of
one round) in one database transaction that also inserts the part's row into the commit table
`recovery_commits` (in the table's schema), keyed by (run, sink, task, round):

1. at the part's first chunk, the commit row first (`INSERT ... ON CONFLICT DO NOTHING`): a
   concurrent attempt of the same part (Spark speculation) blocks on the key until the first
   one commits or rolls back;
2. an existing row means the part is in the table already (a Spark retry, a resumed crashed
   round, a repeated round): nothing is written, the tuples are acked;
3. otherwise each chunk is COPY'd into the transaction as it comes, and at the end of the
   task's input the commit row gets the part's row count and the transaction COMMITs: rows and
   commit row are there together or not at all.

A missing table is created by the first part written, its column types from that part's first
chunk's values (`column_types`; a field no value of it names: text); a missing commit table
too. Both under an advisory lock, so that concurrent
tasks create each once. Identifiers are quoted (psycopg.sql), never formatted into SQL. The
password comes from libpq's usual places (PGPASSWORD, ~/.pgpass, a service file): the XML
never holds one (refused at validate, recovery/model/xml/build.py).

A write that fails (the database gone, a value the column type refuses) raises: the task's
tuples of that part fail together, are queued at the sink task and `recover` writes them once
the cause is gone. `recovery clear RUN` drops the run's commit rows (`clear_commits`), never
rows of the user's table.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recovery.api.tuples import Tuple
from recovery.connectors.sink_base import SinkTableError, StreamingSink
from recovery.model.workflow import SinkImpl

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

COMMIT_TABLE = "recovery_commits"
CONNECT_TIMEOUT_SECONDS = 10
BIGINT = (-(1 << 63), (1 << 63) - 1)


# --- names -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableName:
    """A table as the XML names it: `name` or `schema.name` (schema None: the search path's)."""
    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        parts = text.split(".")
        if len(parts) > 2 or not all(p.strip() for p in parts):
            raise ValueError(f"table must be name or schema.name, got {text!r}")
        return cls(parts[0], parts[1]) if len(parts) == 2 else cls(None, parts[0])

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def table_problem(text: str) -> str | None:
    """Why `text` is not a table name the sink takes (None: it is one)."""
    try:
        TableName.parse(text)
    except ValueError as err:
        return str(err)
    return None


def _conninfo(url: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict
    return conninfo_to_dict(url)


@contextmanager
def connect(url: str, what: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection (transactions are explicit); a server that cannot be reached is
    one line naming `what` and the URL (which holds no password)."""
    import psycopg
    from psycopg.conninfo import make_conninfo
    extra: dict[str, Any] = {} if "connect_timeout" in _conninfo(url) else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    try:
        conn = psycopg.connect(make_conninfo(url, application_name="recovery", **extra), autocommit=True)
    except psycopg.Error as err:
        raise SinkTableError(f"{what}: cannot connect to {url}: {one_line(err)}") from None
    try:
        yield conn
    finally:
        conn.close()


def one_line(err: BaseException) -> str:
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return (text or type(err).__name__)[:400]


# --- the table, as the server has it ---------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """The table with its schema known; `columns` {name: type name}, None when it is missing."""
    schema: str
    name: str
    columns: dict[str, str] | None

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"

    def ident(self) -> Any:
        from psycopg import sql
        return sql.Identifier(self.schema, self.name)

    def commits(self) -> Any:
        from psycopg import sql
        return sql.Identifier(self.schema, COMMIT_TABLE)


def resolve(conn: psycopg.Connection, table: TableName) -> Resolved:
    """Where `table` is (an unqualified name: where the search path finds it, else the current
    schema, where CREATE TABLE puts it) and its columns."""
    from psycopg import sql
    quoted = sql.Identifier(*([table.schema] if table.schema else []), table.name).as_string(conn)
    row = conn.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)", [quoted]).fetchone()
    if row is None:
        current = conn.execute("SELECT current_schema()").fetchone()
        schema = table.schema or (current[0] if current else None)
        if schema is None:
            raise SinkTableError(f"table {table}: no schema to create it in (the search path is empty)")
        return Resolved(schema, table.name, None)
    schema = row[0]
    cols = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        [quoted]).fetchall()
    return Resolved(schema, table.name, {name: typ for name, typ in cols})


def schema_exists(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone() is not None


def missing_columns(resolved: Resolved, wanted: Sequence[str]) -> list[str]:
    have = resolved.columns or {}
    return [c for c in wanted if c not in have]


def columns_error(what: str, resolved: Resolved, missing: Sequence[str]) -> SinkTableError:
    have = ", ".join(resolved.columns or {}) or "none"
    return SinkTableError(f"{what}: table {resolved} has no column{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)} for the input's fields (its columns: {have}); add "
                          "them, or write to another table")


@contextmanager
def _advisory_lock(conn: psycopg.Connection, name: str) -> Iterator[None]:
    """A transaction holding the advisory lock of `name` (one creator at a time)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"recovery:{name}"])
        yield


def ensure_commit_table(conn: psycopg.Connection, resolved: Resolved) -> None:
    from psycopg import sql
    quoted = resolved.commits().as_string(conn)
    if conn.execute("SELECT to_regclass(%s)", [quoted]).fetchone() != (None,):
        return
    with _advisory_lock(conn, quoted):
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (run_id text NOT NULL, sink text NOT NULL, task integer NOT NULL, "
            "round integer NOT NULL, target text NOT NULL, rows bigint NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run_id, sink, task, round))"
        ).format(resolved.commits()))


def ensure_table(conn: psycopg.Connection, table: TableName, rows: Sequence[dict[str, Any]],
                 columns: Sequence[str], run_column: str | None) -> Resolved:
    """The table, created from `rows`' values when missing (column_types); its columns."""
    from psycopg import sql
    resolved = resolve(conn, table)
    if resolved.columns is not None:
        return resolved
    with _advisory_lock(conn, str(resolved)):
        again = resolve(conn, TableName(resolved.schema, resolved.name))
        if again.columns is not None:   # another task created it meanwhile
            return again
        types = column_types(rows, columns)
        if run_column:
            types[run_column] = "text"
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
            resolved.ident(),
            sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in types.items())))
        log.info("created table %s (%s)", resolved, ", ".join(f"{c} {t}" for c, t in types.items()))
    return resolve(conn, TableName(resolved.schema, resolved.name))


# --- values ----------------------------------------------------------------------------------
def kind(value: Any) -> str:
    """A value's kind, for choosing a column type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint" if BIGINT[0] <= value <= BIGINT[1] else "numeric"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytea"
    return "jsonb"   # lists and maps, and anything else JSON holds


def column_type(values: Iterable[Any]) -> str:
    """The column type for a column's values: boolean, bigint (numeric past 64 bits), double
    precision (numbers with a fraction among them), text, bytea, jsonb for lists and maps and
    for columns mixing kinds (JSON holds them all); text for a column of nulls only."""
    kinds = {kind(v) for v in values if v is not None}
    if not kinds:
        return "text"
    if len(kinds) == 1:
        return kinds.pop()
    if kinds <= {"bigint", "numeric"}:
        return "numeric"
    if kinds <= {"bigint", "numeric", "double precision"}:
        return "double precision"
    return "jsonb"


def column_types(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> dict[str, str]:
    return {c: column_type(r.get(c) for r in rows) for c in columns}


def _check_no_nul(value: Any, field: str) -> None:
    """PostgreSQL's text and jsonb cannot hold U+0000: such a tuple fails alone, at encode."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"field {field!r} holds a NUL character (U+0000), which PostgreSQL "
                             "text cannot store")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_no_nul(k, field)
            _check_no_nul(v, field)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_no_nul(v, field)


def _json(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError("bytes cannot go into a JSON column")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)


def converter(type_name: str) -> Any:
    """How a value goes into a column of `type_name` through COPY: JSON text for json/jsonb
    columns, and for text columns given other than a string; as psycopg adapts it otherwise
    (the server parses it, and refuses what its type cannot hold)."""
    base = type_name.split("(")[0].strip()
    if base in ("json", "jsonb"):
        return lambda v: None if v is None else _json(v)
    if base in ("text", "character varying", "character", "name", "citext"):
        return lambda v: v if v is None or isinstance(v, str) else _json(v)
    return lambda v: _json(v) if isinstance(v, dict) else v


# --- the sink --------------------------------------------------------------------------------
class PgPart:
    """A part being written: its connection, inside the part's transaction once the commit row
    is claimed (`claimed` False: the part is in the table already, nothing is written)."""

    def __init__(self, stack: ExitStack, conn: psycopg.Connection, target: Resolved, claimed: bool):
        self.stack, self.conn, self.target, self.claimed = stack, conn, target, claimed
        self.rows = 0


class PostgresSink(StreamingSink):
    """The part's chunks COPY'd into the transaction that inserted its commit row (module doc)."""

    def __init__(self, impl: SinkImpl, base_dir: str):
        super().__init__(impl, base_dir)
        self.url = impl.param("url") or ""
        self.table = TableName.parse(impl.param("table") or "")
        self.run_column = impl.param("run-column")

    def encode(self, tup: Tuple) -> dict[str, Any]:
        if not tup.fields:
            raise ValueError("a postgres sink writes named fields: the input stream declares none")
        row = tup.as_dict()
        for field, value in row.items():
            _check_no_nul(value, field)
        return row

    def _what(self) -> str:
        return f"sink {self.context.component_id!r} (postgres)"

    def _declared(self) -> list[str]:
        """The fields the sink's inputs declare (a recovery round's queue inputs declare none)."""
        wf = self.context.workflow
        out: list[str] = []
        try:
            inputs = wf.component(self.context.component_id).inputs
        except KeyError:
            return out
        for inp in inputs:
            try:
                stream = wf.component(inp.source).stream(inp.stream)
            except KeyError:
                continue
            out += stream.fields if stream else ()
        return list(dict.fromkeys(out))

    def open_part(self, chunk: list[dict[str, Any]]) -> PgPart:
        """Connected, the table and the commit table there, the part's transaction begun with
        its commit row (the first chunk's values give a missing table its column types)."""
        import psycopg
        from psycopg import sql
        ctx, what = self.context, self._what()
        stack = ExitStack()
        try:
            conn = stack.enter_context(connect(self.url, what))
            columns = list(dict.fromkeys([*self._declared(), *(c for row in chunk for c in row)]))
            target = ensure_table(conn, self.table, chunk, columns, self.run_column)
            ensure_commit_table(conn, target)
            conn.autocommit = False   # the part's transaction, from the commit row to COMMIT
            claimed = conn.execute(sql.SQL(
                "INSERT INTO {} (run_id, sink, task, round, target, rows) VALUES (%s, %s, %s, %s, %s, 0) "
                "ON CONFLICT DO NOTHING RETURNING 1").format(target.commits()),
                [ctx.run_id, ctx.component_id, ctx.task_id, ctx.round, str(target)]).fetchone()
            return PgPart(stack, conn, target, claimed is not None)
        except psycopg.Error as err:
            stack.close()
            raise SinkTableError(f"{what}: cannot write table {self.table} at {self.url}: {one_line(err)}") from None
        except BaseException:
            stack.close()
            raise

    def write_chunk(self, part: PgPart, chunk: list[dict[str, Any]]) -> None:
        import psycopg
        from psycopg import sql
        if not part.claimed or not chunk:
            return
        what = self._what()
        columns = list(dict.fromkeys(c for row in chunk for c in row))
        missing = missing_columns(part.target, columns + ([self.run_column] if self.run_column else []))
        if missing:
            raise columns_error(what, part.target, missing)
        types = part.target.columns or {}
        convert = [converter(types[c]) for c in columns]
        names = columns + ([self.run_column] if self.run_column else [])
        extra = [self.context.run_id] if self.run_column else []
        try:
            with part.conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
                    part.target.ident(), sql.SQL(", ").join(sql.Identifier(c) for c in names))) as copy:
                for row in chunk:
                    copy.write_row([f(row.get(c)) for f, c in zip(convert, columns)] + extra)
        except psycopg.Error as err:
            raise SinkTableError(f"{what}: cannot write table {self.table} at {self.url}: {one_line(err)}") from None
        part.rows += len(chunk)

    def commit_part(self, part: PgPart) -> None:
        import psycopg
        from psycopg import sql
        ctx, what = self.context, self._what()
        try:
            if part.claimed:
                part.conn.execute(sql.SQL(
                    "UPDATE {} SET rows = %s WHERE run_id = %s AND sink = %s AND task = %s AND round = %s").format(
                    part.target.commits()), [part.rows, ctx.run_id, ctx.component_id, ctx.task_id, ctx.round])
                # last, before COMMIT: a task of a driver that lost the run (taken over, cleared)
                # raises here and its transaction rolls back (the file sinks check before renaming)
                if ctx.fence is not None:
                    ctx.fence()
                part.conn.commit()
            else:
                part.conn.rollback()
        except psycopg.Error as err:
            raise SinkTableError(f"{what}: cannot write table {self.table} at {self.url}: {one_line(err)}") from None
        finally:
            part.stack.close()
        log.info("%s task %d round %d: %s", what, ctx.task_id, ctx.round,
                 f"{part.rows} rows written to {self.table}" if part.claimed else
                 "part committed already (a retry or a resumed round): nothing written")

    def abort_part(self, part: PgPart) -> None:
        """The part's transaction rolled back (closing the connection does it too)."""
        import psycopg
        try:
            part.conn.rollback()
        except psycopg.Error as err:
            log.info("%s: rollback of a dropped part: %s", self._what(), one_line(err))
        finally:
            part.stack.close()


# --- the driver's side -----------------------------------------------------------------------
def check(component: str, impl: SinkImpl, fields: Sequence[str]) -> None:
    """Before a run starts: the database answers, and an existing table has a column for every
    field (and the run column); a missing table's schema exists. One line, naming the sink."""
    what = f"sink {component!r} (postgres)"
    url, table = impl.param("url") or "", TableName.parse(impl.param("table") or "")
    run_column = impl.param("run-column")
    import psycopg
    with connect(url, what) as conn:
        try:
            resolved = resolve(conn, table)
            if resolved.columns is None:
                if not schema_exists(conn, resolved.schema):
                    raise SinkTableError(f"{what}: schema {resolved.schema!r} of table {table} does not exist "
                                         f"in {url}: create it first")
                return
        except psycopg.Error as err:
            raise SinkTableError(f"{what}: cannot read table {table} at {url}: {one_line(err)}") from None
        missing = missing_columns(resolved, [*fields, *([run_column] if run_column else [])])
        if missing:
            raise columns_error(what, resolved, missing)


def clear_commits(conn: psycopg.Connection, component: str, impl: SinkImpl, run_id: str) -> tuple[str, int]:
    """Drop the run's rows of the sink's commit table (so that a run submitted again under the
    same id writes again); the user's table is left as it is. (the commit table, rows dropped)."""
    import psycopg
    from psycopg import sql
    what = f"sink {component!r} (postgres)"
    table = TableName.parse(impl.param("table") or "")
    try:
        resolved = resolve(conn, table)
        commits = f"{resolved.schema}.{COMMIT_TABLE}"
        if conn.execute("SELECT to_regclass(%s)", [resolved.commits().as_string(conn)]).fetchone() == (None,):
            return commits, 0
        cur = conn.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s AND sink = %s").format(resolved.commits()),
                           [run_id, component])
        return commits, cur.rowcount
    except psycopg.Error as err:
        raise SinkTableError(f"{what}: cannot drop run {run_id}'s commit rows at {impl.param('url')}: "
                             f"{one_line(err)}") from None
