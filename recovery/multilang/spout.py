"""ShellSpout: a spout whose logic is a multilang program; it asks for each tuple with `next`."""
from __future__ import annotations

import queue
from typing import Any

from recovery.api.components import Spout
from recovery.model import config as config_decl
from recovery.model.workflow import ShellImpl
from recovery.multilang import process
from recovery.multilang.base import EMIT_ERRORS, ShellBase, ShellError
from recovery.multilang.protocol import (
    END_OF_MESSAGE,
    ProtocolError,
    dumps,
    encode_compact,
    quote,
)


class ShellSpout(ShellBase, Spout):
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
        data = dumps(command, default=str).encode() + END_OF_MESSAGE
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
        assert child is not None   # next_tuple starts one first
        self._emitted = 0
        self._synced = False
        self._out += data
        start = process.monotonic()
        if self._backlog is not None:
            items, self._backlog = self._backlog, None
            if not self._handle(items):
                return None
        while not self._synced:
            if self._out:
                child.write(self._out)
            now = process.monotonic()
            silent = now - max(child.clock[0], start)
            if silent > self._timeout:
                self._lose(self._hung(child))
                return None
            try:
                item = child.queue.get(timeout=min(self._timeout - silent + 0.01,
                                                   0.02 if self._out else 0.25))
            except queue.Empty:
                if child.exited() is not None and process.monotonic() - child.clock[0] > 1.0:
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
            raise ProtocolError(f"sent an emit without a tuple list: {quote(msg)}")
        task = msg.get("task")
        if task is not None and task.__class__ is not int:
            raise ProtocolError(f"sent an emit whose task is not a number: {quote(msg)}")
        stream = msg.get("stream") or "default"
        self._emitted += 1
        message_id = msg.get("id")
        try:
            task_ids = self._collect_emit(values, stream, (), task, message_id)
            self._seen += 1
        except EMIT_ERRORS as exc:
            self._emit_failed(msg, message_id, stream, exc)
            task_ids = []
        if task is None and msg.get("need_task_ids", True):
            self._out += encode_compact(list(task_ids or ())).encode() + END_OF_MESSAGE
            assert self._child is not None   # the child that sent the emit
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
        self._log(f"shell process `{self.label}` emitted {quote(msg)}: {exc}", "error")
        if message_id is None:                # an unreliable emit: no root to fail
            return
        key = dumps(message_id, sort_keys=True, default=str)
        if key in self._failed_ids:
            return
        self._failed_ids.add(key)

        def refused() -> list:
            raise exc

        attempts = max(1, config_decl.settings(self.conf).max_attempts)
        self._collector.spout_record(message_id, refused, dumps(msg, default=str).encode(),
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
