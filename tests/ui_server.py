"""The web view served from a background thread on a free loopback port, and the headless
Chromium that looks at it: for the browser tests and scripts/screenshot.py."""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

from redis import Redis

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
# Debian's chromium as root in a container (as measured on these machines): no sandbox, no GPU, no /dev/shm,
# and nothing that reaches the network on its own.
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]


def chromium_path() -> str | None:
    """The Chromium binary to drive ($RECOVERY_CHROMIUM, else the distribution's), or None."""
    env = os.environ.get("RECOVERY_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for p in CHROMIUM_PATHS:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("chromium")


def launch_chromium(playwright: Any) -> Any:
    """A headless Chromium browser through Playwright (its own download is never used)."""
    path = chromium_path()
    if path is None:
        raise RuntimeError("no Chromium found (apt-get install chromium, or set RECOVERY_CHROMIUM)")
    return playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BackgroundServer:
    """uvicorn serving `recovery ui`'s app in a thread on `host`:`port` (a free loopback port by
    default), with `token` (a random one by default; `.token`); `with` starts it and waits
    until it listens, leaving stops it. `.printed_url` is the URL `recovery ui` prints: a
    browser opens it first, to get its session cookie."""

    def __init__(self, client: Redis, redis_url: str, log_dir: Path, port: int | None = None,
                 host: str = "127.0.0.1", token: str | None = None):
        import uvicorn

        from recovery.ui.app import create_app
        self.port = port or free_port()
        self.app = create_app(client, redis_url, log_dir, host=host, port=self.port, token=token)
        self.token: str = self.app.state.token
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        self.printed_url = f"{self.url}/?token={self.token}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=self.port, proxy_headers=False,
                                                     log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, name="recovery-ui", daemon=True)

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:      # a state, not a guess: uvicorn says when it listens
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the web view did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
