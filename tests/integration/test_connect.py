"""Runs under Spark Connect: a real Connect server (pyspark's own start-connect-server.sh, its
Python workers this venv's), reached by the CLI's --remote and by the run API with a Connect
session. Every client runs in a process of its own: a Connect session marks its process as a
Connect client (pyspark's SPARK_CONNECT_MODE_ENABLED), which the test session's classic Spark
must not become."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.model.graph import TaskMap
from recovery.model.xml import parse as workflow_xml
from recovery.runtime.routing import Router
from recovery.tracking import keys, runs
from tests.connect import ConnectServer, OldSparkServer
from tests.helpers import wait_for
from tests.integration.conftest import copy_workflow, sink_records
from tests.integration.test_engine import wordcount_reference

TRANSIENT_SPLIT = {"recovery.inject.s.component": "split", "recovery.inject.s.rate": "0.05",
                   "recovery.retry.delay.period.ms": "10"}


@pytest.fixture(scope="module")
def connect_server() -> Iterator[ConnectServer]:
    server = ConnectServer(sys.executable)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def env_for(redis_url: str, home: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    return dict(env, RECOVERY_REDIS_URL=redis_url, RECOVERY_HOME=str(home), **more)


def cli(env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recovery", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def props(values: dict[str, str]) -> list[str]:
    return [a for k, v in values.items() for a in ("-p", f"{k}={v}")]


def test_submit_and_recover_with_remote_are_exact(connect_server, redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    env = env_for(redis_url, tmp_path / "home")
    got = cli(env, "submit", str(xml), "--remote", connect_server.url, "--json", *props(TRANSIENT_SPLIT))
    assert got.returncode == 0, got.stderr
    submitted = json.loads(got.stdout)
    assert submitted["status"] == "pending" and submitted["failed"] > 0
    assert {p["component"] for p in submitted["failed_positions"]} == {"split"}
    got = cli(env, "recover", submitted["run_id"], "--remote", connect_server.url, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "completed"
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")


def test_spark_remote_names_the_server_and_master_beside_it_is_refused(connect_server, redis_url, redis_client,
                                                                       tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    env = env_for(redis_url, tmp_path / "home", SPARK_REMOTE=connect_server.url)
    got = cli(env, "submit", str(xml), "--master", "local[2]")
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "--master" in got.stderr and "SPARK_REMOTE" in got.stderr
    got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(xml), "--master", "local[2]",
              "--remote", connect_server.url)
    assert got.returncode == 2 and got.stderr.count("\n") == 1 and "--remote and --master" in got.stderr
    assert runs.list_ids(redis_client) == []   # nothing stored
    got = cli(env, "submit", str(xml), "--json")   # SPARK_REMOTE alone: the run goes there
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "completed"


API_SCRIPT = '''
import json, sys
import recovery
from pyspark.sql import SparkSession
url, xml, redis, out = sys.argv[1:5]
spark = SparkSession.builder.remote(url).getOrCreate()
run = recovery.submit(xml, spark=spark, redis=redis, config=json.loads(out))
first = run.status()
run = recovery.Run.get(run.id, redis=redis, spark=spark)
final = run.recover()
print(json.dumps({"run_id": run.id, "failed": first.failed, "status": final.status,
                  "alive": spark.range(5).count(), "remote": type(spark).__module__}))
'''


def test_the_run_api_uses_a_connect_session_as_it_is_and_never_stops_it(connect_server, redis_url, redis_client,
                                                                         tmp_path):
    xml = copy_workflow("fanout", tmp_path)
    script = tmp_path / "api.py"
    script.write_text(API_SCRIPT)
    inject = {"recovery.inject.f.component": "cube", "recovery.inject.f.rate": "0.05",
              "recovery.retry.delay.period.ms": "10", "recovery.max.attempts": "8"}
    got = subprocess.run([sys.executable, str(script), connect_server.url, str(xml), redis_url, json.dumps(inject)],
                         env=env_for(redis_url, tmp_path / "home"), capture_output=True, text=True, timeout=400)
    assert got.returncode == 0, got.stderr[-3000:]
    result = json.loads(got.stdout.strip().splitlines()[-1])
    assert result["failed"] > 0 and result["status"] == "completed"
    assert result["alive"] == 5 and result["remote"].startswith("pyspark.sql.connect")
    from tests.integration.test_engine import fanout_reference
    archive, joined = fanout_reference(tmp_path / "data" / "numbers.txt")
    assert sink_records(tmp_path / "out" / "fanout" / "archive") == archive
    assert sink_records(tmp_path / "out" / "fanout" / "joined") == joined


WHERE_MODULE = '''
import os
from recovery import BasicBolt


class Where(BasicBolt):
    """Each word with the task that got it, and the folder its code was loaded from."""

    def process(self, tup):
        self.emit([tup.values[0], tup.task, os.path.dirname(os.path.abspath(__file__))])
'''

WHERE_XML = '''<workflow xmlns="urn:recovery:workflow:1" name="where">
  <spout id="words" parallelism="2">
    <source type="file" path="words.txt" format="text"/>
    <stream fields="word"/>
  </spout>
  <bolt id="where" parallelism="4" class="where_code.where:Where">
    <input from="words" grouping="fields" fields="word"/>
    <stream fields="word task folder"/>
  </bolt>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out"/>
    <input from="where" grouping="shuffle"/>
  </bolt>
</workflow>
'''


def test_fields_grouping_lands_each_key_where_the_router_says_with_code_the_server_never_had(
        connect_server, redis_url, redis_client, tmp_path):
    folder = tmp_path / "wf"
    (folder / "where_code").mkdir(parents=True)
    (folder / "where_code" / "__init__.py").write_text("")
    (folder / "where_code" / "where.py").write_text(WHERE_MODULE)
    words = [f"w{i % 97}-{i % 13}" for i in range(600)]
    (folder / "words.txt").write_text("\n".join(words) + "\n")
    (folder / "where.xml").write_text(WHERE_XML)
    got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(folder / "where.xml"), "--remote",
              connect_server.url, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "completed"
    records = list(read_jsonl_dir(str(folder / "out")))
    assert sorted(r["word"] for r in records) == sorted(words)
    wf = workflow_xml.load(folder / "where.xml")
    tm = TaskMap.of(wf)
    router = Router(wf, tm, "words")
    for r in records:
        (_, index), _, _ = router.route("default", [r["word"]], 0, None)[0]
        assert r["task"] == tm.task_id("where", index), r
    assert len({r["task"] for r in records}) == 4
    # the workflow's code ran from what shipped with the job, not from its folder
    assert all(not r["folder"].startswith(str(folder)) for r in records), records[0]


def test_a_spark_parquet_source_reads_every_row_once(connect_server, redis_url, redis_client, tmp_path):
    data = tmp_path / "events"
    data.mkdir()
    rows = [{"id": i, "host": f"h{i % 7}", "bytes": i * 10} for i in range(300)]
    for part in range(3):
        pq.write_table(pa.Table.from_pylist(rows[part * 100:(part + 1) * 100]), data / f"part-{part}.parquet")
    xml = tmp_path / "events.xml"
    xml.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="events">
  <spout id="events" parallelism="2">
    <source type="spark" format="parquet" path="events"/>
    <stream fields="id host bytes"/>
  </spout>
  <bolt id="out" parallelism="2">
    <sink type="jsonl" path="out"/>
    <input from="events" grouping="shuffle"/>
  </bolt>
</workflow>
''')
    got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(xml), "--remote", connect_server.url, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["roots"] == 300
    assert sorted(json.dumps(r, sort_keys=True) for r in read_jsonl_dir(str(tmp_path / "out"))) == \
        sorted(json.dumps(r, sort_keys=True) for r in rows)


def test_kill_9_of_the_client_mid_submit_then_recover_with_remote_is_exact(connect_server, redis_url, redis_client,
                                                                           tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    run_id = "connect-killed"
    slow = {"recovery.inject.z.component": "count", "recovery.inject.z.mode": "slow",
            "recovery.inject.z.delay.ms": "2", "recovery.inject.z.rate": "1", **TRANSIENT_SPLIT}
    env = env_for(redis_url, tmp_path / "home")
    proc = subprocess.Popen([sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json",
                             "--remote", connect_server.url, *props(slow)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def split_committed() -> bool:
            assert proc.poll() is None, f"submit ended (exit {proc.returncode}) before a split task committed"
            return any(f.startswith(b"split:") for f in redis_client.hkeys(keys.task_done(run_id, 0)))
        wait_for(split_committed, 300, "a split task of round 0 to commit")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.CRASHED
    got = cli(env, "recover", run_id, "--remote", connect_server.url, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "completed"
    assert sink_records(tmp_path / "out" / "wordcount") == wordcount_reference(tmp_path / "data" / "sentences.txt")


# --- bad input: one line, exit 2, nothing stored -------------------------------------------
def test_an_unreachable_server_is_one_line(redis_url, redis_client, tmp_path):
    from tests.connect import free_port
    xml = copy_workflow("wordcount", tmp_path)
    got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(xml), "--remote", f"sc://127.0.0.1:{free_port()}")
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "cannot reach the Spark Connect server" in got.stderr
    assert runs.list_ids(redis_client) == []


def test_a_server_older_than_spark_4_is_refused(redis_url, redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    old = OldSparkServer("3.5.1")
    old.start()
    try:
        got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(xml), "--remote", old.url, timeout=120)
    finally:
        old.stop()
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "Spark 3.5.1" in got.stderr and "4.0" in got.stderr
    assert runs.list_ids(redis_client) == []


def test_a_server_whose_python_lacks_recovery_says_which_module_and_how_to_install(redis_url, redis_client,
                                                                                  tmp_path):
    bare = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                          text=True, check=True).stdout.strip()
    python = os.path.join(bare, "bin", "python3")   # the venv's base interpreter: no recovery, no pyarrow
    server = ConnectServer(python)
    xml = copy_workflow("wordcount", tmp_path)
    try:
        server.start()
        got = cli(env_for(redis_url, tmp_path / "home"), "submit", str(xml), "--remote", server.url)
    finally:
        server.stop()
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "no module" in got.stderr and "pip install recovery==" in got.stderr
    assert runs.list_ids(redis_client) == []


def test_embedded_redis_with_a_server_on_another_host_is_refused_before_connecting(tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "RECOVERY_REDIS_URL")}
    # (192.0.2.1: a documentation address; the refusal comes before any connection is tried)
    got = cli(dict(env, RECOVERY_HOME=str(tmp_path / "home")), "submit", str(xml), "--remote", "sc://192.0.2.1:15002")
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "embedded Redis" in got.stderr and "--redis" in got.stderr
    assert not list((tmp_path / "home").rglob("*.sock"))   # the embedded server was never started
