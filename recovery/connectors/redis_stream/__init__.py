"""Redis Streams as a partitioned log: KafkaSpout's model (docs/references.md) on Redis.

A *topic* is N partitions, each one Redis stream (keys.topic_partition); N is the topic's own,
fixed when it is created (the keys.topic_meta hash). A message's *offset* is an integer: the
entry id is ``<offset>-1`` (``recovery produce`` writes them (topics.py) that way, atomically per batch),
so offsets compare like Kafka's and ``XRANGE key a b`` reads offsets a..b.

Reading, as KafkaSpout does:

* partitions are assigned to the spout's tasks as ``calculatePartitionsForTask`` does:
  partition i goes to task index ``i mod tasks``; a task without a partition is idle (warned);
* every message becomes a root tuple whose message id is ``(partition, offset)``;
* a *consumer* (workflow name + spout id) has a committed offset per partition
  (keys.offsets): every offset below it is complete, queued for recovery or dead. A failed
  root never holds its partition back: it is in the recovery queue, and the offset moves on
  (the stall of the CDN-log topology in docs/references.md cannot happen).

A round's work is fixed before it starts: connectors.log_offsets (the offset model this source
shares with the kafka source; offsets.py is this transport's part of it) decides each
partition's ``[start, end)`` and returns it as JSON that goes into ``RunSpec.source_json`` and
the run record, so a crashed round that is resumed reads exactly the same messages; Spark tasks
read their partitions' ranges with XRANGE in batches (:func:`reader.stream_source`, never
through the driver); the ends are committed once the round settled.
"""

