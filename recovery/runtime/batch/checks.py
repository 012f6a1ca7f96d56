"""Which components the batch runtime runs: BatchBolts, BatchSpouts, the built-in sinks they
alone feed, and the text file sources that feed batch components only."""
from __future__ import annotations

from recovery.api.batch import BatchBolt, BatchSpout
from recovery.api.loader import load_class
from recovery.connectors import sinks
from recovery.model.graph import subscribers
from recovery.model.workflow import Component, Workflow

_is_batch: dict[tuple[str | None, str], bool] = {}


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
