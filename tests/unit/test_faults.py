"""Fault injection's choice of tuples (recovery/faults.py), with the waits of a slow injection
counted through an injected sleep function: nothing here really sleeps."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from recovery.faults import InjectedFailure, Injection

N = 20_000


def tuples(n: int = N) -> list[SimpleNamespace]:
    """Tuples with ids spread as the engine's derived ids are (64-bit hashes; a fixed seed)."""
    ids = random.Random(7)
    return [SimpleNamespace(id=ids.getrandbits(63), values=[f"line {i}"], attempt=1, task=1) for i in range(n)]


def slowed(injection: Injection, batch: list[SimpleNamespace]) -> list[float]:
    waits: list[float] = []
    injection.sleep = waits.append
    for tup in batch:
        injection.before_process(tup)
    return waits


@pytest.mark.parametrize("rate,low,high", [(0.0, 0, 0), (0.01, 0.007, 0.013), (0.25, 0.23, 0.27), (1.0, 1, 1)])
def test_slow_injection_slows_only_the_chosen_fraction(rate, low, high):
    batch = tuples()
    injection = Injection("s", "count", mode="slow", rate=rate, delay_ms=300)
    waits = slowed(injection, batch)
    assert low * N <= len(waits) <= high * N
    assert set(waits) <= {0.3}
    # the same tuples as a failing injection of that rate chooses
    assert len(waits) == sum(Injection("f", "count", rate=rate).chosen(t) for t in batch)


def test_slow_injection_by_match_slows_the_matching_tuples_only():
    batch = tuples(100)
    waits = slowed(Injection("s", "count", mode="slow", match="line 4", delay_ms=5), batch)
    assert len(waits) == sum("line 4" in t.values[0] for t in batch) == 11     # 4, 40..49


def test_a_chosen_tuple_still_fails_in_the_failing_modes():
    chosen = next(t for t in tuples() if Injection("p", "c", rate=0.01).chosen(t))
    with pytest.raises(InjectedFailure, match="permanent"):
        Injection("p", "c", mode="permanent", rate=0.01).before_process(chosen)


def test_a_hold_keeps_its_chosen_tuples_until_the_marker_exists(tmp_path):
    marker = tmp_path / "go"
    batch = tuples(40)
    hold = Injection("h", "count", mode="hold", match="line 3", marker=str(marker))
    polls: list[float] = []

    def count_poll(seconds: float) -> None:   # the marker appears on the third wait
        polls.append(seconds)
        if len(polls) == 3:
            marker.touch()
    hold.sleep = count_poll
    for tup in batch:
        hold.before_process(tup)
    assert len(polls) == 3 and hold.seen == 40    # held once, at line 3, then everything went by


def test_a_hold_without_its_marker_is_refused_naming_the_property():
    from recovery.model import config
    with pytest.raises(config.PropertyError, match=r"recovery\.inject\.h\.marker must be set") as err:
        config.injections({"recovery.inject.h.component": "count", "recovery.inject.h.mode": "hold"})
    assert err.value.property == "recovery.inject.h.marker"
