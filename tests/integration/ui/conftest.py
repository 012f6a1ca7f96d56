"""Browser and API fixtures: the web view served on a free loopback port (uvicorn in a thread)
against the session's real Redis, and a headless Chromium (Debian's, driven by Playwright)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ui_server import BackgroundServer, chromium_path, launch_chromium


@pytest.fixture
def ui_server(redis_url: str, redis_client: Any, tmp_path) -> Iterator[BackgroundServer]:
    with BackgroundServer(redis_client, redis_url, tmp_path / "ui-logs") as server:
        yield server


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                                   "(pip install 'recovery[test]')")
    if chromium_path() is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium, or set RECOVERY_CHROMIUM)")
    with sync_api.sync_playwright() as pw:
        b = launch_chromium(pw)
        yield b
        b.close()


# Reports every Content-Security-Policy violation of every page the context opens (Playwright's
# init scripts run before the page's own, whatever its CSP).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) =>
    window.reportCspViolation(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`));
"""


@pytest.fixture
def blank_page(browser: Any) -> Iterator[Any]:
    """A fresh page, in a browser context of its own (no cookie); the test fails if any page it
    opened broke the Content-Security-Policy (a `securitypolicyviolation` event, or Chromium's
    console error about one)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    violations: list[str] = []
    context.expose_function("reportCspViolation", lambda text: violations.append(text))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    p = context.new_page()
    p.on("console", lambda msg: violations.append(msg.text)
         if msg.type == "error" and "Content Security Policy" in msg.text else None)
    p.on("pageerror", lambda err: violations.append(f"uncaught: {err}"))
    p.csp_violations = violations
    p.set_default_timeout(30_000)
    try:
        yield p
    finally:
        context.close()
    assert not violations, f"the pages broke their Content-Security-Policy or threw: {violations}"


@pytest.fixture
def page(blank_page: Any, ui_server: BackgroundServer) -> Any:
    """A fresh page logged in to `ui_server` as a user is: by opening the URL `recovery ui`
    prints, which trades the token for a session cookie and drops it from the address bar."""
    from playwright.sync_api import expect
    blank_page.goto(ui_server.printed_url)
    expect(blank_page).to_have_url(ui_server.url + "/")
    expect(blank_page.locator("h1")).to_have_text("Runs")
    return blank_page
