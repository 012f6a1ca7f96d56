"""What ShellBolt and ShellSpout share: starting a child and its handshake, its log, error and
metrics messages, what a child that went wrong did, and restarts (see the package docstring)."""
from __future__ import annotations

import os
import queue
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from recovery.api.collector import OutputCollector
from recovery.errors import RecoveryError
from recovery.model import config as config_decl
from recovery.model.graph import ComponentContext
from recovery.model.workflow import ShellImpl
from recovery.multilang import process
from recovery.multilang.process import ChildProcess
from recovery.multilang.protocol import (
    END_OF_MESSAGE,
    ERROR_CHARS,
    LOG_LEVELS,
    BadMessage,
    EndOfOutput,
    ProtocolError,
    StderrLine,
    dumps,
    handshake_conf,
    quote,
)

# What the collector raises for an emit that is the program's mistake (an undeclared stream,
# a direct task that does not subscribe, values a grouping or the encoder cannot take);
# anything else (Redis gone...) is the host's and propagates, failing the Spark task.
EMIT_ERRORS = (ValueError, TypeError, LookupError, OverflowError)


class ShellError(RecoveryError):
    """A shell component's program cannot be started or fails its handshake."""


class ShellBase:
    """What ShellBolt and ShellSpout share: starting, handshaking, stopping children."""

    max_restarts = 5          # consecutive child failures without an ack before giving up...
    max_explained_restarts = 50   # ...or ones the child reported (an exception in pystorm)
    _read_delay = 0.0
    _gave_up_note = " (its tuples now fail without being run)"   # what giving up means
    _collector: OutputCollector   # bound by the runtime: Component.bind

    if TYPE_CHECKING:   # ShellBolt and ShellSpout each lose a child their own way
        def _lose(self, problem: str) -> None: ...

    def _shell_init(self, impl: ShellImpl, base_dir: str) -> None:
        self.impl = impl
        self.base_dir = os.path.abspath(base_dir or ".")
        try:
            argv = shlex.split(impl.command)
        except ValueError as exc:
            raise ShellError(f"shell command {impl.command!r}: {exc}") from None
        if impl.script:
            argv.append(impl.script)
        argv.extend(impl.args)
        if not argv:
            raise ShellError("shell component has an empty command")
        self.argv = argv
        label = " ".join(argv)
        self.label = label if len(label) <= 120 else label[:117] + "..."
        self.metrics: dict[str, list] = {}
        self._pack = msgpack.Packer().pack     # (a Packer reused: a third of packb's cost)
        self.errors: list[str] = []           # every child failure, described
        self.pids: list[int] = []             # every child started (tests check they are gone)
        self.restarts = 0
        self._child: ChildProcess | None = None
        self._live: list[ChildProcess] = []         # started and not yet stopped
        self._pid_dir: str | None = None
        self._own_pid_dir = False
        self._backlog: list | None = None
        self._broken: str | None = None
        self._strikes = 0                     # unexplained failures since the last ack
        self._explained = 0                   # failures reported by the child since then
        self._last_error: str | None = None
        self._last_error_log: str | None = None
        self._timeout = 30.0
        self._handlers: dict[str, Callable[[dict], None]] = {}

    # -- configuration and start ------------------------------------------------------------

    def _configure(self, conf: dict, context: Any) -> None:
        self.conf = conf
        self.context = context
        settings = config_decl.settings(conf)
        timeout = settings.subprocess_timeout_secs
        timeout = timeout if timeout > 0 else 30.0
        message_timeout = settings.message_timeout_secs
        if message_timeout > 0:
            timeout = min(timeout, 0.9 * message_timeout)
        self._timeout = timeout
        # a task's context, or (a component run by hand) Storm's context as a dict, or None
        task_context = context if isinstance(context, ComponentContext) else None
        if task_context is not None:
            self._storm_context = task_context.to_storm()
        else:
            self._storm_context = dict(context or {})
        storm_conf = handshake_conf(conf)
        if "topology.name" not in storm_conf and task_context is not None:
            storm_conf["topology.name"] = task_context.workflow.name
        self._storm_conf = storm_conf
        if self._pid_dir is None:
            parent = task_context.pid_dir if task_context is not None else None
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._pid_dir = tempfile.mkdtemp(prefix="recovery-shell-", dir=parent or None)
            self._own_pid_dir = True
        script = self.impl.script
        if script and not script.startswith("-"):
            path = os.path.join(self.base_dir, script)
            if not os.path.exists(path):
                raise ShellError(f"shell component {self._component_id()!r}: script {script!r} "
                                 f"not found in {self.base_dir}")

    def _component_id(self) -> str:
        if isinstance(self.context, ComponentContext):
            return self.context.component_id
        return self._storm_context.get("componentid") or self.label

    def _start(self) -> ChildProcess:
        """Start a child and do the handshake; raises ShellError saying why it failed."""
        where = f"shell component {self._component_id()!r} (`{self.label}` in {self.base_dir})"
        try:
            child = ChildProcess(self.argv, self.base_dir, self.label, self._read_delay)
        except OSError as exc:
            raise ShellError(f"{where}: cannot start: {exc}") from None
        self.pids.append(child.pid)
        self._live.append(child)
        deadline = process.monotonic() + self._timeout
        handshake = dumps({"conf": self._storm_conf, "pidDir": self._pid_dir,
                            "context": self._storm_context}, default=str).encode() + END_OF_MESSAGE
        problem = None
        first = None
        rest: list = []
        if not child.write_all(handshake, deadline):
            problem = "did not read its handshake"
        while problem is None and first is None:
            try:
                item = child.queue.get(timeout=max(0.0, deadline - process.monotonic()))
            except queue.Empty:
                problem = f"did not answer the handshake within {self._timeout:g} s"
                break
            if isinstance(item, StderrLine):
                self._log(item.line, "stderr")
            elif isinstance(item, EndOfOutput):
                problem = "exited during the handshake"
                if item.rest:
                    problem += f" after sending {quote(item.rest)}"
            elif item:
                first, rest = item[0], item[1:]
        if first is not None:
            if isinstance(first, BadMessage):
                problem = f"answered the handshake with {first.reason}: {quote(first.raw)}"
            elif not (isinstance(first, dict) and isinstance(first.get("pid"), int)):
                problem = f"answered the handshake with {quote(first)} instead of {{\"pid\": N}}"
            # The pid file is not checked here: Storm's storm.py sends the pid before it writes
            # the file (pystorm the other way round), and Storm's own host never needs it.
        if problem is not None:
            code = child.stop(grace=1.0 if problem.startswith("exited") else 0.0)
            self._live.remove(child)
            if problem.startswith("exited during") and code is not None and not child.killed:
                problem = problem.replace("exited", f"exited with code {code}", 1)
            for item in child.leftover():
                if isinstance(item, StderrLine):
                    self._log(item.line, "stderr")
            raise ShellError(self._describe(where + " " + problem, child, code))
        assert first is not None   # no problem means the handshake's pid arrived
        child.reported_pid = first["pid"]
        self._child = child
        self._backlog = rest or None
        self._last_error = self._last_error_log = None
        self._on_started()
        return child

    def _on_started(self) -> None:
        pass

    # -- messages shared by bolts and spouts ------------------------------------------------

    def _dispatch(self, msg: Any) -> None:
        """Hand one message from the program to the handler for its command; anything else
        is a ProtocolError quoting it."""
        if msg.__class__ is not dict:
            raise ProtocolError(self._child_problem(msg) or f"sent {quote(msg)}, which is not a command")
        command = msg.get("command")
        handler = self._handlers.get(command) if isinstance(command, str) else None
        if handler is None:
            raise ProtocolError(f"sent an unknown command: {quote(msg)}")
        handler(msg)

    def _collect_emit(self, values: list, stream: str, anchors: tuple, task: Any, message_id: Any) -> list:
        """The collector's emit, after checking that the values can be carried (JSON gives
        integers msgpack cannot encode: they would fail a whole chunk at the task's end)."""
        self._pack(values)
        return list(self._collector.emit(self, values, stream, anchors, task, message_id))

    def _log(self, message: str, level: str) -> None:
        self._collector.log(message, level)

    def _on_log(self, msg: dict) -> None:
        level = msg.get("level", 2)
        level = LOG_LEVELS.get(level, str(level)) if isinstance(level, int) else str(level)
        text = str(msg.get("msg", ""))
        if level == "error":                  # quoted if the child then goes away
            self._last_error_log = text
        self._log(text, level)

    def _on_error(self, msg: dict) -> None:
        text = str(msg.get("msg", ""))
        self._log(text, "error")
        self._last_error = text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "..."

    def _on_metrics(self, msg: dict) -> None:
        name = msg.get("name")
        if not isinstance(name, str):
            raise ProtocolError(f"a metrics message without a name: {quote(msg)}")
        values = self.metrics.setdefault(name, [])
        values.append(msg.get("params"))
        if len(values) > 10000:
            del values[:5000]

    # -- failure ------------------------------------------------------------------------------

    def _describe(self, problem: str, child: ChildProcess | None, code: int | None) -> str:
        parts = [problem]
        if code is not None and child is not None and not child.killed and "exit" not in problem:
            parts.append(f"exit code {code}" if code >= 0 else f"killed by signal {-code}")
        if self._last_error:
            parts.append(f"last error: {quote(self._last_error)}")
        elif self._last_error_log:
            parts.append(f"last error logged: {quote(self._last_error_log, ERROR_CHARS)}")
        if child is not None and child.stderr_tail:
            parts.append(f"stderr: {quote(chr(10).join(child.stderr_tail))}")
        return "; ".join(parts)

    def _stop_child(self, grace: float = 0.0) -> tuple[ChildProcess | None, int | None]:
        child, self._child = self._child, None
        self._backlog = None
        if child is None:
            return None, None
        code = child.stop(grace)
        if child in self._live:
            self._live.remove(child)
        for item in child.leftover():
            if isinstance(item, StderrLine):
                self._log(item.line, "stderr")
        self._check_pid_file(child)
        return child, code

    def _check_pid_file(self, child: ChildProcess) -> None:
        """Only a note: Storm's protocol asks for a pid file, but neither Storm's host nor
        this one needs it (children are killed by process group), so its absence fails
        nothing. Checked once the child is gone, when a late writer has had its chance."""
        if child.reported_pid is None or self._pid_dir is None:
            return
        path = os.path.join(self._pid_dir, str(child.reported_pid))
        if not os.path.exists(path):
            self._log(f"shell process `{self.label}` (pid {child.pid}) sent pid "
                      f"{child.reported_pid} but wrote no pid file {path}", "warn")

    def _shutdown(self) -> None:
        """cleanup()/close(): stop the child (a grace period to exit on EOF) and any other
        still running (e.g. when an exception interrupted a restart)."""
        self._stop_child(grace=min(1.0, self._timeout))
        while self._live:
            self._live.pop().stop()
        self._remove_pid_dir()

    def _child_problem(self, item: Any) -> str | None:
        """What is wrong, if the item ends the child's usefulness."""
        if isinstance(item, BadMessage):
            return f"sent {item.reason}: {quote(item.raw)}"
        if isinstance(item, EndOfOutput):
            child = self._child
            code = child.exited() if child else None
            deadline = process.monotonic() + 1.0
            while child is not None and code is None and process.monotonic() < deadline:
                time.sleep(0.005)
                code = child.exited()
            if item.rest:
                what = (f"closed its output in the middle of a message (no 'end' line): "
                        f"{quote(item.rest)}")
            else:
                what = "closed its output"
            if code is not None:
                what = (f"exited with code {code}" if code >= 0 else
                        f"was killed by signal {-code}") + ("" if not item.rest else
                                                            f" after sending {quote(item.rest)}"
                                                            " without an 'end' line")
            return what
        return None

    def _strike(self, error: str, explained: bool = False) -> None:
        """Count a child failure; too many in a row without an ack and the component gives
        up (its tuples fail at once, no more children are started)."""
        if explained:
            self._explained += 1
        else:
            self._strikes += 1
        if self._strikes > self.max_restarts or self._explained > self.max_explained_restarts:
            self._broken = (f"shell component {self._component_id()!r} gave up after "
                            f"{self._strikes + self._explained} consecutive process failures "
                            f"without an ack{self._gave_up_note}; last failure: {error}")
            self._log(self._broken, "error")

    def _hung(self, child: ChildProcess) -> str:
        what = f"did not answer for {self._timeout:g} s (hung)"
        if child.partial[0]:
            what += f"; it sent {quote(child.partial[0])} without an 'end' line"
        return what

    def _remove_pid_dir(self) -> None:
        if self._pid_dir and self._own_pid_dir:
            shutil.rmtree(self._pid_dir, ignore_errors=True)
            self._pid_dir = None

    # A spout's answer ends at its `sync`; a bolt never waits for one (stays False).
    _synced = False

    def _handle(self, item: Any) -> bool:
        """Handle one item the reader queued; False when it ended the child (it was lost).
        Messages after a spout's `sync` are kept for its next command."""
        if item.__class__ is list:
            for i, msg in enumerate(item):
                if self._synced:
                    self._backlog = item[i:]
                    return True
                try:
                    self._dispatch(msg)
                except ProtocolError as exc:
                    self._lose(str(exc))
                    return False
            return True
        if item.__class__ is StderrLine:
            self._log(item.line, "stderr")
            return True
        self._lose(self._child_problem(item) or f"sent {quote(item)}")
        return False


