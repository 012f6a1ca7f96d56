"""A shell component's child process: started in its own process group, its stdout parsed into
messages and its stderr collected on reader threads, written to without blocking, stopped and
reaped as a whole."""
from __future__ import annotations

import os
import queue
import select
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from typing import Any

from recovery.multilang.protocol import (
    END_OF_MESSAGE,
    MAX_MESSAGE_BYTES,
    QUOTE_CHARS,
    BadMessage,
    EndOfOutput,
    StderrLine,
    loads,
)

READ_DELAY = 0.001          # a bolt's reader lets small outputs accumulate this long
monotonic = time.monotonic   # the shell components' one clock (tests freeze it)


def read_stdout(stream: Any, q: queue.SimpleQueue, clock: list, partial: list,
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
            clock[0] = monotonic()
            buf = buf + chunk if buf else chunk
            partial[0] = buf
            if END_OF_MESSAGE not in buf:
                if len(buf) > MAX_MESSAGE_BYTES:
                    q.put([BadMessage(buf[:QUOTE_CHARS * 2], f"a message longer than "
                                f"{MAX_MESSAGE_BYTES} bytes without an 'end' line")])
                    buf = b""
                continue
            parts = buf.split(END_OF_MESSAGE)
            buf = partial[0] = parts.pop()
            msgs: list = []
            for part in parts:
                try:
                    msgs.append(loads(part))
                except ValueError as exc:      # JSONDecodeError, UnicodeDecodeError
                    msgs.append(BadMessage(part, f"invalid JSON ({exc})"))
            q.put(msgs)
            if delay[0] and len(chunk) < 8192:
                time.sleep(delay[0])
    finally:
        q.put(EndOfOutput(buf))
        try:
            stream.close()
        except OSError:
            pass


def read_stderr(stream: Any, q: queue.SimpleQueue, tail: deque) -> None:
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
            q.put(StderrLine(text))
    finally:
        try:
            stream.close()
        except OSError:
            pass


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class ChildProcess:
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
        self._finalizer = weakref.finalize(self, kill_group, self.pid)
        assert self.popen.stdin is not None   # stdin=PIPE
        self.fd_in = self.popen.stdin.fileno()
        os.set_blocking(self.fd_in, False)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.clock = [monotonic()]           # when stdout last delivered bytes
        self.partial = [b""]                  # what came after the last complete message
        self.read_delay = [read_delay]
        self.stderr_tail: deque = deque(maxlen=20)
        self.stdin_closed = False
        self.returncode: int | None = None
        self.killed = False                   # True when stop() had to kill it
        self.reported_pid: int | None = None  # the pid its handshake answer gave
        self._threads = [
            threading.Thread(target=read_stdout, args=(self.popen.stdout, self.queue, self.clock,
                                                        self.partial, self.read_delay),
                             name=f"shell-stdout-{self.pid}", daemon=True),
            threading.Thread(target=read_stderr,
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
                left = deadline - monotonic()
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
            if self.popen.stdin is not None:   # always (stdin=PIPE): for the type checker
                self.popen.stdin.close()
        except OSError:
            pass
        self.stdin_closed = True
        code = self.exited()
        deadline = monotonic() + grace
        while code is None and monotonic() < deadline:
            time.sleep(0.01)
            code = self.exited()
        self.killed = code is None
        kill_group(self.pid)                 # orphans in the group too, even if it exited
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
