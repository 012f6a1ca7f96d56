"""The Redis-stream transport of the log offsets (connectors.log_offsets holds the model that
the kafka source shares): a topic's partitions and bounds from its streams, its retention
told of each consumer, and each topic trimmed by it once its consumers committed."""
from __future__ import annotations

import logging
from typing import Any

import redis
from redis import Redis

from recovery.connectors import log_offsets
from recovery.connectors.log_offsets import (  # noqa: F401  (the names this module always had)
    assign_partitions,
    commit_ranges,
    committed_offsets,
    plan_ranges,
    planned_messages,
    trimmed_lines,
)
from recovery.connectors.redis_stream import retention
from recovery.connectors.redis_stream.topics import (
    SOURCE_TYPE,
    consumer_name,
    partition_bounds,
    require_topic,
    source_param,
    spout_format,
)
from recovery.errors import RecoveryError
from recovery.model.workflow import Component, Workflow

log = logging.getLogger(__name__)


class RedisStreamTransport:
    source_type = SOURCE_TYPE

    def consumer(self, wf: Workflow, spout: Component) -> str:
        return consumer_name(wf, spout.id)

    def store_topic(self, spout: Component) -> str:
        return source_param(spout, "topic") or ""

    def open(self, client: Redis, wf: Workflow, spout: Component, reset: str | None) -> log_offsets.TopicView:
        topic = source_param(spout, "topic") or ""
        n = require_topic(client, topic, spout.id)
        fmt = spout_format(client, spout)
        # a committed offset below what retention kept: read on from the first message left,
        # reported as trimmed (the topic's retention waits for its registered consumers)
        return log_offsets.TopicView(topic=topic, store=topic, consumer=consumer_name(wf, spout.id), partitions=n,
                                     format=fmt, bounds=lambda _committed: partition_bounds(client, topic, n))

    def claimed(self, client: Redis, view: log_offsets.TopicView) -> None:
        retention.register_consumer(client, view.topic, view.consumer)   # trimming waits for it from now on

    def committed(self, client: Redis, wf: Workflow, plans: list[dict[str, Any]]) -> None:
        for topic in sorted({plan["topic"] for plan in plans}):
            try:
                retention.apply_retention(client, topic)   # what every consumer has committed may go
            except (redis.ResponseError, RecoveryError) as err:
                # trimming is housekeeping: a server that refuses it (XTRIM MINID needs Redis 6.2),
                # or a policy stored by hand that does not parse, never fails a settled round
                log.warning("topic %r was not trimmed by its retention: %s", topic, err)

    def settled(self, client: Redis, wf: Workflow, run_id: str) -> None:
        return None      # the committed offsets in Redis are what `recovery topics` shows


TRANSPORT = RedisStreamTransport()
log_offsets.register(TRANSPORT)
