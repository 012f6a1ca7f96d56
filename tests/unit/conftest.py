"""Unit-test fixtures.

The test components record what they saw in module globals and class attributes (the runner
instantiates them from a class reference, so nothing can be handed to them), and the runtime
caches a client per Redis URL (recovery.testing injects fakeredis there). Every test
gets fresh ones here, so that no test sees what another left behind, in any order."""
from __future__ import annotations

import threading

import pytest

from recovery.runtime import task
from tests.unit import ledger_components, runner_components


@pytest.fixture(autouse=True)
def fresh_component_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task, "_clients", {})
    monkeypatch.setattr(ledger_components, "OUTCOMES", [])
    monkeypatch.setattr(ledger_components, "SEED", [0])
    monkeypatch.setattr(runner_components.Collect, "SEEN", [])
    monkeypatch.setattr(runner_components.AcksInFinish, "FINISHED", [])
    monkeypatch.setattr(runner_components.StuckOnThree, "RAN", [])
    monkeypatch.setattr(runner_components.StuckOnThree, "KILLED", threading.Event())
