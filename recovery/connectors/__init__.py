"""Built-in sources and sinks: files, the redis-stream log source (redis_stream/), the spark
source, the failed-tuple queue; the sinks (sinks.py maps each sink type to its class:
file_sinks, redis_sink, postgres, delta, each a sink_base.BufferedSink)."""
