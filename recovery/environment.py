"""The environment variables `recovery` reads, in one typed object read at call time.

`environment()` reads them when called, never at import: a test or a process that sets one
before its next call gets the new value. docs/configuration.md lists them (written by
scripts/gen_config_docs.py from `Environment`'s fields), with the variables of other tools the
project sets or reads (`OTHER_VARIABLES`).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from recovery.errors import RecoveryError


@dataclass(frozen=True)
class Environment:
    """The values of the RECOVERY_* variables (an unset or empty one: its default)."""

    home: str = field(default=".recovery", metadata={"variable": "RECOVERY_HOME", "meaning": (
        "The folder of local state (the embedded Redis, the spill files, Spark's log), kept private "
        "(folders 0700, files 0600). Relative: to the current folder.")})
    redis_url: str | None = field(default=None, metadata={"variable": "RECOVERY_REDIS_URL", "meaning": (
        "The Redis server (`redis://`, `rediss://`, `unix://`; one node's URL for a Redis Cluster) "
        "when no `--redis URL` is given. Unset: the embedded server under RECOVERY_HOME.")})
    key_prefix: str = field(default="recovery:", metadata={"variable": "RECOVERY_KEY_PREFIX", "meaning": (
        "What every key of the runs' index, records, topics and offsets starts with, so that "
        "several installations can share one Redis. Every process of a run must see the same value.")})
    lease_seconds: float = field(default=30.0, metadata={"variable": "RECOVERY_LEASE_SECONDS", "meaning": (
        "How long a driver's lease on its run lasts without a refresh (refreshed every third of "
        "it): a `running` run whose lease expired is `crashed`.")})
    spark_master: str = field(default="local[*]", metadata={"variable": "RECOVERY_SPARK_MASTER", "meaning": (
        "The Spark master when a command is given no `--master`.")})
    ui_token: str | None = field(default=None, metadata={"variable": "RECOVERY_UI_TOKEN", "meaning": (
        "`recovery ui`'s secret token when no `--token` is given. Unset: a random one, printed at start.")})
    redis_password_file: str | None = field(default=None, metadata={
        "variable": "RECOVERY_REDIS_PASSWORD_FILE", "meaning": (
            "A file whose first line is the Redis password, for a URL that has none (else REDIS_PASSWORD): "
            "a password never on a command line, where `ps` shows it.")})


# Variables of other tools that `recovery` sets (when unset) or reads.
OTHER_VARIABLES: tuple[tuple[str, str], ...] = (
    ("PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON",
     "Set to the running Python when unset, before Spark starts. In local mode the executors run it too; "
     "with a cluster's master they run the cluster's Python (docs/cluster.md)."),
    ("REDIS_PASSWORD", "The Redis password for a URL that has none, when RECOVERY_REDIS_PASSWORD_FILE is unset."),
    ("PYTHONHASHSEED", "Set to 0 when unset, for the driver and the executors."),
    ("SPARK_LOCAL_IP", "Set to 127.0.0.1 when unset."),
    ("SPARK_CONF_DIR", "Read, never set. Unset, the driver logs to RECOVERY_HOME/spark.log (settings in "
     "RECOVERY_HOME/spark-conf, given to the JVM by a -D option) and its JVM shares Spark's classes through an "
     "archive kept in the user's cache folder (XDG_CACHE_HOME). Set, its settings stand and no archive is "
     "used (Java cannot share classes with a configuration folder on the class path)."),
    ("XDG_CACHE_HOME", "The cache folder where the driver JVM's class archive is kept (~/.cache when unset)."),
    ("AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN",
     "Read only to mask their values in messages about an S3 spill location."),
)


_FIELDS = {f.name: f for f in fields(Environment)}


def variables() -> list[tuple[str, str, str]]:
    """(name, default as text, meaning) of each RECOVERY_* variable, in declaration order."""
    out = []
    for f in fields(Environment):
        default = "" if f.default is None else f"{f.default:g}" if isinstance(f.default, float) else str(f.default)
        out.append((f.metadata["variable"], default, f.metadata["meaning"]))
    return out


def _value(env: Mapping[str, str], name: str) -> str | None:
    """The variable of Environment's field `name`, None when unset or empty."""
    return env.get(_FIELDS[name].metadata["variable"]) or None


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    raw = _value(env, name)
    if raw is None:
        return None
    variable = _FIELDS[name].metadata["variable"]
    try:
        seconds = float(raw)
    except ValueError:
        raise RecoveryError(f"{variable}={raw!r}: expected a number of seconds") from None
    if not seconds > 0:
        raise RecoveryError(f"{variable}={raw!r}: expected a number of seconds above 0")
    return seconds


def environment(environ: Mapping[str, str] | None = None) -> Environment:
    """The variables as they are now (`environ`: os.environ). A value that does not parse is one
    line naming the variable."""
    env = os.environ if environ is None else environ
    lease = _seconds(env, "lease_seconds")
    return Environment(home=_value(env, "home") or Environment.home,
                       redis_url=_value(env, "redis_url"),
                       key_prefix=_value(env, "key_prefix") or Environment.key_prefix,
                       lease_seconds=Environment.lease_seconds if lease is None else lease,
                       redis_password_file=_value(env, "redis_password_file"),
                       spark_master=_value(env, "spark_master") or Environment.spark_master,
                       ui_token=_value(env, "ui_token"))
