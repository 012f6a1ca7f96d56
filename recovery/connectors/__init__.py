"""Built-in sources and sinks: files, the log sources (log_offsets.py and log_reader.py, their
shared offset model and reading loop, with two transports: redis_stream/ and kafka/), the spark
source, the failed-tuple queue; the sinks (sinks.py maps each sink type to its class:
file_sinks, redis_sink, postgres, delta, each a sink_base.BufferedSink)."""
