"""recovery's test kit: run a workflow in-process with the engine's own semantics, feed
spouts from lists, collect sinks, and compare a run's output with a failure-free run's.

    from recovery.testing import run_local, feed, ABORT, assert_same_output, failure_free_output

The fault-injection properties (`recovery.inject.*`) are in recovery.faults.
"""
from recovery.testing.components import (
    ABORT,
    CRASH,
    EOF,
    DriverCrash,
    ListSink,
    Sentinel,
    TaskAborted,
    TestingSpout,
    fired_key,
    read_list_sink,
)
from recovery.testing.local_spark import LocalJobFailed, LocalSession
from recovery.testing.run import (
    LIST_SINK,
    TESTING_SPOUT,
    LocalRun,
    assert_same_output,
    execute_round,
    failure_free_output,
    feed,
    recover_local,
    run_local,
    sink_multisets,
    with_list_sinks,
    without_failures,
)

__all__ = [
    "ABORT", "CRASH", "EOF", "LIST_SINK", "TESTING_SPOUT", "DriverCrash", "ListSink",
    "LocalJobFailed", "LocalRun", "LocalSession", "Sentinel", "TaskAborted", "TestingSpout",
    "assert_same_output", "execute_round", "failure_free_output", "feed", "fired_key",
    "read_list_sink", "recover_local", "run_local", "sink_multisets", "with_list_sinks",
    "without_failures",
]
