"""A spout that cannot go on fails visibly; nothing of its input is lost silently (docs/protocol.md, docs/guarantees.md).

A shell spout whose program keeps dying gives up after `max_failures` restarts. It used to
report itself exhausted: the run ended `completed` with the rest of its input missing and
only a log line said so. Now its task fails, the round fails in Spark with one line naming
the spout and its last error, and `recover` resumes the round once the program is fixed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from recovery.errors import RunError
from recovery.jobs import recover as jobs_submit
from recovery.tracking import runs
from tests.integration.conftest import sink_records, submit

PROGRAMS = Path(__file__).resolve().parents[1] / "multilang_programs"

# emits 0..4 (message id = value); while the file `broken` exists next to it, it says why on
# stderr and exits on its third `next`, so every fresh program dies at the same place
SPOUT = r'''
import os, sys

from raw_protocol import handshake, read_msg as read, send

handshake("")
n = 0
while True:
    cmd = read()
    if cmd["command"] == "next":
        if n == 2 and os.path.exists("broken"):
            sys.stderr.write("cannot read record 2: disk on fire\n")
            sys.stderr.flush()
            sys.exit(3)
        if n < 5:
            send({"command": "emit", "id": n, "tuple": [n], "need_task_ids": False})
        n += 1
    send({"command": "sync"})
'''
XML = """<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="dying_spout">
  <spout id="numbers" parallelism="1">
    <shell command="python" script="dying_spout.py"/>
    <stream fields="n"/>
  </spout>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/numbers"/>
    <input from="numbers" grouping="shuffle"/>
  </bolt>
</workflow>
"""


def test_a_shell_spout_that_gives_up_fails_the_round_and_recover_resumes_it(spark, redis_url, redis_client, tmp_path):
    (tmp_path / "dying_spout.py").write_text(SPOUT)
    shutil.copy(PROGRAMS / "raw_protocol.py", tmp_path)   # (the spout's protocol helpers)
    (tmp_path / "broken").touch()
    xml = tmp_path / "dying_spout.xml"
    xml.write_text(XML)
    with pytest.raises(RunError) as failed:
        submit(spark, redis_url, redis_client, xml, run_id="dying")
    error = str(failed.value)
    assert "\n" not in error and "failed in Spark" in error
    assert "shell component 'numbers' gave up after" in error
    assert "disk on fire" in error                       # its last error
    assert "recovery recover dying" in error
    rec = runs.get(redis_client, "dying")
    assert runs.status_of(rec) == runs.ERROR and "gave up" in (rec.error or "")
    # nothing of the round was written: records 0 and 1 were emitted, never committed
    assert sink_records(tmp_path / "out" / "numbers") == []

    (tmp_path / "broken").unlink()                       # the cause, fixed
    r = jobs_submit.recover(spark, redis_client, redis_url, "dying")
    assert r.resumed and r.status == runs.COMPLETED
    assert (r.roots, r.complete, r.pending) == (5, 5, 0)
    assert sink_records(tmp_path / "out" / "numbers") == sorted(
        json.dumps({"n": n}) for n in range(5))
