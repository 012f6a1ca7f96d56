"""Shell components: Storm's multilang protocol (shared/seeds/000) over a child's stdin/stdout.

`ShellBolt(impl, base_dir)` and `ShellSpout(impl, base_dir)` run `command script args...`
(cwd = base_dir, the environment passed through) and speak the protocol unchanged, so a
program written for Storm (storm.py, storm.js, storm.rb, pystorm) runs as it is.

How the bolt works, for throughput: `process()` queues the tuple for the child's stdin
(written without blocking, a few milliseconds' worth at a time) and returns without waiting
for its ack; a reader thread parses whatever the child sends into a queue; every collector
call (emit, ack, fail, log) happens on the runtime's thread, in `process()` (what is already
there, without blocking) and in `finish()` (until every outstanding tuple is acked or
failed). At most `max_outstanding` tuples are in the child at a time. Waits are bounded by
`topology.subprocess.timeout.secs`, kept under `topology.message.timeout.secs` (the
runtime's own cooperative message timeout does not apply to shell bolts: these bounded waits
are how their tuples time out).

A child that misbehaves (invalid JSON, a message cut short by EOF, raw text printed on
stdout, exits, hangs, never acks) never stalls the run and never raises out of
`process()`/`finish()`: the child's process group is killed, the tuples it was working on
fail here with an error quoting what it sent (and the tail of its stderr), and a fresh child
(a new handshake) takes the tuples after. Children run in their own process group, killed
as a whole and reaped: nothing is left behind. Which outstanding tuples fail:

- the tuples the child already emitted for (anchored to) but never acked or failed;
- when the child did not fail a tuple itself just before it went away (pystorm reports an
  exception with `error`, `fail` and exits), the oldest outstanding tuple is the one it was
  working on and fails too;
- the rest were never touched and go to the fresh child (a tuple outstanding in more than
  `max_resends` unexplained failures fails);
- a child that answers heartbeats but acks nothing for `topology.subprocess.timeout.secs`
  fails every outstanding tuple.

After `max_restarts` consecutive failures without one ack in between (`max_explained_restarts`
when the child reported each one, as pystorm does for an exception), the component stops
starting children and fails its tuples at once: a program that cannot work does not cost a
restart per tuple. A shell spout that gives up fails its task instead (ShellSpout says
why). The child's stderr goes to the collector's log at level "stderr".

An emit the collector refuses (an undeclared stream, a direct task that does not subscribe,
values a grouping or msgpack cannot take) is the program's mistake, never silent: a bolt's
fails the tuples it was anchored to (and later emits for them are dropped); a spout's with a
message id fails its record at the spout's position, dead at once, and the program is sent
`fail` for it. The pid file is not required (Storm's storm.py writes it after sending its
pid, and Storm's host never needs it); its absence is only noted when the child stops.
"""
from __future__ import annotations

import json
import os
import queue
import re
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable

import msgpack

from recovery.model import config as config_decl
from recovery.api.components import HEARTBEAT_STREAM, SYSTEM_COMPONENT, TICK_STREAM, Bolt, Spout, Tuple
from recovery.errors import RecoveryError
from recovery.model.workflow import ShellImpl

__all__ = ["ShellBolt", "ShellSpout", "ShellError"]

QUOTE_CHARS = 300           # how much of what a child sent an error quotes
ERROR_CHARS = 4000          # longest `error` message kept as a failure's error
MAX_MESSAGE_BYTES = 16 << 20
OUT_LIMIT = 1 << 18         # bytes buffered for the child's stdin before process() waits
WRITE_BATCH = 16384         # process() writes when this much is buffered...
WRITE_DELAY = 0.002         # ...or this long after the last write
IDLE_DELAY = 0.0005         # ...or the child has nothing else to do and this much passed
READ_DELAY = 0.001          # a bolt's reader lets small outputs accumulate this long
_END = b"\nend\n"
_LOG_LEVELS = {0: "trace", 1: "debug", 2: "info", 3: "warn", 4: "error"}
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_dumps = json.dumps
_encode_compact = json.JSONEncoder(separators=(",", ":")).encode   # tuples and task ids
_loads = json.loads
_monotonic = time.monotonic
# What the collector raises for an emit that is the program's mistake (an undeclared stream,
# a direct task that does not subscribe, values a grouping or the encoder cannot take);
# anything else (Redis gone...) is the host's and propagates, failing the Spark task.
_EMIT_ERRORS = (ValueError, TypeError, LookupError, OverflowError)


def _collect_emit(component: Any, values: list, stream: str, anchors: tuple, task: Any,
                  message_id: Any) -> list:
    """The collector's emit, after checking that the values can be carried (JSON gives
    integers msgpack cannot encode: they would fail a whole chunk at the task's end)."""
    component._pack(values)
    return component._collector.emit(component, values, stream, anchors, task, message_id)


def _dispatch(component: Any, msg: Any) -> None:
    """Hand one message from the program to the component's handler for its command
    (ShellBolt and ShellSpout alike); anything else is a _ProtocolError quoting it."""
    if msg.__class__ is not dict:
        raise _ProtocolError(component._child_problem(msg) or
                             f"sent {_quote(msg)}, which is not a command")
    handler = component._handlers.get(msg.get("command"))
    if handler is None:
        raise _ProtocolError(f"sent an unknown command: {_quote(msg)}")
    handler(msg)


class ShellError(RecoveryError):
    """A shell component's program cannot be started or fails its handshake."""


class _ProtocolError(Exception):
    """A message the child sent is not the protocol (the text says what it was)."""


class _Bad:
    """A framed message that is not JSON."""
    __slots__ = ("raw", "reason")

    def __init__(self, raw: bytes, reason: str):
        self.raw = raw
        self.reason = reason


class _Eof:
    """The child closed its stdout; `rest` is what came after the last complete message."""
    __slots__ = ("rest",)

    def __init__(self, rest: bytes):
        self.rest = rest


class _Stderr:
    __slots__ = ("line",)

    def __init__(self, line: str):
        self.line = line


def _quote(data: Any, limit: int = QUOTE_CHARS) -> str:
    """A short, printable quotation of what a child sent."""
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    elif not isinstance(data, str):
        try:
            data = _dumps(data)
        except (TypeError, ValueError):
            data = repr(data)
    if len(data) > limit:
        return repr(data[:limit]) + f"... ({len(data)} chars)"
    return repr(data)


def _storm_conf(conf: dict) -> dict:
    """Topology config as Storm sends it: "30" -> 30, "true" -> True, other text as is."""
    out: dict[str, Any] = {}
    for key, value in (conf or {}).items():
        if isinstance(value, str):
            text = value.strip()
            low = text.lower()
            if low in ("true", "false"):
                value = low == "true"
            elif _INT_RE.fullmatch(text):
                value = int(text)
            elif _FLOAT_RE.fullmatch(text):
                value = float(text)
        out[str(key)] = value
    return out


def _conf_float(conf: dict, key: str) -> float:
    return float(config_decl.value(conf or {}, key))   # declared in recovery/model/config.py


def _read_stdout(stream: Any, q: "queue.SimpleQueue", clock: list, partial: list,
                 delay: list) -> None:
    """Reader thread: frame messages on `end` lines, parse them, queue them in batches.
    After a small read it waits `delay[0]` seconds for more (a child writing one message at
    a time would otherwise cost a thread switch per message); 0 for children that wait for
    answers (spouts, emits that ask for task ids)."""
    fd = stream.fileno()
    buf = b""
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            clock[0] = _monotonic()
            buf = buf + chunk if buf else chunk
            partial[0] = buf
            if _END not in buf:
                if len(buf) > MAX_MESSAGE_BYTES:
                    q.put([_Bad(buf[:QUOTE_CHARS * 2], f"a message longer than "
                                f"{MAX_MESSAGE_BYTES} bytes without an 'end' line")])
                    buf = b""
                continue
            parts = buf.split(_END)
            buf = partial[0] = parts.pop()
            msgs: list = []
            for part in parts:
                try:
                    msgs.append(_loads(part))
                except ValueError as exc:      # JSONDecodeError, UnicodeDecodeError
                    msgs.append(_Bad(part, f"invalid JSON ({exc})"))
            q.put(msgs)
            if delay[0] and len(chunk) < 8192:
                time.sleep(delay[0])
    finally:
        q.put(_Eof(buf))
        try:
            stream.close()
        except OSError:
            pass


def _read_stderr(stream: Any, q: "queue.SimpleQueue", tail: deque) -> None:
    """Stderr thread: every line to the queue (logged on the runtime's thread) and a tail."""
    try:
        while True:
            try:
                line = stream.readline(65536)
            except (OSError, ValueError):
                break
            if not line:
                break
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            tail.append(text)
            q.put(_Stderr(text))
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class _Child:
    """One running program: its own process group, stdin written without blocking, a reader
    thread for stdout and one for stderr feeding one queue."""

    def __init__(self, argv: list[str], cwd: str, label: str, read_delay: float):
        self.label = label
        self.popen = subprocess.Popen(argv, cwd=cwd, env=os.environ.copy(),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, bufsize=0, close_fds=True,
                                      start_new_session=True)
        self.pid = self.popen.pid
        # Safety net: a child still running when the interpreter exits is killed.
        self._finalizer = weakref.finalize(self, _kill_group, self.pid)
        self.fd_in = self.popen.stdin.fileno()
        os.set_blocking(self.fd_in, False)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.clock = [_monotonic()]           # when stdout last delivered bytes
        self.partial = [b""]                  # what came after the last complete message
        self.read_delay = [read_delay]
        self.stderr_tail: deque = deque(maxlen=20)
        self.stdin_closed = False
        self.returncode: int | None = None
        self.killed = False                   # True when stop() had to kill it
        self.reported_pid: int | None = None  # the pid its handshake answer gave
        self._threads = [
            threading.Thread(target=_read_stdout, args=(self.popen.stdout, self.queue, self.clock,
                                                        self.partial, self.read_delay),
                             name=f"shell-stdout-{self.pid}", daemon=True),
            threading.Thread(target=_read_stderr,
                             args=(self.popen.stderr, self.queue, self.stderr_tail),
                             name=f"shell-stderr-{self.pid}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def write(self, out: bytearray) -> bool:
        """Write what the child takes now; False once its stdin is closed."""
        if self.stdin_closed:
            out.clear()
            return False
        try:
            n = os.write(self.fd_in, out)
        except BlockingIOError:
            return True
        except OSError:                       # EPIPE: the child closed stdin or died
            self.stdin_closed = True
            out.clear()
            return False
        del out[:n]
        return True

    def write_all(self, data: bytes, deadline: float) -> bool:
        """Blocking write with a deadline (the handshake)."""
        out = bytearray(data)
        while out:
            if not self.write(out):
                return False
            if out:
                left = deadline - _monotonic()
                if left <= 0:
                    return False
                select.select([], [self.fd_in], [], min(left, 0.1))
        return True

    def exited(self) -> int | None:
        """The exit code if the child has exited, without reaping it (so its process group
        id cannot be reused before we kill the group)."""
        if self.returncode is not None:
            return self.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.popen.returncode if self.popen.returncode is not None else -1
        if info is None or info.si_pid == 0:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def stop(self, grace: float = 0.0) -> int | None:
        """Close stdin, give the child `grace` seconds to exit, kill its whole process group,
        reap it and let the reader threads finish. Returns the exit code."""
        if self.returncode is not None:
            return self.returncode
        try:
            self.popen.stdin.close()
        except OSError:
            pass
        self.stdin_closed = True
        code = self.exited()
        deadline = _monotonic() + grace
        while code is None and _monotonic() < deadline:
            time.sleep(0.01)
            code = self.exited()
        self.killed = code is None
        _kill_group(self.pid)                 # orphans in the group too, even if it exited
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:     # uninterruptible sleep: nothing more to do
            pass
        self._finalizer.detach()
        self.returncode = self.popen.returncode if code is None else code
        for t in self._threads:
            t.join(timeout=1.0)
        return self.returncode

    def leftover(self) -> list:
        """Items still queued (after stop())."""
        items = []
        while True:
            try:
                items.append(self.queue.get_nowait())
            except queue.Empty:
                return items


class _ShellBase:
    """What ShellBolt and ShellSpout share: starting, handshaking, stopping children."""

    max_restarts = 5          # consecutive child failures without an ack before giving up...
    max_explained_restarts = 50   # ...or ones the child reported (an exception in pystorm)
    _read_delay = 0.0
    _gave_up_note = " (its tuples now fail without being run)"   # what giving up means

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
        self._child: _Child | None = None
        self._live: list[_Child] = []         # started and not yet stopped
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
        timeout = _conf_float(conf, "topology.subprocess.timeout.secs")
        timeout = timeout if timeout > 0 else 30.0
        message_timeout = _conf_float(conf, "topology.message.timeout.secs")
        if message_timeout > 0:
            timeout = min(timeout, 0.9 * message_timeout)
        self._timeout = timeout
        if hasattr(context, "to_storm"):
            self._storm_context = context.to_storm()
        else:
            self._storm_context = dict(context or {})
        storm_conf = _storm_conf(conf)
        workflow = getattr(context, "workflow", None)
        if "topology.name" not in storm_conf and workflow is not None:
            storm_conf["topology.name"] = workflow.name
        self._storm_conf = storm_conf
        if self._pid_dir is None:
            parent = getattr(context, "pid_dir", None)
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
        return getattr(self.context, "component_id", None) or \
            self._storm_context.get("componentid") or self.label

    def _start(self) -> _Child:
        """Start a child and do the handshake; raises ShellError saying why it failed."""
        where = f"shell component {self._component_id()!r} (`{self.label}` in {self.base_dir})"
        try:
            child = _Child(self.argv, self.base_dir, self.label, self._read_delay)
        except OSError as exc:
            raise ShellError(f"{where}: cannot start: {exc}") from None
        self.pids.append(child.pid)
        self._live.append(child)
        deadline = _monotonic() + self._timeout
        handshake = _dumps({"conf": self._storm_conf, "pidDir": self._pid_dir,
                            "context": self._storm_context}, default=str).encode() + _END
        problem = None
        first = None
        rest: list = []
        if not child.write_all(handshake, deadline):
            problem = "did not read its handshake"
        while problem is None and first is None:
            try:
                item = child.queue.get(timeout=max(0.0, deadline - _monotonic()))
            except queue.Empty:
                problem = f"did not answer the handshake within {self._timeout:g} s"
                break
            if isinstance(item, _Stderr):
                self._log(item.line, "stderr")
            elif isinstance(item, _Eof):
                problem = "exited during the handshake"
                if item.rest:
                    problem += f" after sending {_quote(item.rest)}"
            elif item:
                first, rest = item[0], item[1:]
        if first is not None:
            if isinstance(first, _Bad):
                problem = f"answered the handshake with {first.reason}: {_quote(first.raw)}"
            elif not (isinstance(first, dict) and isinstance(first.get("pid"), int)):
                problem = f"answered the handshake with {_quote(first)} instead of {{\"pid\": N}}"
            # The pid file is not checked here: Storm's storm.py sends the pid before it writes
            # the file (pystorm the other way round), and Storm's own host never needs it.
        if problem is not None:
            code = child.stop(grace=1.0 if problem.startswith("exited") else 0.0)
            self._live.remove(child)
            if problem.startswith("exited during") and code is not None and not child.killed:
                problem = problem.replace("exited", f"exited with code {code}", 1)
            for item in child.leftover():
                if isinstance(item, _Stderr):
                    self._log(item.line, "stderr")
            raise ShellError(self._describe(where + " " + problem, child, code))
        child.reported_pid = first["pid"]
        self._child = child
        self._backlog = rest or None
        self._last_error = self._last_error_log = None
        self._on_started()
        return child

    def _on_started(self) -> None:
        pass

    # -- messages shared by bolts and spouts ------------------------------------------------

    def _log(self, message: str, level: str) -> None:
        collector = self._collector
        if collector is not None:
            collector.log(message, level)

    def _on_log(self, msg: dict) -> None:
        level = msg.get("level", 2)
        level = _LOG_LEVELS.get(level, str(level)) if isinstance(level, int) else str(level)
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
            raise _ProtocolError(f"a metrics message without a name: {_quote(msg)}")
        values = self.metrics.setdefault(name, [])
        values.append(msg.get("params"))
        if len(values) > 10000:
            del values[:5000]

    # -- failure ------------------------------------------------------------------------------

    def _describe(self, problem: str, child: _Child | None, code: int | None) -> str:
        parts = [problem]
        if code is not None and child is not None and not child.killed and "exit" not in problem:
            parts.append(f"exit code {code}" if code >= 0 else f"killed by signal {-code}")
        if self._last_error:
            parts.append(f"last error: {_quote(self._last_error)}")
        elif self._last_error_log:
            parts.append(f"last error logged: {_quote(self._last_error_log, ERROR_CHARS)}")
        if child is not None and child.stderr_tail:
            parts.append(f"stderr: {_quote(chr(10).join(child.stderr_tail))}")
        return "; ".join(parts)

    def _stop_child(self, grace: float = 0.0) -> tuple[_Child | None, int | None]:
        child, self._child = self._child, None
        self._backlog = None
        if child is None:
            return None, None
        code = child.stop(grace)
        if child in self._live:
            self._live.remove(child)
        for item in child.leftover():
            if isinstance(item, _Stderr):
                self._log(item.line, "stderr")
        self._check_pid_file(child)
        return child, code

    def _check_pid_file(self, child: _Child) -> None:
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
        if isinstance(item, _Bad):
            return f"sent {item.reason}: {_quote(item.raw)}"
        if isinstance(item, _Eof):
            code = self._child.exited() if self._child else None
            deadline = _monotonic() + 1.0
            while code is None and _monotonic() < deadline:
                time.sleep(0.005)
                code = self._child.exited()
            if item.rest:
                what = (f"closed its output in the middle of a message (no 'end' line): "
                        f"{_quote(item.rest)}")
            else:
                what = "closed its output"
            if code is not None:
                what = (f"exited with code {code}" if code >= 0 else
                        f"was killed by signal {-code}") + ("" if not item.rest else
                                                            f" after sending {_quote(item.rest)}"
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

    def _hung(self, child: _Child) -> str:
        what = f"did not answer for {self._timeout:g} s (hung)"
        if child.partial[0]:
            what += f"; it sent {_quote(child.partial[0])} without an 'end' line"
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
                    _dispatch(self, msg)
                except _ProtocolError as exc:
                    self._lose(str(exc))
                    return False
            return True
        if item.__class__ is _Stderr:
            self._log(item.line, "stderr")
            return True
        self._lose(self._child_problem(item) or f"sent {_quote(item)}")
        return False


class ShellBolt(_ShellBase, Bolt):
    """A bolt implemented by a multilang program (Storm's ShellBolt)."""

    max_outstanding = 1000    # tuples written to the child and not yet acked or failed
    max_resends = 3           # times a tuple moves to a fresh child after unexplained failures
    _read_delay = READ_DELAY

    def __init__(self, impl: ShellImpl, base_dir: str):
        self._shell_init(impl, base_dir)
        self._pending: dict[str, Tuple] = {}
        self._touched: set[str] = set()
        # tuples this host failed (an emit for them raised) that the child still works on:
        # what it emits for them is dropped, their ack or fail ignored
        self._failed_here: set[str] = set()
        self._resent: dict[str, int] = {}
        self._out = bytearray()
        self._unsent = 0                      # tuples in _out not written yet
        self._urgent = False                  # _out holds an answer the child waits for
        self._last_write = 0.0
        self._prefixes: dict[tuple, str] = {}
        self._hb_sent = 0                     # heartbeats sent to the current child...
        self._syncs = 0                       # ...and its syncs (answers), at most as many
        self._tick_barrier = 0                # syncs needed before the last tick is done
        self.heartbeats = 0                   # heartbeats sent, all children
        self.syncs = 0                        # syncs received, all children
        self._next_hb = 0.0
        self._next_tick = float("inf")
        self._next_timer = float("inf")
        self._tick_secs = 0.0
        self._hb_secs = 1.0
        self._engine_ticks = False
        self._seq = 0
        self._last_progress = 0.0
        self._last_kind = ""
        self._handlers = {"emit": self._on_emit, "ack": self._on_ack, "fail": self._on_fail,
                          "log": self._on_log, "error": self._on_error,
                          "metrics": self._on_metrics, "sync": self._on_sync}

    # -- the runtime's calls ----------------------------------------------------------------

    def prepare(self, conf: dict, context: Any) -> None:
        self._configure(conf, context)
        self._tick_secs = max(0.0, _conf_float(conf, "topology.tick.tuple.freq.secs"))
        hb = _conf_float(conf, "topology.multilang.heartbeat.interval.secs")
        self._hb_secs = hb if hb > 0 else 1.0
        try:
            self._start()
        except ShellError:
            self._remove_pid_dir()
            raise

    def process(self, tup: Tuple) -> None:
        if self._child is None and not self._restart(tup):
            return
        tid = str(tup.id) if type(tup.id) is int else _dumps(str(tup.id))[1:-1]
        if tid in self._pending or tid in self._failed_here:   # the same tuple twice at once
            self._seq += 1
            tid = f"{tid}#{self._seq}"
        try:
            data = self._encode(tup, tid)
        except (TypeError, ValueError) as exc:
            self._collector.fail(tup, f"cannot send the tuple to shell process `{self.label}`: "
                                      f"its values are not JSON ({exc})")
            return
        if tup.stream == TICK_STREAM and tup.is_tick:
            self._engine_ticks = True
            self._next_tick = float("inf")
        if not self._pending:
            self._last_progress = _monotonic()
        self._pending[tid] = tup
        self._out += data
        self._unsent += 1
        self._pump()
        if len(self._pending) >= self.max_outstanding or len(self._out) > OUT_LIMIT:
            self._service(self._below_limits)

    def finish(self) -> None:
        self._pump()
        self._service(self._all_done)
        if self._child is not None and self._syncs < self._tick_barrier:
            # what the child emits for the last tick still belongs to this task: a heartbeat
            # sent after the tick is answered once the tick has been processed
            if self._hb_sent < self._tick_barrier:
                self._send_heartbeat(_monotonic())
            self._service(self._tick_done)

    def cleanup(self) -> None:
        self._shutdown()

    # -- writing ------------------------------------------------------------------------------

    def _encode(self, tup: Tuple, tid: str) -> bytes:
        key = (tup.component, tup.stream, tup.source_task)   # (a tick is known by the first two)
        prefix = self._prefixes.get(key)
        if prefix is None:
            if tup.is_tick:
                prefix = f'{{"comp":"{SYSTEM_COMPONENT}","stream":"{TICK_STREAM}","task":-1,"id":"'
            else:
                prefix = (f'{{"comp":{_dumps(tup.component)},"stream":{_dumps(tup.stream)},'
                          f'"task":{int(tup.source_task)},"id":"')
            self._prefixes[key] = prefix
        return (prefix + tid + '","tuple":' + _encode_compact(tup.values) + "}\nend\n").encode()

    def _send_system(self, stream: str, values: list) -> None:
        self._seq += 1
        self._out += (f'{{"id":"{stream}-{self._seq}","comp":"{SYSTEM_COMPONENT}",'
                      f'"stream":"{stream}","task":-1,"tuple":{_dumps(values)}}}\nend\n').encode()

    def _timers(self, now: float) -> bool:
        """Send a tick when one is due, and a heartbeat every interval while tuples are
        outstanding (one at a time: the next goes after the child's `sync`). True when it
        sent something."""
        sent = False
        if now >= self._next_tick:
            sent = True
            secs = self._tick_secs
            self._send_system(TICK_STREAM, [int(secs) if secs == int(secs) else secs])
            self._next_tick = now + secs
            self._tick_barrier = self._hb_sent + 1
        answered = self._syncs >= self._hb_sent
        if self._pending and answered and now >= self._next_hb:
            self._send_heartbeat(now)
            answered = False
            sent = True
        nxt = self._next_tick
        if answered:
            nxt = min(nxt, self._next_hb if self._pending else now + self._hb_secs)
        self._next_timer = nxt
        return sent

    def _send_heartbeat(self, now: float) -> None:
        self._send_system(HEARTBEAT_STREAM, [])
        self._hb_sent += 1
        self.heartbeats += 1
        self._next_hb = now + self._hb_secs

    def _tick_done(self) -> bool:
        return self._syncs >= self._tick_barrier

    def _on_started(self) -> None:
        now = _monotonic()
        self._hb_sent = self._syncs = self._tick_barrier = 0
        self._next_hb = now + self._hb_secs
        self._last_progress = now
        self._last_kind = ""
        if self._tick_secs > 0 and not self._engine_ticks:
            self._next_tick = now + self._tick_secs
        self._next_timer = min(self._next_tick, self._next_hb)

    # -- reading ------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Without blocking: write what the child takes, handle what it sent, run timers.
        Tuples are written in batches (WRITE_BATCH bytes, WRITE_DELAY seconds, sooner when
        the child has nothing else to work on): fewer, larger writes cost both processes
        much less than one per tuple. Task-id answers, ticks and heartbeats go at once."""
        child = self._child
        if child is None:
            return
        if self._backlog is not None:
            items, self._backlog = self._backlog, None
            if not self._handle(items):
                return
        q = child.queue
        while not q.empty():
            if not self._handle(q.get()):
                return
        now = _monotonic()
        if now >= self._next_timer and self._timers(now):
            self._urgent = True
        out = self._out
        if out and (self._urgent or len(out) >= WRITE_BATCH
                    or now - self._last_write >= WRITE_DELAY
                    or (len(self._pending) <= self._unsent
                        and now - self._last_write >= IDLE_DELAY)):
            self._urgent = False
            self._last_write = now
            if not child.write(out):
                # stdin closed: the child is going away; handle what it sent until its EOF
                self._service(lambda: self._child is not child)
                return
            if not out:
                self._unsent = 0

    def _write(self) -> None:
        if self._out:
            self._child.write(self._out)
            if not self._out:
                self._unsent = 0

    def _below_limits(self) -> bool:
        return len(self._pending) < self.max_outstanding and len(self._out) <= OUT_LIMIT

    def _all_done(self) -> bool:
        return not self._pending

    def _service(self, done: Callable[[], bool]) -> None:
        """Block until done(): handle messages, send ticks and heartbeats, and lose the child
        when it stops answering for the subprocess timeout."""
        child = None
        start = 0.0
        while True:
            if self._child is not child:
                child = self._child
                start = _monotonic()
                if child is None:
                    return
            if self._backlog is not None:
                items, self._backlog = self._backlog, None
                if not self._handle(items):
                    continue
            self._write()
            if done():
                return
            now = _monotonic()
            if now >= self._next_timer:
                self._timers(now)
                self._write()
            limit = self._timeout
            silent = now - max(child.clock[0], start)
            if silent > limit:
                self._lose(self._hung(child))
                continue
            if self._pending and now - max(self._last_progress, start) > limit:
                self._lose(f"did not ack or fail any of {len(self._pending)} outstanding "
                           f"tuples for {limit:g} s" + ("; it answered heartbeats"
                                                         if self._syncs else ""),
                           fail_all=True)
                continue
            wait = min(self._next_timer - now, limit - silent + 0.01,
                       0.02 if self._out else 0.25)
            try:
                item = child.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                if child.exited() is not None and _monotonic() - child.clock[0] > 1.0:
                    # it is gone but something it started holds its stdout open
                    self._lose(f"exited with code {child.exited()} (its output stayed open)")
                continue
            if self._handle(item):
                q = child.queue
                while not q.empty() and self._handle(q.get()):
                    pass

    def _on_emit(self, msg: dict) -> None:
        values = msg.get("tuple")
        if values.__class__ is not list:
            raise _ProtocolError(f"sent an emit without a tuple list: {_quote(msg)}")
        anchors: tuple = ()
        ids = msg.get("anchors")
        anchored_to_failed = False
        if ids:
            pending = self._pending
            found = []
            for aid in ids:
                if aid.__class__ is not str:
                    aid = str(aid)
                t = pending.get(aid)
                if t is not None:
                    found.append(t)
                    self._touched.add(aid)
                elif self._failed_here and aid in self._failed_here:
                    anchored_to_failed = True
            anchors = tuple(found)
        stream = msg.get("stream") or "default"
        task = msg.get("task")
        if task is not None and (task.__class__ is not int):
            raise _ProtocolError(f"sent an emit whose task is not a number: {_quote(msg)}")
        self._last_progress = _monotonic()
        self._last_kind = "emit"
        if anchored_to_failed:
            # on behalf of a tuple failed here: it must not flow (the tuple is replayed, and
            # emitted unanchored it would flow untracked and twice); its other anchors fail
            # too, as a Python bolt's emit onto a failed tuple raises and fails its input
            for t in anchors:
                self._fail_tuple(t, f"shell process `{self.label}` emitted {_quote(msg)} "
                                    f"anchored to a tuple that already failed here")
            task_ids = []
        else:
            try:
                task_ids = _collect_emit(self, values, stream, anchors, task, None)
            except _EMIT_ERRORS as exc:
                error = f"shell process `{self.label}` emitted {_quote(msg)}: {exc}"
                if anchors:
                    for t in anchors:
                        self._fail_tuple(t, error)
                else:
                    self._log(error, "error")
                task_ids = []
        if task is None and msg.get("need_task_ids", True):
            self._out += _encode_compact(list(task_ids or ())).encode() + _END
            self._urgent = True
            self._child.read_delay[0] = 0.0   # it waits for answers: read without delay

    def _fail_tuple(self, tup: Tuple, error: str) -> None:
        for tid, t in self._pending.items():
            if t is tup:
                del self._pending[tid]
                self._touched.discard(tid)
                self._failed_here.add(tid)
                self._collector.fail(tup, error)
                return

    def _on_ack(self, msg: dict) -> None:
        tid = msg.get("id")
        if tid.__class__ is not str:
            tid = str(tid)
        tup = self._pending.pop(tid, None)
        self._last_progress = _monotonic()
        self._last_kind = "ack"
        self._strikes = self._explained = 0
        if tup is not None:
            if self._touched:
                self._touched.discard(tid)
            self._collector.ack(tup)
        elif self._failed_here:
            self._failed_here.discard(tid)    # failed here already: that fail stands

    def _on_fail(self, msg: dict) -> None:
        tid = msg.get("id")
        if tid.__class__ is not str:
            tid = str(tid)
        tup = self._pending.pop(tid, None)
        self._last_progress = _monotonic()
        self._last_kind = "fail"
        error, self._last_error = self._last_error, None
        if tup is not None:
            self._touched.discard(tid)
            self._collector.fail(tup, error or f"failed by shell process `{self.label}`")
        elif self._failed_here:
            self._failed_here.discard(tid)

    def _on_error(self, msg: dict) -> None:
        super()._on_error(msg)
        self._last_progress = _monotonic()
        self._last_kind = "error"

    def _on_sync(self, msg: dict) -> None:
        self.syncs += 1
        if self._syncs < self._hb_sent:
            self._syncs += 1
            if self._next_hb < self._next_timer:
                self._next_timer = self._next_hb

    # -- losing a child -----------------------------------------------------------------------

    def _lose(self, problem: str, fail_all: bool = False) -> None:
        """The child is unusable: kill it, fail the tuples it was working on, give the
        untouched ones to a fresh child."""
        explained = self._last_kind == "fail"
        last_error = self._last_error
        pid = self._child.pid if self._child else "?"
        child, code = self._stop_child()
        self._last_error = last_error
        error = self._describe(f"shell process `{self.label}` (pid {pid}) {problem}", child, code)
        self._last_error = None
        self.errors.append(error)
        self._log(error, "error")
        self._out.clear()
        self._unsent = 0
        pending, self._pending = self._pending, {}
        touched, self._touched = self._touched, set()
        self._failed_here.clear()             # the fresh child knows none of them
        resent, self._resent = self._resent, {}
        blame_first = not (fail_all or explained or touched.intersection(pending))
        again: list[tuple[str, Tuple, int]] = []
        fail = self._collector.fail
        for tid, tup in pending.items():
            if fail_all or tid in touched:
                fail(tup, error)
            elif blame_first:
                blame_first = False
                fail(tup, error)
            else:
                n = resent.get(tid, 0) + (0 if explained else 1)
                if n > self.max_resends:
                    fail(tup, error + " (outstanding in an earlier failure too)")
                else:
                    again.append((tid, tup, n))
        self._strike(error, explained)
        if not again:
            return                               # start a fresh child when a tuple comes
        if not self._restart(None):
            for _, tup, _ in again:
                fail(tup, self._broken or self.errors[-1])
            return
        for tid, tup, n in again:
            self._pending[tid] = tup
            if n:
                self._resent[tid] = n
            self._out += self._encode(tup, tid)
        self._write()

    def _restart(self, tup: Tuple | None) -> bool:
        """Start a fresh child; on failure fail `tup` (when given) and return False."""
        if self._broken is None:
            try:
                self._start()
                self.restarts += 1
                return True
            except ShellError as exc:
                error = str(exc)
                self.errors.append(error)
                self._log(error, "error")
                self._strike(error)
        else:
            error = self._broken
        if tup is not None:
            self._collector.fail(tup, self._broken or error)
        return False


class ShellSpout(_ShellBase, Spout):
    """A spout implemented by a multilang program (Storm's ShellSpout). Synchronous: each
    call sends one command and handles emits and logs until the program's `sync`.
    `next_tuple()` returns whether it emitted anything (nothing: the spout is exhausted).
    A program that fails is restarted and `next` asked again of the fresh one (as Storm
    restarts a spout); after `max_restarts` failures in a row, or `max_failures` in all (a
    program that restarts from its beginning and fails at the same place again would run
    for ever), the spout gives up: `next_tuple()` raises ShellError, which fails its task
    (see there why)."""

    max_failures = 25
    max_unseen_nexts = 100    # `next`s in a row whose emits the runtime cannot see
    _gave_up_note = " (its task fails)"

    def __init__(self, impl: ShellImpl, base_dir: str):
        self._shell_init(impl, base_dir)
        self._out = bytearray()
        self._emitted = 0
        self._seen = 0                        # emits that made or failed a record (visible)
        self._synced = False
        self._failed_ids: set[str] = set()    # message ids whose emit raised here (JSON)
        self._to_fail: list[Any] = []         # ...to tell the program once its answer is over
        self._handlers = {"emit": self._on_emit, "log": self._on_log, "error": self._on_error,
                          "metrics": self._on_metrics, "sync": self._on_sync}

    def open(self, conf: dict, context: Any) -> None:
        self._configure(conf, context)
        try:
            self._start()
        except ShellError:
            self._remove_pid_dir()
            raise

    def next_tuple(self) -> bool:
        """Ask for `next` until an emit the runtime can see (a record made, or failed here):
        the runtime takes a `next_tuple()` that changed nothing for an exhausted spout, so
        one whose only emits were refused (an unreliable one, or a re-emit of a record
        already failed here) must not end the spout while it has more to give."""
        for _ in range(self.max_unseen_nexts):
            self._seen = 0
            emitted = self._command({"command": "next"}, retry=True)
            while self._to_fail:              # Storm calls the spout's fail for these
                self._command({"command": "fail", "id": self._to_fail.pop(0)})
            if self._broken is not None:
                # A spout that gave up is not exhausted: ending it as if it were would leave
                # the rest of its input silently missing from a run that says `completed`.
                # Nor can its position be failed for recovery to replay: no tuple of that
                # input exists yet (only the program knows what it had left). What Storm does
                # is restart the spout's task, so the task fails: Spark retries it where it
                # allows retries, and otherwise the round fails in Spark with this one line
                # and `recovery recover RUN` resumes it once the cause is fixed (the task
                # committed nothing: its records come again from a fresh program, under the
                # same root ids).
                raise ShellError(self._broken)
            if emitted == 0 or self._seen:
                return emitted > 0
        self._log(f"shell process `{self.label}` answered {self.max_unseen_nexts} `next`s in "
                  f"a row only with emits the host refused: taken for exhausted", "error")
        return False

    def ack(self, tup_id: Any) -> None:
        self._command({"command": "ack", "id": tup_id})

    def fail(self, tup_id: Any) -> None:
        self._command({"command": "fail", "id": tup_id})

    def activate(self) -> None:
        self._command({"command": "activate"})

    def deactivate(self) -> None:
        self._command({"command": "deactivate"})

    def close(self) -> None:
        self._shutdown()

    def _command(self, command: dict, retry: bool = False) -> int:
        """Send a command, handle the answer up to `sync`; returns the number of emits.
        A child that fails is replaced (and `next` retried on the fresh one)."""
        data = _dumps(command, default=str).encode() + _END
        while True:
            if self._child is None:
                if self._broken is not None:
                    return 0
                try:
                    self._start()
                    self.restarts += 1
                except ShellError as exc:
                    self._note_failure(str(exc))
                    if not retry or self._broken is not None:
                        return 0
                    continue
            emitted = self._exchange(data)
            if emitted is not None:
                return emitted
            if not retry or self._broken is not None:
                return 0

    def _exchange(self, data: bytes) -> int | None:
        child = self._child
        self._emitted = 0
        self._synced = False
        self._out += data
        start = _monotonic()
        if self._backlog is not None:
            items, self._backlog = self._backlog, None
            if not self._handle(items):
                return None
        while not self._synced:
            if self._out:
                child.write(self._out)
            now = _monotonic()
            silent = now - max(child.clock[0], start)
            if silent > self._timeout:
                self._lose(self._hung(child))
                return None
            try:
                item = child.queue.get(timeout=min(self._timeout - silent + 0.01,
                                                   0.02 if self._out else 0.25))
            except queue.Empty:
                if child.exited() is not None and _monotonic() - child.clock[0] > 1.0:
                    self._lose(f"exited with code {child.exited()} (its output stayed open)")
                    return None
                continue
            if not self._handle(item):
                return None
        self._strikes = self._explained = 0
        return self._emitted

    def _on_emit(self, msg: dict) -> None:
        values = msg.get("tuple")
        if values.__class__ is not list:
            raise _ProtocolError(f"sent an emit without a tuple list: {_quote(msg)}")
        task = msg.get("task")
        if task is not None and task.__class__ is not int:
            raise _ProtocolError(f"sent an emit whose task is not a number: {_quote(msg)}")
        stream = msg.get("stream") or "default"
        self._emitted += 1
        message_id = msg.get("id")
        try:
            task_ids = _collect_emit(self, values, stream, (), task, message_id)
            self._seen += 1
        except _EMIT_ERRORS as exc:
            self._emit_failed(msg, message_id, stream, exc)
            task_ids = []
        if task is None and msg.get("need_task_ids", True):
            self._out += _encode_compact(list(task_ids or ())).encode() + _END
            self._child.write(self._out)      # the program waits for these

    def _on_sync(self, msg: dict) -> None:
        self._synced = True

    def _emit_failed(self, msg: dict, message_id: Any, stream: str, exc: Exception) -> None:
        """An emit the collector refused. With a message id its record must not vanish: its
        root fails at the spout's position, with the emit and the error, and goes straight to
        the dead letters (the stored workflow decides streams, direct tasks and groupings,
        so a replay could only fail again), so the root is dead, never complete; and the
        program is sent `fail` for it, as Storm's spout would be. Once per message id: a
        spout that re-emits what failed would otherwise loop for ever."""
        self._log(f"shell process `{self.label}` emitted {_quote(msg)}: {exc}", "error")
        if message_id is None:                # an unreliable emit: no root to fail
            return
        key = _dumps(message_id, sort_keys=True, default=str)
        if key in self._failed_ids:
            return
        self._failed_ids.add(key)

        def refused() -> list:
            raise exc

        attempts = max(1, int(_conf_float(self.conf, "recovery.max.attempts")))
        self._collector.spout_record(message_id, refused, _dumps(msg, default=str).encode(),
                                     stream, "json", attempts)
        self._seen += 1
        self._to_fail.append(message_id)

    def _note_failure(self, error: str) -> None:
        self.errors.append(error)
        self._log(error, "error")
        self._strike(error)
        if self._broken is None and len(self.errors) > self.max_failures:
            self._broken = (f"shell component {self._component_id()!r} gave up after "
                            f"{len(self.errors)} process failures{self._gave_up_note}; "
                            f"last failure: {error}")
            self._log(self._broken, "error")

    def _lose(self, problem: str) -> None:
        pid = self._child.pid if self._child else "?"
        child, code = self._stop_child()
        self._out.clear()
        error = self._describe(f"shell process `{self.label}` (pid {pid}) {problem}", child, code)
        self._last_error = None
        self._note_failure(error)
