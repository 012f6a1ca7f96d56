"""Preview against recover on random workflows, in process (the test kit's engine, fakeredis):
a line of 1 to 3 bolts of random groupings and parallelism that fail, raise, fail only once, ack
early, hold or emit unanchored by value, into a jsonl sink. The sandboxed round's failures are
those the next `recover` round leaves (position, id, error, dead or queued), and its sink gets
as many records as the preview counted, the sample among them."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import fakeredis
from hypothesis import HealthCheck, given, settings

from recovery.jobs import sandbox
from recovery.model.failed import FailedTuple
from recovery.model.workflow import SinkImpl, Workflow
from recovery.runtime import task
from recovery.testing import LocalSession, recover_local, run_local
from recovery.tracking import queue as failed_queue
from tests.unit.runtime.test_chunks import shaped_workflows


def outcome(tup: FailedTuple) -> tuple:
    return tup.component, tup.task, tup.id, tup.dead, tup.error


def with_jsonl_sink(wf: Workflow, folder: str) -> Workflow:
    comps = tuple(c.model_copy(update={"impl": SinkImpl(type="jsonl", params=(("path", folder),))})
                  if c.id == "sink" else c for c in wf.components)
    return wf.model_copy(update={"components": comps})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped_workflows())
def test_a_preview_says_what_the_next_recover_round_does(drawn: tuple[Workflow, Any]):
    with tempfile.TemporaryDirectory(prefix="preview-sink-") as folder:
        check_preview_against_recover(with_jsonl_sink(drawn[0], folder), folder)


def check_preview_against_recover(wf: Workflow, folder: str) -> None:
    client = fakeredis.FakeRedis()
    run = run_local(wf, client, list_sinks=False)
    dead_before = {outcome(t) for t in failed_queue.dead_letters(client, run.run_id)}
    queued = sum(n for _, _, n in failed_queue.counts(client, run.run_id))

    with task.injected_client(run.redis_url, client):
        previewed = sandbox.run_sandboxed(LocalSession(), client, run.redis_url, run.run_id)
    recover_local(run, max_rounds=1)

    assert len(previewed.replayed) == queued
    after = {outcome(t) for c, t in failed_queue.positions(client, run.run_id)
             for t in failed_queue.read(client, run.run_id, c, t)}
    after |= {outcome(t) for t in failed_queue.dead_letters(client, run.run_id)} - dead_before
    assert sorted({outcome(t) for t in previewed.failures}) == sorted(after)
    for sink in previewed.sinks:
        written = [json.loads(line) for part in sorted(Path(folder).glob(f"part-{run.run_id}-r0001-sink-t*.jsonl"))
                   for line in part.read_text().splitlines() if line]
        assert sink.records == len(written)
        assert all(rec in written for rec in sink.sample)
