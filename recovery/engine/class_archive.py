"""Java class-data sharing for the driver's JVM: its start reads Spark's classes from an archive
instead of loading and verifying them from the jars again (about half of a cold JVM start's CPU).

The first driver that finds no archive asks its JVM to write one at exit, under a temporary
name; a JVM killed while writing leaves a file cut short, and a JVM that maps a cut archive dies
with SIGBUS. So this process, which outlives its JVM, renames the file once the JVM has ended
cleanly (at interpreter exit), and every later driver maps the finished archive. The JVM checks
an archive against its own version and class path and ignores one that does not match.

The JVM refuses to write an archive while a non-empty folder is on its class path, and Spark's
configuration folder is put there: archives are used only when no SPARK_CONF_DIR is set (the
log4j settings then come by a -D option, session.prepare_environment).
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# the JVM's own messages about archives (classes it cannot store) would reach the terminal
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
STALE_SECONDS = 3600.0   # a temporary archive this old was left by a driver that died


def cache_dir() -> Path:
    """Where archives are kept: the user's cache folder, shared by every RECOVERY_HOME (an
    archive depends on the Java and Spark installed, not on a run)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "recovery" / "jvm"


def archive_path(spark_home: str) -> Path:
    """The archive for this Java and this Spark (its jars folder): a new install of either
    gets a new name, so an archive is never rewritten in place."""
    java = shutil.which("java") or ""
    jars = Path(spark_home) / "jars"
    try:
        listing = sorted(os.listdir(jars))
    except OSError:
        listing = []
    key = "\0".join([os.path.realpath(java) if java else "", os.environ.get("JAVA_HOME", ""),
                     str(jars.resolve()), *listing])
    return cache_dir() / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def applies(spark_home: str) -> bool:
    """Whether the driver's class path can take an archive: no configuration folder of the
    user's (SPARK_CONF_DIR, or a non-empty SPARK_HOME/conf) is on it."""
    if os.environ.get("SPARK_CONF_DIR"):
        return False
    conf = Path(spark_home) / "conf"
    try:
        return not any(conf.iterdir())
    except OSError:   # no such folder: nothing on the class path
        return True


def java_options(spark_home: str) -> str:
    """The driver JVM's options for class-data sharing: map the archive when there is one, or
    write one at exit (renamed at this process's exit, finish_at_exit); '' when none applies."""
    if not applies(spark_home):
        return ""
    archive = archive_path(spark_home)
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {QUIET}"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        log.info("no Java class archive: cannot create %s: %s", archive.parent, err)
        return ""
    drop_stale(archive.parent)
    pending = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    _pending.append((pending, archive))
    return f"-XX:ArchiveClassesAtExit={pending} {QUIET}"


_pending: list[tuple[Path, Path]] = []


def drop_stale(folder: Path) -> None:
    """Remove temporary archives that drivers which died left behind."""
    now = time.time()
    for path in folder.glob("*.tmp"):
        try:
            if now - path.stat().st_mtime > STALE_SECONDS:
                path.unlink()
        except OSError:
            pass


def finish(gateway_process: Any, timeout: float = 120.0) -> None:
    """Once the driver's JVM has ended cleanly, its archive under the temporary name takes the
    archive's name; a JVM that did not end cleanly leaves nothing behind."""
    if not _pending:
        return
    pending, archive = _pending.pop()
    try:
        if gateway_process is not None and gateway_process.poll() is None:
            # the JVM ends when its stdin closes (PySpark's gateway watches it)
            if gateway_process.stdin is not None:
                gateway_process.stdin.close()
            gateway_process.wait(timeout=timeout)
        clean = gateway_process is None or gateway_process.returncode == 0
        if clean and pending.is_file() and pending.stat().st_size > 0:
            os.replace(pending, archive)
            log.info("Java class archive written: %s", archive)
            return
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("Java class archive not kept: %s", err)
    try:
        pending.unlink()
    except OSError:
        pass


def finish_at_exit() -> None:
    """Register finish() for this process's exit, with PySpark's gateway process."""
    if not _pending:
        return

    def at_exit() -> None:
        from pyspark import SparkContext
        active = SparkContext._active_spark_context
        if active is not None:   # its threads (the accumulator server) would see the JVM go
            try:
                active.stop()
            except Exception as err:   # broad-except: the archive is an optimisation; say why, go on
                log.info("Spark context not stopped at exit: %s", err)
        gateway = SparkContext._gateway
        finish(getattr(gateway, "proc", None) if gateway is not None else None)
    atexit.register(at_exit)
