"""Built-in sources and sinks: files, the redis-stream log source (redis_stream/), sinks."""
