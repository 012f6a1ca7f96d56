"""Builds the object that implements a component: a user's class, a shell program, a sink."""
from __future__ import annotations

import sys
from typing import Any

from recovery.api.components import Component as UserComponent
from recovery.api.loader import load_class
from recovery.connectors import sinks
from recovery.model.workflow import Component, Workflow
from recovery.multilang.bolt import ShellBolt
from recovery.multilang.spout import ShellSpout


def python_is_ours(impl: Any) -> Any:
    """`command="python"` (or python3) means the interpreter running recovery, so a program
    finds the packages of recovery's environment (pystorm, say) wherever it runs."""
    if impl.command in ("python", "python3"):
        return impl.model_copy(update={"command": sys.executable})
    return impl


def build(comp: Component, wf: Workflow) -> UserComponent:
    """The object that implements `comp` (a Spout or Bolt: bind it before open/prepare)."""
    impl = comp.impl
    if impl.kind == "class":
        obj: UserComponent = load_class(impl.ref, wf.code_folder)()
        return obj
    if impl.kind == "shell":
        cls = ShellSpout if comp.is_spout else ShellBolt
        return cls(python_is_ours(impl), wf.code_folder or ".")   # (the shipped copy on a cluster)
    if impl.kind == "sink":
        return sinks.make_sink(impl, wf.base_dir or ".")
    raise ValueError(f"component {comp.id!r}: a built-in source is driven by the engine, not built")
