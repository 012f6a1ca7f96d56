"""jobs.settle: a round that raises. A failed Spark job is one line naming its cause; an
exception from our own driver code is not passed off as a Spark failure and keeps its traceback."""
from __future__ import annotations

import logging

import pytest

from recovery import Spout, testing
from recovery.engine import rounds
from recovery.jobs import settle
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.tracking import runs


class Broken(Spout):
    """A spout that cannot open: its task fails, and so the (local) Spark job."""

    def open(self, conf, context):
        raise RuntimeError("no spout today")

    def next_tuple(self):
        pass


def pipeline(spout: str = testing.TESTING_SPOUT) -> Workflow:
    return Workflow(name="submit-errors", components=(
        Component(id="words", kind="spout", impl=ClassImpl(ref=spout), streams=(StreamDef(fields=("word",)),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK), inputs=(Input(source="words"),))))


def test_a_bug_in_the_driver_is_not_reported_as_a_spark_failure(fake_redis, monkeypatch, caplog):
    def buggy_build(spark, wf, spec):
        raise TypeError("build() got confused")
    monkeypatch.setattr(rounds, "build", buggy_build)
    caplog.set_level(logging.DEBUG, logger="recovery")
    run = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a"]})
    assert run.interrupted == "error" and run.status == runs.ERROR
    assert "failed in Spark" not in run.error
    assert "failed in the driver" in run.error and "TypeError: build() got confused" in run.error
    assert "\n" not in run.error
    logged = [r for r in caplog.records if r.name == "recovery.jobs.settle" and r.exc_info]
    assert logged and logged[0].exc_info[0] is TypeError
    assert "buggy_build" in caplog.text   # the traceback down to the raising frame


def test_a_failed_spark_job_is_still_one_line_naming_the_task_error(fake_redis, caplog):
    caplog.set_level(logging.DEBUG, logger="recovery")
    run = testing.run_local(pipeline(f"{__name__}:Broken"), fake_redis)
    assert run.interrupted == "error"
    assert "failed in Spark" in run.error and "no spout today" in run.error
    assert any(r.exc_info for r in caplog.records if r.name == "recovery.jobs.settle")


@pytest.mark.parametrize(("module", "spark"), [
    ("pyspark.errors.exceptions.captured", True), ("py4j.protocol", True), ("recovery.engine.rounds", False)])
def test_spark_failures_are_told_by_module_without_importing_pyspark(module, spark):
    err = type("SomeError", (Exception,), {"__module__": module})("boom")
    assert settle.is_spark_failure(err) is spark
