"""The stage task (runtime.stage) runs each component by the mode its chain plan stores: the
batch modes in a BatchTaskRunner, the others in a TaskRunner."""
from __future__ import annotations

from pathlib import Path

import pytest

from recovery.model.run import RunSpec
from recovery.model.xml.parse import load
from recovery.runtime import stage
from recovery.runtime.batch import BatchTaskRunner
from recovery.runtime.task import TaskRunner, chain_plan_of

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"


@pytest.mark.parametrize("name", ["cdn_logs", "cdn_logs_batch", "wordcount_shell"])
def test_each_component_gets_the_runner_of_its_mode(name):
    wf = load(str(WORKFLOWS / f"{name}.xml"), check_paths=False)
    spec = RunSpec("r", 0, wf.to_task_json(), None, False)
    plan = chain_plan_of(spec)
    for comp in wf.components:
        runner, output = stage.start(spec, comp.id, 0, iter(()))   # (its output not pulled: nothing runs)
        assert runner.mode is plan.mode(comp.id)
        assert type(runner) is (BatchTaskRunner if runner.mode.is_batch else TaskRunner)
        output.close()
