"""workflows/cdn_logs_batch.xml does cdn_logs's job with batch components: for the same input,
the same failed positions and queued tuples (ids, roots, values, errors), the same sink
records under the same tuple ids, the same keyed state, before and after recovery."""
from __future__ import annotations

import sys
from pathlib import Path

import msgpack
import pytest

from recovery import BatchBolt, testing
from recovery.api.loader import component_class
from recovery.api.runnable import validate_file
from recovery.model.xml.parse import load
from recovery.testing.components import sink_key
from recovery.tracking.state import state_key

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"


@pytest.fixture(scope="module", autouse=True)
def _workflows_on_path():
    sys.path.insert(0, str(WORKFLOWS))
    yield
    sys.path.remove(str(WORKFLOWS))


def test_the_batch_workflow_validates_and_its_bolts_are_batch_bolts():
    wf, warnings = validate_file(WORKFLOWS / "cdn_logs_batch.xml")
    assert warnings == []
    for cid in ("split", "normalize", "aggregate"):
        assert issubclass(component_class(wf, cid), BatchBolt)


def _observed(run: testing.LocalRun) -> dict:
    def tuples(ts):
        return sorted((t.component, t.task, t.id, tuple(t.roots), repr(t.values),
                       t.error, t.attempt) for t in ts)
    state = {k: msgpack.unpackb(v) for k, v in run.client.hgetall(state_key(run.run_id, "aggregate")).items()}
    sink = sorted((msgpack.unpackb(k), msgpack.unpackb(v))
                  for k, v in run.client.hgetall(sink_key(run.run_id, "output")).items())
    return {"queued": tuples(run.failed_tuples()), "dead": tuples(run.dead_tuples()), "state": state,
            "sink": sink, "status": run.status}


@pytest.mark.parametrize("invalid", [None, 0.3])
def test_cdn_logs_batch_gives_what_cdn_logs_gives(fake_redis, tmp_path, invalid):
    lines = None
    if invalid is not None:   # more bad records than the shipped data has, of every kind
        from cdn_logs.generate import lines as generated
        lines = generated(400, seed=11, invalid=invalid)
        lines[5] = lines[5].replace("HTTP/1.1\" 200", "HTTP/1.1\" 999")   # a status out of range
    runs = {}
    for name in ("cdn_logs", "cdn_logs_batch"):
        wf = load(WORKFLOWS / f"{name}.xml").with_config({"recovery.batch.size": "64",
                                                          "recovery.retry.delay.period.ms": "0"})
        if lines is not None:
            inputs = {"logs": lines}
        else:
            inputs = {"logs": (WORKFLOWS / "data" / "cdn.log").read_text().splitlines()}
        runs[name] = testing.run_local(wf.model_copy(update={"name": "cdn"}), fake_redis, inputs=inputs,
                                       run_id=f"r-{name}")
    row, batch = (_observed(runs[n]) for n in ("cdn_logs", "cdn_logs_batch"))
    assert row["queued"] and batch == row
    for run in runs.values():
        testing.recover_local(run)
    row, batch = (_observed(runs[n]) for n in ("cdn_logs", "cdn_logs_batch"))
    assert row["dead"] and batch == row


def test_the_file_source_feeding_batch_bolts_reads_in_blocks_and_gives_the_row_ids(fake_redis):
    """Without a fed spout: cdn_logs_batch's file source reads blocks of lines (it feeds only
    batch bolts) and must derive the row source's root and tuple ids, so every record and
    queued tuple is the same, under the same id, before and after either recovery."""
    runs = {}
    for name in ("cdn_logs", "cdn_logs_batch"):
        wf = load(WORKFLOWS / f"{name}.xml").with_config({"recovery.batch.size": "100",
                                                          "recovery.retry.delay.period.ms": "0"})
        runs[name] = testing.run_local(wf.model_copy(update={"name": "cdn"}), fake_redis, run_id=f"f-{name}")
    row, batch = (_observed(runs[n]) for n in ("cdn_logs", "cdn_logs_batch"))
    assert len(row["queued"]) == 20 and len(row["sink"]) == 980 and batch == row
    assert runs["cdn_logs_batch"].summary.components["logs"].roots == 1000
    for run in runs.values():
        testing.recover_local(run)
    row, batch = (_observed(runs[n]) for n in ("cdn_logs", "cdn_logs_batch"))
    assert batch == row


def test_cdn_logs_batch_sinks_do_not_depend_on_arrival_order(fake_redis):
    """The test kit's arrival orders split Arrow chunks into one-row chunks too."""
    import random
    wf = load(WORKFLOWS / "cdn_logs_batch.xml").with_config({"recovery.batch.size": "64"})
    reference = testing.run_local(wf, fake_redis)
    shuffled = testing.run_local(wf, fake_redis, arrival=random.Random(3))
    testing.assert_same_output(shuffled, reference)
