"""Fault injection for tests, benchmarks and the demo, set in a workflow's config (or with
`recovery submit -p KEY=VALUE`). Each injection has a name and these properties:

    recovery.inject.<name>.component   the component it acts at (required)
    recovery.inject.<name>.mode        transient | permanent | crash | slow | hold   (default transient)
    recovery.inject.<name>.rate        fraction of tuples chosen, by tuple id (default 0.01)
    recovery.inject.<name>.match       or: choose tuples whose values contain this text
    recovery.inject.<name>.attempts    transient: fail the first N attempts (default 1)
    recovery.inject.<name>.task        crash: the global task id whose process dies ...
    recovery.inject.<name>.after       ... after this many tuples, on Spark's first attempt only
    recovery.inject.<name>.marker      crash: a file created just before the process dies;
                                       hold: the file whose creation lets the held tuples go
    recovery.inject.<name>.delay.ms    slow: sleep this long per chosen tuple

Choices are deterministic (a hash of the derived tuple id), so a re-run chooses the same tuples.
Names and values are declared, checked and typed in one place, recovery/model/config.py
(InjectionSettings), at validate, submit, `recover -p` and in the test kit: an unknown
attribute, mode or component is an error there, so every injection read here acts.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recovery.model import config

PREFIX = config.INJECT_PREFIX


HOLD_POLL_SECONDS = 0.05


class InjectedFailure(RuntimeError):
    """Raised in place of a component's process() for a chosen tuple."""


@dataclass
class Injection:
    name: str
    component: str
    mode: str = "transient"
    rate: float = 0.01
    match: str | None = None
    attempts: int = 1
    task: int | None = None
    after: int = 0
    delay_ms: float = 0.0
    marker: str | None = None
    seen: int = 0
    # how a slow injection waits (a test gives its own, to count the waits without waiting)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)

    def chosen(self, tup: Any) -> bool:
        if self.match is not None:
            return any(self.match in str(v) for v in tup.values)
        return (tup.id % 1_000_003) < self.rate * 1_000_003

    def before_process(self, tup: Any) -> None:
        self.seen += 1
        if self.mode == "slow":
            if self.chosen(tup):   # only the chosen fraction (rate or match) is slowed
                self.sleep(self.delay_ms / 1000.0)
            return
        if self.mode == "hold":
            # a test's deterministic mid-round point: nothing past here commits until it says so
            if self.marker and self.chosen(tup):
                while not os.path.exists(self.marker):
                    self.sleep(HOLD_POLL_SECONDS)
            return
        if self.mode == "crash":
            if tup.task == self.task and self.seen > self.after and _first_spark_attempt():
                if self.marker:
                    open(self.marker, "a").close()
                os._exit(17)   # the Python worker dies mid-task, as an executor loss would
            return
        if not self.chosen(tup):
            return
        if self.mode == "permanent":
            raise InjectedFailure(f"injected permanent failure ({self.name}) at {self.component}")
        if tup.attempt <= self.attempts:
            raise InjectedFailure(f"injected transient failure ({self.name}) at {self.component}, "
                                  f"attempt {tup.attempt} of {self.attempts} failing")


def _first_spark_attempt() -> bool:
    try:
        from pyspark import TaskContext  # lazy: only a Spark worker has it loaded already
        ctx = TaskContext.get()
        return ctx is None or ctx.attemptNumber() == 0
    except ImportError:   # no pyspark: the test kit's local engine, one attempt per task
        return True


def injections(conf: dict[str, str], component: str) -> list[Injection]:
    """The injections configured for `component`, as model/config.py types them."""
    return [Injection(name=name, component=component, mode=inj.mode, rate=inj.rate, match=inj.match,
                      attempts=inj.attempts, task=inj.task, after=inj.after, delay_ms=inj.delay_ms,
                      marker=inj.marker)
            for name, inj in config.injections(conf).items() if inj.component == component]
