"""The task driver of a BatchBolt: the row runtime's semantics, computed a batch at a time.

Input tuples are gathered per (source component, stream) into batches of at most
`recovery.batch.size` rows and handed to `process_batch` as pyarrow.RecordBatches. What a
successful call emitted gets exactly the ids, ledger contributions and routes a row bolt's
emits would (runtime.collector, runtime.routing), computed over arrays:

- an output row anchored to input row `a` is the row path's `emit(values, anchors=[a])`:
  base id `derive(a.id, stream salt, n)` with n its index among the call's outputs anchored to
  `a` (the row path's emit count), one copy per route with id `derive(base, target task)`;
  ids.derive_many computes these bit for bit;
- fields/shuffle/all/global groupings pick the tasks runtime.Router would (ids.fields_hash_many,
  base % parallelism);
- XOR contributions (every released copy and every acked input, per root) are combined per
  root with numpy before they reach the task's contrib map.

Failure localization: a call that raises (or emits something invalid) is discarded, outputs
and keyed-state writes alike, and its two halves are run again, recursively, until each
failing row fails alone with its own error: the FailedTuple a row bolt's exception gives. The
task's stats count the re-executions (`bisect_runs`, and `bisect_rows`, the rows they ran
again) and the rows isolated that way (`bisect_isolated`): at most 2*log2(batch size) runs per
isolated failure. Rows named in
`fail_rows` fail without bisection.

Tuples replayed from a failed position's queue come in as any others (with their attempt) and
are batched the same way, so recovery replays failed rows through the same batch component.

A built-in sink whose inputs are all batch components runs here too (is_batch_sink, run_sink):
it gets the Arrow chunks and writes the columns as they are, with the row sink's bytes and
guarantees.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgpack
import numpy as np

from recovery.api.batch import BatchBolt
from recovery.api.components import Tuple
from recovery.api.loader import load_class
from recovery.connectors import files, sinks
from recovery.model import config as config_decl
from recovery.model.graph import subscribers
from recovery.model.workflow import Component, Grouping, Workflow
from recovery.runtime.collector import CHUNK, format_error
from recovery.runtime.task import TaskRunner
from recovery.tracking import ids
from recovery.tracking.state import KeyedState, LocalState

log = logging.getLogger(__name__)

_is_batch: dict[tuple[str | None, str], bool] = {}


def is_batch_component(comp: Component, wf: Workflow) -> bool:
    """Whether `comp` is a bolt implemented by a BatchBolt subclass (its class decides), or a
    built-in sink fed by batch components only (is_batch_sink)."""
    impl = comp.impl
    if impl.kind == "sink":
        return is_batch_sink(comp, wf)
    if comp.is_spout or impl.kind != "class":
        return False
    key = (wf.base_dir, impl.ref)
    got = _is_batch.get(key)
    if got is None:
        got = _is_batch[key] = issubclass(load_class(impl.ref, wf.base_dir), BatchBolt)
    return got


def is_batch_sink(comp: Component, wf: Workflow) -> bool:
    """A built-in sink whose every input is a batch component: it takes their Arrow chunks and
    writes the columns as they are (BatchTaskRunner.run_sink). A sink fed by a row component
    (or, in a recovery round, by its own queue) stays a row sink; both write the same bytes."""
    if comp.impl.kind != "sink" or comp.impl.type not in sinks.SINKS or not comp.inputs:
        return False
    try:
        return all(is_batch_component(wf.component(i.source), wf) for i in comp.inputs)
    except KeyError:   # an input from outside this round's workflow
        return False


# --- state kept across a call that may be discarded ------------------------------------------
def _snapshot(state: Any) -> Any:
    if isinstance(state, LocalState):
        return dict(state._store)
    if isinstance(state, KeyedState):
        return dict(state._cache), set(state._dirty)
    return None


def _restore(state: Any, saved: Any) -> None:
    if isinstance(state, LocalState):
        state._store = saved
    elif isinstance(state, KeyedState):
        state._cache, state._dirty = saved


XOR_FOLD_EVERY = 1 << 22   # pending (root, id) pairs folded at once: 64 MB of arrays at most
MAGIC = b"\x00RB1"   # an Arrow chunk (a msgpack chunk, a 3-array, starts with 0x93)


def encode_chunk(src: str, src_task: int, stream: str, ids_: np.ndarray, root_off: np.ndarray,
                 root_flat: np.ndarray, values: Any) -> bytes:
    """Tuples between batch components: one Arrow IPC stream of id, roots and the values'
    columns (runtime/task.py's msgpack chunk, by column)."""
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
    """An Arrow chunk as one-tuple chunks (the test kit's arrival orders permute tuples)."""
    src, src_task, stream, batch = decode_chunk(blob)
    roots = batch.column(1)
    offsets, flat = roots.offsets.to_numpy().astype(np.int64), roots.values.to_numpy()
    values = batch.select(list(range(2, batch.num_columns)))
    return [encode_chunk(src, src_task, stream, batch.column(0).to_numpy()[i:i + 1],
                         offsets[i:i + 2] - offsets[i], flat[offsets[i]:offsets[i + 1]], values.slice(i, 1))
            for i in range(batch.num_rows)]


class _Rows:
    """Input tuples of one (source, stream), by column: ids, roots (flat, with offsets), the
    values (a record batch, or Python lists when they came as msgpack), attempts (0: not a
    replay) and source tasks."""

    __slots__ = ("src", "stream", "tids", "root_off", "root_flat", "values", "pyvalues", "attempts",
                 "src_tasks")

    def __init__(self, src: str, stream: str, tids: np.ndarray, root_off: np.ndarray, root_flat: np.ndarray,
                 values: Any, pyvalues: list[list] | None, attempts: np.ndarray, src_tasks: np.ndarray):
        self.src, self.stream = src, stream
        self.tids, self.root_off, self.root_flat = tids, root_off, root_flat
        self.values, self.pyvalues = values, pyvalues
        self.attempts, self.src_tasks = attempts, src_tasks

    @classmethod
    def from_records(cls, src: str, src_task: int, stream: str, recs: list[list]) -> _Rows:
        n = len(recs)
        lens = np.fromiter((len(r[1]) for r in recs), dtype=np.int64, count=n)
        return cls(src, stream, np.fromiter((r[0] for r in recs), dtype=np.uint64, count=n),
                   np.r_[0, np.cumsum(lens)].astype(np.int64),
                   np.fromiter((x for r in recs for x in r[1]), dtype=np.uint64, count=int(lens.sum())),
                   None, [r[3] for r in recs],
                   np.fromiter((r[4] if len(r) > 4 else 0 for r in recs), dtype=np.int64, count=n),
                   np.full(n, src_task, dtype=np.int64))

    @classmethod
    def from_arrow(cls, src: str, src_task: int, stream: str, batch: Any) -> _Rows:
        roots = batch.column(1)
        n = batch.num_rows
        return cls(src, stream, batch.column(0).to_numpy(), roots.offsets.to_numpy().astype(np.int64),
                   roots.values.to_numpy(), batch.select(list(range(2, batch.num_columns))), None,
                   np.zeros(n, dtype=np.int64), np.full(n, src_task, dtype=np.int64))

    @staticmethod
    def concat(parts: list[_Rows]) -> _Rows:
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        offs, base = [np.zeros(1, dtype=np.int64)], 0
        for p in parts:
            offs.append(p.root_off[1:] - p.root_off[0] + base)
            base += int(p.root_off[-1] - p.root_off[0])
        values, pyvalues = None, None
        if all(p.values is not None for p in parts):
            import pyarrow as pa
            try:
                values = pa.Table.from_batches([p.values for p in parts]).combine_chunks().to_batches()[0]
            except (pa.ArrowInvalid, pa.ArrowTypeError):   # column types differ: as Python values
                values = None
        if values is None:
            pyvalues = [v for p in parts for v in p.python_values()]
        return _Rows(first.src, first.stream, np.concatenate([p.tids for p in parts]), np.concatenate(offs),
                     np.concatenate([p.root_flat[p.root_off[0]:p.root_off[-1]] for p in parts]), values, pyvalues,
                     np.concatenate([p.attempts for p in parts]), np.concatenate([p.src_tasks for p in parts]))

    def __len__(self) -> int:
        return len(self.tids)

    def part(self, lo: int, hi: int) -> _Rows:
        return _Rows(self.src, self.stream, self.tids[lo:hi], self.root_off[lo:hi + 1], self.root_flat,
                     self.values.slice(lo, hi - lo) if self.values is not None else None,
                     self.pyvalues[lo:hi] if self.pyvalues is not None else None,
                     self.attempts[lo:hi], self.src_tasks[lo:hi])

    def python_values(self) -> list[list]:
        if self.pyvalues is None:
            columns = [c.to_pylist() for c in self.values.columns]
            self.pyvalues = [list(r) for r in zip(*columns)] if columns else [[] for _ in range(len(self))]
        return self.pyvalues

    def roots_of(self, i: int) -> tuple[int, ...]:
        return tuple(self.root_flat[self.root_off[i]:self.root_off[i + 1]].tolist())


class _Call:
    """What one process_batch call emitted and failed, kept until the call returns."""

    __slots__ = ("emits", "failed")

    def __init__(self) -> None:
        self.emits: list[tuple[str, Any, Any]] = []
        self.failed: dict[int, str] = {}


def _occurrences(anchors: np.ndarray) -> np.ndarray:
    """Per position, how many earlier positions hold the same value (a stable cumcount)."""
    n = len(anchors)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(anchors, kind="stable")
    s = anchors[order]
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    occ = np.empty(n, dtype=np.int64)
    occ[order] = np.arange(n) - run_start
    return occ


class BatchTaskRunner(TaskRunner):
    """TaskRunner for a BatchBolt: run_bolt batches the input; the collector side gains
    emit_batch and fail_rows."""

    def __init__(self, spec: Any, component_id: str, index: int):
        super().__init__(spec, component_id, index)
        self.batch_size = config_decl.settings(self.conf).batch_size
        self._call: _Call | None = None
        self.stats["bisect_runs"] = 0
        self.stats["bisect_isolated"] = 0
        self.stats["bisect_rows"] = 0      # rows run again by bisection
        # XOR contributions not yet in self.contrib (see _combine)
        self._xor_parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._xor_pending = 0
        self._xor_roots = self._xor_vals = np.zeros(0, dtype=np.uint64)
        # consumers that are batch components get Arrow chunks (see encode_chunk)
        self.arrow_to = {r.consumer for routes in self.router.routes.values() for r in routes
                         if is_batch_component(self.wf.component(r.consumer), self.wf)}

    # -- the collector side a BatchBolt talks to ------------------------------------------
    def emit_batch(self, batch: Any, anchors: Any, stream: str) -> None:
        if self._call is None:
            raise RuntimeError(f"{self.component_id}: emit_batch outside process_batch (outputs "
                               "must be anchored to the batch's input rows)")
        self._call.emits.append((stream, batch, anchors))

    def fail_rows(self, rows: Any, errors: Sequence[str] | str) -> None:
        if self._call is None:
            raise RuntimeError(f"{self.component_id}: fail_rows outside process_batch")
        rows = [int(r) for r in rows]
        errs = [errors] * len(rows) if isinstance(errors, str) else [str(e) for e in errors]
        if len(errs) != len(rows):
            raise ValueError(f"fail_rows: {len(rows)} rows but {len(errs)} errors")
        for r, e in zip(rows, errs):
            self._call.failed.setdefault(r, e)

    # -- the task ---------------------------------------------------------------------------
    @staticmethod
    def _pieces(records: Iterable[tuple[Any, bytes]]) -> Iterator[_Rows]:
        """The input chunks, msgpack or Arrow, as _Rows of one (source, stream) each."""
        for _, blob in records:
            if blob[:len(MAGIC)] == MAGIC:
                src, src_task, stream, batch = decode_chunk(blob)
                if batch.num_rows:
                    yield _Rows.from_arrow(src, src_task, stream, batch)
                continue
            src, src_task, recs = msgpack.unpackb(blob)
            if not recs:
                continue
            stream = recs[0][2]
            if all(r[2] == stream for r in recs):
                yield _Rows.from_records(src, src_task, stream, recs)
            else:
                by_stream: dict[str, list] = {}
                for r in recs:
                    by_stream.setdefault(r[2], []).append(r)
                for st, rs in by_stream.items():
                    yield _Rows.from_records(src, src_task, st, rs)

    def _fail_all(self, records: Iterable[tuple[Any, bytes]], error: str, tb: str) -> Iterator[tuple[Any, bytes]]:
        for rows in self._pieces(records):
            self.stats["executed"] += len(rows)
            for i in range(len(rows)):
                self._fail_row(rows, i, error, tb)
        return iter(())

    def run_bolt(self, records: Iterable[tuple[Any, bytes]]) -> Iterator[tuple[Any, bytes]]:
        if self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        if self.comp.impl.kind == "sink":
            yield from self.run_sink(records)
            return
        started = time.time()
        bolt = yield from self._start_bolt(records, started)
        if bolt is None:
            return
        pending: dict[tuple[str, str, bool], tuple[list[_Rows], int]] = {}
        for piece in self._pieces(records):
            key = (piece.src, piece.stream, piece.values is None)
            parts, n = pending.pop(key, ([], 0))
            parts.append(piece)
            n += len(piece)
            if n < self.batch_size:
                pending[key] = (parts, n)
                continue
            rows = _Rows.concat(parts)
            full = n - n % self.batch_size
            for lo in range(0, full, self.batch_size):
                self._run_batch(bolt, rows.part(lo, lo + self.batch_size))
            if full < n:
                pending[key] = ([rows.part(full, n)], n - full)
            if self.ready:
                yield from self._drain()
        for parts, _ in pending.values():
            self._run_batch(bolt, _Rows.concat(parts))
        try:
            bolt.finish()
        except Exception as err:   # broad-except: user code (finish) can raise anything
            self.log(f"{self.component_id}.finish raised {format_error(err)[0]}", "error")
        try:
            bolt.cleanup()
        except Exception as err:   # broad-except: user code (cleanup) can raise anything
            self.log(f"cleanup raised {format_error(err)[0]}", "error")
        yield from self._finish(started)

    def run_sink(self, records: Iterable[tuple[Any, bytes]]) -> Iterator[tuple[Any, bytes]]:
        """A built-in sink over Arrow chunks: the row sink's semantics, a chunk at a time. Each
        chunk's rows are encoded column-wise (sink.encode_batch); a row that cannot be encoded
        (or that an injected fault hits) fails alone, as the row sink's `process` fails it. At
        the end of the input the task's chunks are written as one part (atomically, under the
        (round, task) name a re-executed task overwrites), and only then are the written rows
        acked, vectorized; a write that raises fails them all, as the row sink's `finish`."""
        started = time.time()
        try:
            sink = self._instantiate()
            self.component_obj = sink
            sink.prepare(sink.conf, sink.context)
        except Exception as err:   # broad-except: a sink's set-up (its parameters, a connection) can raise anything
            msg, tb = format_error(err)
            yield from self._fail_all(records, f"{self.component_id} could not start: {msg}", tb)
            yield from self._finish(started)
            return
        written: list[tuple[_Rows, np.ndarray]] = []   # each piece and its rows that encoded
        chunks: list[Any] = []
        for rows in self._pieces(records):
            n = len(rows)
            self.stats["executed"] += n
            ok = np.ones(n, dtype=bool)
            failed: dict[int, BaseException] = {}
            for inj in self.injections:   # recovery.faults acts per tuple, as at a row sink
                for i in range(n):
                    if i not in failed:
                        try:
                            inj.before_process(self._tuple(rows, i))
                        except Exception as err:   # broad-except: an injected fault fails its row
                            failed[i] = err
            keep = np.flatnonzero(~np.isin(np.arange(n), list(failed))) if failed else None
            fields = self._fields(rows.src, rows.stream)
            if rows.values is not None:
                values = rows.values if keep is None else rows.values.take(keep)
                chunk, bad = sink.encode_batch(values, fields)
                for j, error in bad.items():
                    failed[int(keep[j]) if keep is not None else j] = error
            else:   # msgpack tuples (replays): the row sink's encode, one by one
                encoded = []
                for i in (range(n) if keep is None else keep.tolist()):
                    try:
                        encoded.append(sink.encode(self._tuple(rows, i)))
                    except Exception as err:   # broad-except: what encode raises fails that row alone
                        failed[i] = err
                chunk = sink.chunk_of(encoded)
            for i in sorted(failed):
                ok[i] = False
                msg, tb = format_error(failed[i])
                self._fail_row(rows, i, msg, tb)
            if ok.any():
                chunks.append(chunk)
                written.append((rows, ok))
        try:
            if chunks:
                sink.write_chunks(chunks)
        except Exception as err:   # broad-except: a write that raises (disk full, Redis down) fails what it held
            msg, tb = format_error(err)
            for rows, ok in written:
                for i in np.flatnonzero(ok).tolist():
                    self._fail_row(rows, i, f"{self.component_id}.finish raised {msg}", tb)
        else:
            for rows, ok in written:
                self._ack_rows(rows, ok)
        try:
            sink.cleanup()
        except Exception as err:   # broad-except: cleanup can raise anything
            self.log(f"cleanup raised {format_error(err)[0]}", "error")
        yield from self._finish(started)

    def _ack_rows(self, rows: _Rows, ok: np.ndarray) -> None:
        """Ack the rows of `rows` where `ok`: each id XORed into its roots, combined per root."""
        acked = np.flatnonzero(ok)
        starts = rows.root_off[:-1][acked]
        k = (rows.root_off[1:] - rows.root_off[:-1])[acked]
        pos = np.repeat(starts - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
        self._combine(rows.root_flat[pos], np.repeat(rows.tids[acked], k))
        self.stats["acked"] += len(acked)
        if self.tracker is not None:
            for i in np.flatnonzero(ok & (rows.attempts > 0)).tolist():   # replays: queue entries go
                self.tracker.replay_done(self.component_id, self.task_id, int(rows.tids[i]))

    def _run_batch(self, bolt: Any, rows: _Rows) -> None:
        self.stats["executed"] += len(rows)
        self._attempt(bolt, rows, isolating=False)

    def _attempt(self, bolt: Any, rows: _Rows, isolating: bool) -> None:
        """One process_batch call over `rows`; on an exception, its halves (bisection)."""
        saved = _snapshot(self.state)
        call = self._call = _Call()
        try:
            if self.injections:   # recovery.faults acts per tuple, as at a row bolt
                for i in range(len(rows)):
                    tup = self._tuple(rows, i)
                    for inj in self.injections:
                        inj.before_process(tup)
            bolt.process_batch(self._record_batch(rows))
            outputs = [self._resolve(stream, out, anchors, len(rows)) for stream, out, anchors in call.emits]
            for r in call.failed:
                if not 0 <= r < len(rows):
                    raise IndexError(f"fail_rows: row {r} is not in a batch of {len(rows)}")
        # user code (process_batch) can raise anything: it fails the rows that cause it
        except (Exception, SystemExit) as err:  # broad-except: user code
            _restore(self.state, saved)
            if len(rows) == 1:
                msg, tb = format_error(err)
                if isolating:
                    self.stats["bisect_isolated"] += 1
                self._fail_row(rows, 0, msg, tb)
                return
            mid = len(rows) // 2
            self.stats["bisect_runs"] += 2
            self.stats["bisect_rows"] += len(rows)
            self._attempt(bolt, rows.part(0, mid), True)
            self._attempt(bolt, rows.part(mid, len(rows)), True)
            return
        finally:
            self._call = None
        self._settle(rows, call.failed, outputs)

    def _record_batch(self, rows: _Rows) -> Any:
        import pyarrow as pa
        fields = self._fields(rows.src, rows.stream)
        if rows.values is not None:
            if list(rows.values.schema.names) == list(fields) or not fields:
                return rows.values
            return pa.RecordBatch.from_arrays(rows.values.columns, names=list(fields))
        values = rows.python_values()
        width = len(values[0]) if values else len(fields)
        names = list(fields) if len(fields) == width else [f"_{j}" for j in range(width)]
        for v in values:
            if len(v) != width:
                raise ValueError(f"tuple from {rows.src!r} stream {rows.stream!r} has {len(v)} values "
                                 f"for {width} fields ({', '.join(names)})")
        columns = [pa.array([v[j] for v in values]) for j in range(width)]
        return pa.RecordBatch.from_arrays(columns, names=names)

    def _resolve(self, stream: str, out: Any, anchors: Any, n_in: int) -> tuple[str, Any, Any]:
        """(stream, the output rows as a record batch of the stream's fields, anchors as an
        int array or a list of lists), checked: a declared stream, its fields as columns,
        anchors within the batch."""
        import pyarrow as pa
        declared = self.comp.stream(stream)
        if declared is None or stream not in self.router.routes:
            raise ValueError(f"{self.component_id!r} emitted on undeclared stream {stream!r}")
        names = set(out.schema.names)
        missing = [f for f in declared.fields if f not in names]
        if missing:
            raise ValueError(f"{self.component_id!r}: the batch emitted on stream {stream!r} has no "
                             f"column {missing[0]!r} (fields: {' '.join(declared.fields)})")
        m = out.num_rows
        if isinstance(out, pa.Table):
            out = out.combine_chunks()
            chunks = out.to_batches()
            out = chunks[0] if chunks else pa.RecordBatch.from_pylist([], schema=out.schema)
        out = out.select(list(declared.fields))
        if anchors is None:
            if m != n_in:
                raise ValueError(f"{self.component_id!r}: emit_batch without anchors needs one output "
                                 f"row per input row ({n_in} in, {m} out)")
            return stream, out, np.arange(m, dtype=np.int64)
        if hasattr(anchors, "to_pylist"):
            anchors = anchors.to_pylist()
        arr = np.asarray(anchors, dtype=object) if not isinstance(anchors, np.ndarray) else anchors
        if len(arr) != m:
            raise ValueError(f"{self.component_id!r}: {len(arr)} anchors for {m} output rows")
        if arr.dtype.kind in "iu" or (m and all(isinstance(a, (int, np.integer)) for a in arr)):
            single = arr.astype(np.int64)
            if m and (single.min() < 0 or single.max() >= n_in):
                raise IndexError(f"{self.component_id!r}: an anchor is not a row of the input batch "
                                 f"of {n_in} rows")
            return stream, out, single
        multi = [[int(r) for r in (a if isinstance(a, (list, tuple, np.ndarray)) else [a])] for a in arr]
        if any(not 0 <= r < n_in for a in multi for r in a):
            raise IndexError(f"{self.component_id!r}: an anchor is not a row of the input batch "
                             f"of {n_in} rows")
        return stream, out, multi

    # -- a successful call's outputs, acks and failures ----------------------------------------
    def _settle(self, rows: _Rows, failed: dict[int, str], outputs: list[tuple[str, Any, Any]]) -> None:
        n = len(rows)
        ok = np.ones(n, dtype=bool)
        if failed:
            ok[list(failed)] = False
        in_ids = rows.tids
        starts = rows.root_off[:-1]
        lens = rows.root_off[1:] - starts
        flat_roots = rows.root_flat
        xor_roots: list[np.ndarray] = []
        xor_ids: list[np.ndarray] = []

        def root_positions(anchor_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(positions in flat_roots of the anchor rows' roots, roots per anchor row)."""
            k = lens[anchor_rows]
            total = int(k.sum())
            return np.repeat(starts[anchor_rows] - (np.cumsum(k) - k), k) + np.arange(total), k

        def add_xors(anchor_rows: np.ndarray, tids: np.ndarray) -> None:
            """XOR each tid into every root of its anchor row."""
            pos, k = root_positions(anchor_rows)
            if len(pos):
                xor_roots.append(flat_roots[pos])
                xor_ids.append(np.repeat(tids, k))

        counts = np.zeros(n, dtype=np.int64)   # emits per input row so far in this call
        emitted = 0
        for stream, out, anchors in outputs:
            salt = self.router.salts.get(stream, 0)
            if isinstance(anchors, np.ndarray):
                occ = _occurrences(anchors) + counts[anchors]
                counts += np.bincount(anchors, minlength=n)
                keep = np.flatnonzero(ok[anchors])
                if len(keep) == 0:
                    continue
                kept = anchors[keep]
                base = ids.derive_many(in_ids[kept], salt, occ[keep])
                kept_out = out if len(keep) == out.num_rows else out.take(keep)
                emitted += self._route(stream, base, kept_out, kept, rows, root_positions, add_xors)
            else:
                emitted += self._emit_multi(stream, salt, out, anchors, rows, ok, counts)
        self.stats["emitted"] += emitted
        acked = np.flatnonzero(ok)
        add_xors(acked, in_ids[acked])
        self.stats["acked"] += len(acked)
        if self.tracker is not None:
            for i in np.flatnonzero(ok & (rows.attempts > 0)).tolist():   # replays: queue entries go
                self.tracker.replay_done(self.component_id, self.task_id, int(rows.tids[i]))
        if xor_roots:
            self._combine(np.concatenate(xor_roots), np.concatenate(xor_ids))
        for i in sorted(failed):
            self._fail_row(rows, i, failed[i], "")

    def _targets(self, r: Any, base: np.ndarray, out: Any) -> list[np.ndarray]:
        """The target task indices of route `r` per output row (runtime.Router's choices)."""
        m = len(base)
        g = r.grouping
        if g is Grouping.ALL:
            return [np.full(m, i, dtype=np.int64) for i in range(r.p)]
        if g is Grouping.FIELDS:
            return [(self._key_hashes(out, r.idx) % np.uint64(r.p)).astype(np.int64)]
        if g is Grouping.GLOBAL:
            return [np.zeros(m, dtype=np.int64)]
        return [(base % np.uint64(r.p)).astype(np.int64)]   # shuffle, none, local_or_shuffle

    @staticmethod
    def _key_hashes(out: Any, columns: tuple[int, ...]) -> np.ndarray:
        """ids.fields_hash of each row's grouping key; one key column is dictionary-encoded
        first, so that each distinct key is hashed once."""
        import pyarrow as pa
        import pyarrow.compute as pc
        if len(columns) == 1:
            try:
                encoded = pc.dictionary_encode(out.column(columns[0]), null_encoding="encode")
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                pass   # a type Arrow does not dictionary-encode: row by row below
            else:
                return ids.fields_hash_many([encoded.dictionary.to_pylist()])[encoded.indices.to_numpy()]
        return ids.fields_hash_many([out.column(j).to_pylist() for j in columns])

    def _route(self, stream: str, base: np.ndarray, out: Any, anchor_rows: np.ndarray, rows: _Rows,
               root_positions: Any, add_xors: Any) -> int:
        """Every copy of the kept output rows: Arrow chunks to batch consumers, msgpack records
        to row consumers."""
        emitted, m = 0, len(base)
        values: list[list] | None = None
        roots: list[tuple] | None = None
        pos, k = root_positions(anchor_rows)
        out_flat = rows.root_flat[pos]
        out_off = np.r_[0, np.cumsum(k)].astype(np.int64)
        for r in self.router.routes[stream]:
            for idx in self._targets(r, base, out):
                tids = ids.derive_many(base, (idx + r.first).astype(np.uint64))
                add_xors(anchor_rows, tids)
                emitted += m
                if r.consumer in self.arrow_to:
                    self._ship_arrow(r.consumer, stream, idx, tids, out_off, out_flat, out)
                    continue
                if values is None:
                    columns = [c.to_pylist() for c in out.columns]
                    values = [list(v) for v in zip(*columns)] if columns else [[] for _ in range(m)]
                    roots = [tuple(out_flat[out_off[j]:out_off[j + 1]].tolist()) for j in range(m)]
                buffers, consumer = self.out, r.consumer
                for i, tid, rts, vals in zip(idx.tolist(), tids.tolist(), roots or (), values):
                    key = (consumer, i)
                    buf = buffers.get(key)
                    if buf is None:
                        buf = buffers[key] = []
                    buf.append([tid, rts, stream, vals])
                    if len(buf) >= CHUNK:
                        self._seal(key)
        return emitted

    def _ship_arrow(self, consumer: str, stream: str, idx: np.ndarray, tids: np.ndarray, root_off: np.ndarray,
                    root_flat: np.ndarray, out: Any) -> None:
        """One Arrow chunk per target task of `consumer`: the rows ordered by target once (a
        stable sort, so each chunk keeps the rows' order), each chunk a slice of them."""
        targets = np.unique(idx)
        if len(targets) > 1:
            order = np.argsort(idx, kind="stable")
            idx, tids, out = idx[order], tids[order], out.take(order)
            k = root_off[1:][order] - root_off[:-1][order]
            pos = np.repeat(root_off[:-1][order] - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
            root_off, root_flat = np.r_[0, np.cumsum(k)], root_flat[pos]
        bounds = np.searchsorted(idx, targets, side="left") if len(targets) > 1 else np.zeros(1, dtype=np.int64)
        ends = np.r_[bounds[1:], len(idx)]
        for i, lo, hi in zip(targets.tolist(), bounds.tolist(), ends.tolist()):
            off = root_off[lo:hi + 1] - root_off[lo]
            flat = root_flat[root_off[lo]:root_off[hi]]
            part = out if hi - lo == out.num_rows else out.slice(lo, hi - lo)
            blob = encode_chunk(self.component_id, self.task_id, stream, tids[lo:hi], off, flat, part)
            key = (consumer, i)
            self.ready.append((key, blob))
            if self.tracker is not None:
                self.tracker.add_output(key, blob)

    def _emit_multi(self, stream: str, salt: int, out: Any, anchors: list[list[int]], rows: _Rows,
                    ok: np.ndarray, counts: np.ndarray) -> int:
        """Output rows anchored to several input rows (or none): the row path's emit, one by one."""
        emitted = 0
        multi_counts: dict[int, int] = {}
        columns = [c.to_pylist() for c in out.columns]
        values = [list(v) for v in zip(*columns)] if columns else [[] for _ in range(out.num_rows)]
        for vals, anchor in zip(values, anchors):
            uniq = list(dict.fromkeys(anchor))
            if not uniq:   # unanchored: released at once, in no root's tree
                self.unanchored_seq += 1
                base = ids.derive(self.task_id, salt, self.unanchored_seq, 1, self.spec.round)
                roots: tuple = ()
            elif len(uniq) == 1:
                a = uniq[0]
                base = ids.derive(int(rows.tids[a]), salt, int(counts[a]))
                counts[a] += 1
                roots = rows.roots_of(a)
            else:
                key = 0
                root_list: list[int] = []
                for a in uniq:
                    key ^= int(rows.tids[a])
                    for r in rows.roots_of(a):
                        if r not in root_list:
                            root_list.append(r)
                n = multi_counts.get(key, 0)
                multi_counts[key] = n + 1
                base = ids.derive(key, salt, n)
                roots = tuple(root_list)
            if uniq and not all(ok[a] for a in uniq):
                continue   # anchored to a failed row: nothing flows on
            deliveries = self.router.deliver(stream, vals, base, None)
            recs = [(c, i, [tid, roots, stream, vals]) for c, i, _, tid in deliveries]
            if roots:
                self._combine(np.fromiter((r for _, _, rec in recs for r in roots), dtype=np.uint64),
                              np.fromiter((rec[0] for _, _, rec in recs for _ in roots), dtype=np.uint64))
            for c, i, rec in recs:
                key2 = (c, i)
                buf = self.out.setdefault(key2, [])
                buf.append(rec)
                if len(buf) >= CHUNK:
                    self._seal(key2)
            emitted += len(recs)
        return emitted

    def _combine(self, roots: np.ndarray, tids: np.ndarray) -> None:
        """XOR `tids` into `roots`' contributions. They are kept as arrays and combined per
        root in bulk (_fold_xors), not a dict update per root and batch: that update was the
        batch path's largest framework cost (16% of a tracked cdn_logs_batch run's worker CPU)."""
        if len(roots) == 0:
            return
        self._xor_parts.append((roots, tids))
        self._xor_pending += len(roots)
        if self._xor_pending >= XOR_FOLD_EVERY:   # bounds the arrays kept: about a task's roots
            self._fold_xors()

    def _fold_xors(self) -> None:
        """The pending contributions XORed per root into one sorted (roots, xors) pair."""
        if not self._xor_parts:
            return
        roots = np.concatenate([self._xor_roots, *(r for r, _ in self._xor_parts)])
        tids = np.concatenate([self._xor_vals, *(t for _, t in self._xor_parts)])
        self._xor_parts, self._xor_pending = [], 0
        order = np.argsort(roots)   # XOR needs no stable order; 3x faster than a stable sort of uint64
        r, t = roots[order], tids[order]
        starts = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1]
        self._xor_roots, self._xor_vals = r[starts], np.bitwise_xor.reduceat(t, starts)

    def _contributions(self) -> tuple[np.ndarray, np.ndarray]:
        """(roots, xors), one entry per root the task touched, with the XOR the row path's
        updates would leave: the folded arrays and the row path's contrib map (a source's
        undecodable line...) together; the commit packs the arrays without a dict."""
        if self.contrib:
            self._combine(np.fromiter(self.contrib.keys(), dtype=np.uint64, count=len(self.contrib)),
                          np.fromiter(self.contrib.values(), dtype=np.uint64, count=len(self.contrib)))
            self.contrib = {}
        self._fold_xors()
        return self._xor_roots, self._xor_vals

    def _tuple(self, rows: _Rows, i: int) -> Tuple:
        return Tuple(int(rows.tids[i]), rows.src, rows.stream, self.task_id, rows.python_values()[i],
                     self._fields(rows.src, rows.stream), rows.roots_of(i), int(rows.src_tasks[i]),
                     int(rows.attempts[i]) or 1)

    def _fail_row(self, rows: _Rows, i: int, error: str, tb: str) -> None:
        """Row i fails alone, as a row bolt's tuple would (Collector.fail's record)."""
        tup = self._tuple(rows, i)
        self.outstanding[tup.id] = tup
        self.fail(tup, error, tb)


# --- a text file source feeding batch components --------------------------------------------
def reads_in_batches(comp: Component, wf: Workflow) -> bool:
    """A text file source whose every subscriber is a batch component: it reads and emits a
    block of lines at a time (file_source_batches)."""
    impl = comp.impl
    if impl.kind != "source" or impl.type != "file" or impl.param("format", "text") not in ("text", ""):
        return False
    consumers = [c for c, _ in subscribers(wf, comp.id)]
    return bool(consumers) and all(is_batch_component(c, wf) for c in consumers)


READ_BYTES = 1 << 22   # the batched file source reads this much at a time
_BLANK = np.zeros(256, dtype=bool)
_BLANK[list(b" \t\n\r\x0b\x0c")] = True   # what bytes.strip() strips


def _line_blocks(path: str, index: int, tasks: int, max_lines: int) -> Iterator[tuple[np.ndarray, Any]]:
    """files._split_lines's lines of task `index` (those that start in its byte range) that
    are not blank, in blocks of at most `max_lines`: (their byte offsets as uint64, the lines
    as a pyarrow binary array, line ends included). Newlines are found with numpy over reads of
    READ_BYTES, not a readline per line."""
    import pyarrow as pa
    size = os.path.getsize(path)
    start, end = size * index // tasks, size * (index + 1) // tasks
    with open(path, "rb") as fh:
        pos = start
        if start > 0:   # a line begun before the range belongs to the task before
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                pos = start + len(fh.readline())
        fh.seek(pos)
        carry = b""   # the start of a line the previous read cut
        while pos < end:
            data = fh.read(READ_BYTES)
            buf = carry + data
            arr = np.frombuffer(buf, dtype=np.uint8)
            ends = np.flatnonzero(arr == 10) + 1
            if not data and len(buf) and (not len(ends) or ends[-1] != len(buf)):
                ends = np.r_[ends, len(buf)]   # the file's last line, without a newline
            starts = np.r_[0, ends[:-1]].astype(np.int64) if len(ends) else np.zeros(0, dtype=np.int64)
            inside = int(np.searchsorted(pos + starts, end))   # lines that start in the range
            starts, stops = starts[:inside], ends[:inside]
            # a line whose first byte is not blank is not blank; the others (rare), by bytes.strip
            nonblank = ~_BLANK[arr[starts]]
            for i in np.flatnonzero(~nonblank).tolist():
                nonblank[i] = bool(buf[starts[i]:stops[i]].strip())
            keep = np.flatnonzero(nonblank)
            for lo in range(0, len(keep), max_lines):
                sel = keep[lo:lo + max_lines]
                lengths = stops[sel] - starts[sel]
                offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
                if len(sel) == sel[-1] - sel[0] + 1:   # contiguous lines: a slice of the read
                    data_buf = pa.py_buffer(buf)[int(starts[sel[0]]):int(stops[sel[-1]])]
                else:
                    pieces = zip(starts[sel].tolist(), stops[sel].tolist())
                    data_buf = pa.py_buffer(b"".join(buf[a:b] for a, b in pieces))
                raw = pa.BinaryArray.from_buffers(pa.binary(), len(sel), [None, pa.py_buffer(offsets), data_buf])
                yield (pos + starts[sel]).astype(np.uint64), raw
            if not data or inside < len(ends):
                return
            done = int(ends[-1]) if len(ends) else 0
            carry, pos = buf[done:], pos + done


def file_source_batches(runner: Any) -> Iterator[None]:
    """connectors.files.file_source, a block of lines at a time: the same root ids (from the
    same (file, offset) message ids), tuple ids, routes and ledger contributions, with the
    lines sent to the batch consumers as Arrow chunks. A block with a line that is not UTF-8
    goes through file_source's own path (spout_record), so that line fails alone as there."""
    import pyarrow as pa
    import pyarrow.compute as pc
    comp = runner.comp
    stream = comp.streams[0]
    field = stream.fields[0] if stream.fields else "_0"
    salt = runner._root_salt(runner.spec.root_epoch)
    stream_salt = runner.router.salts.get(stream.id, 0)
    decode = files.decoder("text", stream.fields)
    for path in files.source_files(comp.impl, runner.wf.base_dir):
        name = os.path.basename(path)
        for offsets, raw in _line_blocks(path, runner.index, comp.parallelism, runner.batch_size):
            hashes = ids.position_hashes(name, offsets)
            if runner.spec.root_replay:   # root replay: only the failed roots' lines
                old = ids.derive_many(runner._root_salt(runner.spec.filter_epoch), hashes)
                replay = runner.replay_root_set()
                chosen = np.isin(old, np.fromiter(replay, dtype=np.uint64, count=len(replay)))
                if not chosen.any():
                    continue
                hashes, offsets, raw = hashes[chosen], offsets[chosen], raw.filter(pa.array(chosen))
            try:
                text = pc.utf8_rtrim(pc.cast(raw, pa.string()), characters="\r\n")
            except pa.ArrowInvalid:   # a line that is not UTF-8: the row path fails it alone
                for offset, line in zip(offsets.tolist(), raw.to_pylist()):
                    runner.spout_record((name, offset), functools.partial(decode, line), line, stream.id, "text")
                yield None
                continue
            m = len(raw)
            roots = ids.derive_many(salt, hashes)
            base = ids.derive_many(roots, stream_salt, 0)
            out = pa.RecordBatch.from_arrays([text], names=[field])
            off, flat = np.arange(m + 1, dtype=np.int64), roots
            for r in runner.router.routes[stream.id]:
                for idx in runner._targets(r, base, out):
                    tids = ids.derive_many(base, (idx + r.first).astype(np.uint64))
                    runner._combine(roots, tids)
                    runner._ship_arrow(r.consumer, stream.id, idx, tids, off, flat, out)
                    runner.stats["emitted"] += m
            counted = "replayed_roots" if runner.spec.root_replay else "roots"
            runner.stats[counted] = runner.stats.get(counted, 0) + m
            yield None
