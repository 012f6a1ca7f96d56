"""recovery: failure-localizing recovery for Storm-style stream workflows on Apache Spark.

Components (`Bolt`, `Spout`, ..., and the `ComponentContext` they are given) are imported at
once; the builder (`Topology`) and the run API (`submit`, `Run`) when first named, so that a
Spark task importing a component does not load the driver's side."""
from __future__ import annotations

from typing import Any

from recovery.api.batch import BatchBolt, BatchSpout
from recovery.api.components import BasicBolt, Bolt, ComponentContext, Spout, Tuple

__all__ = ["BasicBolt", "BatchBolt", "BatchSpout", "Bolt", "ComponentContext", "Run", "Spout", "Topology", "Tuple",
           "submit"]
__version__ = "0.1.0"

_LAZY = {"Topology": "recovery.topology", "Run": "recovery.run", "submit": "recovery.run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recovery' has no attribute {name!r}")
