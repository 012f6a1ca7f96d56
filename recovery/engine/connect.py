"""Spark Connect sessions: `--remote sc://HOST:PORT` (or Spark's own SPARK_REMOTE), and the
checks that make a server that cannot run a workflow say so in one line before anything is
stored.

A Connect client has no SparkContext and no JVM: what runs is on the server, whose Python
workers must have `recovery` (at this version, with its dependencies) installed, and whose
executors must reach the run's Redis. One small job on the server checks both (`check_server`).
"""
from __future__ import annotations

import ipaddress
import logging
import re
import socket
import sys
from collections.abc import Iterator
from typing import Any

from recovery.errors import RecoveryError

log = logging.getLogger(__name__)

REMOTE_ENV = "SPARK_REMOTE"
MIN_SPARK = (4, 0)
CONNECT_SECS = 10.0


class ConnectError(RecoveryError):
    """A Spark Connect server that cannot be reached, is too old, or cannot run recovery's tasks."""


def endpoint(remote: str) -> tuple[str, int]:
    """(host, port) of an `sc://HOST[:PORT][/;param=value...]` URL, as Spark's client reads it."""
    from pyspark.sql.connect.client.core import DefaultChannelBuilder
    try:
        builder = DefaultChannelBuilder(remote)
    except Exception as err:   # pyspark's own validation of the URL: its words, on one line
        raise ConnectError(f"--remote {remote}: not a Spark Connect URL ({_one_line(str(err))}); "
                           "expected sc://HOST:PORT") from None
    host, _, port = builder.endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def on_this_host(remote: str) -> bool:
    """A server started in this process (`local[...]`) or listening on a loopback address."""
    if remote.startswith("local"):
        return True
    host = endpoint(remote)[0]
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (OSError, ValueError):
        return False


def connect_session(remote: str, conf: dict[str, str] | None = None) -> Any:
    """A Spark Connect session to `remote` (`sc://…`, or `local[…]` for a server started in this
    process, as `pyspark --remote` takes it), checked to be reachable and Spark 4.0 or later."""
    from pyspark.sql import SparkSession
    if not remote.startswith("local"):
        host, port = endpoint(remote)
        try:
            socket.create_connection((host, port), timeout=CONNECT_SECS).close()
        except OSError as err:
            raise ConnectError(f"cannot reach the Spark Connect server at {remote}: "
                               f"{err.strerror or err} (is it running? start one with Spark's "
                               "sbin/start-connect-server.sh)") from None
    builder = SparkSession.builder.remote(remote)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as err:   # pyspark's and gRPC's errors: worded as one line
        raise ConnectError(f"cannot open a Spark Connect session at {remote}: {_one_line(str(err))}") from None
    check_version(spark, remote)
    _urls[str(getattr(spark, "session_id", ""))] = remote
    log.info("Spark Connect session at %s (Spark %s, master %s)", remote, spark.version,
             spark.conf.get("spark.master", "?"))
    return spark


def check_version(spark: Any, remote: str) -> None:
    try:
        version = str(spark.version)
    except Exception as err:   # the first call to the server: gRPC's error as one line
        raise ConnectError(f"the Spark Connect server at {remote} does not answer: {_one_line(str(err))}") from None
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    if numbers < MIN_SPARK:
        raise ConnectError(f"the Spark Connect server at {remote} runs Spark {version}; recovery needs "
                           f"Spark {MIN_SPARK[0]}.{MIN_SPARK[1]} or later")


def is_connect(spark: Any) -> bool:
    """A Spark Connect client's session (pyspark.sql.connect): no SparkContext, no JVM here."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


_urls: dict[str, str] = {}   # the URL each session of ours was opened with, by session id


def remote_of(spark: Any) -> str:
    """A Connect session's server: the URL it was opened with here, else sc://HOST."""
    url = _urls.get(str(getattr(spark, "session_id", "")))
    if url is not None:
        return url
    try:
        return f"sc://{spark.client.host}"
    except AttributeError:
        return "sc://(unknown)"


# --- the server's side ---------------------------------------------------------------------
def _probe(redis_url: str | None, batches: Iterator[Any]) -> Iterator[Any]:
    """Runs on the server's executor: recovery's version, Python's, the interpreter, the first
    module the task runtime cannot import, and what reaching Redis said (None: it answered)."""
    import importlib

    import pyarrow as pa
    for _ in batches:
        pass
    import recovery
    missing = None
    try:
        importlib.import_module("recovery.engine.rounds")
    except ModuleNotFoundError as err:
        missing = err.name or str(err)
    redis_error = None
    if redis_url is not None and missing is None:
        try:
            from recovery.controlplane import connection
            connection.connect(redis_url, start=False).ping()
        except Exception as err:   # broad-except: whatever stops it is what the driver says
            redis_error = f"{type(err).__name__}: {err}"
    row = [recovery.__version__, "%d.%d" % sys.version_info[:2], sys.executable, missing or "", redis_error or ""]
    yield pa.RecordBatch.from_arrays([pa.array([v]) for v in row],
                                     names=["version", "python", "executable", "missing", "redis"])


def check_server(spark: Any, redis_url: str | None) -> None:
    """A one-task job on the Connect server: its Python workers must import recovery (at this
    version) and its runtime's dependencies, and reach `redis_url`. One line otherwise."""
    import functools

    import recovery
    want = recovery.__version__
    remote = remote_of(spark)
    install = (f"install it in the Python the server's workers run (PYSPARK_PYTHON of the server): "
               f"pip install recovery=={want}")
    try:
        rows = spark.range(0, 1, 1, 1).mapInArrow(
            functools.partial(_probe, redis_url),
            "version string, python string, executable string, missing string, redis string").collect()
    except Exception as err:   # the probe could not even start on the server
        raise ConnectError(server_failure(str(err), remote, install)) from None
    version, python, executable, missing, redis_error = rows[0]
    if missing:
        raise ConnectError(f"the Spark Connect server's Python ({executable}) has no module {missing!r}, "
                           f"which recovery needs: {install}")
    if version != want:
        raise ConnectError(f"the Spark Connect server's Python ({executable}) has recovery {version}, this "
                           f"client {want}: {install}")
    py = "%d.%d" % sys.version_info[:2]
    if python != py:
        raise ConnectError(f"the Spark Connect server's Python ({executable}) is Python {python}, this client's "
                           f"{py}: the workflow's code and cloudpickle need the same Python version on both")
    if redis_error:
        raise ConnectError(f"the executors of the Spark Connect server at {remote} cannot reach Redis "
                           f"({redis_error[:200]}): give --redis redis://HOST:PORT of a Redis they reach "
                           "(the embedded Redis is a unix socket on this host)")
    log.info("Spark Connect server's workers run %s (Python %s, recovery %s)", executable, python, version)


def server_failure(text: str, remote: str, install: str) -> str:
    """One line for a probe job that failed on the server, from its error text."""
    missing = re.search(r"No module named '([^']+)'", text)
    if missing:
        return (f"the Spark Connect server's Python workers have no module {missing[1]!r}"
                f"{'' if missing[1].split('.')[0] == 'recovery' else ', which recovery needs'}: {install}")
    return f"the Spark Connect server at {remote} cannot run recovery's tasks: {_one_line(text)} ({install})"


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "unknown error")[:300]
