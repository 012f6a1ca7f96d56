"""What users write against: Spout, Bolt, BasicBolt, Tuple; the loader of their classes; the checks
that a workflow's code can run here."""
