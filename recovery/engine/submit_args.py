"""Secret Spark properties reach the driver's JVM through a private file, never its command line.

PySpark starts the driver's JVM with spark-submit and passes every SparkConf setting as
`--conf key=value` on that command line, which any account on the host reads (`ps`,
/proc/PID/cmdline). So while a session of ours starts, the secret-looking properties (Spark's
own redaction rule, SECRET_PROPERTY) are written to a properties file only its owner reads
(0600, in a 0700 folder under the state home), spark-submit is told of it through
PYSPARK_SUBMIT_ARGS (which PySpark's launcher appends to the command, and which only names the
file), and the SparkConf is left without them. SparkSubmit loads the file into the JVM's
system properties, which the new SparkContext's conf reads; the file is removed as soon as the
context has started.
"""
from __future__ import annotations

import os
import re
import secrets
import shlex
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from recovery.home import private_dir, private_file

# Spark's own spark.redaction.regex (its default): the properties whose values are secrets
SECRET_PROPERTY = re.compile(r"secret|password|token|access[.]?key", re.IGNORECASE)

SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
_PYSPARK_DEFAULT_ARGS = "pyspark-shell"   # what PySpark passes when PYSPARK_SUBMIT_ARGS is unset


def secret_keys(conf: dict[str, str]) -> list[str]:
    """The keys of `conf` whose values are secrets (SECRET_PROPERTY), in order."""
    return [key for key in conf if SECRET_PROPERTY.search(key)]


def _escaped(text: str, key: bool) -> str:
    """`text` as java.util.Properties.load reads it back unchanged (what spark-submit uses)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ord(ch) > 0x7E or ord(ch) < 0x20:   # (as UTF-16 units: Properties' own escapes)
            units = ch.encode("utf-16-be")
            out.append("".join(f"\\u{int.from_bytes(units[j:j + 2], 'big'):04x}"
                               for j in range(0, len(units), 2)))
        else:
            out.append(ch)
    return "".join(out)


def write_properties(path: Path, conf: dict[str, str]) -> None:
    """`conf` into `path` in the properties-file format, the file made 0600 before it is written."""
    private_file(path, "Spark properties file")
    lines = (f"{_escaped(k, key=True)}={_escaped(v, key=False)}\n" for k, v in conf.items())
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.writelines(lines)


def _gateway_running() -> bool:
    """Whether this process already talks to a JVM (spark-submit started it, or an earlier
    context did): then no command line is made, and settings go to that JVM directly."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return True
    from pyspark import SparkContext
    return SparkContext._gateway is not None


@contextmanager
def secrets_off_the_command_line(conf: dict[str, str], home: Path) -> Iterator[dict[str, str]]:
    """Within the block, `conf` without its secret-looking properties; those are in a private
    properties file that spark-submit reads (PYSPARK_SUBMIT_ARGS names it, after what the
    variable held before). Start the SparkContext inside the block: on leaving it the file is
    removed and PYSPARK_SUBMIT_ARGS restored. With no secret, or a JVM already running (no
    command line is made), `conf` as it is and nothing written."""
    keys = secret_keys(conf)
    if not keys or _gateway_running():
        yield conf
        return
    folder = private_dir(home / "spark-conf")
    path = folder / f"submit-{os.getpid()}-{secrets.token_hex(8)}.properties"
    saved = os.environ.get(SUBMIT_ARGS)
    try:
        write_properties(path, {k: conf[k] for k in keys})
        # spark-submit skips spark-defaults.conf when given a properties file, unless told not to
        os.environ[SUBMIT_ARGS] = (f"--properties-file {shlex.quote(str(path))} --load-spark-defaults "
                                   f"{saved or _PYSPARK_DEFAULT_ARGS}")
        yield {k: v for k, v in conf.items() if k not in keys}
    finally:
        if saved is None:
            os.environ.pop(SUBMIT_ARGS, None)
        else:
            os.environ[SUBMIT_ARGS] = saved
        with suppress(FileNotFoundError):
            path.unlink()
