"""The Spark session: local[*] unless a master is given, quiet, with its logs in a file."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from recovery.environment import environment
from recovery.home import private_dir, private_file, state_home

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


def prepare_environment(home: Path) -> None:
    """Environment a PySpark driver needs here; set before the JVM starts."""
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
    os.environ.setdefault("SPARK_CONF_DIR", str(conf_dir))


def session(master: str | None = None, conf: dict[str, str] | None = None, home: Path | None = None,
            app_name: str = "recovery"):
    home = Path(home or state_home())
    prepare_environment(home)
    from pyspark.sql import SparkSession  # lazy: commands that need no Spark never load it
    builder = (SparkSession.builder.appName(app_name)
               .master(master or environment().spark_master)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.local.dir", str((home / "spark-tmp").resolve()))
               .config("spark.executorEnv.PYTHONHASHSEED", os.environ["PYTHONHASHSEED"])
               .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
               .config("spark.python.worker.reuse", "true")
               # PySpark's daemon, minus the traceback of a worker whose task Spark cancelled
               # (engine/worker_daemon.py); that worker still ends, as PySpark's own does
               .config("spark.python.daemon.module", "recovery.engine.worker_daemon")
               .config("spark.python.daemon.killWorkerOnFlushFailure", "true"))
    pythonpath = os.pathsep.join(p for p in sys.path if p)
    builder = builder.config("spark.executorEnv.PYTHONPATH", pythonpath)
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    log.info("Spark session on %s (Spark %s)", spark.sparkContext.master, spark.version)
    return spark
