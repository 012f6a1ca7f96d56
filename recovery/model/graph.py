"""Graph operations on a Workflow: order, downstream closure, Storm's task numbering and the
context a task is given (also the multilang handshake's `context`)."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from recovery.model.workflow import Component, Grouping, Input, Workflow

V = TypeVar("V")


def subscribers(wf: Workflow, component_id: str) -> list[tuple[Component, Input]]:
    """(consumer, input) for every input that reads from `component_id`, in XML order."""
    return [(c, i) for c in wf.components for i in c.inputs if i.source == component_id]


def in_stage_order(per_component: dict[str, V], wf: Workflow) -> dict[str, V]:
    """Per-component values (a round's counters) in the workflow's topological order; those of
    components it does not have (a recovery workflow's queue sources) first: they feed the rest."""
    order = topological_order(wf)
    return {**{c: per_component[c] for c in per_component if c not in order},
            **{c: per_component[c] for c in order if c in per_component}}


def topological_order(wf: Workflow) -> list[str]:
    """Component ids, every component after all it reads from; ties keep XML order.
    Raises ValueError naming a component on a cycle."""
    ids = [c.id for c in wf.components]
    indegree = {cid: 0 for cid in ids}
    for c in wf.components:
        for src in {i.source for i in c.inputs}:
            if src in indegree:
                indegree[c.id] += 1
    ready = deque(cid for cid in ids if indegree[cid] == 0)
    order: list[str] = []
    while ready:
        cid = ready.popleft()
        order.append(cid)
        for consumer in dict.fromkeys(c.id for c, _ in subscribers(wf, cid)):
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                ready.append(consumer)
    if len(order) != len(ids):
        cycle = find_cycle(wf.components)
        raise ValueError(f"cycle through component {cycle.path[0]!r}" if cycle else "cycle")
    return order


@dataclass(frozen=True)
class Cycle:
    """A cycle along inputs: `path` lists the components upstream first and ends where it
    began; it closes at input number `input_index` of component `closed_at`."""
    path: tuple[str, ...]
    closed_at: str
    input_index: int


def find_cycle(components: Sequence[Component]) -> Cycle | None:
    """The first cycle in document order (depth-first along inputs), or None. The one cycle
    detector: topological_order and the workflow checks (with file and line) both use it."""
    by_id = {c.id: c for c in components}
    white, grey, black = 0, 1, 2
    color = {c.id: white for c in components}
    for start in components:
        if color[start.id] != white:
            continue
        # stack of (component id, index of next input to follow); path mirrors grey nodes
        stack: list[tuple[str, int]] = [(start.id, 0)]
        path = [start.id]
        color[start.id] = grey
        while stack:
            cid, i = stack[-1]
            c = by_id[cid]
            if i >= len(c.inputs):
                stack.pop()
                path.pop()
                color[cid] = black
                continue
            stack[-1] = (cid, i + 1)
            src = c.inputs[i].source
            if color.get(src) == grey:
                # path[k:] runs downstream to upstream (src feeds cid): reverse it
                k = path.index(src)
                return Cycle(tuple(reversed(path[k:] + [src])), cid, i)
            if color.get(src) == white:
                color[src] = grey
                stack.append((src, 0))
                path.append(src)
    return None


def downstream(wf: Workflow, start: Iterable[str], include_start: bool = True) -> set[str]:
    """Every component reachable from `start` along inputs (the start ones too by default)."""
    start = set(start)
    seen: set[str] = set()
    todo = deque(start)
    while todo:
        cid = todo.popleft()
        for consumer, _ in subscribers(wf, cid):
            if consumer.id not in seen:
                seen.add(consumer.id)
                todo.append(consumer.id)
    return seen | start if include_start else seen - start


def upstream(wf: Workflow, component_id: str) -> set[str]:
    """Every component `component_id` reads from, directly or not."""
    by_id = {c.id: c for c in wf.components}
    seen: set[str] = set()
    todo = deque([component_id])
    while todo:
        for i in by_id[todo.popleft()].inputs:
            if i.source not in seen:
                seen.add(i.source)
                todo.append(i.source)
    return seen


# --- chains -------------------------------------------------------------------------------
# Flink's operator chaining, on Storm's groupings: a bolt whose one input comes from a
# component of equal parallelism over a local_or_shuffle or none edge (shuffle too with
# recovery.chain.shuffle=true) runs in that component's stage: task i of the chain runs task i
# of each member in turn, in one Python worker, and a chained edge sends task i's tuples to
# task i of the next member (Storm's local preference) with no shuffle between them.
CHAINED_GROUPINGS = frozenset({Grouping.LOCAL_OR_SHUFFLE, Grouping.NONE})


@dataclass(frozen=True)
class Chain:
    """Components that run as one stage: `members` in topological order, the head (the one
    fed from outside the chain, or a spout) first. Every member has the head's parallelism."""
    members: tuple[str, ...]
    parallelism: int

    @property
    def head(self) -> str:
        return self.members[0]

    @property
    def name(self) -> str:
        """How drawings and Spark's stage names show it: Flink's "a -> b -> c"."""
        return " -> ".join(self.members)


def chained_input(wf: Workflow, c: Component) -> Input | None:
    """The input over which `c` chains to its upstream, or None: `c` is a bolt with that one
    input, from a component of the same parallelism, over a chainable grouping."""
    if c.is_spout or len(c.inputs) != 1:
        return None
    settings = wf.settings()
    if not settings.chain:
        return None
    inp = c.inputs[0]
    allowed = CHAINED_GROUPINGS | ({Grouping.SHUFFLE} if settings.chain_shuffle else set())
    if inp.grouping not in allowed or inp.source == c.id:
        return None
    try:
        upstream = wf.component(inp.source)
    except KeyError:
        return None
    return inp if upstream.parallelism == c.parallelism else None


class Mode(str, Enum):
    """How a component's task calls its code and keeps its books: decided once per component
    from what implements it and what it reads or feeds (runtime.modes), stored in the chain
    plan, and what the task dispatches on."""
    ROW = "row"                    # a bolt, one tuple at a time: a shell bolt, a bolt with tick tuples
    CHUNK = "chunk"                # a Python bolt, an input chunk at a time (bookkeeping by array)
    BATCH = "batch"                # a BatchBolt, Arrow batches
    SINK = "sink"                  # a built-in sink fed rows: each tuple held until its commit
    BATCH_SINK = "batch-sink"      # a built-in sink fed by batch components only: their columns
    SPOUT = "spout"                # a Spout class or a shell spout: one next_tuple at a time
    BATCH_SPOUT = "batch-spout"    # a BatchSpout: one next_batch at a time
    SOURCE = "source"              # a built-in source, one record at a time
    BLOCK_SOURCE = "block-source"  # a text or JSON file source, a block of lines at a time
    BATCH_SOURCE = "batch-source"  # a text file source feeding batch components: Arrow batches

    def __str__(self) -> str:
        return self.value

    @property
    def is_batch(self) -> bool:
        """Run by the batch runtime (its collector settles Arrow batches)."""
        return self in (Mode.BATCH, Mode.BATCH_SINK, Mode.BATCH_SPOUT, Mode.BATCH_SOURCE)


@dataclass(frozen=True)
class ChainPlan:
    """A workflow's stages: every component in exactly one chain (most in a chain of one), and
    each component's execution mode when the plan was made with them (runtime.modes.plan_of:
    deciding them loads the workflow's classes, which the model does not)."""
    chains: tuple[Chain, ...]        # in topological order of their heads
    of: dict[str, Chain]             # component id -> its chain
    consumers: dict[str, tuple[str, ...]]   # chain head -> components outside it that read it
    modes: dict[str, Mode] = field(default_factory=dict)   # component id -> its execution mode

    @classmethod
    def of_workflow(cls, wf: Workflow, mode_of: Callable[[Component], Mode] | None = None) -> ChainPlan:
        order = topological_order(wf)
        parent: dict[str, str] = {}
        for cid in order:
            inp = chained_input(wf, wf.component(cid))
            if inp is not None:
                parent[cid] = inp.source

        def head_of(cid: str) -> str:
            while cid in parent:
                cid = parent[cid]
            return cid
        members: dict[str, list[str]] = {}
        for cid in order:   # topological: a member comes after the members it reads from
            members.setdefault(head_of(cid), []).append(cid)
        chains = tuple(Chain(tuple(m), wf.component(h).parallelism) for h, m in members.items())
        by_id = {cid: ch for ch in chains for cid in ch.members}
        consumers = {ch.head: tuple(dict.fromkeys(
            c.id for m in ch.members for c, _ in subscribers(wf, m) if by_id[c.id] is not ch))
            for ch in chains}
        modes = {cid: mode_of(wf.component(cid)) for cid in order} if mode_of is not None else {}
        return cls(chains, by_id, consumers, modes)

    def mode(self, component_id: str) -> Mode:
        """The component's execution mode (KeyError: the plan was made without modes)."""
        return self.modes[component_id]

    def chain_of(self, component_id: str) -> Chain:
        return self.of[component_id]

    def readers(self, wf: Workflow, component_id: str) -> list[str]:
        """The done-marker fields (`component:index`) of every task that reads what the chain of
        `component_id` sends out of its stage: once all committed, nothing needs its spill."""
        head = self.of[component_id].head
        return [f"{c}:{i}" for c in self.consumers[head] for i in range(wf.component(c).parallelism)]

    @property
    def chained(self) -> list[Chain]:
        """The chains of more than one member (what drawings show)."""
        return [ch for ch in self.chains if len(ch.members) > 1]


def chain_plan(wf: Workflow) -> ChainPlan:
    return ChainPlan.of_workflow(wf)


@dataclass(frozen=True)
class TaskMap:
    """Storm's task numbering: components sorted by id, task ids from 1, consecutive per
    component (system tasks such as ticks use -1)."""
    first: dict[str, int]
    count: dict[str, int]

    @classmethod
    def of(cls, wf: Workflow) -> TaskMap:
        first, count, nxt = {}, {}, 1
        for c in sorted(wf.components, key=lambda c: c.id):
            first[c.id], count[c.id] = nxt, c.parallelism
            nxt += c.parallelism
        return cls(first, count)

    def extended(self, wf: Workflow) -> TaskMap:
        """Numbering for a workflow derived from this one (a recovery workflow): components
        this map knows keep their task ids, so a failed position means the same task in every
        round; new components (queue spouts) get ids after the highest one."""
        first, count = {}, {}
        nxt = max((f + self.count[c] for c, f in self.first.items()), default=1)
        for c in sorted(wf.components, key=lambda c: c.id):
            if c.id in self.first and self.count[c.id] == c.parallelism:
                first[c.id], count[c.id] = self.first[c.id], c.parallelism
            else:
                first[c.id], count[c.id] = nxt, c.parallelism
                nxt += c.parallelism
        return TaskMap(first, count)

    def task_ids(self, component_id: str) -> list[int]:
        f = self.first[component_id]
        return list(range(f, f + self.count[component_id]))

    def task_id(self, component_id: str, index: int) -> int:
        return self.first[component_id] + index

    def index(self, component_id: str, task_id: int) -> int:
        i = task_id - self.first[component_id]
        if not 0 <= i < self.count[component_id]:
            raise KeyError(f"task {task_id} is not a task of {component_id!r}")
        return i

    def component_of(self, task_id: int) -> str:
        for cid, f in self.first.items():
            if f <= task_id < f + self.count[cid]:
                return cid
        raise KeyError(f"no component has task {task_id}")

    @property
    def task_to_component(self) -> dict[int, str]:
        return {t: cid for cid in self.first for t in self.task_ids(cid)}


@dataclass
class ComponentContext:
    """What `prepare`/`open` receive as `context`, also `self.context` (Storm's
    TopologyContext, reduced), and what a task of a run adds for the built-in sources and sinks
    (runtime.task.TaskRunner sets them; a component run outside a run keeps the defaults).
    Named apart from `pyspark.TaskContext`, which is Spark's view of a Spark task."""
    workflow: Workflow
    component_id: str
    task_id: int
    task_map: TaskMap = field(default=None)  # type: ignore[assignment]
    pid_dir: str | None = None
    run_id: str = "run"
    round: int = 0
    # the run's Redis client (a redis.Redis; typed loosely: the model imports no Redis), None
    # without tracking or a Redis-reading component
    redis: Any = None
    # raises unless this task's driver still owns the run; a sink calls it right before it
    # publishes a part (connectors.sink_folders.atomic_write, postgres, delta). Returns how many
    # drivers held the run before this one (tracking.tracker.TaskTracker.check_fence). None: no run
    fence: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        if self.task_map is None:
            self.task_map = TaskMap.of(self.workflow)

    @property
    def task_index(self) -> int:
        return self.task_map.index(self.component_id, self.task_id)

    @property
    def component_tasks(self) -> list[int]:
        return self.task_map.task_ids(self.component_id)

    def to_storm(self) -> dict:
        """The multilang handshake's `context`, with the fields Storm 0.10+ sends."""
        wf, me = self.workflow, self.workflow.component(self.component_id)
        targets: dict[str, dict[str, dict]] = {}
        for consumer, inp in subscribers(wf, me.id):
            g: dict = {"type": inp.grouping.value.upper()}
            if inp.fields:
                g["fields"] = list(inp.fields)
            targets.setdefault(inp.stream, {})[consumer.id] = g
        sources: dict[str, dict[str, dict]] = {}
        for inp in me.inputs:
            g = {"type": inp.grouping.value.upper()}
            if inp.fields:
                g["fields"] = list(inp.fields)
            sources.setdefault(inp.source, {})[inp.stream] = g
        return {
            "task->component": {str(t): c for t, c in self.task_map.task_to_component.items()},
            "taskid": self.task_id,
            "componentid": me.id,
            "stream->target->grouping": targets,
            "streams": [s.id for s in me.streams],
            "stream->outputfields": {s.id: list(s.fields) for s in me.streams},
            "source->stream->grouping": sources,
            "source->stream->fields": _source_fields(wf, me),
        }


def __getattr__(name: str) -> Any:
    # The context's former name, kept for code written against it; it clashed with pyspark's.
    if name == "TaskContext":
        import warnings
        warnings.warn("recovery.model.graph.TaskContext is deprecated: use recovery.ComponentContext",
                      DeprecationWarning, stacklevel=2)
        return ComponentContext
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    TaskContext = ComponentContext   # deprecated: use ComponentContext


def _source_fields(wf: Workflow, me: Component) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for inp in me.inputs:
        s = _stream_of(wf, inp)
        if s is not None:
            out.setdefault(inp.source, {})[inp.stream] = list(s.fields)
    return out


def _stream_of(wf: Workflow, inp: Input):
    try:
        return wf.component(inp.source).stream(inp.stream)
    except KeyError:
        return None
