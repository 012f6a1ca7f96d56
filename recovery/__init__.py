"""recovery: failure-localizing recovery for Storm-style stream workflows on Apache Spark."""
from recovery.api.batch import BatchBolt
from recovery.api.components import BasicBolt, Bolt, Spout, Tuple

__all__ = ["BasicBolt", "BatchBolt", "Bolt", "Spout", "Tuple"]
__version__ = "0.1.0"
