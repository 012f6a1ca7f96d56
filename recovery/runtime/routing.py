"""Storm's groupings at emit time: which consumer tasks a tuple goes to, so that emit can return
them and the ids it creates can be XORed into the ledger."""
from __future__ import annotations

from recovery.model.graph import TaskMap, subscribers
from recovery.model.workflow import Grouping, Workflow
from recovery.tracking import ids


# --- routing -------------------------------------------------------------------------------
class _Route:
    __slots__ = ("consumer", "p", "first", "grouping", "idx")

    def __init__(self, consumer: str, p: int, first: int, grouping: Grouping, idx: tuple[int, ...]):
        self.consumer, self.p, self.first, self.grouping, self.idx = consumer, p, first, grouping, idx


class Router:
    """Storm's groupings, computed by the emitter. Deterministic: shuffle spreads by the
    tuple's derived id, so a re-run routes every tuple to the same task."""

    def __init__(self, wf: Workflow, tm: TaskMap, component_id: str):
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
            self.routes[inp.stream].append(
                _Route(consumer.id, consumer.parallelism, tm.first[consumer.id], inp.grouping, idx))

    def deliver(self, stream: str, values: list, base: int, direct_task: int | None
                ) -> list[tuple[str, int, int, int]]:
        """(consumer, index, task id, tuple id) for every copy of one emit."""
        if stream not in self.routes:
            raise ValueError(f"{self.component!r} emitted on undeclared stream {stream!r}")
        if direct_task is not None:
            target = self.direct[stream].get(direct_task)
            if target is None:
                raise ValueError(f"task {direct_task} does not subscribe to {self.component!r} "
                                 f"stream {stream!r} with a direct grouping")
            return [(target[0], target[1], direct_task, ids.derive(base, direct_task))]
        out = []
        for r in self.routes[stream]:
            g = r.grouping
            if g is Grouping.FIELDS:
                i = ids.fields_hash([values[j] for j in r.idx]) % r.p
            elif g is Grouping.GLOBAL:
                i = 0
            elif g is Grouping.ALL:
                for i in range(r.p):
                    t = r.first + i
                    out.append((r.consumer, i, t, ids.derive(base, t)))
                continue
            else:  # shuffle, none, local_or_shuffle: spread evenly and deterministically
                i = base % r.p
            t = r.first + i
            out.append((r.consumer, i, t, ids.derive(base, t)))
        return out
