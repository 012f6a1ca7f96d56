"""`recovery launcher`: the path of the script spark-submit runs the command line with."""
from __future__ import annotations

from pathlib import Path

import click

SCRIPT = Path(__file__).resolve().parents[1] / "launcher" / "spark_submit.py"


@click.command()
def launcher() -> None:
    """Print the path of the script that runs this command line inside spark-submit.

    \b
    spark-submit [spark flags] $(recovery launcher) submit workflow.xml --redis URL

    runs `recovery submit` (or `recover`, `status`, ...) inside spark-submit's Spark session:
    its master, conf and archives."""
    click.echo(str(SCRIPT))
