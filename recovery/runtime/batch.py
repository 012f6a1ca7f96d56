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
task's stats count the re-executions (`bisect_runs`) and the rows isolated that way
(`bisect_isolated`): about 2*log2(batch size) runs per isolated failure. Rows named in
`fail_rows` fail without bisection.

Tuples replayed from a failed position's queue come in as any others (with their attempt) and
are batched the same way, so recovery replays failed rows through the same batch component.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgpack
import numpy as np

from recovery.api.batch import BatchBolt
from recovery.api.components import Tuple
from recovery.api.loader import load_class
from recovery.model import config as config_decl
from recovery.model.workflow import Component, Grouping, Workflow
from recovery.runtime.collector import CHUNK, format_error
from recovery.runtime.task import TaskRunner
from recovery.tracking import ids
from recovery.tracking.state import KeyedState, LocalState

log = logging.getLogger(__name__)

_is_batch: dict[tuple[str | None, str], bool] = {}


def is_batch_component(comp: Component, wf: Workflow) -> bool:
    """Whether `comp` is a bolt implemented by a BatchBolt subclass (its class decides)."""
    impl = comp.impl
    if comp.is_spout or impl.kind != "class":
        return False
    key = (wf.base_dir, impl.ref)
    got = _is_batch.get(key)
    if got is None:
        got = _is_batch[key] = issubclass(load_class(impl.ref, wf.base_dir), BatchBolt)
    return got


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


class _Rows:
    """Input tuples of one (source, stream), as parallel lists."""

    __slots__ = ("src", "stream", "tids", "roots", "values", "attempts", "src_tasks")

    def __init__(self, src: str, stream: str):
        self.src, self.stream = src, stream
        self.tids: list[int] = []
        self.roots: list[Sequence[int]] = []
        self.values: list[list] = []
        self.attempts: list[int] = []     # 0: not a replay
        self.src_tasks: list[int] = []

    def __len__(self) -> int:
        return len(self.tids)

    def add(self, rec: list, src_task: int) -> None:
        self.tids.append(rec[0])
        self.roots.append(rec[1])
        self.values.append(rec[3])
        self.attempts.append(rec[4] if len(rec) > 4 else 0)
        self.src_tasks.append(src_task)

    def part(self, lo: int, hi: int) -> _Rows:
        p = _Rows(self.src, self.stream)
        p.tids, p.roots, p.values = self.tids[lo:hi], self.roots[lo:hi], self.values[lo:hi]
        p.attempts, p.src_tasks = self.attempts[lo:hi], self.src_tasks[lo:hi]
        return p


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
        self.batch_size = config_decl.value(self.conf, "recovery.batch.size")
        self._call: _Call | None = None
        self.stats["bisect_runs"] = 0
        self.stats["bisect_isolated"] = 0

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
    def run_bolt(self, records: Iterable[tuple[Any, bytes]]) -> Iterator[tuple[Any, bytes]]:
        if self.tracker is not None and self.tracker.committed() is not None:
            yield from self.tracker.stored_output()
            return
        started = time.time()
        try:
            bolt = self._instantiate()
            self.component_obj = bolt
            bolt.prepare(bolt.conf, bolt.context)
        except Exception as err:   # broad-except: user code (a bolt's __init__/prepare) can raise anything
            msg, tb = format_error(err)
            yield from self._fail_all(records, f"{self.component_id} could not start: {msg}", tb)
            yield from self._finish(started)
            return
        pending: dict[tuple[str, str], _Rows] = {}
        for _, blob in records:
            src, src_task, recs = msgpack.unpackb(blob)
            for rec in recs:
                group = pending.get((src, rec[2]))
                if group is None:
                    group = pending[(src, rec[2])] = _Rows(src, rec[2])
                group.add(rec, src_task)
                if len(group) >= self.batch_size:
                    del pending[(src, rec[2])]
                    self._run_batch(bolt, group)
                    if self.ready:
                        yield from self._drain()
        for group in pending.values():
            self._run_batch(bolt, group)
        try:
            bolt.finish()
        except Exception as err:   # broad-except: user code (finish) can raise anything
            self.log(f"{self.component_id}.finish raised {format_error(err)[0]}", "error")
        try:
            bolt.cleanup()
        except Exception as err:   # broad-except: user code (cleanup) can raise anything
            self.log(f"cleanup raised {format_error(err)[0]}", "error")
        yield from self._finish(started)

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
            self._attempt(bolt, rows.part(0, mid), True)
            self._attempt(bolt, rows.part(mid, len(rows)), True)
            return
        finally:
            self._call = None
        self._settle(rows, call.failed, outputs)

    def _record_batch(self, rows: _Rows) -> Any:
        import pyarrow as pa
        fields = self._fields(rows.src, rows.stream)
        width = len(rows.values[0]) if rows.values else len(fields)
        names = list(fields) if len(fields) == width else [f"_{j}" for j in range(width)]
        for v in rows.values:
            if len(v) != width:
                raise ValueError(f"tuple from {rows.src!r} stream {rows.stream!r} has {len(v)} values "
                                 f"for {width} fields ({', '.join(names)})")
        columns = [pa.array([v[j] for v in rows.values]) for j in range(width)]
        return pa.RecordBatch.from_arrays(columns, names=names)

    def _resolve(self, stream: str, out: Any, anchors: Any, n_in: int) -> tuple[str, list, Any]:
        """(stream, the output rows' values, anchors as an int array or a list of lists),
        checked: a declared stream, its fields as columns, anchors within the batch."""
        declared = self.comp.stream(stream)
        if declared is None or stream not in self.router.routes:
            raise ValueError(f"{self.component_id!r} emitted on undeclared stream {stream!r}")
        names = set(out.schema.names)
        missing = [f for f in declared.fields if f not in names]
        if missing:
            raise ValueError(f"{self.component_id!r}: the batch emitted on stream {stream!r} has no "
                             f"column {missing[0]!r} (fields: {' '.join(declared.fields)})")
        m = out.num_rows
        columns = [out.column(f).to_pylist() for f in declared.fields]
        values = [list(r) for r in zip(*columns)] if columns else [[] for _ in range(m)]
        if anchors is None:
            if m != n_in:
                raise ValueError(f"{self.component_id!r}: emit_batch without anchors needs one output "
                                 f"row per input row ({n_in} in, {m} out)")
            return stream, values, np.arange(m, dtype=np.int64)
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
            return stream, values, single
        multi = [[int(r) for r in (a if isinstance(a, (list, tuple, np.ndarray)) else [a])] for a in arr]
        if any(not 0 <= r < n_in for a in multi for r in a):
            raise IndexError(f"{self.component_id!r}: an anchor is not a row of the input batch "
                             f"of {n_in} rows")
        return stream, values, multi

    # -- a successful call's outputs, acks and failures ----------------------------------------
    def _settle(self, rows: _Rows, failed: dict[int, str], outputs: list[tuple[str, list, Any]]) -> None:
        n = len(rows)
        ok = np.ones(n, dtype=bool)
        if failed:
            ok[list(failed)] = False
        in_ids = np.fromiter(rows.tids, dtype=np.uint64, count=n)
        lens = np.fromiter((len(r) for r in rows.roots), dtype=np.int64, count=n)
        flat_roots = np.fromiter((r for rs in rows.roots for r in rs), dtype=np.uint64, count=int(lens.sum()))
        starts = np.cumsum(lens) - lens
        xor_roots: list[np.ndarray] = []
        xor_ids: list[np.ndarray] = []

        def add_xors(anchor_rows: np.ndarray, tids: np.ndarray) -> None:
            """XOR each tid into every root of its anchor row."""
            k = lens[anchor_rows]
            total = int(k.sum())
            if total == 0:
                return
            pos = np.repeat(starts[anchor_rows] - (np.cumsum(k) - k), k) + np.arange(total)
            xor_roots.append(flat_roots[pos])
            xor_ids.append(np.repeat(tids, k))

        counts = np.zeros(n, dtype=np.int64)   # emits per input row so far in this call
        emitted = 0
        for stream, values, anchors in outputs:
            salt = self.router.salts.get(stream, 0)
            if isinstance(anchors, np.ndarray):
                occ = _occurrences(anchors) + counts[anchors]
                counts += np.bincount(anchors, minlength=n)
                keep = np.flatnonzero(ok[anchors])
                if len(keep) == 0:
                    continue
                kept = anchors[keep]
                base = ids.derive_many(in_ids[kept], salt, occ[keep])
                kept_values = values if len(keep) == len(values) else [values[i] for i in keep.tolist()]
                kept_roots = [rows.roots[a] for a in kept.tolist()]
                emitted += self._route(stream, base, kept_values, kept_roots, kept, add_xors)
            else:
                emitted += self._emit_multi(stream, salt, values, anchors, rows, ok, counts, add_xors)
        self.stats["emitted"] += emitted
        acked = np.flatnonzero(ok)
        add_xors(acked, in_ids[acked])
        self.stats["acked"] += len(acked)
        if self.tracker is not None:
            for i in acked.tolist():
                if rows.attempts[i]:   # a replay from a queue: its entry goes at commit
                    self.tracker.replay_done(self.component_id, self.task_id, rows.tids[i])
        if xor_roots:
            self._combine(np.concatenate(xor_roots), np.concatenate(xor_ids))
        for i in sorted(failed):
            self._fail_row(rows, i, failed[i], "")

    def _route(self, stream: str, base: np.ndarray, values: list, roots: list, anchor_rows: np.ndarray,
               add_xors: Any) -> int:
        """Every copy of the kept output rows, by the stream's routes (runtime.Router's choices)."""
        out, emitted = self.out, 0
        m = len(base)
        for r in self.router.routes[stream]:
            g = r.grouping
            if g is Grouping.ALL:
                targets = [np.full(m, i, dtype=np.int64) for i in range(r.p)]
            elif g is Grouping.FIELDS:
                key_cols = [[v[j] for v in values] for j in r.idx]
                targets = [(ids.fields_hash_many(key_cols) % np.uint64(r.p)).astype(np.int64)]
            elif g is Grouping.GLOBAL:
                targets = [np.zeros(m, dtype=np.int64)]
            else:   # shuffle, none, local_or_shuffle: base % p, as the row path
                targets = [(base % np.uint64(r.p)).astype(np.int64)]
            for idx in targets:
                tids = ids.derive_many(base, (idx + r.first).astype(np.uint64))
                add_xors(anchor_rows, tids)
                consumer = r.consumer
                for i, tid, rts, vals in zip(idx.tolist(), tids.tolist(), roots, values):
                    key = (consumer, i)
                    buf = out.get(key)
                    if buf is None:
                        buf = out[key] = []
                    buf.append([tid, rts, stream, vals])
                    if len(buf) >= CHUNK:
                        self._seal(key)
                emitted += m
        return emitted

    def _emit_multi(self, stream: str, salt: int, values: list, anchors: list[list[int]], rows: _Rows,
                    ok: np.ndarray, counts: np.ndarray, add_xors: Any) -> int:
        """Output rows anchored to several input rows (or none): the row path's emit, one by one."""
        emitted = 0
        multi_counts: dict[int, int] = {}
        for vals, anchor in zip(values, anchors):
            uniq = list(dict.fromkeys(anchor))
            if not uniq:   # unanchored: released at once, in no root's tree
                self.unanchored_seq += 1
                base = ids.derive(self.task_id, salt, self.unanchored_seq, 1, self.spec.round)
                roots: tuple = ()
            elif len(uniq) == 1:
                a = uniq[0]
                base = ids.derive(rows.tids[a], salt, int(counts[a]))
                counts[a] += 1
                roots = tuple(rows.roots[a])
            else:
                key = 0
                root_list: list[int] = []
                for a in uniq:
                    key ^= rows.tids[a]
                    for r in rows.roots[a]:
                        if r not in root_list:
                            root_list.append(r)
                n = multi_counts.get(key, 0)
                multi_counts[key] = n + 1
                base = ids.derive(key, salt, n)
                roots = tuple(root_list)
            if uniq and not all(ok[a] for a in uniq):
                continue   # anchored to a failed row: nothing flows on
            recs = [(c, i, [tid, roots, stream, vals]) for c, i, _, tid in self.router.deliver(stream, vals, base, None)]
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
        """XOR `tids` into `roots`' contributions, combined per root first."""
        if len(roots) == 0:
            return
        order = np.argsort(roots, kind="stable")
        r, t = roots[order], tids[order]
        starts = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1]
        xors = np.bitwise_xor.reduceat(t, starts)
        contrib = self.contrib
        for root, x in zip(r[starts].tolist(), xors.tolist()):
            contrib[root] = contrib.get(root, 0) ^ x

    def _tuple(self, rows: _Rows, i: int) -> Tuple:
        return Tuple(rows.tids[i], rows.src, rows.stream, self.task_id, rows.values[i],
                     self._fields(rows.src, rows.stream), rows.roots[i], rows.src_tasks[i],
                     rows.attempts[i] or 1)

    def _fail_row(self, rows: _Rows, i: int, error: str, tb: str) -> None:
        """Row i fails alone, as a row bolt's tuple would (Collector.fail's record)."""
        tup = self._tuple(rows, i)
        self.outstanding[tup.id] = tup
        self.fail(tup, error, tb)
