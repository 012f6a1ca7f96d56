"""The wire format: the chunks of tuples a task outputs, as they travel through Spark's shuffle
and into the task's spill file (tracking/spill.py) as its in-flight tuples.

A chunk is the tuples one task sent to one consumer task, in one of two encodings:

- a row chunk (msgpack): [source component, source task id, [record, ...]], a record being
  [id, roots, stream, values] or, for a tuple replayed from a failed position's queue,
  [id, roots, stream, values, attempt];
- an Arrow chunk, between batch components: MAGIC, then one Arrow IPC stream of one record
  batch whose columns are `__id`, `__roots` (a list of uint64) and the values' fields, its
  schema's metadata naming the source component, source task and stream.

MAGIC tells them apart: a msgpack row chunk, a 3-array, starts with 0x93.
"""
from __future__ import annotations

from typing import Any, TypeGuard

import msgpack
import numpy as np

MAGIC = b"\x00RB1"   # an Arrow chunk's first bytes


# A chunk for a consumer in the same chain (runtime.chain) never leaves its worker: it is handed
# over as the (source component, source task, records) it would encode, unencoded, as Storm
# passes tuples between the executors of one worker.
Unencoded = tuple[str, int, list]
Chunk = bytes | Unencoded


# --- row chunks (msgpack) ------------------------------------------------------------------
def pack_rows(src: str, src_task: int, records: list) -> bytes:
    """A row chunk of `records` ([id, roots, stream, values(, attempt)] each)."""
    return msgpack.packb([src, src_task, records])


def unpack_rows(blob: Chunk) -> tuple[str, int, list[list]]:
    """(source component, source task, records) of a row chunk, encoded or not."""
    if isinstance(blob, tuple):
        return blob
    src, src_task, records = msgpack.unpackb(blob)
    return src, src_task, records


def is_arrow(blob: Chunk) -> TypeGuard[bytes]:
    return isinstance(blob, bytes) and blob[:len(MAGIC)] == MAGIC


# --- Arrow chunks --------------------------------------------------------------------------
def encode_chunk(src: str, src_task: int, stream: str, ids_: np.ndarray, root_off: np.ndarray,
                 root_flat: np.ndarray, values: Any) -> bytes:
    """An Arrow chunk: tuple ids `ids_`, tuple i's roots root_flat[root_off[i]:root_off[i + 1]],
    and `values` (a record batch, one row per tuple), the row chunk by column."""
    import pyarrow as pa
    offsets = pa.array(root_off.astype(np.int32), pa.int32())
    roots = pa.ListArray.from_arrays(offsets, pa.array(root_flat, pa.uint64()))
    schema_meta = {b"src": src.encode(), b"src_task": str(src_task).encode(), b"stream": stream.encode()}
    batch = pa.RecordBatch.from_arrays([pa.array(ids_, pa.uint64()), roots, *values.columns],
                                       names=["__id", "__roots", *values.schema.names])
    batch = batch.replace_schema_metadata(schema_meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return MAGIC + sink.getvalue().to_pybytes()


def decode_chunk(blob: bytes) -> tuple[str, int, str, Any]:
    """(source component, source task, stream, the record batch) of an Arrow chunk."""
    import pyarrow as pa
    reader = pa.ipc.open_stream(pa.py_buffer(blob)[len(MAGIC):])
    batch = reader.read_all().combine_chunks().to_batches()[0] if reader is not None else None
    meta = batch.schema.metadata or {}
    return meta[b"src"].decode(), int(meta[b"src_task"]), meta[b"stream"].decode(), batch


def split_chunk(blob: bytes) -> list[bytes]:
    """An Arrow chunk as one-tuple Arrow chunks."""
    src, src_task, stream, batch = decode_chunk(blob)
    roots = batch.column(1)
    offsets, flat = roots.offsets.to_numpy().astype(np.int64), roots.values.to_numpy()
    values = batch.select(list(range(2, batch.num_columns)))
    return [encode_chunk(src, src_task, stream, batch.column(0).to_numpy()[i:i + 1],
                         offsets[i:i + 2] - offsets[i], flat[offsets[i]:offsets[i + 1]], values.slice(i, 1))
            for i in range(batch.num_rows)]


# --- either ---------------------------------------------------------------------------------
def split(blob: Chunk) -> list[bytes]:
    """A chunk, row or Arrow, as one-tuple chunks of the same encoding (the test kit's
    arrival orders permute tuples)."""
    if is_arrow(blob):
        return split_chunk(blob)
    src, src_task, records = unpack_rows(blob)
    return [pack_rows(src, src_task, [rec]) for rec in records]
