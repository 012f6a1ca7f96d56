"""The file sinks: `jsonl` (one JSON object a line) and `parquet`, each task's part one file of
its sink's folder (recovery/connectors/sink_folders.py), written as its chunks come: a staged
file renamed into place in a local folder, the attempt's object (uploaded in parts) committed
by marker at a URI (recovery/connectors/sink_objects.py)."""
from __future__ import annotations

import json
import os
from typing import Any

from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import joined, json_lines, pylist_typed
from recovery.connectors.sink_base import StreamingSink
from recovery.connectors.sink_folders import StagedFile, atomic_write, folder_of, part_name_of, staged_of
from recovery.connectors.sink_objects import ObjectFolder
from recovery.tracking.spill_files import local_path


class FilePart:
    """A file sink task's part while it is written: a staged file of a local folder (renamed
    over the part at `commit`, by `atomic_write`), or the attempt's object at a URI folder (its
    marker written at `commit`). `stream` takes the part's bytes."""

    def __init__(self, sink: StreamingSink, ext: str):
        folder = folder_of(sink.impl, sink.base_dir)
        name = part_name_of(sink.context, ext)
        local = local_path(folder)
        self.staged: StagedFile | None = None
        self.attempt: Any = None
        if local is not None:
            self.path = os.path.join(local, name)
            ctx = sink.context
            self.staged = StagedFile(local, name, staged_of(ctx.run_id, [ctx.component_id], ctx.task_id))
            self.stream: Any = self.staged.file
        else:
            self.path = name
            self.attempt = ObjectFolder(folder).attempt(name)
            self.stream = self.attempt.stream

    @property
    def local(self) -> bool:
        return self.staged is not None

    def commit(self, fence: Any) -> None:
        if self.staged is not None:
            atomic_write(self.path, self.staged, fence)
        else:
            self.attempt.commit(fence)

    def abort(self) -> None:
        if self.staged is not None:
            self.staged.discard()
        else:
            self.attempt.abort()


class JsonlSink(StreamingSink):
    def encode(self, tup: Tuple) -> bytes:
        return json.dumps(super().encode(tup), ensure_ascii=False, sort_keys=True).encode() + b"\n"

    def size_of(self, encoded: bytes) -> int:
        return len(encoded)

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        if not fields:
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"\n")
        return joined(lines), errors

    def chunk_of(self, encoded: list[bytes]) -> bytes:
        return b"".join(encoded)

    def merged(self, chunks: list[Any]) -> bytes:
        return b"".join(chunks)

    def open_part(self, chunk: Any) -> FilePart:
        return FilePart(self, "jsonl")

    def write_chunk(self, part: FilePart, chunk: bytes) -> None:
        part.stream.write(chunk)

    def commit_part(self, part: FilePart) -> None:
        part.commit(self.context.fence)

    def abort_part(self, part: FilePart) -> None:
        part.abort()


class ParquetPart:
    """A parquet part while it is written: its file (FilePart) and a parquet writer of the
    first chunk's schema, one row group a chunk."""

    def __init__(self, file: FilePart, schema: Any):
        import pyarrow.parquet as pq
        self.file = file
        self.schema = schema
        self.writer = pq.ParquetWriter(file.stream, schema)

    def widen(self, schema: Any) -> None:
        """The part's file rewritten with `schema` (wider types: a chunk brought values that the
        first chunks' types cannot hold, ints after nulls, doubles after ints). A local staged
        file only: an object being uploaded cannot be read back."""
        import pyarrow.parquet as pq
        if not self.file.local:
            raise ValueError(f"the part's column types changed between its chunks ({self.schema} then "
                             f"{schema}): write them with one type, or to a local folder")
        self.writer.close()
        old = self.file.staged
        assert old is not None
        old.file.close()
        folder = os.path.dirname(self.file.path)
        self.file.staged = StagedFile(folder, os.path.basename(self.file.path), old.stale)
        self.file.stream = self.file.staged.file
        self.writer = pq.ParquetWriter(self.file.stream, schema)
        try:
            source = pq.ParquetFile(old.path)
            for i in range(source.num_row_groups):
                self.writer.write_table(conformed(source.read_row_group(i), schema))
        finally:
            old.discard()
        self.schema = schema


def conformed(table: Any, schema: Any) -> Any:
    """`table`'s columns as `schema` has them (by name; a column it lacks: nulls)."""
    import pyarrow as pa
    return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


class ParquetSink(StreamingSink):
    def chunk_of(self, encoded: list[dict]) -> Any:
        import pyarrow as pa  # lazy: only parquet sinks need it, and it is slow to import
        return pa.Table.from_pylist(encoded)

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        """The columns as they are, with the types `Table.from_pylist` gives the row path's
        dicts (int64, double, string, null for a column of None...): encoding never fails."""
        import pyarrow as pa
        if not fields:
            return super().encode_batch(batch, fields)
        columns = dict(zip(fields, batch.columns))   # as Tuple.as_dict: a repeated name, its last value
        return pa.table([pylist_typed(c) for c in columns.values()], names=list(columns)), {}

    def merged(self, chunks: list[Any]) -> Any:
        """One table of the chunks' rows, the types the row path infers: tables of one schema are
        concatenated; otherwise (Python rows, or types that differ between chunks: int64 and
        double, say) every row goes through `chunk_of` as in the row path."""
        import pyarrow as pa
        tables = [c for c in chunks if isinstance(c, pa.Table)]
        if len(tables) == len(chunks) and all(t.schema == tables[0].schema for t in tables):
            return pa.concat_tables(tables).combine_chunks()
        return self.chunk_of([row for c in chunks for row in (c.to_pylist() if isinstance(c, pa.Table) else c)])

    def open_part(self, chunk: Any) -> Any:
        file = FilePart(self, "parquet")
        try:
            return ParquetPart(file, chunk.schema)
        except BaseException:
            file.abort()
            raise

    def write_chunk(self, part: Any, chunk: Any) -> None:
        import pyarrow as pa
        if chunk.schema != part.schema:
            try:
                if not set(chunk.column_names) <= set(part.schema.names):
                    raise KeyError("a column the part has not had")
                chunk = conformed(chunk, part.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
                wider = pa.unify_schemas([part.schema, chunk.schema], promote_options="permissive")
                part.widen(wider)
                chunk = conformed(chunk, wider)
        part.writer.write_table(chunk)

    def commit_part(self, part: Any) -> None:
        part.writer.close()
        part.file.commit(self.context.fence)

    def abort_part(self, part: Any) -> None:
        try:
            part.writer.close()
        finally:
            part.file.abort()
