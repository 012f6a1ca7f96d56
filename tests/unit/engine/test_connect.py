"""Spark Connect sessions without a server: the URL, the choice between --remote, SPARK_REMOTE
and --master, and the one-line refusals of a server that cannot run recovery's tasks."""
from __future__ import annotations

import pytest

from recovery.engine import connect
from recovery.errors import RecoveryError
from recovery.run import SparkChoice


def test_the_url_is_read_as_sparks_client_reads_it():
    assert connect.endpoint("sc://127.0.0.1:15010") == ("127.0.0.1", 15010)
    assert connect.endpoint("sc://host") == ("host", 15002)
    with pytest.raises(connect.ConnectError, match=r"^--remote http://x: not a Spark Connect URL .*sc://HOST:PORT$"):
        connect.endpoint("http://x")


def test_a_loopback_server_counts_as_this_hosts():
    assert connect.on_this_host("sc://127.0.0.1:1") and connect.on_this_host("sc://localhost:1")
    assert connect.on_this_host("local[2]")
    assert not connect.on_this_host("sc://192.0.2.1:15002")


def test_remote_and_master_together_are_refused(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    with pytest.raises(RecoveryError, match="^--remote and --master both given"):
        SparkChoice(master="local[2]", remote="sc://127.0.0.1:1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    with pytest.raises(RecoveryError, match=r"^--master local\[2\] given while \$SPARK_REMOTE"):
        SparkChoice(master="local[2]")
    choice = SparkChoice()
    assert choice.remote == "sc://127.0.0.1:1" and choice.effective_master == "local[*]"
    assert SparkChoice(remote="sc://192.0.2.1:15002").effective_master == "sc://192.0.2.1:15002"


def test_a_missing_module_on_the_server_is_named_with_how_to_install():
    text = "pyspark.errors.exceptions.connect.PythonException: \n  ModuleNotFoundError: No module named 'recovery'\n"
    line = connect.server_failure(text, "sc://h:1", "pip install recovery==0.1.0")
    assert line == "the Spark Connect server's Python workers have no module 'recovery': pip install recovery==0.1.0"
    line = connect.server_failure("No module named 'msgpack'", "sc://h:1", "pip install recovery==0.1.0")
    assert "'msgpack', which recovery needs" in line and "\n" not in line


class _Rows:
    def __init__(self, row):
        self.row = row

    def range(self, *args):
        return self

    def mapInArrow(self, f, schema):
        return self

    def collect(self):
        return [self.row]


def test_executors_that_cannot_reach_redis_are_said_in_one_line():
    import sys

    import recovery
    py = "%d.%d" % sys.version_info[:2]
    spark = _Rows((recovery.__version__, py, "/srv/python", "", "ConnectionError: Error 111 connecting"))
    with pytest.raises(connect.ConnectError, match=r"^the executors of the Spark Connect server at .* cannot reach "
                                                   r"Redis \(ConnectionError: .*\): give --redis"):
        connect.check_server(spark, "unix:///tmp/none.sock")
    spark = _Rows(("0.0.1", py, "/srv/python", "", ""))
    with pytest.raises(connect.ConnectError, match="has recovery 0.0.1"):
        connect.check_server(spark, None)


def test_the_probe_says_what_reaching_redis_said(tmp_path):
    import pyarrow as pa
    batches = connect._probe(f"unix://{tmp_path}/no.sock", iter([pa.RecordBatch.from_pylist([{"id": 0}])]))
    row = next(batches).to_pylist()[0]
    assert row["missing"] == "" and row["redis"]
