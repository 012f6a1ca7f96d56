"""PySpark's Python worker daemon, quiet about workers that Spark hung up on.

When a task of a job fails (a spill file found truncated, say), Spark cancels the job's other
running tasks and closes their workers' sockets. A worker still sending its output then fails
at its last flush, and PySpark's daemon prints that flush's traceback on the executor's stderr
(`BrokenPipeError: [Errno 32] Broken pipe`, or `ConnectionResetError`), which is the terminal
in local mode: noise under the one-line error the driver prints, in some runs and not others.

Spark starts this module instead of `pyspark.daemon` (`spark.python.daemon.module`, set by
engine/session.py). It runs PySpark's daemon unchanged, except that a worker whose socket was
closed by Spark exits (status 1, as PySpark's own would after printing) without a traceback:
Spark gave up on that task and reads nothing more from it; it reports the job's failure itself.
Every other error of a worker is printed as PySpark prints it.
"""
from __future__ import annotations

import gc
import os
import socket
import sys


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """`path` (sys.path) with Spark's zipped PySpark and py4j moved to its end when they are the
    ones of the PySpark package installed in this interpreter (a pip-installed PySpark's own
    python/lib/*.zip): the same code, which the installed copy serves from its compiled files
    instead of compiling every module out of the zip at each daemon start (half a second of a
    cold round). A cluster's Spark, whose zip is not inside an installed package, keeps its
    own first: it matches the executors' JVM."""
    def bundled(entry: str) -> bool:
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))   # <site-packages>/pyspark
        return (entry.endswith(".zip") and os.path.basename(lib) == "lib"
                and os.path.basename(os.path.dirname(lib)) == "python"
                and os.path.basename(package) == "pyspark"
                and os.path.isfile(os.path.join(package, "__init__.py"))
                and any(os.path.abspath(p) == os.path.dirname(package) for p in path))
    moved = [p for p in path if bundled(p)]
    return [p for p in path if p not in moved] + moved


sys.path[:] = prefer_installed_pyspark(sys.path)

from pyspark import daemon  # noqa: E402  (after the path is set)

_pyspark_worker = daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    """PySpark's `daemon.worker`, ended quietly when Spark has closed the worker's socket."""
    try:
        return _pyspark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        os._exit(1)   # what the daemon's child does after printing the traceback


daemon.worker = worker   # the daemon's forked children call the module's `worker`


def preload() -> None:
    """Import the task runtime once, in the daemon, so that every worker it forks starts with
    it loaded (about half a second of imports per worker otherwise, most of a short round's
    Python time). Of what it loads only numpy's BLAS starts threads, and its own fork handler
    stops them around each fork. A failure is left for the worker to meet and report, as it
    would without this."""
    try:
        # a mapInArrow task's worker imports pandas as it ends its first task: a second of
        # every new worker's, once here instead
        import pandas  # type: ignore[import-untyped]  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark.worker  # noqa: F401  (what each forked worker imports first)

        import recovery.engine.rounds  # noqa: F401
    except Exception:   # broad-except: the worker's own import will report it
        pass
    # What is loaded now lives as long as the workers: out of the cyclic collector's sight, the
    # full collection PySpark runs after each task of a reused worker does not walk it again
    # (nor copy the pages the fork shares, by touching each object's header).
    gc.freeze()


if __name__ == "__main__":
    preload()
    daemon.manager()
