"""Each component's execution mode (model.graph.Mode), decided here and nowhere else: from what
implements the component (its class, a shell program, a built-in source or sink), its settings
(tick tuples) and the components it reads from or feeds (a sink fed by batch components only
writes their columns; a text file source feeding batch components only reads Arrow batches).

The chain plan stores the modes (plan_of), and a task dispatches on its component's
(runtime.stage). One switch is made in mid-task, by the chunk mode only, and counted in the
component's stats as `per_tuple_rows`: the rows it ran one at a time, by the row mode's loop —
a chunk of fewer than chunks.SMALL_CHUNK rows (a recovery round's replays come a few at a time),
and every row from the one on which a Bolt kept its tuple unacked past process(), or emitted
other than anchored to it alone (then the task goes on tuple by tuple).
"""
from __future__ import annotations

from recovery.api.batch import BatchBolt, BatchSpout
from recovery.api.loader import ClassLoadError, load_class
from recovery.connectors import sinks
from recovery.model import config as config_decl
from recovery.model.graph import ChainPlan, Mode, subscribers
from recovery.model.workflow import Component, Workflow
from recovery.runtime import chunks

__all__ = ["Mode", "decide", "plan_of", "shown_modes", "is_batch_component", "is_batch_sink", "reads_in_batches"]

_is_batch: dict[tuple[str | None, str], bool] = {}


def decide(comp: Component, wf: Workflow) -> Mode:
    """`comp`'s execution mode in `wf` (the workflow a round runs: a recovery round's too)."""
    impl = comp.impl
    if comp.is_spout:
        if impl.kind == "source":
            if reads_in_batches(comp, wf):
                return Mode.BATCH_SOURCE
            # the file source hands its lines over a block at a time; with the chunk mode off
            # (what the equivalence tests compare it with) one record at a time
            return Mode.BLOCK_SOURCE if impl.type == "file" and chunks.ENABLED else Mode.SOURCE
        return Mode.BATCH_SPOUT if is_batch_component(comp, wf) else Mode.SPOUT
    if impl.kind == "sink":
        # a row sink holds every tuple until its commit: nothing a chunk could settle early
        return Mode.BATCH_SINK if is_batch_sink(comp, wf) else Mode.SINK
    if is_batch_component(comp, wf):
        return Mode.BATCH
    # a shell bolt's program reads tuples one at a time; tick tuples come between tuples
    if impl.kind == "shell" or config_decl.settings(wf.conf(comp.id)).tick_tuple_freq_secs > 0:
        return Mode.ROW
    return Mode.CHUNK if chunks.ENABLED else Mode.ROW


def plan_of(wf: Workflow) -> ChainPlan:
    """`wf`'s chain plan with every component's mode."""
    return ChainPlan.of_workflow(wf, lambda comp: decide(comp, wf))


def shown_modes(wf: Workflow) -> dict[str, Mode | None]:
    """Every component's mode as drawings and reports show it: None for one whose mode depends
    on a class that does not load here (`validate` warns of it; a run refuses it)."""
    shown: dict[str, Mode | None] = {}
    for comp in wf.components:
        try:
            shown[comp.id] = decide(comp, wf)
        except ClassLoadError:
            shown[comp.id] = None
    return shown


def is_batch_component(comp: Component, wf: Workflow) -> bool:
    """Whether `comp` is implemented by a BatchBolt or BatchSpout subclass (its class
    decides), or is a built-in sink fed by batch components only (is_batch_sink)."""
    impl = comp.impl
    if impl.kind == "sink":
        return is_batch_sink(comp, wf)
    if impl.kind != "class":
        return False
    key = (wf.code_folder, impl.ref)
    got = _is_batch.get(key)
    if got is None:
        got = _is_batch[key] = issubclass(load_class(impl.ref, wf.code_folder), (BatchBolt, BatchSpout))
    return got


def is_batch_sink(comp: Component, wf: Workflow) -> bool:
    """A built-in sink whose every input is a batch component: it takes their Arrow chunks and
    writes the columns as they are (runtime.batch.sink). A sink fed by a row component (or, in
    a recovery round, by its own queue) stays a row sink; both write the same bytes."""
    if comp.impl.kind != "sink" or comp.impl.type not in sinks.SINKS or not comp.inputs:
        return False
    try:
        return all(is_batch_component(wf.component(i.source), wf) for i in comp.inputs)
    except KeyError:   # an input from outside this round's workflow
        return False


def reads_in_batches(comp: Component, wf: Workflow) -> bool:
    """A text file source whose every subscriber is a batch component: it reads and emits a
    block of lines at a time (connectors.file_blocks)."""
    impl = comp.impl
    if impl.kind != "source" or impl.type != "file" or impl.param("format", "text") not in ("text", ""):
        return False
    consumers = [c for c, _ in subscribers(wf, comp.id)]
    return bool(consumers) and all(is_batch_component(c, wf) for c in consumers)
