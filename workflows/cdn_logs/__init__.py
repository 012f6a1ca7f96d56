"""The CDN-log example workflow (workflows/cdn_logs.xml): the stalled KafkaSpout topology of
docs/references.md."""
