"""Kafka as a partitioned log: KafkaSpout's model (docs/references.md) on a Kafka cluster,
sharing the offset logic of the Redis-stream source (connectors.log_offsets).

* partitions are assigned to the spout's tasks round-robin (partition i to task index
  ``i mod tasks``), never subscribed, as Spark's Kafka source does;
* every record becomes a root tuple whose message id is ``(partition, offset)``;
* the consumer (the source's ``group``) has a committed offset per partition in Redis, which is
  authoritative: a round reads from it to the end seen at the round's start (the partition EOF);
* the Kafka group is committed the contiguous prefix of complete or dead roots whenever it
  advances (transport.py), so lag tools see the run's true lag.
"""
