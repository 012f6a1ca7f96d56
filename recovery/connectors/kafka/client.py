"""Talking to the Kafka cluster with confluent-kafka (librdkafka): partitions are assigned, never
subscribed (as Spark's Kafka source does), and a partition's end is where librdkafka reports
the partition EOF, never a ListOffsets answer."""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from recovery.connectors.kafka.settings import KafkaSource
from recovery.connectors.log_offsets import SourceUnanswered, TopicError

POLL = 1.0      # seconds per poll while waiting for a record or the EOF


def _local(name: str) -> int:
    """librdkafka's local error codes (KafkaError's names that start with an underscore)."""
    return int(getattr(KafkaError, "_" + name))


PARTITION_EOF, AUTO_OFFSET_RESET = _local("PARTITION_EOF"), _local("AUTO_OFFSET_RESET")
_AUTH = (_local("AUTHENTICATION"), KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
         KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED, _local("SSL"))
_UNREACHABLE = tuple(_local(n) for n in ("TRANSPORT", "TIMED_OUT", "ALL_BROKERS_DOWN", "RESOLVE"))


class ClientLog:
    """librdkafka's log lines: kept at debug level (its connection retries are not the user's
    errors), the last error remembered, since it names the cause a client error leaves out
    (a refused SASL handshake, a certificate)."""

    def __init__(self) -> None:
        self.last_error: str | None = None

    def log(self, level: int, fmt: str, *args: Any) -> None:
        text = fmt % args if args else fmt
        client_log.debug("%s", text)
        if level >= logging.ERROR:
            self.last_error = text


_AUTH_TEXT = re.compile(r"SASL|SSL|authenticat", re.I)
client_log = logging.getLogger(__name__ + ".librdkafka")
_LOGS: dict[int, ClientLog] = {}


def error_line(src: KafkaSource, err: Any) -> str:
    """A client error's first line, the source's secrets masked."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    text = err.str() if isinstance(err, KafkaError) else str(err)
    return src.mask((text or type(err).__name__).splitlines()[0])


def refusal(src: KafkaSource, err: Any, doing: str, c: Consumer | None = None,
            partition: int | None = None) -> TopicError:
    code = err.args[0].code() if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError) \
        else err.code() if isinstance(err, KafkaError) else None
    why = "authentication or authorization failed" if code in _AUTH else "cannot reach the cluster" \
        if code in _UNREACHABLE else "the cluster refused"
    if c is not None:
        c.poll(0)     # (serves the client's log lines queued so far: the cause, if it logged one)
    last = _LOGS[id(c)].last_error if c is not None and id(c) in _LOGS else None
    if last and _AUTH_TEXT.search(last):
        why = "authentication failed"
    cause = f" ({src.mask(last.splitlines()[0])})" if last else ""
    message = f"kafka {src.where()}: {why} while {doing}: {error_line(src, err)}{cause}"
    if code in _UNREACHABLE:   # down or hung: it may answer again
        return SourceUnanswered(message, src.bootstrap, src.topic, partition, src.timeout)
    return TopicError(message)


def unanswered(src: KafkaSource, partition: int, what: str) -> SourceUnanswered:
    return SourceUnanswered(f"kafka {src.where()}: partition {partition} {what}", src.bootstrap, src.topic,
                            partition, src.timeout)


def consumer(src: KafkaSource, **extra: Any) -> Consumer:
    log = ClientLog()
    try:
        c = Consumer(src.config(logger=log, **extra))
    except KafkaException as err:
        raise TopicError(f"kafka {src.where()}: bad client settings: {error_line(src, err)}") from None
    _LOGS[id(c)] = log
    return c


def close(c: Consumer) -> None:
    _LOGS.pop(id(c), None)
    c.close()


def partition_count(src: KafkaSource, c: Consumer) -> int:
    """The topic's partitions (a one-line TopicError when the cluster cannot be reached, refuses
    us, or has no such topic)."""
    try:
        md = c.list_topics(src.topic, timeout=src.timeout)
    except KafkaException as err:
        raise refusal(src, err, "reading the topic's metadata", c) from None
    t = md.topics.get(src.topic)
    if t is None or t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or not t.partitions:
        raise TopicError(f"kafka topic {src.topic!r} (read by spout {src.spout!r}) does not exist at {src.bootstrap}")
    if t.error is not None:
        raise refusal(src, t.error, "reading the topic's metadata", c)
    return len(t.partitions)


def offset_of(m: Message) -> int:
    """A record's offset, or the end a partition EOF names (librdkafka sets both)."""
    o = m.offset()
    assert o is not None
    return int(o)


def is_eof(m: Message) -> bool:
    err = m.error()
    return err is not None and err.code() == PARTITION_EOF


def _next_event(src: KafkaSource, c: Consumer, deadline: float, partition: int | None = None) -> Message | None:
    """The next record or partition EOF (None: nothing before the deadline). Errors raise."""
    while time.monotonic() < deadline:
        m = c.poll(min(POLL, max(0.01, deadline - time.monotonic())))
        if m is None:
            continue
        err = m.error()
        if err is None or err.code() == PARTITION_EOF:
            return m
        if err.code() == AUTO_OFFSET_RESET or err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            return m
        p = m.partition() if partition is None else partition
        raise refusal(src, err, f"reading partition {p}", c, p)
    return None


def bounds(src: KafkaSource, c: Consumer, partitions: int) -> list[tuple[int | None, int]]:
    """Per partition (0 .. partitions-1): (first offset stored or None when it holds nothing,
    end), the end being where the partition EOF is reported now. Every partition is read at
    once, so a topic's partitions cost one wait for their ends, not one each. The high
    watermark of a partition's first fetch only says where to look: the end is the offset its
    EOF names, after the record before it was read."""
    topic = src.topic
    first: dict[int, int] = {}
    at: dict[int, int] = {}
    hinted: set[int] = set()     # sent to their high watermark's last record
    out: dict[int, tuple[int | None, int]] = {}

    def from_first(p: int) -> None:   # the hint led past the end, or nowhere: read on from the first record
        hinted.discard(p)
        c.seek(TopicPartition(topic, p, first[p] + 1))

    def ended(p: int, first_offset: int | None, end: int) -> None:
        out[p] = (first_offset, end)
        c.pause([TopicPartition(topic, p)])

    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    deadline = time.monotonic() + src.timeout
    try:
        while len(out) < partitions:
            m = _next_event(src, c, deadline)
            if m is None:
                stuck = [p for p in sorted(hinted) if p not in out and at[p] == first[p]]
                if stuck:
                    for p in stuck:
                        from_first(p)
                    deadline = time.monotonic() + src.timeout
                    continue
                p = min(q for q in range(partitions) if q not in out)
                what = "no end" if p in first else "neither a record nor its end"
                raise unanswered(src, p, f"reported {what} within {src.timeout:g} s")
            pid = m.partition()
            if pid is None:
                continue
            p = pid
            if p in out:
                continue     # produced since its end was seen: the round ends where it saw it
            if p not in first:
                if m.error() is not None:
                    ended(p, None, offset_of(m))      # its end at once: nothing stored
                    continue
                first[p] = at[p] = offset_of(m)
                _, high = c.get_watermark_offsets(TopicPartition(topic, p), cached=True)
                if high is not None and high - 1 > first[p]:
                    c.seek(TopicPartition(topic, p, int(high) - 1))
                    hinted.add(p)
                continue
            if m.error() is not None and not is_eof(m):
                if p in hinted and at[p] == first[p]:
                    from_first(p)
                    continue
                raise unanswered(src, p, f"reported no end within {src.timeout:g} s")
            if m.error() is not None:
                ended(p, first[p], offset_of(m))
                continue
            at[p] = offset_of(m)
    finally:
        c.unassign()
    return [out[p] for p in range(partitions)]


def read(src: KafkaSource, c: Consumer, partition: int, start: int, end: int,
         batch: int = 1000) -> Iterator[tuple[list[Message], int]]:
    """Batches of the records with offsets in [start, end) of a partition, each with how many
    offsets before it were gone (below the log's start: removed by retention) since the last."""
    if end <= start:
        return
    tp = TopicPartition(src.topic, partition, start)
    c.assign([tp])
    try:
        expected, gone_possible = start, False
        out: list[Message] = []
        deadline = time.monotonic() + src.timeout
        while True:
            m = _next_event(src, c, deadline, partition)
            if m is None:
                raise unanswered(src, partition, f"stopped answering at offset {expected} (planned up to {end})")
            deadline = time.monotonic() + src.timeout
            err = m.error()
            if err is not None and err.code() != PARTITION_EOF:
                # below the log's start: what is left starts later; the offsets before it are gone
                gone_possible = True
                c.assign([TopicPartition(src.topic, partition, OFFSET_BEGINNING)])
                continue
            offset = offset_of(m)
            gone = 0
            if gone_possible:
                gone = max(0, min(offset, end) - expected)
                gone_possible = False
            if err is not None or offset >= end:
                yield out, gone
                return
            if offset < expected:
                continue
            expected = offset + 1
            out.append(m)
            if expected >= end:     # the planned end: no need to wait for the fetch after it
                yield out, gone
                return
            if gone or len(out) >= batch:
                yield out, gone
                out = []
    finally:
        c.unassign()


def commit_group(src: KafkaSource, offsets: dict[int, int]) -> None:
    """Commit `offsets` (partition -> the next offset to read) for the source's group."""
    if not offsets:
        return
    c = consumer(src)
    try:
        c.commit(offsets=[TopicPartition(src.topic, p, o) for p, o in sorted(offsets.items())], asynchronous=False)
    except KafkaException as err:
        raise refusal(src, err, "committing the group's offsets", c) from None
    finally:
        close(c)


def offsets_for_time(src: KafkaSource, c: Consumer, partitions: int, ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record's time is at or after `ms` (-1: none)."""
    try:
        got = c.offsets_for_times([TopicPartition(src.topic, p, ms) for p in range(partitions)], timeout=src.timeout)
    except KafkaException as err:
        raise refusal(src, err, "looking up offsets by time", c) from None
    return {tp.partition: tp.offset for tp in got}
