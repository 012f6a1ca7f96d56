"""The kafka transport of the log offsets (connectors.log_offsets): a round's ranges planned
from the cluster's partitions, and the consumer group told of the contiguous prefix of complete
or dead roots whenever it advances, so that lag tools (kcat, Burrow, exporters) see the run's
true lag."""
from __future__ import annotations

import logging
from typing import Any

from redis import Redis

from recovery.connectors import log_offsets
from recovery.connectors.kafka import client as kafka
from recovery.connectors.kafka.settings import FORMAT_OF, SOURCE_TYPE, source_of, start_time_ms
from recovery.connectors.log_offsets import TopicError, TopicView, committed_offsets
from recovery.model.workflow import Component, Workflow
from recovery.tracking import keys, runs

log = logging.getLogger(__name__)
RESETS = ("earliest", "latest")


def store_topic_of(topic: str) -> str:
    """A Kafka topic's name in Redis keys (apart from a Redis-stream topic of the same name)."""
    return f"kafka.{topic}"


def group_key(group: str, topic: str) -> str:
    """Hash: partition -> the offset last committed to the Kafka group (the acked prefix)."""
    return keys.offsets(group, store_topic_of(topic)) + ":group"


def resume_at(topic: str, group: str, partition: int, committed: int, first: int | None, end: int,
              reset: str | None) -> tuple[int, int]:
    """Where a partition whose group committed `committed` goes on, and how many records were
    skipped unread: from `committed` when the log still holds it (first <= committed <= end);
    otherwise only as `reset` (--reset earliest | latest) says, never silently."""
    lowest = end if first is None else first
    if lowest <= committed <= end:
        return committed, 0
    if committed < lowest:
        what = (f"group {group!r} committed offset {committed}, but the log now starts at {lowest} "
                f"(records were removed by the topic's retention before they were read)")
    else:
        what = (f"group {group!r} committed offset {committed}, but the partition ends at {end} "
                f"(was the topic deleted and created again?)")
    if reset is None:
        raise TopicError(f"kafka topic {topic!r} partition {partition}: {what}; give --reset earliest "
                         f"(read from offset {lowest}) or --reset latest (from the end, {end})")
    start = lowest if reset == "earliest" else end
    return start, max(0, min(start, end) - committed)


class KafkaTransport:
    source_type = SOURCE_TYPE

    def consumer(self, wf: Workflow, spout: Component) -> str:
        return source_of(wf, spout).group

    def store_topic(self, spout: Component) -> str:
        return store_topic_of(log_offsets.source_param(spout, "topic") or "")

    def open(self, client: Redis, wf: Workflow, spout: Component, reset: str | None) -> TopicView:
        src = source_of(wf, spout)
        c = kafka.consumer(src, **{"auto.offset.reset": "error"})
        try:
            n = kafka.partition_count(src, c)
            store = store_topic_of(src.topic)
            committed = committed_offsets(client, src.group, store)
            unknown = sorted(p for p in committed if p >= n)
            if unknown:
                raise TopicError(f"kafka topic {src.topic!r} has {n} partitions, but group {src.group!r} "
                                 f"committed an offset for partition {unknown[0]} (was the topic "
                                 f"recreated? `recovery clear` the runs of this group to start over)")
        except BaseException:
            kafka.close(c)
            raise
        by_time: dict[int, int] | None = None

        def bounds(_committed: dict[int, int]) -> list[tuple[int | None, int]]:
            return kafka.bounds(src, c, n)

        def first_start(p: int, first: int | None, end: int) -> int:
            nonlocal by_time
            if src.start == "earliest":
                return end if first is None else first
            if src.start == "latest":
                return end
            ms = start_time_ms(src.start)
            if ms is None:
                return min(int(src.start), end)
            if by_time is None:
                by_time = kafka.offsets_for_time(src, c, n, ms)
            got = by_time.get(p, -1)
            return end if got < 0 else min(got, end)

        def resume(p: int, committed_at: int, first: int | None, end: int) -> tuple[int, int]:
            return resume_at(src.topic, src.group, p, committed_at, first, end, reset)

        return TopicView(topic=src.topic, store=store, consumer=src.group, partitions=n,
                         format=FORMAT_OF[src.decode], bounds=bounds, first_start=first_start,
                         resume=resume, extra={"bootstrap": src.bootstrap}, close=lambda: kafka.close(c))

    def claimed(self, client: Redis, view: TopicView) -> None:
        return None

    def committed(self, client: Redis, wf: Workflow, plans: list[dict[str, Any]]) -> None:
        # the group is told by `settled`, once the acker's verdict on the round is in
        return None

    def settled(self, client: Redis, wf: Workflow, run_id: str) -> None:
        """Commit each kafka spout's acked prefix to its group when it advanced (Redis keeps the
        last one committed, so lag tools follow the run; a cluster that cannot be reached now
        is told at the next settle)."""
        rec = runs.get(client, run_id)
        # (a queued root may carry the ids of any root epoch: a dead letter requeued since)
        epochs = sorted({0, rec.root_epoch, *rec.root_epochs})
        for spout in log_offsets.log_spouts(wf):
            if log_offsets.transport_of(spout) is not self:
                continue
            src = source_of(wf, spout)
            read_to = committed_offsets(client, src.group, store_topic_of(src.topic))
            if not read_to:
                continue
            key = group_key(src.group, src.topic)
            before = {int(k): int(v) for k, v in client.hgetall(key).items()}
            prefix = log_offsets.acked_prefix(client, run_id, spout.id, epochs, read_to, before)
            moved = {p: o for p, o in prefix.items() if o > before.get(p, -1)}
            if not moved:
                continue
            try:
                kafka.commit_group(src, moved)
            except TopicError as err:
                log.warning("%s (committed at the next settle)", err)
                continue
            log_offsets.commit_offsets(client, key, moved)


TRANSPORT = KafkaTransport()
log_offsets.register(TRANSPORT)
