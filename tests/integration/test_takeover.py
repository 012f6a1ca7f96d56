"""`recover --force` while the first driver is still recovering, on a real Redis
and real Spark: driver A is a `recovery recover` process; once A's recovery reaches a given state
(a round under way, a round whose tasks all committed and that A is settling, a round settled),
driver B takes the run over in this process and recovers it to the end. A must stop at its
next write with one line (exit non-zero, never `completed`), and the sinks must hold exactly
what a failure-free run writes: nothing lost, nothing twice.

The states are read in Redis (done markers, the run record), never waited for by time; the
slowed-down `format` (fault injection `slow`) only makes each state last long enough to be seen
by a poll. A take-over lands wherever A is when its state is seen: every landing must be exact."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recovery.jobs import recover, summary
from recovery.model.workflow import Workflow
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys, ledger, runs
from recovery.tracking.state import state_key
from tests.helpers import wait_for
from tests.integration.conftest import WORKFLOWS, copy_workflow, sink_records, submit
from tests.integration.test_engine import tracking_keys

EVENTS = 400
WAIT = 300.0   # seconds a state may take on a loaded machine (bounds a hang only)
# at `enrich`, 30% of the events fail once (round 1 recovers them, through the slowed-down
# `format`), a third of those (the same tuple ids: choices are by id) fail twice (round 2)
FAILING = {"recovery.inject.once.component": "enrich", "recovery.inject.once.rate": "0.3",
           "recovery.inject.twice.component": "enrich", "recovery.inject.twice.rate": "0.1",
           "recovery.inject.twice.attempts": "2", "recovery.retry.delay.period.ms": "0"}
SLOW_FORMAT = ["-p", "recovery.inject.s.component=format", "-p", "recovery.inject.s.mode=slow",
               "-p", "recovery.inject.s.delay.ms=40"]
SINKS = ("main", "archive")


def bench_pipeline(dest: Path) -> Path:
    """workflows/bench_pipeline.xml with EVENTS events of its generator, under dest."""
    xml = copy_workflow("bench_pipeline", dest)
    spec = importlib.util.spec_from_file_location("bench_pipeline_generate",
                                                  WORKFLOWS / "bench_pipeline" / "generate.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.generate(str(dest / "bench_pipeline" / "data" / "events.csv"), EVENTS)
    return xml


def outputs(folder: Path) -> dict[str, list[str]]:
    return {s: sink_records(folder / "out" / "bench_pipeline" / s) for s in SINKS}


@pytest.fixture(scope="module")
def failure_free(tmp_path_factory) -> dict[str, list[str]]:
    """The sinks of a failure-free run of the same input, on the test kit's engine in this
    process (no Spark job: it writes what a Spark run writes, tests/integration/test_testing_kit.py)."""
    import fakeredis

    from recovery import testing
    folder = tmp_path_factory.mktemp("failure-free")
    run = testing.run_local(workflow_xml.load(bench_pipeline(folder)),
                            fakeredis.FakeRedis(server=fakeredis.FakeServer()), list_sinks=False)
    assert run.summary.status == "completed" and run.summary.complete == EVENTS
    return outputs(folder)


def _round_tasks(client: Any, run_id: str) -> int:
    """How many tasks the run's current round has (its recovery workflow's)."""
    wf = Workflow.model_validate_json(runs.get(client, run_id).current_workflow or "{}")
    return sum(c.parallelism for c in wf.components)


def _committed(client: Any, run_id: str, round_no: int) -> int:
    return int(client.hlen(keys.task_done(run_id, round_no)))


def _at(round_no: int) -> Callable[[Any, str], bool]:
    return lambda client, run_id: runs.get(client, run_id).round == round_no


def _settled(round_no: int) -> Callable[[Any, str], bool]:
    return lambda client, run_id: (runs.get(client, run_id).settled_round or 0) >= round_no


# A's states at which B takes over. A state seen late by a poll (a loaded machine) falls back
# to a later one of round 1 (`or` round 1 settled): the take-over still lands while A works,
# which is all the assertions need; A is then in round 2, which lasts.
POINTS: dict[str, Callable[[Any, str], bool]] = {
    # round 1 under way: some of its tasks committed, not all (`format` is slow)
    "round-1-running": lambda c, r: (_at(1)(c, r) and 0 < _committed(c, r, 1) < _round_tasks(c, r))
    or _settled(1)(c, r),
    # round 1's tasks all committed: A is settling it (folding the ledger, storing its verdict,
    # clearing its done markers and spill folder), or just past that
    "round-1-settling": lambda c, r: (_at(1)(c, r) and 0 < _committed(c, r, 1) == _round_tasks(c, r))
    or _settled(1)(c, r),
    # round 1 settled: A clearing it, telling, summing up, or starting round 2 (a later round
    # under way runs the same code as round 1 under way: no point of its own)
    "round-1-settled": _settled(1),
}


def spawn_recover(redis_url: str, run_id: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    return subprocess.Popen([sys.executable, "-m", "recovery", "recover", run_id, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("point", list(POINTS))
def test_a_forced_take_over_of_a_live_recovery_is_exact_and_stops_the_first_driver(
        point, spark, redis_url, redis_client, tmp_path, failure_free):
    xml = bench_pipeline(tmp_path)
    run_id = f"takeover-{point}"
    s = submit(spark, redis_url, redis_client, xml, FAILING, run_id=run_id)
    assert s.status == "pending" and {p.component for p in s.failed_positions} == {"enrich"}
    first = spawn_recover(redis_url, run_id, *SLOW_FORMAT)
    try:
        def reached() -> bool:
            if POINTS[point](redis_client, run_id):
                return True
            assert first.poll() is None, f"the first driver ended (exit {first.returncode}) before {point}"
            return False
        wait_for(reached, WAIT, f"the first driver's recovery of {run_id} to reach {point}")
        second = recover.recover(spark, redis_client, redis_url, run_id, force=True)
        out, err = first.communicate(timeout=WAIT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # B: the run recovered to the end, exactly
    assert second.status == "completed" and second.pending == 0 and second.in_flight == 0, second
    assert outputs(tmp_path) == failure_free
    final = summary.summarize(redis_client, runs.get(redis_client, run_id))
    assert (final.status, final.complete, final.in_flight) == ("completed", EVENTS, 0)
    assert ledger.pending_roots(redis_client, run_id) == set()
    assert tracking_keys(redis_client, run_id) == {state_key(run_id, "aggregate")}
    assert json.loads(redis_client.hget(runs.record_key(run_id), "summary"))["status"] == "completed"
    # A: one line, a non-zero exit, never a summary saying completed
    assert first.returncode not in (0, None), (out, err)
    assert "completed" not in out, out
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: run {run_id} was taken over by another driver") and \
        last.endswith("this driver stopped without writing into it"), err
    assert "Traceback" not in err
