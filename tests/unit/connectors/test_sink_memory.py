"""A sink task's memory does not grow with its partition: a jsonl sink task, run in a process
whose address space is capped (`resource.setrlimit`), writes a partition several times larger
than the cap, exactly, and acks every tuple."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

LIMIT_MB = 100          # address space the task may add to what the process had after its imports
PARTITION_MB = 400      # bytes of tuple values the task receives: four times the cap
VALUE_BYTES = 1000

TASK = textwrap.dedent('''
    import json, resource, sys

    from recovery import testing
    from recovery.model.run import RunSpec
    from recovery.model.workflow import ClassImpl, Component, Input, SinkImpl, StreamDef, Workflow
    from recovery.runtime import wire
    from recovery.runtime.task import TaskRunner

    folder, n, value_bytes, limit_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    wf = Workflow(name="mem", base_dir=folder, components=(
        Component(id="src", kind="spout", impl=ClassImpl(ref=testing.TESTING_SPOUT),
                  streams=(StreamDef(fields=("n", "text")),)),
        Component(id="out", kind="bolt", impl=SinkImpl(type="jsonl", params=(("path", "out"),)),
                  inputs=(Input(source="src"),))))
    runner = TaskRunner(RunSpec("r", 0, wf.to_task_json(), None, False), "out", 0)

    def records():
        """The partition, made as it is read (as Spark's shuffle reads it): nothing held."""
        for start in range(0, n, 2048):
            recs = [[i + 1, (i + 1,), "default", [i, f"{i:010d}" + "x" * (value_bytes - 10)]]
                    for i in range(start, min(n, start + 2048))]
            yield ("out", 0), wire.pack_rows("src", 0, recs)

    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + limit_mb * 2**20, resource.RLIM_INFINITY))
    for _ in runner.run_bolt(records()):
        pass
    print(json.dumps(runner.stats))
''')


def test_a_sink_task_writes_a_partition_four_times_its_memory_cap(tmp_path):
    n = PARTITION_MB * 2**20 // VALUE_BYTES
    done = subprocess.run([sys.executable, "-c", TASK, str(tmp_path), str(n), str(VALUE_BYTES), str(LIMIT_MB)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads(done.stdout.splitlines()[-1])
    assert (stats["executed"], stats["acked"], stats["failed"]) == (n, n, 0)
    parts = list((tmp_path / "out").iterdir())
    assert len(parts) == 1 and not parts[0].name.startswith(".")
    count, last = 0, None
    with parts[0].open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            assert row["n"] == count and row["text"].startswith(f"{count:010d}")
            count, last = count + 1, row
    assert count == n and last is not None


@pytest.mark.parametrize("limit_mb", [LIMIT_MB])
def test_the_cap_is_a_real_one_the_same_process_cannot_hold_the_partition(tmp_path, limit_mb):
    """(What the test above would meet if the task held its partition: the cap refuses it.)"""
    script = textwrap.dedent('''
        import resource, sys
        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[1]) * 2**20, resource.RLIM_INFINITY))
        held = [bytes(1000) + i.to_bytes(4, "big") for i in range(int(sys.argv[2]))]
    ''')
    n = PARTITION_MB * 2**20 // VALUE_BYTES
    done = subprocess.run([sys.executable, "-c", script, str(limit_mb), str(n)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode != 0 and "MemoryError" in done.stderr
