"""A Spark standalone cluster whose executors share nothing with the driver but shared storage:
the worker runs as another OS user, from its own folder, with its own Python environment (a
venv of the system's Python with `recovery` and its dependencies installed, as a cluster image
has them), and cannot read the driver's workflow folder, RECOVERY_HOME, or run its Python.

On it: a workflow with a Python bolt (a package of the workflow's folder), a multilang shell
bolt (storm.py beside its script), a Spark-reader Parquet source and jsonl and Delta sinks on a
folder both users reach, its spill on the S3 endpoint, Redis over TCP with a password; injected
failures, the driver killed with SIGKILL mid-round, then `recover`: every record exactly once.
And an executor Python without `recovery`: one line saying how to fix it.

One cluster (tests/clusters.py: SparkStandalone) for the module; each CLI call is one Spark
application.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

import pytest

from recovery.controlplane.connection import connect
from recovery.engine.executors import SHIP_A_VENV
from recovery.tracking import runs
from tests.clusters import (
    WORKER_USER,
    RedisWithPassword,
    SparkStandalone,
    as_user_can,
    build_worker_python,
)
from tests.integration.conftest import kill_when_round_0, sink_records

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800),
              pytest.mark.skipif(os.geteuid() != 0, reason="starts a Spark worker as another OS user (needs root)")]

WORKFLOW = Path(__file__).resolve().parent / "isolated_workflow"
LINES = [f"line {i} of alpha beta gamma {i % 7}" for i in range(120)]


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder driver and worker both write (a shared mount's stand-in): the input, the sinks."""
    folder = Path(tempfile.mkdtemp(prefix="recovery-shared-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(shared: Path) -> Iterator[SparkStandalone]:
    folder = Path(tempfile.mkdtemp(prefix="recovery-worker-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        python = build_worker_python(folder / "venv")
        with SparkStandalone(folder, python, user=WORKER_USER) as standalone:
            yield standalone
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_tcp() -> Iterator[RedisWithPassword]:
    folder = Path(tempfile.mkdtemp(prefix="recovery-redis-"))
    server = RedisWithPassword(folder).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def driver_env(tmp_path: Path, redis_tcp: RedisWithPassword) -> dict[str, str]:
    """The driver's environment: its own RECOVERY_HOME (0700), Redis over TCP with the password
    in a file, and the driver's venv as PYSPARK_PYTHON (as the Makefile exports it: an
    interpreter the worker's user cannot run, which must not reach the executors)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    password_file = tmp_path / "redis-password"
    password_file.write_text(redis_tcp.password + "\n")
    password_file.chmod(0o600)
    env = dict(os.environ, RECOVERY_HOME=str(home), RECOVERY_REDIS_URL=redis_tcp.url,
               RECOVERY_REDIS_PASSWORD_FILE=str(password_file), PYSPARK_PYTHON=sys.executable)
    env.pop("REDIS_PASSWORD", None)
    return env


def _workflow(dest: Path, shared: Path, s3_uri: str | None = None) -> Path:
    """isolated.xml and its code in `dest` (0700: the worker cannot read it), its shared paths
    and its S3 sink's URI (else a shared folder) filled in; the input lines in the shared folder
    as a two-file Parquet dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    dest.mkdir(mode=0o700)
    shutil.copytree(WORKFLOW, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    xml = dest / "isolated.xml"
    s3_sink = xml_escape(s3_uri or str(shared / "out-s3"), {'"': "&quot;"})
    xml.write_text(xml.read_text().replace("@SHARED@", str(shared)).replace("@S3@", s3_sink))
    data = shared / "lines.parquet"
    if not data.exists():
        data.mkdir()
        half = len(LINES) // 2
        for i, part in enumerate((LINES[:half], LINES[half:])):
            pq.write_table(pa.table({"line": part}), data / f"part-{i}.parquet")
        for path in (data, *data.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
    for sink in ("out", "table"):   # the executors' user writes into them
        folder = shared / sink
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        folder.chmod(0o777)
    return xml


def _cli(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recovery", *args], env=env, capture_output=True, text=True,
                          timeout=900, **kw)


def _expected() -> list[tuple[str, str]]:
    return sorted((w, w.upper() + "!") for line in LINES for w in line.split())


def _delta_rows(folder: Path) -> list[tuple[str, str]]:
    from deltalake import DeltaTable
    return sorted((r["word"], r["loud"]) for r in DeltaTable(str(folder)).to_pyarrow_table().to_pylist())


def test_the_worker_shares_nothing_with_the_driver(cluster: SparkStandalone, tmp_path: Path):
    """What the tests below rely on: the worker's user cannot read the driver's workflow folder
    or home, nor run the driver's Python; its own Python imports recovery from its own folder."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert not as_user_can(WORKER_USER, "-r", str(private))
    assert not as_user_can(WORKER_USER, "-x", sys.executable)
    assert os.path.realpath(sys.executable) != os.path.realpath(cluster.python)
    where = subprocess.run(["runuser", "-u", WORKER_USER, "--", "env", "-i", "PATH=/usr/bin:/bin", cluster.python,
                            "-c", "import recovery; print(recovery.__file__)"], capture_output=True, text=True,
                           cwd=cluster.folder)
    assert where.returncode == 0 and where.stdout.startswith(str(cluster.folder)), where.stderr


def test_a_workflow_recovers_exactly_after_failures_and_a_driver_killed(
        cluster: SparkStandalone, shared: Path, tmp_path: Path, driver_env: dict[str, str],
        redis_tcp: RedisWithPassword, s3_bucket):
    """Python and shell bolts shipped with the job, a Spark-reader source, jsonl and Delta sinks
    on a shared folder, a jsonl sink and the spill on S3: failures injected in both bolts, the driver killed once
    round 0's source tasks committed, `recover` on the cluster: every record once in both sinks.
    The driver's PYSPARK_PYTHON (its own venv, which the worker cannot run) was not pushed."""
    out_s3 = s3_bucket.uri("out")
    xml = _workflow(tmp_path / "wf", shared, out_s3)
    client = connect(redis_tcp.url_with_password)
    inject = {"recovery.inject.sh.component": "split", "recovery.inject.sh.rate": "0.1",
              "recovery.inject.py.component": "shout", "recovery.inject.py.rate": "0.1"}
    run_id = f"isolated-{secrets.token_hex(3)}"
    args = ["submit", str(xml), "--run-id", run_id, "--json", "--spill-dir", s3_bucket.uri(),
            *cluster.submit_args(), *[a for k, v in inject.items() for a in ("-p", f"{k}={v}")]]
    with subprocess.Popen([sys.executable, "-m", "recovery", *args], env=driver_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            kill_when_round_0(proc, client, run_id, lambda done: any(d.startswith("lines:") for d in done),
                              "its source tasks committed")
        finally:
            stderr = proc.stderr.read() if proc.stderr else ""
            print(stderr[-3000:])
    assert redis_tcp.password not in stderr
    assert runs.get(client, run_id).code_digest

    done = _cli(["recover", run_id, "--json", *cluster.submit_args()], driver_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert redis_tcp.password not in done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "completed" and summary["resumed"] and summary["recovered"] > 0, summary
    expected = _expected()
    assert sink_records(shared / "out") == sorted(json.dumps({"word": w, "loud": loud}, sort_keys=True)
                                                  for w, loud in expected)
    assert sink_records(out_s3) == sink_records(shared / "out")   # (read through its commit markers)
    assert _delta_rows(shared / "table") == expected
    # the executors ran the worker's own Python, and imported the shipped copy of the code
    stderr_files = list(cluster.work_dir.glob("app-*/*/stderr"))
    assert stderr_files
    assert not any(str(xml.parent) in p.read_text(errors="replace") for p in stderr_files)
    assert any(cluster.work_dir.glob("app-*/*/recovery-code-*/shouting/style.py"))
    assert any(cluster.work_dir.glob("app-*/*/recovery-code-*/multilang/storm.py"))
    assert not any(cluster.work_dir.glob("app-*/*/recovery-code-*/multilang/notes.txt"))   # <exclude>

    # the code changed since: recover refuses, in one line, before Spark starts
    style = xml.parent / "shouting" / "style.py"
    style.write_text(style.read_text() + "\n# changed\n")
    refused = _cli(["recover", run_id], driver_env)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "changed since it was submitted" in refused.stderr and "--code-changed" in refused.stderr


def test_an_executor_python_without_recovery_fails_in_one_line_saying_how_to_fix_it(
        cluster: SparkStandalone, shared: Path, tmp_path: Path, driver_env: dict[str, str]):
    xml = _workflow(tmp_path / "wf", shared)
    done = _cli(["submit", str(xml), "--spill-dir", str(shared / "spill"), *cluster.submit_args(python="/usr/bin/python3")],
                driver_env)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert lines == [lines[0]] and "\tat " not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "/usr/bin/python3" in lines[0] and "no module 'recovery'" in lines[0]
    assert "install recovery==" in lines[0] and SHIP_A_VENV in lines[0]
