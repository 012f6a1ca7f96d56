"""The collector of a batch task: the row collector's semantics (runtime.collector), computed a
batch at a time. What a successful process_batch call emitted gets exactly the ids, ledger
contributions and routes a row bolt's emits would, computed over arrays:

- an output row anchored to input row `a` is the row path's `emit(values, anchors=[a])`:
  base id `derive(a.id, stream salt, n)` with n its index among the call's outputs anchored to
  `a` (the row path's emit count), one copy per route with id `derive(base, target task)`;
  ids.derive_many computes these bit for bit;
- the groupings pick their tasks by the one grouping kernel (runtime.routing), the keys
  hashed from the Arrow columns;
- XOR contributions (every released copy and every acked input, per root) go to the task's
  accumulator as arrays (tracking.xors), folded per root before they reach its commit.

Copies for batch consumers travel as Arrow chunks, copies for row consumers as row chunks
(runtime.wire).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from recovery.api.batch import message_ids_as_list
from recovery.runtime import timeouts, wire
from recovery.runtime.batch.rows import Rows, occurrences
from recovery.runtime.collector import CHUNK, TaskCollector
from recovery.tracking import ids


class BatchCall:
    """What one process_batch call emitted and failed, kept until the call returns."""

    __slots__ = ("emits", "failed")

    def __init__(self) -> None:
        self.emits: list[tuple[str, Any, Any]] = []
        self.failed: dict[int, str] = {}


class BatchCollector(TaskCollector):
    """TaskCollector for a batch task: it gains emit_batch and fail_rows (what a BatchBolt
    calls, kept in `call` while process_batch runs), settles a call's outputs by array, and
    keeps the ledger contributions as arrays."""

    def __init__(self, *args: Any, arrow_to: set[str], fields: Callable[[str, str], tuple[str, ...]],
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.arrow_to = arrow_to      # consumers that are batch components: they get Arrow chunks
        self.fields = fields          # (source, stream) -> declared fields
        self.call: BatchCall | None = None
        self.spout_rows = 0           # rows a BatchSpout task emitted: default message ids' positions

    # -- what a BatchBolt calls ------------------------------------------------------------------
    def emit_batch(self, batch: Any, anchors: Any, stream: str) -> None:
        self._check_deadline()
        if self.call is None:
            raise RuntimeError(f"{self.component_id}: emit_batch outside process_batch (outputs "
                               "must be anchored to the batch's input rows)")
        self.call.emits.append((stream, batch, anchors))

    def fail_rows(self, rows: Any, errors: Sequence[str] | str) -> None:
        self._check_deadline()
        if self.call is None:
            raise RuntimeError(f"{self.component_id}: fail_rows outside process_batch")
        rows = [int(r) for r in rows]
        errs = [errors] * len(rows) if isinstance(errors, str) else [str(e) for e in errors]
        if len(errs) != len(rows):
            raise ValueError(f"fail_rows: {len(rows)} rows but {len(errs)} errors")
        for r, e in zip(rows, errs):
            self.call.failed.setdefault(r, e)

    def _check_deadline(self) -> None:
        """The message timeout, checked at each collector call as the row path does: past the
        deadline of the process_batch call running, the call raises TupleTimeout."""
        running = self.timeouts.running
        if running is not None and timeouts.clock() > running[1]:
            raise self.timeouts.expired()

    # -- what a BatchSpout calls -----------------------------------------------------------------
    def emit_root_batch(self, batch: Any, message_ids: Any, stream: str) -> None:
        """A BatchSpout's emit_batch: one root tuple per row of `batch` (the columns of
        `stream`'s fields, by name), row i with message id message_ids[i], or, when None, the
        task's (index, position) pair; each root gets the id, routes and ledger contributions
        a row spout's `emit(values, tup_id=...)` of that message id would give it."""
        import pyarrow as pa
        n = batch.num_rows
        if n == 0:
            return
        self.spout_emits += 1   # an emit: the spout is not exhausted (root replay's unselected too)
        fields = self.fields(self.component_id, stream)
        if stream not in self.router.routes:
            raise ValueError(f"{self.component_id!r} emitted on undeclared stream {stream!r}")
        missing = [f for f in fields if f not in batch.schema.names]
        if missing:
            raise ValueError(f"{self.component_id!r}: the batch emitted on stream {stream!r} has no "
                             f"column {missing[0]!r} (fields: {' '.join(fields)})")
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0]
        values = batch.select(list(fields))
        start, self.spout_rows = self.spout_rows, self.spout_rows + n
        if message_ids is None:
            index = self.task_map.index(self.component_id, self.task_id)
            mids: list[Any] = [(index, p) for p in range(start, start + n)]
            hashes = ids.pair_hashes(index, np.arange(start, start + n, dtype=np.uint64))
        else:
            mids = message_ids_as_list(message_ids)
            if len(mids) != n:
                raise ValueError(f"{self.component_id!r}: {len(mids)} message ids for {n} rows")
            hashes = ids.stable_hashes(mids)
        selected = self.roots.selected_many(hashes)   # a root replay re-emits the failed ones only
        if selected is not None:
            keep = np.flatnonzero(selected)
            if len(keep) == 0:
                return
            hashes, values, mids = hashes[keep], values.take(keep), [mids[i] for i in keep.tolist()]
        roots = self.roots.root_ids(hashes).tolist()
        made = self.roots.made
        if len(set(roots)) < len(roots) or not made.isdisjoint(roots):
            # ids are derived from message ids: a second root under one id would cancel the
            # first one's XORs and share its queue fields (the row spout's check)
            seen = set(made)
            for root, mid in zip(roots, mids):
                if root in seen:
                    raise ValueError(f"spout {self.component_id!r} emitted message id {mid!r} twice in "
                                     f"one task; message ids must be unique within a run")
                seen.add(root)
        self.emit_roots(hashes, values, stream)
        made.update(roots)
        self.roots.messages.extend([r, m] for r, m in zip(roots, mids))

    # -- a successful call's outputs, acks and failures ----------------------------------------
    def settle(self, rows: Rows, failed: dict[int, str], outputs: list[tuple[str, Any, Any]]) -> None:
        """The outputs of a call over `rows` (checked: (stream, record batch, anchors)) routed,
        its rows acked but for `failed` (row -> error), which fail."""
        n = len(rows)
        ok = np.ones(n, dtype=bool)
        if failed:
            ok[list(failed)] = False
        in_ids = rows.tids
        starts = rows.root_off[:-1]
        lens = rows.root_off[1:] - starts
        flat_roots = rows.root_flat
        xors: list[tuple[np.ndarray, np.ndarray]] = []   # (roots, ids) to XOR per root

        def root_positions(anchor_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(positions in flat_roots of the anchor rows' roots, roots per anchor row)."""
            k = lens[anchor_rows]
            total = int(k.sum())
            return np.repeat(starts[anchor_rows] - (np.cumsum(k) - k), k) + np.arange(total), k

        counts = np.zeros(n, dtype=np.int64)   # emits per input row so far in this call
        emitted = 0
        for stream, out, anchors in outputs:
            salt = self.router.salts.get(stream, 0)
            if isinstance(anchors, np.ndarray):
                occ = occurrences(anchors) + counts[anchors]
                counts += np.bincount(anchors, minlength=n)
                keep = np.flatnonzero(ok[anchors])
                if len(keep) == 0:
                    continue
                kept = anchors[keep]
                base = ids.derive_many(in_ids[kept], salt, occ[keep])
                kept_out = out if len(keep) == out.num_rows else out.take(keep)
                pos, k = root_positions(kept)
                emitted += self._route(stream, base, kept_out, np.r_[0, np.cumsum(k)].astype(np.int64),
                                       flat_roots[pos], xors)
            else:
                emitted += self._emit_multi(stream, salt, out, anchors, rows, ok, counts)
        self.stats["emitted"] += emitted
        acked = np.flatnonzero(ok)
        pos, k = root_positions(acked)
        if len(pos):
            xors.append((flat_roots[pos], np.repeat(in_ids[acked], k)))
        self.stats["acked"] += len(acked)
        if self.tracker is not None:
            for i in np.flatnonzero(ok & (rows.attempts > 0)).tolist():   # replays: queue entries go
                self.tracker.replay_done(self.component_id, self.task_id, int(rows.tids[i]))
        if xors:
            self.combine(np.concatenate([r for r, _ in xors]), np.concatenate([t for _, t in xors]))
        for i in sorted(failed):
            self.fail_row(rows, i, failed[i], "")

    def ack_rows(self, rows: Rows, ok: np.ndarray) -> None:
        """Ack the rows of `rows` where `ok`: each id XORed into its roots, combined per root."""
        acked = np.flatnonzero(ok)
        starts = rows.root_off[:-1][acked]
        k = (rows.root_off[1:] - rows.root_off[:-1])[acked]
        pos = np.repeat(starts - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))
        self.combine(rows.root_flat[pos], np.repeat(rows.tids[acked], k))
        self.stats["acked"] += len(acked)
        if self.tracker is not None:
            for i in np.flatnonzero(ok & (rows.attempts > 0)).tolist():   # replays: queue entries go
                self.tracker.replay_done(self.component_id, self.task_id, int(rows.tids[i]))

    def fail_row(self, rows: Rows, i: int, error: str, tb: str) -> None:
        """Row i fails alone, as a row bolt's tuple would (TaskCollector.fail's record)."""
        tup = rows.as_tuple(i, self.task_id, self.fields(rows.src, rows.stream))
        self.outstanding[tup.id] = tup
        self.fail(tup, error, tb)

    # -- root tuples by the block (connectors.runner.BatchSourceRunner) ------------------------
    def emit_roots(self, hashes: np.ndarray, values: Any, stream: str) -> None:
        """Root tuples, one per row of `values` (a record batch of `stream`'s fields), the
        message id of row i hashing to hashes[i] (ids.position_hashes): the root ids, tuple
        ids, routes and ledger contributions spout_record would give each row."""
        m = len(hashes)
        roots = self.roots.root_ids(hashes)
        base = ids.derive_many(roots, self.router.salts.get(stream, 0), 0)
        xors: list[tuple[np.ndarray, np.ndarray]] = []
        self.stats["emitted"] += self._route(stream, base, values, np.arange(m + 1, dtype=np.int64), roots, xors)
        for root_ids, tids in xors:
            self.combine(root_ids, tids)
        self.roots.count(False, m)

    # -- routing by array ------------------------------------------------------------------------
    def _route(self, stream: str, base: np.ndarray, out: Any, out_off: np.ndarray, out_flat: np.ndarray,
               xors: list[tuple[np.ndarray, np.ndarray]]) -> int:
        """Every copy of output rows `out` (row j: base id base[j], roots
        out_flat[out_off[j]:out_off[j + 1]]): Arrow chunks to batch consumers, row records to
        row consumers; each copy's (roots, id) pairs go to `xors`. Returns the copies made."""
        emitted, m = 0, len(base)
        values: list[list] | None = None
        roots: list[tuple] | None = None
        per_row = np.diff(out_off)
        for r in self.router.routes[stream]:
            for idx in self._targets(r, base, out):
                tids = ids.derive_many(base, (idx + r.first).astype(np.uint64))
                if len(out_flat):
                    xors.append((out_flat, np.repeat(tids, per_row)))
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
                        self.seal(key)
        return emitted

    def _targets(self, r: Any, base: np.ndarray, out: Any) -> list[np.ndarray]:
        """The target task indices of route `r` per output row, one array per copy: the
        grouping kernel (runtime.routing), the keys hashed from the Arrow columns."""
        return r.indices(base, lambda: _key_hashes(out, r.idx))

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
            self.add_ready((consumer, i), wire.encode_chunk(self.component_id, self.task_id, stream, tids[lo:hi],
                                                            off, flat, part))

    def _emit_multi(self, stream: str, salt: int, out: Any, anchors: list[list[int]], rows: Rows,
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
                base = ids.derive(self.task_id, salt, self.unanchored_seq, 1, self.round)
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
                self.combine(np.fromiter((r for _, _, rec in recs for r in roots), dtype=np.uint64),
                             np.fromiter((rec[0] for _, _, rec in recs for _ in roots), dtype=np.uint64))
            for c, i, rec in recs:
                key2 = (c, i)
                buf = self.out.setdefault(key2, [])
                buf.append(rec)
                if len(buf) >= CHUNK:
                    self.seal(key2)
            emitted += len(recs)
        return emitted

    # -- ledger contributions, by array ----------------------------------------------------------
    def combine(self, roots: np.ndarray, tids: np.ndarray) -> None:
        """XOR `tids` into `roots`' contributions, as arrays (tracking.xors folds them per root
        in bulk: a dict update per root and batch was the batch path's largest framework
        cost, 16% of a tracked cdn_logs_batch run's worker CPU)."""
        self.xors.add(roots, tids)


def _key_hashes(out: Any, columns: tuple[int, ...]) -> np.ndarray:
    """ids.fields_hash of each row's grouping key; one key column is dictionary-encoded first,
    so that each distinct key is hashed once."""
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
