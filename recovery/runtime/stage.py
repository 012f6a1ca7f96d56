"""The task function of a stage: task `index` of one component, or of a chain's members
(runtime.chain), dispatched on each component's execution mode as the chain plan stores it
(runtime.modes). The engine calls stage_task in every Spark task of a round."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from recovery.connectors import sources
from recovery.model.graph import Mode
from recovery.model.run import RunSpec
from recovery.model.workflow import SourceImpl
from recovery.runtime.batch import BatchTaskRunner
from recovery.runtime.chain import ChainTask
from recovery.runtime.collector import Output
from recovery.runtime.task import TaskRunner, chain_plan_of


def start(spec: RunSpec, component_id: str, index: int, it: Any) -> tuple[TaskRunner, Iterator[Output]]:
    """One component's task: (its runner, the iterator of its output). `it` is its input: a
    bolt's chunks; for a spout nothing, or for a spark source the chunks of the reader
    partitions this task owns."""
    mode = chain_plan_of(spec).mode(component_id)
    if mode is Mode.BATCH_SOURCE:   # (its runner is the batch source's BatchSourceRunner)
        batch_runner = BatchTaskRunner(spec, component_id, index)
        impl = batch_runner.comp.impl
        assert isinstance(impl, SourceImpl)
        return batch_runner, batch_runner.run_spout(sources.batch_source_for(impl.type))
    runner = (BatchTaskRunner if mode.is_batch else TaskRunner)(spec, component_id, index)
    impl = runner.comp.impl
    if mode in (Mode.SOURCE, Mode.BLOCK_SOURCE):
        assert isinstance(impl, SourceImpl)
        return runner, runner.run_spout(sources.source_for(impl.type, it))
    if mode in (Mode.SPOUT, Mode.BATCH_SPOUT):
        return runner, runner.run_spout(None)
    return runner, runner.run_bolt(it)


def stage_task(spec: RunSpec, members: tuple[str, ...], index: int, it: Any) -> Iterator[Output]:
    """Task `index` of a stage: one component's task, or a chain's (runtime.chain)."""
    if len(members) == 1:
        return start(spec, members[0], index, it)[1]
    chain = chain_plan_of(spec).chain_of(members[0])
    return ChainTask(chain, index, lambda cid, feed: start(spec, cid, index, feed)).run(it)
