"""recovery.engine.executors: which Python a cluster's executors run (never the driver's own
interpreter unless chosen), and the one line a failed first job becomes."""
from __future__ import annotations

import sys

import pytest

from recovery.engine.executors import SHIP_A_VENV, chosen_python, executor_failure
from recovery.engine.session import is_local_master


def test_spark_settings_come_first_then_an_exported_python_that_is_not_the_drivers():
    driver = sys.executable
    conf = {"spark.pyspark.python": "./env/bin/python", "spark.executorEnv.PYSPARK_PYTHON": "/opt/b/python"}
    assert chosen_python(conf, {"PYSPARK_PYTHON": "/opt/c/python"}, driver) == "./env/bin/python"
    assert chosen_python({"spark.executorEnv.PYSPARK_PYTHON": "/opt/b/python"}, {}, driver) == "/opt/b/python"
    assert chosen_python({}, {"PYSPARK_PYTHON": "/opt/c/python"}, driver) == "/opt/c/python"


def test_the_drivers_own_interpreter_exported_as_pyspark_python_is_no_choice_for_the_executors(tmp_path):
    # (the Makefile and the driver's own set-up export it: it exists on the driver's host only)
    assert chosen_python({}, {"PYSPARK_PYTHON": sys.executable}, sys.executable) is None
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    assert chosen_python({}, {"PYSPARK_PYTHON": str(link)}, sys.executable) is None
    assert chosen_python({}, {}, sys.executable) is None


@pytest.mark.parametrize("master, local", [("local", True), ("local[2]", True), ("local[2,3]", True),
                                           ("local-cluster[2,1,1024]", False), ("spark://h:7077", False),
                                           ("yarn", False), ("k8s://https://h:6443", False)])
def test_only_local_masters_are_local(master, local):
    assert is_local_master(master) is local


JAVA_TRACE = "\n\tat org.apache.spark.api.python.PythonWorkerFactory.create(PythonWorkerFactory.scala:1)\n"


@pytest.mark.parametrize("text, says", [
    ('org.apache.spark.SparkException: Job aborted: java.io.IOException: Cannot run program '
     '"/home/me/.venv/bin/python": error=13, Permission denied' + JAVA_TRACE,
     "the executors cannot run Python '/home/me/.venv/bin/python' (Permission denied): set --conf "
     "spark.pyspark.python=PATH"),
    ("org.apache.spark.SparkException: Job aborted\n/usr/bin/python3: Error while finding module specification "
     "for 'recovery.engine.worker_daemon' (ModuleNotFoundError: No module named 'recovery')" + JAVA_TRACE,
     "the executors' Python (/usr/bin/python3) has no module 'recovery': install recovery==0.1.0 on the "
     "cluster's Python"),
    ("pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has different "
     "version: 3.10 than that in driver: 3.11" + JAVA_TRACE,
     "the executors' Python (/usr/bin/python3) is Python 3.10, the driver's 3.11"),
])
def test_a_failed_probe_is_one_line_that_says_how_to_fix_it(text, says):
    line = executor_failure(text, "/usr/bin/python3", "0.1.0")
    assert line.startswith(says) and SHIP_A_VENV in line
    assert "\n" not in line and "\tat " not in line and "PythonWorkerFactory" not in line
