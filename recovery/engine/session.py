"""The Spark session: local[*] unless a master is given, quiet, with its logs in a file.

In local mode the executors are this process's children: they run the driver's interpreter
with the driver's sys.path. On a cluster (any other master) the executors' Python is the
cluster's: `spark.pyspark.python`, `spark.executorEnv.PYSPARK_PYTHON`, a PYSPARK_PYTHON the
user exported for them, or the workers' own PYSPARK_PYTHON, in that order (executors.py),
and a first tiny job checks that it imports `recovery` at the driver's version.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from recovery.connectors.spark_source import session_settings
from recovery.engine import class_archive, connect, executors
from recovery.engine.submit_args import SECRET_PROPERTY, secrets_off_the_command_line
from recovery.environment import environment
from recovery.errors import RecoveryError
from recovery.home import private_dir, private_file, read_private, state_home
from recovery.tracking import runs
from recovery.visible import hide, visible

log = logging.getLogger(__name__)

LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


def prepare_environment(home: Path) -> Path:
    """Environment a PySpark driver needs here; set before the JVM starts. Returns the log4j
    settings file, which the driver's JVM is given by a -D option (driver_java_options): a
    configuration folder on its class path would keep it from sharing class data."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # the log and spark-tmp's shuffle files hold tuple values: private, like the rest of home
    # (folders 0700, files 0600 whatever the umask; the log4j file names the log's path)
    private_dir(home, "state folder")
    conf_dir = private_dir(home / "spark-conf")
    log = private_file(home / "spark.log").resolve()  # log4j appends to it, keeping its mode
    private_dir(home / "spark-tmp")
    log4j = private_file(conf_dir / "log4j2.properties")   # 0600 first, then written: it keeps its mode
    log4j.write_text(LOG4J.format(level="warn", log=log))
    return log4j


def spark_home() -> str:
    """The Spark whose launcher starts the driver: SPARK_HOME, else the installed PySpark's."""
    import pyspark
    return os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))


def driver_java_options(log4j: Path, spark_home: str) -> str:
    """The options our driver JVM starts with, before any the user gives: our log settings
    (unless the user has a Spark configuration folder of their own, whose settings stand) and
    class-data sharing (engine/class_archive.py)."""
    options = []
    if not os.environ.get("SPARK_CONF_DIR"):
        options.append(f"-Dlog4j2.configurationFile={log4j}")
    options.append(class_archive.java_options(spark_home))
    return " ".join(o for o in options if o)


# PySpark's first call into the JVM with a Python argument asks each py4j input converter if it
# applies, and its numpy one imports pyspark.testing.utils, which imports pandas: half a second
# of the driver's CPU that would otherwise come after the JVM has started, not beside it.
_FIRST_CALL_IMPORTS = ("pyspark.testing.utils",)


def _import_meanwhile(modules: tuple[str, ...]) -> None:
    """Import `modules` in a thread while this one waits for the JVM to start (a later import
    of them waits for that thread's, under the import system's own lock). A failure is left
    for whoever imports them next to meet."""
    import importlib
    import threading

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:   # broad-except: the next importer reports it
                return
    threading.Thread(target=load, name="recovery-imports", daemon=True).start()


DRIVER_DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


# a line of a properties file: the key, then white space, "=" or ":", then the value
_PROPERTY_LINE = re.compile(r"(?P<key>[^\s=:]+)\s*(?:[=:]|\s)\s*(?P<value>.*)")


def properties_file(path: str, option: str = "--properties-file") -> dict[str, str]:
    """Spark properties from a file, as spark-submit's --properties-file reads them: one a line,
    `key value`, `key=value` or `key: value`, blank lines and `#` or `!` comments skipped, values
    trimmed. The file must be its owner's alone (it holds keys: home.read_private). A line that
    is not a spark.* property with a value is refused naming the file, the line and the key,
    never the value. Secret-looking values (Spark's redaction rule) are never shown afterwards
    (visible.hide)."""
    text = read_private(path, f"{option} {path}")
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = _PROPERTY_LINE.fullmatch(line)
        key = match["key"] if match else line.split()[0]
        if match is None or not match["value"].strip():
            raise RecoveryError(f"{option} {path}:{number}: {visible(key[:100])} has no value "
                                "(expected `spark.NAME VALUE` or `spark.NAME=VALUE`)")
        if not key.startswith("spark."):
            raise RecoveryError(f"{option} {path}:{number}: {visible(key[:100])} is not a Spark property "
                                "(spark.*); workflow properties go in <config> or -p")
        out[key] = match["value"].strip()
    hide(*(value for key, value in out.items() if SECRET_PROPERTY.search(key)))
    return out


def is_local_master(master: str) -> bool:
    """`local` or `local[...]`: the executors are threads of this driver's JVM, its children."""
    return master == "local" or master.startswith("local[")


def session(master: str | None = None, conf: dict[str, str] | None = None, home: Path | None = None,
            app_name: str = "recovery"):
    """A classic session of ours, local or on `master`: its SparkContext and JVM are made here,
    in this process (a Spark Connect session is connect.connect_session's)."""
    home = Path(home or state_home())
    log4j = prepare_environment(home)
    master = master or environment().spark_master
    conf = dict(conf or {})
    from pyspark import SparkContext  # lazy: commands that need no Spark never load it
    _import_meanwhile(_FIRST_CALL_IMPORTS)
    # the user's own default options for the driver JVM come after ours (theirs win)
    ours = driver_java_options(log4j, spark_home())
    theirs = conf.pop(DRIVER_DEFAULT_JAVA_OPTIONS, "")
    if f"{ours} {theirs}".strip():
        conf[DRIVER_DEFAULT_JAVA_OPTIONS] = f"{ours} {theirs}".strip()
    class_archive.finish_at_exit()
    if not is_local_master(master):
        from pyspark.sql import SparkSession
        with secrets_off_the_command_line(conf, home) as conf:
            return _cluster_session(SparkSession.builder.config(conf=_settings(master, home, app_name)), conf)
    settings = _settings(master, home, app_name)
    # local mode: the executors are the driver's children and run its interpreter and sys.path
    settings.set("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
    pythonpath = os.pathsep.join(p for p in sys.path if p)
    settings.set("spark.executorEnv.PYTHONPATH", pythonpath)
    # the JVM talks to its Python workers over Unix sockets in a folder only this user can
    # enter (a worker takes no password on one): loopback TCP adds tens of ms to each stage
    sockets = worker_socket_dir()
    if sockets is not None:
        settings.set("spark.python.unix.domain.socket.enabled", "true")
        settings.set("spark.python.unix.domain.socket.dir", sockets)
    from pyspark.sql import SparkSession
    with secrets_off_the_command_line(conf, home) as conf:
        for k, v in conf.items():
            settings.set(k, v)
        sc = SparkContext.getOrCreate(settings)
    sc.setLogLevel("ERROR")
    log.info("Spark session on %s (Spark %s)", sc.master, sc.version)
    return SparkSession(sc)


SOCKET_DIR_PREFIX = "recovery-sockets-"


def worker_socket_dir() -> str | None:
    """A new private folder (mode 0700) for this process's local Python workers' sockets, in
    the temporary folder, removed at exit; those left by processes that are gone (a kill -9)
    are removed first. None where the temporary folder's path is too long for a socket's."""
    import atexit
    import shutil
    import tempfile
    tmp = tempfile.gettempdir()
    if len(tmp) > 30:   # (a socket's path has at most 107 bytes; the folder and file add 77)
        return None
    for entry in os.scandir(tmp):
        owner = entry.name[len(SOCKET_DIR_PREFIX):].partition("-")[0]
        if entry.name.startswith(SOCKET_DIR_PREFIX) and owner.isdigit() and not runs.local_pid_alive(int(owner)):
            shutil.rmtree(entry.path, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f"{SOCKET_DIR_PREFIX}{os.getpid()}-", dir=tmp)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def adopt(spark: Any, redis_url: str | None = None) -> Any:
    """A session the caller made (a notebook's, spark-submit's, a managed platform's, a Spark
    Connect client's), used as it is: its master, settings and artifacts are left alone and it
    is never stopped here. On a cluster, and always under Spark Connect, its executors' Python
    is checked as for a session of ours (once per application or Connect session)."""
    if is_connect(spark):
        key = f"connect:{spark.session_id}"
        if key not in _CHECKED_APPS:
            connect.check_server(spark, redis_url)
            _CHECKED_APPS.add(key)
        return spark
    if not is_classic(spark):   # (the test kit's in-process engine)
        return spark
    sc = spark.sparkContext   # (a classic session's: its executors' Python, checked once)
    if not is_local_master(str(sc.master)) and sc.applicationId not in _CHECKED_APPS:
        python = sc.pythonExec or executors.workers_python(spark) or executors.SPARK_DEFAULT_PYTHON
        executors.check(spark, python)
        _CHECKED_APPS.add(sc.applicationId)
    return spark


_CHECKED_APPS: set[str] = set()   # the applications whose executors `adopt` checked


def _settings(master: str, home: Path, app_name: str) -> Any:
    """The settings every session of ours has, local or not (a SparkConf)."""
    from pyspark import SparkConf
    return (SparkConf().setAppName(app_name)
            .setMaster(master)
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.local.dir", str((home / "spark-tmp").resolve()))
            .set("spark.executorEnv.PYTHONHASHSEED", os.environ["PYTHONHASHSEED"])
            .set("spark.python.worker.reuse", "true")
            # PySpark's daemon, minus the traceback of a worker whose task Spark cancelled
            # (engine/worker_daemon.py); that worker still ends, as PySpark's own does
            .set("spark.python.daemon.module", "recovery.engine.worker_daemon")
            .set("spark.python.daemon.killWorkerOnFlushFailure", "true"))


def _cluster_session(builder: Any, conf: dict[str, str]) -> Any:
    """A session whose executors run the cluster's Python (module doc), checked by a first job.
    A classic session (the command line's own, on --master): its SparkContext is set here.

    PySpark takes the executors' interpreter from the driver's PYSPARK_PYTHON when the context
    starts (and the JVM from its own environment, inherited from this process): while the
    session starts, PYSPARK_PYTHON holds the chosen interpreter, or nothing, never the
    driver's own; it is put back afterwards."""
    chosen = executors.chosen_python(conf, os.environ, sys.executable)
    if chosen is not None:
        builder = builder.config("spark.pyspark.python", chosen)
    for k, v in conf.items():
        builder = builder.config(k, v)
    saved = os.environ.pop("PYSPARK_PYTHON", None)
    if chosen is not None:
        os.environ["PYSPARK_PYTHON"] = chosen
    try:
        spark = builder.getOrCreate()
    finally:
        os.environ.pop("PYSPARK_PYTHON", None)
        if saved is not None:
            os.environ["PYSPARK_PYTHON"] = saved
    spark.sparkContext.setLogLevel("ERROR")   # (a classic session, built here: its SparkContext)
    python = chosen or executors.workers_python(spark) or executors.SPARK_DEFAULT_PYTHON
    spark.sparkContext.pythonExec = python
    log.info("Spark session on %s (Spark %s); executors' Python: %s", spark.sparkContext.master,
             spark.version, python)
    executors.check(spark, python)
    return spark


is_connect = connect.is_connect


def is_classic(spark: Any) -> bool:
    """A classic SparkSession, whose SparkContext and JVM live in this process."""
    return type(spark).__module__ == "pyspark.sql.session"


def master_of(spark: Any) -> str:
    """The session's Spark master: a Connect server answers with its own; the test kit's
    in-process engine is `local`."""
    if is_classic(spark):   # (the SparkContext: classic sessions only)
        return str(spark.sparkContext.master)
    if is_connect(spark):
        return str(spark.conf.get("spark.master", "local"))
    return str(getattr(spark, "master", "local"))


@contextmanager
def job_tag(spark: Any, tag: str, description: str) -> Iterator[None]:
    """The jobs started inside carry `tag`, so that `interrupt(spark, tag)` cancels them: a
    Spark Connect session's operation tag (addTag), a classic session's job tag of this
    thread (SparkContext.addJobTag: the adaptive planner's stage jobs carry it too); a classic
    session's jobs also carry `description`, which Spark's UI shows."""
    if is_connect(spark):
        spark.addTag(tag)
        try:
            yield
        finally:
            spark.removeTag(tag)
        return
    if not is_classic(spark):   # (the test kit's in-process engine)
        yield
        return
    sc = spark.sparkContext   # (a classic session's: its thread's job tags and description)
    sc.setJobDescription(description)
    sc.addJobTag(tag)
    try:
        yield
    finally:
        sc.removeJobTag(tag)
        sc.setJobDescription(None)


def interrupt(spark: Any, tag: str) -> None:
    """Cancel the jobs tagged `tag` by job_tag, from any thread."""
    if is_connect(spark):
        spark.interruptTag(tag)
    elif is_classic(spark):   # (the SparkContext: classic sessions only)
        spark.sparkContext.cancelJobsWithTag(tag)


def settings(spark: Any, values: dict[str, str]) -> AbstractContextManager[None]:
    """`values` set on the session while inside, then what was there before (the test kit's
    engine has no settings)."""
    if not (is_classic(spark) or is_connect(spark)):
        return nullcontext()
    return session_settings(spark, values)
