"""A `<source type="kafka">`'s attributes and `<param>` children, checked where the XML is read
(the source itself: connectors/kafka/)."""
from __future__ import annotations

import re
from datetime import datetime

from recovery.errors import RecoveryError
from recovery.model.workflow import check_topic

SOURCE_TYPE = "kafka"
PARAM_PREFIX = "kafka."
DECODES = ("utf8", "bytes", "json")
# the decoder format (connectors.files.decoder) each decode= queues a failed record with
FORMAT_OF = {"utf8": "utf8", "bytes": "bytes", "json": "jsonl"}
DEFAULT_MAX_BYTES = 1 << 20      # Kafka's default message.max.bytes
DEFAULT_TIMEOUT = 30.0           # seconds to reach the cluster / see a partition's end
# the settings librdkafka must have for this source's semantics: offsets live in Redis and are
# committed by hand; the end of a bounded round is the partition EOF; a topic is never created
FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": True,
         "allow.auto.create.topics": False}
# a setting whose value is a secret: only from file= or env=
_SECRET = re.compile(r"password|secret|jaas|token|(^|\.)key(\.pem)?$|credentials", re.I)
# <param name="kafka.X" file=...> / env=...: kept in the model's options as these names
FILE_SUFFIX, ENV_SUFFIX = "#file", "#env"

def is_secret(setting: str) -> bool:
    return bool(_SECRET.search(setting))


def settings_problem(attrs: dict[str, str], params: list[tuple[str, dict[str, str]]]) -> str | None:
    """What is wrong with a <source type="kafka"> (its attributes, its <param> children as
    (name, attributes)); None when nothing is. Used by the XML parser."""
    unknown = [a for a in attrs if a not in ATTRIBUTES]
    if unknown:
        return f"has no {unknown[0]}= attribute (it takes {', '.join(ATTRIBUTES)})"
    for attr in ("bootstrap", "topic"):
        if not attrs.get(attr, "").strip():
            return f"needs a non-empty {attr}= attribute"
    try:
        check_topic(attrs["topic"])
    except RecoveryError as err:
        return str(err)
    for hp in attrs["bootstrap"].split(","):
        host, _, port = hp.strip().rpartition(":")
        if not host or not port.isdigit():
            return f"bootstrap= must be HOST:PORT[,HOST:PORT...], got {attrs['bootstrap']!r}"
    if "group" in attrs and not attrs["group"].strip():
        return "group= must not be empty"
    problem = start_problem(attrs.get("start", "earliest"))
    if problem:
        return problem
    if attrs.get("decode", "utf8") not in DECODES:
        return f"decode= must be one of {', '.join(DECODES)}, got {attrs['decode']!r}"
    for attr in ("max-bytes", "timeout"):
        v = attrs.get(attr)
        if v is not None and not (v.isdigit() and int(v) > 0):
            return f"{attr}= must be a positive integer, got {v!r}"
    for name, pattrs in params:
        if not name.startswith(PARAM_PREFIX) or len(name) == len(PARAM_PREFIX):
            return f"<param name={name!r}>: a kafka source's params are librdkafka settings named kafka.<setting>"
        setting = name[len(PARAM_PREFIX):]
        given = [k for k in ("value", "file", "env") if k in pattrs]
        if len(given) != 1:
            return f"<param name={name!r}> needs exactly one of value=, file= and env="
        if setting in FIXED or setting in ("bootstrap.servers", "group.id"):
            return (f"<param name={name!r}>: the source sets {setting} itself"
                    + ("" if setting in FIXED else " (use its attribute)"))
        if given[0] == "value" and is_secret(setting):
            return (f"<param name={name!r}> is a secret: give it with file= (a file holding it) or env= "
                    "(an environment variable), never in the workflow file")
    return None


ATTRIBUTES = ("bootstrap", "topic", "group", "start", "decode", "max-bytes", "timeout")


def start_problem(start: str) -> str | None:
    if start in ("earliest", "latest") or start.isdigit():
        return None
    try:
        datetime.fromisoformat(start)
    except ValueError:
        return (f"start= must be earliest, latest, an offset or an ISO-8601 time "
                f"(2026-11-28T10:00:00+00:00), got {start!r}")
    return None


