"""The executors' Python on a cluster: which interpreter they run, and a first job that checks
it imports `recovery` at the driver's version, failing in one line that says how to fix it.

Which interpreter, first set first:
1. `spark.pyspark.python` (`--conf`), as spark-submit honours it;
2. `spark.executorEnv.PYSPARK_PYTHON` (`--conf`);
3. PYSPARK_PYTHON in the driver's environment when it names another interpreter than the
   driver's own (the driver's own is what a local set-up exports, and no other host has it);
4. the workers' own PYSPARK_PYTHON, read on an executor by a JVM-only job (no Python needed);
5. `python3`, Spark's default.
A relative path (`./env/bin/python` of a `spark.archives` venv) is resolved on the executors.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from recovery.errors import RecoveryError

log = logging.getLogger(__name__)

SPARK_DEFAULT_PYTHON = "python3"
SHIP_A_VENV = ("or ship a packed venv: --conf spark.archives=env.tar.gz#env "
               "--conf spark.pyspark.python=./env/bin/python (docs/cluster.md)")


class ExecutorPythonError(RecoveryError):
    """The executors cannot run recovery's tasks: their Python cannot start, lacks `recovery`,
    or has another version of it (or of Python) than the driver."""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def chosen_python(conf: Mapping[str, str], env: Mapping[str, str], driver_python: str) -> str | None:
    """The interpreter the user chose for the executors (module doc, 1 to 3), or None: ask the
    workers. A PYSPARK_PYTHON that names the driver's own interpreter is no choice for them."""
    for key in ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON"):
        if conf.get(key):
            return conf[key]
    exported = env.get("PYSPARK_PYTHON")
    if exported and not _same_file(exported, driver_python):
        return exported
    return None


def workers_python(spark: Any) -> str | None:
    """PYSPARK_PYTHON in an executor's environment (the worker's own, or
    spark.executorEnv.PYSPARK_PYTHON), read by a JVM-only job; None when unset."""
    try:
        rows = spark.range(1, numPartitions=1).selectExpr(
            "reflect('java.lang.System', 'getenv', 'PYSPARK_PYTHON') AS python").collect()
    except Exception as err:   # a JVM job cannot fail here but by the cluster being unusable
        raise ExecutorPythonError(f"the Spark cluster at {spark.conf.get('spark.master', '?')} cannot run a job: "
                                  f"{_last_error_line(str(err))}") from None
    value = rows[0]["python"] if rows else None
    return value or None


def probe(batches: Iterator[Any]) -> Iterator[Any]:
    """Runs on an executor (mapInArrow): recovery's version, Python's major.minor, the interpreter."""
    import pyarrow as pa

    import recovery
    for _ in batches:
        pass
    row = [recovery.__version__, "%d.%d" % sys.version_info[:2], sys.executable]
    yield pa.RecordBatch.from_arrays([pa.array([v]) for v in row], names=["version", "python", "executable"])


def check(spark: Any, python: str) -> None:
    """A one-task job on the executors: they must import `recovery` at the driver's version.
    Raises ExecutorPythonError, one line naming the interpreter and the fix."""
    import recovery
    want = recovery.__version__
    install = f"install recovery=={want} on the cluster's Python ({python}), {SHIP_A_VENV}"
    try:
        got = spark.range(0, 1, 1, 1).mapInArrow(probe, "version string, python string, executable string").collect()
    except Exception as err:
        raise ExecutorPythonError(executor_failure(str(err), python, want)) from None
    version, py, executable = got[0]
    if version != want:
        raise ExecutorPythonError(f"the executors' Python ({executable}) has recovery {version}, the driver "
                                  f"{want}: {install}")
    log.info("executors run %s (Python %s, recovery %s)", executable, py, version)


def executor_failure(text: str, python: str, version: str) -> str:
    """One line for a failed probe job, from Spark's error text (never its stack trace)."""
    install = f"install recovery=={version} on the cluster's Python, {SHIP_A_VENV}"
    cannot_run = re.search(r'Cannot run program "([^"]*)"(?:[^\n]*?error=\d+, )?([^\n)]*)', text)
    if cannot_run:
        why = cannot_run[2].strip(" :,") or "cannot be run"
        return (f"the executors cannot run Python {cannot_run[1]!r} ({why}): set --conf "
                f"spark.pyspark.python=PATH to a Python the workers have, {SHIP_A_VENV}")
    if re.search(r"No module named '?recovery'?", text):
        return f"the executors' Python ({python}) has no module 'recovery': {install}"
    different = re.search(r"Python in worker has different version:? \(?([\d.]+)\)? than that in driver:? \(?([\d.]+)",
                          text)
    if different:
        return (f"the executors' Python ({python}) is Python {different[1]}, the driver's {different[2]}: "
                f"use the same Python version on both, {SHIP_A_VENV}")
    return f"the executors' Python ({python}) cannot run recovery's tasks: {_last_error_line(text)} ({install})"


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if ("Error" in line or "Exception" in line) and ":" in line and not line.startswith("at "):
            return line[:300]
    return (lines[0] if lines else "unknown error")[:300]
