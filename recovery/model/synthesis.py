"""Recovery synthesis: (workflow, failed positions) -> the recovery workflow.

This is step (15-2)/(15-3) of patent CN103699599A (claims 5 and 6): read the failed positions,
put a source reading each position's queue in place of what fed it, and rebuild from the
original topology only what has to run again: the failed processors and everything
downstream of them. Pure functions over the frozen model; no Spark, no Redis.

How a failed position is replaced depends on what failed there:

* a **bolt** C: a new spout ``replay-C`` (parallelism 1) reads C's queue and emits every cached
  tuple *directly* to the task where it failed, with its original id, roots, source component
  and stream. C reads it through an extra ``direct`` input on the stream ``__replay``.
* a **spout** C (its source could not decode a record): C itself is replaced by a spout with
  the same id, parallelism and streams that reads C's queue instead of the original source.

The ``tasks`` parameter of a queue source lists the failed tasks' GLOBAL task ids in the
numbering of the workflow passed to :func:`synthesize` (graph.TaskMap): that is the numbering
the run's queues and failed set use. The recovery workflow has its own numbering (components
were added and removed); :func:`task_translation` maps one to the other.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from recovery.model.graph import TaskMap, downstream
from recovery.model.workflow import Component, Grouping, Input, SourceImpl, StreamDef, Workflow

REPLAY_STREAM = "__replay"
QUEUE_SOURCE = "queue"
RECOVERY_SUFFIX = ".recovery"


def queue_spout_id(component_id: str, taken: set[str]) -> str:
    """The id of the spout replaying `component_id`'s queue: ``replay-<id>``, or
    ``replay-<id>-2``, ``-3``… when that id is already in `taken`."""
    base = f"replay-{component_id}"
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def _queue_impl(component_id: str, tasks: Iterable[int]) -> SourceImpl:
    return SourceImpl(type=QUEUE_SOURCE, params=(
        ("component", component_id),
        ("tasks", " ".join(str(t) for t in sorted(tasks))),
    ))


def _check_failed(wf: Workflow, failed: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    """Validated copy of `failed`: component id -> sorted distinct global task ids."""
    if not failed:
        raise ValueError("no failed positions given: there is nothing to recover")
    ids = {c.id for c in wf.components}
    tasks = TaskMap.of(wf)
    checked: dict[str, list[int]] = {}
    for cid, task_ids in failed.items():
        if cid not in ids:
            raise ValueError(f"failed component {cid!r} is not in workflow {wf.name!r}")
        own = tasks.task_ids(cid)
        got: set[int] = set()
        for t in task_ids:
            if isinstance(t, bool) or not isinstance(t, int):
                raise ValueError(f"task id {t!r} of component {cid!r} is not an integer")
            if t not in own:
                raise ValueError(
                    f"task {t} is not a task of component {cid!r} "
                    f"(its tasks are {own[0]}..{own[-1]})" if len(own) > 1 else
                    f"task {t} is not a task of component {cid!r} (its task is {own[0]})")
            got.add(t)
        if not got:
            raise ValueError(f"no failed task given for component {cid!r}")
        checked[cid] = sorted(got)
    return checked


def recovery_components(wf: Workflow, failed: Mapping[str, Iterable[int]]) -> set[str]:
    """Ids of the original components that run again: the failed ones and everything
    downstream of them. Raises ValueError on bad `failed` (see :func:`synthesize`)."""
    return downstream(wf, _check_failed(wf, failed))


def synthesize(wf: Workflow, failed: Mapping[str, Iterable[int]]) -> Workflow:
    """The recovery workflow for `failed` (component id -> global task ids that failed there).

    Contains: one queue spout per failed bolt (first, in the original order of the bolts),
    then, in the original order, every failed component and everything downstream of it,
    unchanged except that failed spouts read their queue, failed bolts also read their queue
    spout, and every bolt keeps only the inputs whose source is in the recovery workflow.
    Same name plus ``.recovery``, same config and base_dir.

    Raises ValueError for an empty mapping, an unknown component, a task id that is not one
    of the component's, or a component given with no task ids.
    """
    checked = _check_failed(wf, failed)
    keep = downstream(wf, checked)
    taken = {c.id for c in wf.components}

    queue_spouts: list[Component] = []
    replay_input: dict[str, Input] = {}
    for c in wf.components:                      # original order: deterministic ids
        if c.id not in checked or c.is_spout:
            continue
        sid = queue_spout_id(c.id, taken)
        taken.add(sid)
        queue_spouts.append(Component(
            id=sid, kind="spout", parallelism=1,
            impl=_queue_impl(c.id, checked[c.id]),
            streams=(StreamDef(id=REPLAY_STREAM, fields=(), direct=True),),
        ))
        replay_input[c.id] = Input(source=sid, stream=REPLAY_STREAM, grouping=Grouping.DIRECT)

    rest: list[Component] = []
    for c in wf.components:
        if c.id not in keep:
            continue
        if c.is_spout:
            if c.id in checked:
                c = c.model_copy(update={"impl": _queue_impl(c.id, checked[c.id])})
            rest.append(c)
            continue
        inputs = tuple(i for i in c.inputs if i.source in keep)
        if c.id in replay_input:
            inputs += (replay_input[c.id],)
        rest.append(c.model_copy(update={"inputs": inputs}))

    name = wf.name if wf.name.endswith(RECOVERY_SUFFIX) else wf.name + RECOVERY_SUFFIX
    return Workflow(name=name, config=wf.config, components=tuple(queue_spouts + rest),
                    base_dir=wf.base_dir)


def is_queue_spout(c: Component) -> bool:
    """True for a spout that reads a failed position's queue (synthesized, or a replaced
    failed spout)."""
    return c.is_spout and isinstance(c.impl, SourceImpl) and c.impl.type == QUEUE_SOURCE


def queue_tasks(c: Component) -> tuple[str, list[int]]:
    """(component whose queue it reads, the failed global task ids) of a queue spout."""
    if not is_queue_spout(c):
        raise ValueError(f"component {c.id!r} is not a queue spout")
    impl = c.impl
    assert isinstance(impl, SourceImpl)
    return impl.param("component") or "", [int(t) for t in (impl.param("tasks") or "").split()]


def task_translation(original: Workflow, recovery: Workflow) -> dict[int, int]:
    """Global task id in `recovery`'s numbering -> the same task's id in `original`'s, for
    every task of a component both have (queue spouts added by synthesis have none)."""
    orig, rec = TaskMap.of(original), TaskMap.of(recovery)
    out: dict[int, int] = {}
    for cid in rec.first:
        if cid in orig.first and orig.count[cid] == rec.count[cid]:
            for i in range(rec.count[cid]):
                out[rec.task_id(cid, i)] = orig.task_id(cid, i)
    return out


def _plural(n: int) -> str:
    return f"{n} tuple" if n == 1 else f"{n} tuples"


def plan_marks(wf: Workflow, failed_counts: Mapping[tuple[str, int], int]
               ) -> tuple[dict[str, str], set[str]]:
    """What to pass to render.render(wf, marks=..., dim=...) to draw a recovery plan on the
    original topology: `marks` labels each failed component with its failed tasks and how many
    tuples each holds ("FAILED task 3: 12 tuples, task 4: 1 tuple"); `dim` is every component
    that does NOT run again. No failed positions: no marks, everything dim."""
    if not failed_counts:
        return {}, {c.id for c in wf.components}
    by_component: dict[str, dict[int, int]] = {}
    for key, n in failed_counts.items():
        try:
            cid, task = key
        except (TypeError, ValueError):
            raise ValueError(f"failed position {key!r} is not a (component, task) pair") from None
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"tuple count {n!r} at {cid!r} task {task} is not a count")
        by_component.setdefault(cid, {})[task] = n
    rerun = recovery_components(wf, {cid: list(ts) for cid, ts in by_component.items()})
    marks = {
        c.id: "FAILED " + ", ".join(f"task {t}: {_plural(n)}"
                                    for t, n in sorted(by_component[c.id].items()))
        for c in wf.components if c.id in by_component
    }
    return marks, {c.id for c in wf.components} - rerun
