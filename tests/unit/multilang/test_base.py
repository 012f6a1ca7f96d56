"""Shell components are bound to their collector as any component is (Component.bind)."""
from __future__ import annotations

import sys

import pytest

from recovery.model.workflow import ShellImpl
from recovery.multilang.bolt import ShellBolt
from recovery.multilang.spout import ShellSpout
from tests.unit.api.test_components import Recorder


@pytest.mark.parametrize("cls", [ShellBolt, ShellSpout])
def test_a_shell_component_is_bound_like_any_component(cls, tmp_path):
    shell = cls(ShellImpl(command=sys.executable, script="program.py"), str(tmp_path))
    collector, conf = Recorder(), {"topology.name": "t"}
    shell.bind(collector, conf, None)
    assert shell.conf is conf and shell.context is None
    shell.log("from the host", "warn")
    assert collector.calls == [("log", "from the host", "warn")]
