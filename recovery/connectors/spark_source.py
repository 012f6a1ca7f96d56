"""A source that reads anything Spark's DataFrameReader reads: `<source type="spark">`.

On the driver (at submit, and when a round that runs the spout is built) the DataFrame is
defined and its schema read (metadata: no row comes to the driver), the stream's fields are
checked against its columns and its partitions are planned. In the tasks, each of the reader's
partitions is read by a Spark task that turns its rows into msgpack chunks of
[message id, values], keyed by the spout task that owns the partition: partition i goes to
task i mod parallelism, as KafkaSpout assigns a topic's partitions. The engine shuffles the
chunks to their spout tasks, where `spark_source` emits each row as a root tuple.

Message ids: the id-field column's value (several columns: the tuple of their values), else
the row's position in its file, from Spark's hidden `_metadata` column: (file, row index) for
Parquet, (file#split start, index of the row in its split) for the other file formats.

What root replay and a resumed run need: the same partition gives the same rows. So the split
sizes are part of the workflow, not of the cluster: while the source is planned,
`spark.sql.files.minPartitionNum` is the spout's parallelism (Spark's default is the
cluster's core count) and any `<option name="spark.sql...">` is set as a session setting.

Values keep their types through the run (msgpack carries them between stages): ints,
floats, strings, booleans, nulls, lists, maps and structs (as dicts; map keys become strings,
as in JSON), binary (as bytes). What msgpack cannot carry as it is: dates become ISO strings
("2024-01-31"), timestamps ISO strings in UTC ("2024-01-31T12:00:00+00:00"; without a time
zone for timestamp_ntz), decimals exact decimal strings ("12.50"), other types (intervals,
variants) their string form.

pyspark is imported lazily: the CLI imports the engine, which imports this module.
"""
from __future__ import annotations

import datetime
import functools
import logging
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from recovery.connectors.runner import SourceRunner
from recovery.errors import RecoveryError, WorkflowError
from recovery.faults import injections
from recovery.model.workflow import (
    SPARK_UNORDERED_FORMATS,
    Component,
    SourceImpl,
    Workflow,
    resolve_path,
    spark_id_fields,
)
from recovery.tracking import ids

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

SOURCE_TYPE = "spark"
FORMAT = "spark"            # a failed spout record's format (none fails: decoding cannot)
CHUNK_ROWS = 1024           # rows per chunk between the reading task and the spout task
SESSION_OPTION = "spark.sql."   # options named so are session settings while the source is planned
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"

# How a value of each Spark type becomes a value msgpack carries (see the module docstring).
# A kind is None (kept as it is), a name, or a tuple for nested types.
Kind = Any


def reads_with_spark(comp: Component) -> bool:
    return comp.is_spout and isinstance(comp.impl, SourceImpl) and comp.impl.type == SOURCE_TYPE


# --- the driver side ----------------------------------------------------------------------
@dataclass(frozen=True)
class ReadPlan:
    """What a reading task needs (pickled into it): the selected row is the values, then the
    id columns, then (without an id-field) the file and the position columns."""
    component: str
    tasks: int
    value_kinds: tuple[Kind, ...]
    id_kinds: tuple[Kind, ...]
    position: str | None            # "row_index" (Parquet), "split", or None (id-field)

    @property
    def n_values(self) -> int:
        return len(self.value_kinds)


def _describe(comp: Component) -> str:
    impl = comp.impl
    assert isinstance(impl, SourceImpl)
    attrs = " ".join(f'{k}="{v}"' for k, v in impl.params if k in ("format", "path", "table"))
    return f'<source type="spark" {attrs}>'


def _error(comp: Component, message: str, file: str | None, line: int | None) -> WorkflowError:
    return WorkflowError(f"spout {comp.id!r} ({_describe(comp)}): {message}", file, line)


def spark_error_line(err: BaseException) -> str:
    """The one line of a Spark or JVM error that says what went wrong (a py4j error's Java
    exception, an AnalysisException's first line)."""
    java = getattr(err, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception as inner:   # the JVM side is gone: the Python side's text will do
            log.debug("cannot read the Java exception: %s", inner)
            text = str(err)
    else:
        text = str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:500]


def _require_spark(spark: Any, comp: Component) -> None:
    if not hasattr(spark, "read"):
        raise RecoveryError(f"spout {comp.id!r} reads with Spark ({_describe(comp)}), and this engine "
                            "has no Spark (the test kit's): feed the spout with inputs={"
                            f"{comp.id!r}: [...]}}")


@contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """`settings` set on the session while inside, then what was there before."""
    saved: dict[str, str | None] = {}
    try:
        for key, value in settings.items():
            saved[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def planning_settings(comp: Component) -> dict[str, str]:
    """The session settings while the source is defined and planned: the split sizing is the
    workflow's (the spout's parallelism, its spark.sql.* options), so that a resumed or
    root-replayed round plans the same partitions wherever it runs."""
    impl = comp.impl
    assert isinstance(impl, SourceImpl)
    settings = {MIN_PARTITION_NUM: str(comp.parallelism)}
    settings.update((k, v) for k, v in impl.options if k.startswith(SESSION_OPTION))
    return settings


def dataframe(spark: SparkSession, wf: Workflow, comp: Component, file: str | None = None,
              line: int | None = None) -> DataFrame:
    """The source's DataFrame, as the XML defines it (call inside _session_settings)."""
    impl = comp.impl
    assert isinstance(impl, SourceImpl)
    reader = spark.read
    fmt, table, path, schema = (impl.param(k) for k in ("format", "table", "path", "schema"))
    try:
        if fmt:
            reader = reader.format(fmt)
        if schema:
            reader = reader.schema(schema)
        for key, value in impl.options:
            if not key.startswith(SESSION_OPTION):
                reader = reader.option(key, value)
        if table:
            return reader.table(table)
        if path:
            return reader.load(resolve_path(path, wf.base_dir))
        return reader.load()
    except Exception as err:   # pyspark's and py4j's errors: worded as one line, named
        raise _error(comp, f"cannot read it: {spark_error_line(err)}", file, line) from None


def _resolve_column(name: str, columns: list[str], case_sensitive: bool) -> str | None:
    if name in columns:
        return name
    if not case_sensitive:
        matches = [c for c in columns if c.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
    return None


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def plan(spark: SparkSession, wf: Workflow, comp: Component, file: str | None = None,
         line: int | None = None) -> tuple[DataFrame, ReadPlan, list[str]]:
    """(the selected DataFrame, its ReadPlan, the id columns): the stream's fields checked
    against the columns (one line naming the field, the source and the columns there are), the
    message ids' columns chosen. Call inside _session_settings."""
    impl = comp.impl
    assert isinstance(impl, SourceImpl)
    df = dataframe(spark, wf, comp, file, line)
    columns = list(df.columns)
    case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    fields = comp.streams[0].fields if comp.streams else ()
    id_fields = spark_id_fields(impl)

    def column(name: str, role: str) -> str:
        found = _resolve_column(name, columns, case_sensitive)
        if found is None:
            raise _error(comp, f"{role} {name!r} is not a column of its data (its columns: "
                               f"{', '.join(columns) or 'none'})", file, line)
        return found

    selected: list[Column] = [df[_quoted(column(f, "field"))].alias(f"_v{i}") for i, f in enumerate(fields)]
    id_columns = [column(f, "id-field") for f in id_fields]
    selected += [df[_quoted(c)].alias(f"_id{i}") for i, c in enumerate(id_columns)]
    position = None
    if not id_fields:
        fmt = impl.param("format") or ""
        if fmt in SPARK_UNORDERED_FORMATS:   # parse refuses it; a model built in code may not
            raise _error(comp, f"format {fmt!r} has no stable row order: name the column that "
                               "identifies a row with id-field=", file, line)
        try:
            meta = df.metadataColumn("_metadata")
            meta_fields = {f.name for f in df.select(meta).schema.fields[0].dataType.fields}  # type: ignore[attr-defined]
        except Exception as err:   # broad-except: any analysis error means no file metadata here
            log.debug("spout %s: no _metadata column: %s", comp.id, err)
            meta_fields = set()
        if "file_path" not in meta_fields:
            reads = f"format {fmt!r}" if fmt else "a table"
            raise _error(comp, f"{reads} gives its rows no file position to derive message ids from: "
                               "name the column that identifies a row with id-field=", file, line)
        position = "row_index" if "row_index" in meta_fields else "split"
        selected += [meta.getField("file_path").alias("_file"),
                     meta.getField("row_index" if position == "row_index" else "file_block_start").alias("_pos")]
    out = df.select(*selected)
    kinds = [kind_of(f.dataType) for f in out.schema.fields]
    rp = ReadPlan(comp.id, comp.parallelism, tuple(kinds[:len(fields)]),
                  tuple(kinds[len(fields):len(fields) + len(id_fields)]), position)
    return out, rp, id_columns


def read_partitions(spark: SparkSession, wf: Workflow, comp: Component,
                    owner_keys: tuple[int, ...], partition_id: Callable[[], int]) -> DataFrame:
    """The source read by Spark tasks (a mapInArrow over its DataFrame, no row on the driver):
    rows (c, k, chunk), each chunk a msgpack [[message id, values], ...] of reader partition i,
    owned by spout task i mod parallelism, whose routing key is owner_keys[i mod parallelism].
    The partitions are planned when the round runs, under planning_settings_of (the engine sets
    them); `partition_id` gives the reading task's partition."""
    _require_spark(spark, comp)
    with session_settings(spark, planning_settings(comp)):
        out, rp, _ = plan(spark, wf, comp)
    log.info("spout %s reads %s into %d tasks", comp.id, _describe(comp), comp.parallelism)
    return out.mapInArrow(functools.partial(arrow_chunks_of_partition, rp, owner_keys, partition_id),
                          "c int, k long, chunk binary")


def planning_settings_of(wf: Workflow) -> dict[str, str]:
    """The session settings a round that reads `wf`'s spark sources runs under (one action plans
    them all): each source's planning_settings; the split count is the largest spark source's
    parallelism, and a spark.sql.* option two sources set differently is refused by check_options."""
    merged: dict[str, str] = {}
    for comp in wf.spouts:
        if not reads_with_spark(comp):
            continue
        for key, value in planning_settings(comp).items():
            if key == MIN_PARTITION_NUM and key in merged:
                value = str(max(int(merged[key]), int(value)))
            merged[key] = value
    return merged


def check_options(wf: Workflow, file: str | None = None) -> None:
    """Spark sources of one workflow share one round's session settings: two that set one
    spark.sql.* option to different values are refused, naming both."""
    seen: dict[str, tuple[str, str]] = {}
    for comp in wf.spouts:
        if not reads_with_spark(comp):
            continue
        assert isinstance(comp.impl, SourceImpl)
        for key, value in comp.impl.options:
            if not key.startswith(SESSION_OPTION):
                continue
            other = seen.setdefault(key, (comp.id, value))
            if other[1] != value:
                raise WorkflowError(f"spouts {other[0]!r} and {comp.id!r} set the session option {key} to "
                                    f"{other[1]!r} and {value!r}: spark sources of one workflow are planned "
                                    "in one Spark job, give them the same value", file, None)


def check(spark: SparkSession, wf: Workflow, file: str | None = None, xml: str | bytes | None = None) -> None:
    """Before anything is stored (submit): each spark source's data can be read, the stream's
    fields are columns of it, and its id-field values are unique (a Spark job over the id
    columns; only a duplicate, if any, comes back)."""
    check_options(wf, file)
    for comp in wf.spouts:
        if not reads_with_spark(comp):
            continue
        line = _source_line(xml, comp.id, file) if xml is not None else None
        _require_spark(spark, comp)
        with session_settings(spark, planning_settings(comp)):
            out, rp, id_columns = plan(spark, wf, comp, file, line)
            if not id_columns:
                continue
            keys = [f"_id{i}" for i in range(len(id_columns))]
            try:
                dup = out.groupBy(*keys).count().where("`count` > 1").limit(1).collect()
            except Exception as err:   # pyspark's and py4j's errors: worded as one line, named
                raise _error(comp, f"cannot read it: {spark_error_line(err)}", file, line) from None
        if dup:
            value = dup[0][0] if len(id_columns) == 1 else tuple(dup[0][:len(id_columns)])
            raise _error(comp, f"id-field {' '.join(id_columns)!r} value {value!r} is in "
                               f"{dup[0]['count']} rows; message ids must be unique within a run",
                         file, line)


def _source_line(xml: str | bytes, component_id: str, file: str | None) -> int | None:
    from recovery.model.xml.parse import source_line
    try:
        return source_line(xml, component_id)
    except WorkflowError as err:   # only an error message's line is at stake
        log.debug("no line for spout %s in %s: %s", component_id, file, err)
        return None


# --- converting values (in the reading tasks) ---------------------------------------------
def kind_of(data_type: Any) -> Kind:
    """How values of a Spark type are converted (see the module docstring); None: as they are."""
    name = type(data_type).__name__
    if name in ("LongType", "IntegerType", "ShortType", "ByteType", "DoubleType", "FloatType",
                "StringType", "CharType", "VarcharType", "BooleanType", "NullType"):
        return None
    if name == "DateType":
        return "date"
    if name == "TimestampType":
        return "timestamp"
    if name == "TimestampNTZType":
        return "timestamp_ntz"
    if name == "DecimalType":
        return "decimal"
    if name == "BinaryType":
        return "binary"
    if name == "ArrayType":
        return ("array", kind_of(data_type.elementType))
    if name == "MapType":
        return ("map", kind_of(data_type.keyType), kind_of(data_type.valueType))
    if name == "StructType":
        return ("struct", tuple(f.name for f in data_type.fields),
                tuple(kind_of(f.dataType) for f in data_type.fields))
    return "str"


def _date(v: datetime.date) -> str:
    return v.isoformat()


def _timestamp(v: datetime.datetime) -> str:
    # PySpark gives a timestamp as a naive datetime in the worker's local time: astimezone
    # reads a naive datetime as local time, so this is the instant, in UTC, wherever it runs
    return v.astimezone(datetime.UTC).isoformat()


def _timestamp_ntz(v: datetime.datetime) -> str:
    return v.isoformat()


def _decimal(v: Any) -> str:
    return format(v, "f")   # str() would write 1E-8


def _binary(v: Any) -> bytes:
    return bytes(v)


_SIMPLE: dict[str, Callable[[Any], Any]] = {"date": _date, "timestamp": _timestamp,
                                             "timestamp_ntz": _timestamp_ntz, "decimal": _decimal,
                                             "binary": _binary, "str": str}


def converter(kind: Kind) -> Callable[[Any], Any] | None:
    """The function that converts a non-null value of `kind`; None when it stays as it is."""
    if kind is None:
        return None
    if isinstance(kind, str):
        return _SIMPLE[kind]
    if kind[0] == "array":
        each = converter(kind[1])
        if each is None:
            return list
        return lambda v: [None if x is None else each(x) for x in v]
    if kind[0] == "map":
        key, value = converter(kind[1]), converter(kind[2])

        def convert_map(v: Any) -> dict:
            # msgpack's readers take only string map keys (strict_map_key): as JSON does;
            # (Arrow gives a map as its (key, value) pairs, a Row as a dict)
            pairs = v.items() if isinstance(v, dict) else v
            return {(k if isinstance(k, str) else str(k if key is None else key(k))):
                    (x if x is None or value is None else value(x)) for k, x in pairs}
        return convert_map
    names, kinds = kind[1], kind[2]
    fields = [converter(k) for k in kinds]

    def convert_struct(v: Any) -> dict:
        items = v.values() if isinstance(v, dict) else v   # (Arrow gives a struct as a dict)
        return {n: (x if x is None or f is None else f(x)) for n, f, x in zip(names, fields, items)}
    return convert_struct


def _row_converter(kinds: tuple[Kind, ...], start: int) -> Callable[[Any], list]:
    """row -> the list of its values row[start:start+len(kinds)], converted."""
    end = start + len(kinds)
    convs = [converter(k) for k in kinds]
    if all(c is None for c in convs):
        return lambda row: list(row[start:end])
    pairs = list(enumerate(convs, start))
    return lambda row: [row[i] if c is None or row[i] is None else c(row[i]) for i, c in pairs]


def arrow_chunks_of_partition(rp: ReadPlan, owner_keys: tuple[int, ...], partition_id: Callable[[], int],
                              batches: Iterable[Any]) -> Iterator[Any]:
    """mapInArrow over the source's DataFrame: one reader partition's rows as (c, k, chunk)
    batches, k the routing key of the spout task that owns the partition."""
    import pyarrow as pa
    index = partition_id()
    key = owner_keys[index % rp.tasks]
    for _, blob in chunks_of_partition(rp, index, _rows_of(batches)):
        yield pa.RecordBatch.from_arrays([pa.array([0], pa.int32()), pa.array([key], pa.int64()),
                                          pa.array([blob], pa.binary())], names=["c", "k", "chunk"])


def _rows_of(batches: Iterable[Any]) -> Iterator[tuple]:
    """The rows of Arrow batches, as tuples of Python values."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns))


def chunks_of_partition(rp: ReadPlan, index: int, rows: Iterable[Any]) -> Iterator[tuple[int, bytes]]:
    """One reader partition's rows as (owning task index, msgpack chunk of [message id, values])."""
    task = index % rp.tasks
    values_of = _row_converter(rp.value_kinds, 0)
    n = rp.n_values
    ids_of = _row_converter(rp.id_kinds, n)
    one_id = len(rp.id_kinds) == 1
    splits: dict[tuple[str, int], list] = {}   # (file, split start) -> [name, rows seen]
    buf: list[tuple[Any, list]] = []
    for row in rows:
        if rp.position is None:
            got = ids_of(row)
            mid: Any = got[0] if one_id else tuple(got)
        elif rp.position == "row_index":
            mid = (row[n], row[n + 1])
        else:
            key = (row[n], row[n + 1])
            seen = splits.get(key)
            if seen is None:
                seen = splits[key] = [f"{key[0]}#{key[1]}", 0]
            mid = (seen[0], seen[1])
            seen[1] += 1
        buf.append((mid, values_of(row)))
        if len(buf) >= CHUNK_ROWS:
            yield task, msgpack.packb(buf)
            buf = []
    if buf:
        yield task, msgpack.packb(buf)


# --- the spout task -----------------------------------------------------------------------
def spark_source(chunks: Iterable[tuple[int, bytes]], runner: SourceRunner) -> Iterator[None]:
    """The spout task's source: the chunks of the reader partitions it owns, each row a root
    whose message id the chunk carries. Message ids must be unique within a run: with an
    id-field, a value seen twice in this task fails the task with one line (check() refuses
    duplicates across tasks at submit). The crash and slow fault injections act here, per row."""
    comp = runner.comp
    impl = comp.impl
    assert isinstance(impl, SourceImpl)   # the engine runs it only for a spark source
    stream_id = comp.streams[0].id
    id_fields = spark_id_fields(impl)
    seen: set[int] | None = set() if id_fields else None
    hooks = [inj for inj in injections(runner.wf.conf(runner.component_id), runner.component_id)
             if inj.mode in ("crash", "slow", "hold")]
    for _, blob in chunks:
        for mid, values in msgpack.unpackb(blob):
            if type(mid) is list:   # msgpack gives tuples back as lists
                mid = tuple(mid)
            if seen is not None:
                h = ids.stable_hash(mid)
                if h in seen:
                    raise ValueError(f"spout {runner.component_id!r}: id-field {' '.join(id_fields)!r} value "
                                     f"{mid!r} is in two rows; message ids must be unique within a run")
                seen.add(h)
            for inj in hooks:
                inj.before_process(types.SimpleNamespace(task=runner.task_id, values=values, attempt=1))
            # the values are decoded already: `values.copy` is the record's decoder
            runner.spout_record(mid, values.copy, None, stream_id, FORMAT)
        yield None
