"""Emits of a block, routed with numpy: the chunk path's (runtime.chunks) end of a chunk, and a
file source's block of lines. The ids, tasks, records and ledger contributions are those the
per-tuple path (runtime.collector) makes one emit at a time, bit for bit; each consumer task's
records are buffered in emit order.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from recovery.tracking import ids

if TYPE_CHECKING:
    from recovery.runtime.collector import TaskCollector

U64 = np.uint64


# (stream, the emits' positions among all (None: all of them), their base ids, values, roots)
Block = tuple[str, "np.ndarray | None", np.ndarray, list, list]


def route_blocks(collector: TaskCollector, groups: list[Block], n: int, x_emit: np.ndarray) -> None:
    """Emits routed with numpy (runtime.routing's route_many) and their records buffered per
    consumer task in emit order, as the per-tuple path buffers them one by one; x_emit[i]
    becomes the XOR of the ids of emit i's copies."""
    router = collector.router
    # per consumer task: (emit positions, records) parts, merged in emit order below
    parts: dict[tuple[str, int], list[tuple[np.ndarray | None, list]]] = {}
    for stream, pos, bases, g_values, g_roots in groups:
        for keys, idx, oids in router.route_many(stream, bases, g_values):
            if pos is None:
                x_emit ^= oids
            else:
                x_emit[pos] ^= oids
            oid_list = oids.tolist()
            if len(keys) == 1:
                recs_out = [[o, rt, stream, v] for o, rt, v in zip(oid_list, g_roots, g_values)]
                parts.setdefault(keys[0], []).append((pos, recs_out))
                continue
            order = np.argsort(idx, kind="stable")
            bounds = np.flatnonzero(np.diff(idx[order])) + 1
            for sel in np.split(order, bounds):
                if not len(sel):
                    continue
                recs_out = [[oid_list[j], g_roots[j], stream, g_values[j]] for j in sel.tolist()]
                parts.setdefault(keys[int(idx[sel[0]])], []).append((sel if pos is None else pos[sel], recs_out))
    for key, got in parts.items():
        if len(got) == 1:
            collector.add_records(key, got[0][1])
            continue
        where = np.concatenate([np.arange(n) if p is None else p for p, _ in got])
        merged = [r for _, recs_out in got for r in recs_out]
        collector.add_records(key, [merged[j] for j in np.argsort(where, kind="stable").tolist()])


def source_block(collector: TaskCollector, name: str, offsets: list[int], raws: list[bytes],
                 decode: Callable[[bytes], list], stream: str, fmt: str) -> None:
    """A built-in file source's block of lines of file `name` (their byte offsets, message ids
    (name, offset)): the root ids, decoding, failures, tuple ids, routes and ledger
    contributions `spout_record` gives each line, the bookkeeping with numpy."""
    roots = collector.roots
    hashes = ids.position_hashes(name, np.asarray(offsets, dtype=U64))
    chosen = roots.selected_many(hashes)
    if chosen is not None:   # a root-replay round: the failed roots only
        keep = np.flatnonzero(chosen).tolist()
        offsets, raws, hashes = [offsets[j] for j in keep], [raws[j] for j in keep], hashes[chosen]
    if not offsets:
        return
    root_arr = roots.root_ids(hashes)
    root_list = root_arr.tolist()
    roots.count(False, len(offsets))
    values: list[list] = []
    good: list[int] = []
    bad: list[int] = []
    for j, raw in enumerate(raws):
        try:
            values.append(decode(raw))
            good.append(j)
        # a record's decoder (JSON, text) raises many types
        except Exception as err:   # broad-except: whatever it raises, this record fails
            bad.append(j)
            collector.source_failure(root_list[j], (name, offsets[j]), raw, stream, fmt, 1, err)
    tracked = collector.tracker is not None
    x_emit = np.zeros(len(good), dtype=U64)
    if good:
        g_roots = root_arr if not bad else root_arr[good]
        bases = ids.derive_many(g_roots, collector.router.salts.get(stream, 0), 0)
        route_blocks(collector, [(stream, None, bases, values, [(r,) for r in g_roots.tolist()])],
                     len(good), x_emit)
        if tracked:
            collector.add_contributions(g_roots, x_emit)
    if bad and tracked:   # an undecodable record's "raw tuple" stays pending
        bad_roots = root_arr[bad]
        collector.add_contributions(bad_roots, bad_roots.copy())
