"""A round on a cluster left without executors: said within seconds, failed after a while.

When every executor of the application is lost (its workers killed or gone), Spark keeps the
round's job waiting for new ones: nothing fails, the driver prints nothing, and the run keeps
its lease; only Spark's own log says `Lost executor 0 ... worker lost`. So while a round runs
on a master that is not local (local mode's executors are threads of the driver's own JVM), a
watcher thread asks the SparkContext for its executors (`getExecutorIds`, on the JVM side)
every POLL_SECS:

- none for NOTICE_SECS: one warning on stderr naming the executors lost, and the same line in
  the run record (`executors_waiting`, which `recovery status` shows while the driver lives);
- an executor back: said, and the record's line cleared; the round goes on;
- none for `recovery.executors.wait.secs`: the round's jobs are cancelled (by their job tag)
  and the round fails in one line naming the executors lost (errors.ExecutorsLost). The run is left
  in `error` and its lease released: once a worker is back, `recovery recover RUN` resumes it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

POLL_SECS = 0.5
#: How long a round may be without executors before it is said (a worker that restarts its
#: executor at once is not worth a warning).
NOTICE_SECS = 3.0


def executor_ids(sc: Any) -> set[str]:
    """The ids of the executors the application has now (the driver is none of them). Classic
    sessions only: it asks the driver's JVM, which a Spark Connect client does not have (the
    engine builds no watch there: rounds._executor_watch)."""
    ids = sc._jsc.sc().getExecutorIds()   # a Scala Seq
    return {str(ids.apply(i)) for i in range(ids.size())}


def _names(ids: set[str]) -> str:
    ordered = sorted(ids, key=lambda i: (len(i), i))
    return ("executor " if len(ordered) == 1 else "executors ") + ", ".join(ordered)


class ExecutorWatch:
    """Watches the executors while one round runs (`with ExecutorWatch(...)`): see the module
    doc. `list_executors` returns the executor ids now; `cancel` stops the round's jobs;
    `on_state` gets the waiting line when the round is left without executors and None when
    one is back (the run record's field)."""

    def __init__(self, what: str, wait_secs: float, list_executors: Callable[[], set[str]],
                 cancel: Callable[[], None], on_state: Callable[[str | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.what = what                      # "run R round N": how lines name the round
        self.wait_secs = wait_secs
        self.list_executors = list_executors
        self.cancel = cancel
        self.on_state = on_state
        self.clock = clock
        self.seen: set[str] = set()           # every executor this round had
        self.empty_since: float | None = None
        self.said = False                     # the waiting line was said (and not yet cleared)
        self.failure: str | None = None       # why the round was failed (its jobs cancelled)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def lost(self) -> str:
        """The executors lost, for a line: `executor 0`, or that none ever registered."""
        return f"lost {_names(self.seen)}" if self.seen else "no executor registered"

    def poll(self) -> None:
        """One look at the executors (the watcher thread calls it every POLL_SECS)."""
        now = self.clock()
        ids = self.list_executors()
        if ids:
            if self.said:
                log.warning("%s: %s joined; the round goes on", self.what, _names(ids - self.seen or ids))
                self._state(None)
            self.seen |= ids
            self.empty_since, self.said = None, False
            return
        if self.empty_since is None:
            self.empty_since = now
        waited = now - self.empty_since
        if waited >= self.wait_secs and self.failure is None:
            self.failure = (f"no executor for {self.wait_secs:g} s ({self.lost()}); the round was stopped "
                            f"(recovery.executors.wait.secs)")
            self.cancel()
        elif waited >= NOTICE_SECS and not self.said:
            self.said = True
            line = (f"{self.what} is waiting with no executor to run its tasks ({self.lost()}): start a "
                    f"worker, or it fails after {self.wait_secs:g} s without one (recovery.executors.wait.secs)")
            log.warning("%s", line)
            self._state(line)

    def _state(self, line: str | None) -> None:
        if self.on_state is None:
            return
        try:
            self.on_state(line)
        except Exception as err:   # broad-except: the record's line is for `status`; the round goes on
            log.info("%s: the run record's executor line was not written: %s", self.what, err)

    def _loop(self) -> None:
        # a first look as the round starts: the executors it has then are the ones it can lose
        while True:
            try:
                self.poll()
            except Exception as err:   # broad-except: a context stopping under the watcher; the round reports it
                log.debug("%s: executors not read: %s", self.what, err)
            if self._stop.wait(POLL_SECS):
                return

    def __enter__(self) -> ExecutorWatch:
        self._thread = threading.Thread(target=self._loop, name="recovery-executors", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.said:
            self._state(None)
