"""Storm's groupings at emit time: which consumer tasks a tuple goes to, so that emit can return
them and the ids it creates can be XORed into the ledger.

One kernel decides it (_Route.indices): from each emit's base id and, for a fields grouping,
its key's hash (tracking.ids.fields_hash), the target task index of every copy, for many emits
at once. Every loop routes through it: the chunk mode's chunks and a file source's blocks
(route_many), the batch runtime's outputs (its collector), the targets that depend on no
emit (fixed_targets). The per-tuple entry (route, one emit of the row mode) is its scalar
form, the same arithmetic on one base id and key: numpy's cost per call is more than a
tuple's whole routing. tests/unit/runtime/test_routing.py holds them equal."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from recovery.model.graph import TaskMap, subscribers
from recovery.model.workflow import Grouping, Workflow
from recovery.tracking import ids

# --- routing -------------------------------------------------------------------------------
# A route's grouping as a small int: compared once per emit, a module global is cheaper than
# the enum's attribute.
_SPREAD, _FIELDS, _GLOBAL, _ALL, LOCAL = range(5)
_KIND = {Grouping.FIELDS: _FIELDS, Grouping.GLOBAL: _GLOBAL, Grouping.ALL: _ALL}


class _Route:
    __slots__ = ("consumer", "p", "first", "grouping", "idx", "kind", "keys", "local")

    def __init__(self, consumer: str, p: int, first: int, grouping: Grouping, idx: tuple[int, ...],
                 local: int | None = None):
        self.consumer, self.p, self.first, self.grouping, self.idx = consumer, p, first, grouping, idx
        self.kind = _KIND.get(grouping, _SPREAD)   # shuffle, none, local_or_shuffle: spread
        # a chained edge (model.graph.ChainPlan): task i's tuples go to the consumer's task i,
        # the one in the same stage and worker (Storm's local_or_shuffle preference)
        self.local = -1 if local is None else local
        if local is not None:
            self.kind = LOCAL
        # the (consumer, index) output keys, made once: an emit reuses them
        self.keys = tuple((consumer, i) for i in range(p))

    @property
    def fixed(self) -> bool:
        """Whether its targets depend on neither an emit's id nor its values."""
        return self.kind in (LOCAL, _GLOBAL, _ALL)

    def indices(self, bases: np.ndarray, key_hashes: Callable[[], np.ndarray] | None = None) -> list[np.ndarray]:
        """The grouping kernel: the consumer's task index of each emit, one array per copy an
        emit makes (all: one per task). `bases`: the emits' base ids; `key_hashes`: their
        fields-grouping keys' hashes, asked for only by a fields grouping."""
        n = len(bases)
        kind = self.kind
        if kind == _SPREAD:   # shuffle, none, local_or_shuffle: evenly and deterministically
            return [(bases % np.uint64(self.p)).astype(np.intp)]
        if kind == _FIELDS:
            assert key_hashes is not None, "a fields grouping routes by its key's hash"
            return [(key_hashes() % np.uint64(self.p)).astype(np.intp)]
        if kind == LOCAL:
            return [np.full(n, self.local, dtype=np.intp)]
        if kind == _GLOBAL:
            return [np.zeros(n, dtype=np.intp)]
        return [np.full(n, i, dtype=np.intp) for i in range(self.p)]   # all

    def index(self, base: int, values: list) -> int:
        """The kernel for one emit of a route whose emits make one copy (all but `all`)."""
        kind = self.kind
        if kind == _SPREAD:
            return base % self.p
        if kind == LOCAL:
            return self.local
        if kind == _FIELDS:
            return ids.fields_hash([values[j] for j in self.idx]) % self.p
        return 0   # global


class Router:
    """Storm's groupings, computed by the emitter. Deterministic: shuffle spreads by the
    tuple's derived id, so a re-run routes every tuple to the same task."""

    def __init__(self, wf: Workflow, tm: TaskMap, component_id: str, index: int | None = None,
                 chained: frozenset[str] = frozenset()):
        """`chained`: the consumers this component's task `index` feeds within its chain."""
        me = wf.component(component_id)
        self.component = component_id
        self.routes: dict[str, list[_Route]] = {s.id: [] for s in me.streams}
        self.direct: dict[str, dict[int, tuple[str, int]]] = {s.id: {} for s in me.streams}
        self.salts = {s.id: ids.name_salt(component_id, s.id) for s in me.streams}
        for consumer, inp in subscribers(wf, component_id):
            stream = me.stream(inp.stream)
            if stream is None:
                continue
            if inp.grouping == Grouping.DIRECT:
                for i, t in enumerate(tm.task_ids(consumer.id)):
                    self.direct[inp.stream][t] = (consumer.id, i)
                continue
            idx = tuple(stream.fields.index(f) for f in inp.fields) if inp.grouping == Grouping.FIELDS else ()
            local = index if consumer.id in chained else None
            self.routes[inp.stream].append(
                _Route(consumer.id, consumer.parallelism, tm.first[consumer.id], inp.grouping, idx, local))

    def route(self, stream: str, values: list, base: int, direct_task: int | None
              ) -> list[tuple[tuple[str, int], int, int]]:
        """((consumer, index), task id, tuple id) for every copy of one emit: the emit path's
        form of `deliver` (its keys are shared, not made per emit)."""
        routes = self.routes.get(stream)
        if routes is None:
            raise ValueError(f"{self.component!r} emitted on undeclared stream {stream!r}")
        if direct_task is not None:
            target = self.direct[stream].get(direct_task)
            if target is None:
                raise ValueError(f"task {direct_task} does not subscribe to {self.component!r} "
                                 f"stream {stream!r} with a direct grouping")
            return [(target, direct_task, ids.derive2(base, direct_task))]
        derive2 = ids.derive2
        if len(routes) == 1 and (routes[0].kind == _SPREAD or routes[0].kind == LOCAL):
            # one shuffle (or chained) subscriber: the common case
            r = routes[0]
            i = base % r.p if r.kind == _SPREAD else r.local
            t = r.first + i
            return [(r.keys[i], t, derive2(base, t))]
        out: list[tuple[tuple[str, int], int, int]] = []
        for r in routes:
            if r.kind == _ALL:
                first = r.first
                out.extend((key, first + i, derive2(base, first + i)) for i, key in enumerate(r.keys))
                continue
            i = r.index(base, values)
            t = r.first + i
            out.append((r.keys[i], t, derive2(base, t)))
        return out

    def deliver(self, stream: str, values: list, base: int, direct_task: int | None
                ) -> list[tuple[str, int, int, int]]:
        """(consumer, index, task id, tuple id) for every copy of one emit."""
        return [(key[0], key[1], t, tid) for key, t, tid in self.route(stream, values, base, direct_task)]

    def fixed_targets(self, stream: str) -> tuple[int, ...] | None:
        """The task ids every emit on `stream` goes to when they depend on neither its id nor
        its values (chained, global and all groupings only); None otherwise."""
        routes = self.routes.get(stream)
        if routes is None or not all(r.fixed for r in routes):
            return None
        one = np.zeros(1, dtype=np.uint64)   # any emit: they all go the same way
        return tuple(r.first + int(idx[0]) for r in routes for idx in r.indices(one))

    def route_many(self, stream: str, bases: np.ndarray, values: list[list]
                   ) -> list[tuple[tuple[tuple[str, int], ...], np.ndarray, np.ndarray]]:
        """`route` for many emits on `stream` at once (none of them direct): for every copy
        each emit makes, (the route's output keys, the index of each emit's key in them, each
        emit's copy id), the same tasks and ids as `route` gives emit by emit."""
        routes = self.routes.get(stream)
        if routes is None:
            raise ValueError(f"{self.component!r} emitted on undeclared stream {stream!r}")
        n = len(bases)
        out: list[tuple[tuple[tuple[str, int], ...], np.ndarray, np.ndarray]] = []
        for r in routes:
            def key_hashes(r: _Route = r) -> np.ndarray:
                return ids.fields_hash_many([[v[j] for v in values] for j in r.idx])
            for idx in r.indices(bases, key_hashes):
                if r.fixed:   # one task for every emit of this copy: its one key
                    i = int(idx[0]) if n else 0
                    out.append(((r.keys[i],), np.zeros(n, dtype=np.intp), ids.derive_many(bases, r.first + i)))
                else:
                    out.append((r.keys, idx, ids.derive_many(bases, idx.astype(np.uint64) + np.uint64(r.first))))
        return out
