"""A small workflow and run records on fakeredis, shared by the run-record and jobs unit tests."""
from __future__ import annotations

import subprocess
import sys

from recovery.model.workflow import Component, Input, SinkImpl, SourceImpl, StreamDef, Workflow
from recovery.tracking import ledger, runs
from recovery.tracking.ledger import bucket_key

WF = Workflow(name="wf", components=(
    Component(id="src", kind="spout", parallelism=1, impl=SourceImpl(type="file", params=(("path", "x"),)),
              streams=(StreamDef(id="default", fields=("line",)),)),
    Component(id="out", kind="bolt", parallelism=1, impl=SinkImpl(type="jsonl", params=(("path", "o"),)),
              inputs=(Input(source="src", grouping="shuffle"),)),
    Component(id="mid", kind="bolt", parallelism=1, impl=SinkImpl(type="jsonl", params=(("path", "m"),)),
              inputs=(Input(source="src", grouping="shuffle"),)),
))


def create_run(client, run_id="r1"):
    return runs.create(client, run_id, "<xml/>", WF.to_task_json(), None, "local", True)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def ledger_pending(client, run_id, roots):
    """Ledger entries of a task that committed: these roots are pending (in flight)."""
    for b, blob in enumerate(ledger.pack_xors({r: r * 7 + 1 for r in roots})):
        if blob:
            client.hset(bucket_key(run_id, b), "0:src:0", blob)
