"""A kafka source's settings: its attributes, and the librdkafka settings its <param> children
pass through, with secrets read from a file or the environment (never written in the XML) and
masked in every message."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from recovery.connectors.log_offsets import TopicError
from recovery.model.kafka_source import (  # noqa: F401  (what the kafka source's modules use)
    DECODES,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    ENV_SUFFIX,
    FILE_SUFFIX,
    FIXED,
    FORMAT_OF,
    PARAM_PREFIX,
    SOURCE_TYPE,
    is_secret,
)
from recovery.model.workflow import Component, SourceImpl, Workflow
from recovery.tracking.spill_files import MASK

log = logging.getLogger(__name__)


# How long the broker may hold a fetch that finds nothing new. A round reads each partition up
# to its end and learns where the end is from the empty fetch there, so this wait is paid per
# partition and round: librdkafka's 500 ms default would cost seconds on a topic of a few
# partitions. A <param name="kafka.fetch.wait.max.ms"> overrides it.
FETCH_WAIT_MS = 50


@dataclass(frozen=True)
class KafkaSource:
    spout: str
    bootstrap: str
    topic: str
    group: str
    start: str
    decode: str
    max_bytes: int
    timeout: float
    settings: tuple[tuple[str, str, str], ...]   # (librdkafka setting, how: value | file | env, what)

    def config(self, **extra: Any) -> dict[str, Any]:
        """The librdkafka configuration, secrets read now (in the process that connects)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                "socket.timeout.ms": int(self.timeout * 1000),
                                "fetch.wait.max.ms": FETCH_WAIT_MS}
        for name, how, what in self.settings:
            conf[name] = what if how == "value" else _secret(self.spout, name, how, what)
        conf.update(FIXED)
        conf.update(extra)
        return conf

    def secrets(self) -> list[str]:
        """The secret values this source uses (to mask in messages), those that can be read."""
        out = []
        for name, how, what in self.settings:
            if how != "value":
                try:
                    out.append(_secret(self.spout, name, how, what))
                except TopicError:
                    pass
            elif is_secret(name):
                out.append(what)
        return [s for s in out if len(s) >= 3]

    def mask(self, text: str) -> str:
        for s in sorted(self.secrets(), key=len, reverse=True):
            text = text.replace(s, MASK)
        return text

    def where(self) -> str:
        return f"topic {self.topic!r} at {self.bootstrap} (spout {self.spout!r})"


def _secret(spout: str, name: str, how: str, what: str) -> str:
    if how == "env":
        value = os.environ.get(what)
        if not value:
            raise TopicError(f"spout {spout!r}: kafka setting {name} comes from ${what}, which is not set")
        return value
    try:
        with open(what, encoding="utf-8") as fh:
            value = fh.readline().rstrip("\r\n")
    except OSError as err:
        raise TopicError(f"spout {spout!r}: cannot read the file {what} of kafka setting {name}: "
                         f"{err.strerror}") from None
    if not value:
        raise TopicError(f"spout {spout!r}: the file {what} of kafka setting {name} is empty")
    return value


def start_time_ms(start: str) -> int | None:
    """start= as milliseconds since the epoch when it is a time (a naive time is UTC)."""
    if start in ("earliest", "latest") or start.isdigit():
        return None
    t = datetime.fromisoformat(start)
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def source_of(wf: Workflow, spout: Component) -> KafkaSource:
    impl = spout.impl
    assert isinstance(impl, SourceImpl) and impl.type == SOURCE_TYPE
    settings = []
    for name, value in impl.options:
        how = "value"
        for suffix, kind in ((FILE_SUFFIX, "file"), (ENV_SUFFIX, "env")):
            if name.endswith(suffix):
                name, how = name[:-len(suffix)], kind
        if how == "file" and not os.path.isabs(value) and wf.base_dir:
            value = os.path.join(wf.base_dir, value)
        settings.append((name[len(PARAM_PREFIX):], how, value))
    return KafkaSource(spout=spout.id, bootstrap=impl.param("bootstrap", "") or "",
                       topic=impl.param("topic", "") or "",
                       group=impl.param("group") or f"{wf.name}:{spout.id}",
                       start=impl.param("start", "earliest") or "earliest",
                       decode=impl.param("decode", "utf8") or "utf8",
                       max_bytes=int(impl.param("max-bytes") or DEFAULT_MAX_BYTES),
                       timeout=float(impl.param("timeout") or DEFAULT_TIMEOUT),
                       settings=tuple(settings))
