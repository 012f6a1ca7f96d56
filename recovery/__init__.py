"""recovery: failure-localizing recovery for Storm-style stream workflows on Apache Spark."""
from recovery.api.batch import BatchBolt, BatchSpout
from recovery.api.components import BasicBolt, Bolt, Spout, Tuple

__all__ = ["BasicBolt", "BatchBolt", "BatchSpout", "Bolt", "Spout", "Tuple"]
__version__ = "0.1.0"
