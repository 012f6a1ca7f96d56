"""Helpers shared by the benches, one module per concern, all importable from here (`from bench
import _common as C`):

- bench/_env.py: a temporary home with one Spark session and one Redis, workflow copies in a
  temporary folder, submitting them, and sink contents as multisets;
- bench/_meters.py: CPU seconds of a process tree and of Redis's server, Redis's memory;
- bench/_baselines.py: a plain-PySpark runner of a workflow's component classes, and the
  hand-written PySpark job of the same functions;
- bench/_cold.py: a cold `recovery submit` in a fresh process;
- bench/_printing.py: medians, verdicts and small tables;
- bench/_machine.py: what the bench and everyone else used of the machine during a run;
- bench/_results.py: each bench's results as JSON (`--json PATH`, by default
  bench/results/<name>.json; bench/plot.py draws them).

Nothing here writes into the checkout: RECOVERY_HOME, Spark's temporary folders, the embedded
Redis's state, the generated input and every sink live under one temporary folder that is
removed at the end (unless --keep).
"""
from __future__ import annotations

from bench._baselines import (  # noqa: F401 (the benches' names, importable from here)
    aggregate_records,
    parse_normalize,
    run_handwritten,
    run_plain,
)
from bench._cold import (  # noqa: F401 (the benches' names, importable from here)
    COLD_GOAL_S,
    COLD_LINES,
    PR_SET_CHILD_SUBREAPER,
    cli,
    cold_submit,
    print_cold_submit,
    reap_descendants,
    set_subreaper,
)
from bench._env import (  # noqa: F401 (the benches' names, importable from here)
    CHAIN_MODES,
    CHAINING,
    REPO,
    WORKFLOWS,
    bench_home,
    copy_workflow,
    load_workflow,
    redis_for,
    scratch,
    sink_multiset,
    spark_session,
    submit,
)
from bench._machine import (  # noqa: F401 (the benches' names, importable from here)
    BUSY_SHARE,
    MONITOR_SECONDS,
    MachineMonitor,
    count_as_bench,
    process_table,
    sigchld_ignored,
    start_monitor,
    stat_fields,
)
from bench._meters import (  # noqa: F401 (the benches' names, importable from here)
    CpuMeter,
    MemorySampler,
    Poller,
    redis_cpu_seconds,
    redis_used_memory,
    tree_cpu_seconds,
)
from bench._printing import (  # noqa: F401 (the benches' names, importable from here)
    median,
    table,
    timed,
    verdict,
)
from bench._results import (  # noqa: F401 (the benches' names, importable from here)
    RESULTS,
    RESULTS_SCHEMA,
    Results,
    add_result_args,
    machine_facts,
    reproducing_command,
    result_path,
    version,
)
