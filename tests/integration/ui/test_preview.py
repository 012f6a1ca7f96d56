"""The run page's "Preview recovery" (recovery/ui/preview.py) in a real headless Chromium: a
separate `recovery preview` process, then its result per position and per sink before the
Recover and Requeue buttons, every value from the data escaped; the run's keys untouched."""
from __future__ import annotations

import pytest

from tests.integration.conftest import submit
from tests.integration.test_preview import shout_workflow
from tests.integration.test_sandbox import redis_dump

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect

HOSTILE = "bad <script>alert(1)</script>"


def test_preview_from_the_run_page_shows_what_would_fail_again(spark, redis_url, redis_client, tmp_path,
                                                                ui_server, page):
    xml = shout_workflow(tmp_path)
    (tmp_path / "data" / "lines.txt").write_text(f"fine\n{HOSTILE}\nalso fine\n")
    run = submit(spark, redis_url, redis_client, xml).run_id
    before = redis_dump(redis_client)
    page.goto(f"{ui_server.url}/runs/{run}")
    page.locator("#preview").click()
    # the page reloads itself while the server's `recovery preview` process runs its own Spark
    expect(page.locator("#preview-positions")).to_be_visible(timeout=300_000)
    row = page.locator('#preview-positions tr[data-component="upper"]')
    expect(row.locator('td[data-col="would_fail"]')).to_have_text("1")
    expect(row.locator('td[data-col="would_succeed"]')).to_have_text("0")
    expect(row.locator("summary")).to_contain_text(f"1 × ValueError: cannot shout {HOSTILE}")   # text, not markup
    assert page.locator("#preview-result script").count() == 0
    expect(page.locator('#preview-sinks tr[data-component="out"] td[data-col="records"]')).to_have_text("0")
    # the result comes before the buttons that act on it
    assert page.locator("#preview-result ~ .actions #recover").count() == 1
    assert page.locator("#preview-result ~ .actions #requeue-all").count() == 1
    keys_now = redis_dump(redis_client)
    assert keys_now == before
