"""What users write against: Spout, Bolt, BasicBolt, BatchBolt, BatchSpout, Tuple; the collector protocol
components are bound to; the loader of their classes; the checks that a workflow's code can
run here."""
