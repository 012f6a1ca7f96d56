"""The file sinks: `jsonl` (one JSON object a line) and `parquet`, each task's part one file of
its sink's folder (recovery/connectors/sink_folders.py): renamed into place in a local folder,
committed by marker at a URI (recovery/connectors/sink_objects.py)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import joined, json_lines, pylist_typed
from recovery.connectors.sink_base import BufferedSink
from recovery.connectors.sink_folders import atomic_write, folder_of, part_name_of
from recovery.connectors.sink_objects import ObjectFolder
from recovery.tracking.spill_files import local_path


def publish(sink: BufferedSink, ext: str, write: Callable[[Any], None]) -> None:
    """Write a sink task's part into its folder: renamed into place in a local folder
    (`atomic_write`), committed by marker at a URI."""
    folder = folder_of(sink.impl, sink.base_dir)
    name = part_name_of(sink.context, ext)
    fence = sink.context.fence
    local = local_path(folder)
    if local is not None:
        atomic_write(os.path.join(local, name), write, fence)
    else:
        ObjectFolder(folder).commit(name, write, fence)


class JsonlSink(BufferedSink):
    def encode(self, tup: Tuple) -> bytes:
        return json.dumps(super().encode(tup), ensure_ascii=False, sort_keys=True).encode() + b"\n"

    def write(self, encoded: list[bytes]) -> None:
        self.write_chunks([b"".join(encoded)])

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        if not fields:
            return super().encode_batch(batch, fields)
        lines, errors = json_lines(batch, fields, b"\n")
        return joined(lines), errors

    def chunk_of(self, encoded: list[bytes]) -> bytes:
        return b"".join(encoded)

    def write_chunks(self, chunks: list[Any]) -> None:
        data = b"".join(chunks)
        publish(self, "jsonl", lambda fh: fh.write(data))


class ParquetSink(BufferedSink):
    def write(self, encoded: list[dict]) -> None:
        import pyarrow as pa  # lazy: only parquet sinks need it, and it is slow to import
        self.write_table(pa.Table.from_pylist(encoded))

    def write_table(self, table: Any) -> None:
        """Write the part: one Arrow table (the delta sink commits it to its table instead)."""
        import pyarrow.parquet as pq
        publish(self, "parquet", lambda fh: pq.write_table(table, fh))

    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        """The columns as they are, with the types `Table.from_pylist` gives the row path's
        dicts (int64, double, string, null for a column of None...): encoding never fails."""
        import pyarrow as pa
        if not fields:
            return super().encode_batch(batch, fields)
        columns = dict(zip(fields, batch.columns))   # as Tuple.as_dict: a repeated name, its last value
        return pa.table([pylist_typed(c) for c in columns.values()], names=list(columns)), {}

    def write_chunks(self, chunks: list[Any]) -> None:
        """One table for the part, the types `write` infers: tables of one schema are
        concatenated; otherwise (Python rows, or types that differ between chunks: int64 and
        double, say) every row goes through `Table.from_pylist` as in `write`."""
        import pyarrow as pa
        tables = [c for c in chunks if isinstance(c, pa.Table)]
        if len(tables) == len(chunks) and all(t.schema == tables[0].schema for t in tables):
            self.write_table(pa.concat_tables(tables).combine_chunks())
            return
        self.write([row for c in chunks for row in (c.to_pylist() if isinstance(c, pa.Table) else c)])
