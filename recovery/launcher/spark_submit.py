"""The `recovery` command line inside spark-submit's Spark session:

    spark-submit [spark flags] $(recovery launcher) submit workflow.xml --redis URL
    spark-submit [spark flags] $(recovery launcher) recover RUN --redis URL

spark-submit's flags (--master, --conf, --archives, --py-files, ...) make the session; every
command then uses it as `recovery.submit(..., spark=spark)` does, and `--master` or `--conf`
after the command is refused. The session is stopped when the command ends, as a spark-submit
application's main file does.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from pyspark.sql import SparkSession

    from recovery import run
    from recovery.cli import main as cli

    spark = SparkSession.builder.getOrCreate()
    run.use_session(spark)
    try:
        cli.main(args=sys.argv[1:] if argv is None else argv, prog_name="recovery")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
