"""What tests/unit/multilang/test_multilang*.py share: a collector that records what a runtime would
route, a small workflow and task context, and a factory that starts shell components and
checks at the end that none of their processes is left behind."""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recovery.api.components import Tuple
from recovery.model.graph import ComponentContext
from recovery.model.workflow import Component, Input, ShellImpl, StreamDef, Workflow
from recovery.multilang.bolt import ShellBolt
from recovery.multilang.spout import ShellSpout
from tests.helpers import wait_for

PROGRAMS = Path(__file__).resolve().parent


@dataclass
class Emit:
    values: list
    stream: str
    anchors: list            # ids of the anchor tuples
    direct_task: int | None
    message_id: Any
    task_ids: list


@dataclass
class SpoutFailure:
    """A record failed at the spout's position (TaskRunner.spout_record whose decode raised)."""
    message_id: Any
    raw: Any
    stream: str
    format: str
    attempt: int
    error: str


class Harness:
    """The collector protocol, recorded. Non-direct emits go to the next list of
    `task_id_lists` (cycling; [5, 6] by default), direct ones to [task]. With `streams`, an
    emit on another stream raises ValueError, as the runtime's router does."""

    def __init__(self, task_id_lists: list[list[int]] | None = None,
                 streams: set[str] | None = None):
        self.emits: list[Emit] = []
        self.spout_failures: list[SpoutFailure] = []
        self.streams = streams
        self.acked: list[int] = []
        self.failed: list[tuple[int, str | None]] = []
        self.logs: list[tuple[str, str]] = []
        self.task_id_lists = task_id_lists or [[5, 6]]
        self.threads: set[int] = set()

    def emit(self, component, values, stream, anchors, direct_task, message_id):
        self.threads.add(threading.get_ident())
        if self.streams is not None and stream not in self.streams:
            raise ValueError(f"emitted on undeclared stream {stream!r}")
        if direct_task is not None:
            ids = [direct_task]
        else:
            ids = list(self.task_id_lists[len(self.emits) % len(self.task_id_lists)])
        self.emits.append(Emit(list(values), stream, [a.id for a in anchors], direct_task,
                               message_id, ids))
        return ids

    def ack(self, tup):
        self.threads.add(threading.get_ident())
        self.acked.append(tup.id)

    def fail(self, tup, error=None):
        self.threads.add(threading.get_ident())
        self.failed.append((tup.id, error))

    def spout_record(self, message_id, decode, raw, stream="default", fmt="", attempt=1,
                     replayed=False):
        self.threads.add(threading.get_ident())
        try:
            values = decode()
        except Exception as exc:  # noqa: BLE001 - recorded, as the runtime queues it
            self.spout_failures.append(SpoutFailure(message_id, raw, stream, fmt, attempt,
                                                    f"{type(exc).__name__}: {exc}"))
            return
        self.emits.append(Emit(list(values), stream, [], None, message_id, []))

    def log(self, message, level):
        self.threads.add(threading.get_ident())
        self.logs.append((level, message))

    # helpers for assertions
    def errors_of(self, tup_id: int) -> list[str]:
        return [e for i, e in self.failed if i == tup_id]

    def emitted(self, stream: str = "default") -> list[list]:
        return [e.values for e in self.emits if e.stream == stream]


def workflow(impl: ShellImpl, config: dict[str, str] | None = None) -> Workflow:
    """src (spout) -> bolt; the shell component under test is `bolt` or `spout`."""
    return Workflow(name="multilang-test", config=tuple((config or {}).items()), components=(
        Component(id="spout", kind="spout", impl=impl, streams=(StreamDef(fields=("word",)),)),
        Component(id="bolt", kind="bolt", impl=impl, inputs=(Input(source="spout"),),
                  streams=(StreamDef(fields=("word",)), StreamDef(id="ids", fields=("a", "b")),
                           StreamDef(id="ticks", fields=("a", "b")))),
    ))


def tuples(values: list, first_id: int = 1000) -> list[Tuple]:
    return [Tuple(first_id + i, "spout", "default", 1, [v], fields=("word",), source_task=2)
            for i, v in enumerate(values)]


def alive(pid: int) -> bool:
    """True while the process exists (a zombie counts: it was not reaped)."""
    return os.path.exists(f"/proc/{pid}")


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie (for processes that are not our
    children: their zombies are init's to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class Shells:
    """Starts shell components for a test and, at the end, cleans them up and checks that
    every process they started is gone and every collector call came from this thread."""

    def __init__(self) -> None:
        self.made: list[tuple[Any, Harness]] = []
        self.extra_pids: list[int] = []

    def impl(self, script: str, *args: str) -> ShellImpl:
        return ShellImpl(command=sys.executable, script=script, args=tuple(args))

    def bolt(self, script: str, *args: str, config: dict[str, str] | None = None,
             harness: Harness | None = None) -> tuple[ShellBolt, Harness]:
        impl = self.impl(script, *args)
        wf = workflow(impl, config)
        bolt = ShellBolt(impl, str(PROGRAMS))
        harness = harness or Harness()
        bolt._collector = harness
        self.made.append((bolt, harness))
        bolt.prepare(wf.conf("bolt"), ComponentContext(wf, "bolt", 1))
        return bolt, harness

    def spout(self, script: str, *args: str, config: dict[str, str] | None = None,
              harness: Harness | None = None) -> tuple[ShellSpout, Harness]:
        impl = self.impl(script, *args)
        wf = workflow(impl, config)
        spout = ShellSpout(impl, str(PROGRAMS))
        harness = harness or Harness()
        spout._collector = harness
        self.made.append((spout, harness))
        spout.open(wf.conf("spout"), ComponentContext(wf, "spout", 2))
        return spout, harness

    def close(self) -> None:
        for comp, harness in self.made:
            if isinstance(comp, ShellBolt):
                comp.cleanup()
            else:
                comp.close()
        me = threading.get_ident()
        # a killed process disappears soon, but "soon" has no bound on a loaded machine:
        # wait for the state, with a deadline only against a hang
        for comp, harness in self.made:
            assert harness.threads <= {me}, "a collector call came from another thread"
            for pid in comp.pids:
                wait_for(lambda pid=pid: not alive(pid), 30,
                         f"process {pid} of {comp.label} to be gone")
        for pid in self.extra_pids:
            wait_for(lambda pid=pid: not running(pid), 30, f"process {pid} to stop running")


def run(bolt: ShellBolt, values: list, first_id: int = 1000) -> list[Tuple]:
    """Every value as a tuple through process(), then finish()."""
    tups = tuples(values, first_id)
    for tup in tups:
        bolt.process(tup)
    bolt.finish()
    return tups
