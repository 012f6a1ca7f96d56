"""The web view's trace page in a real headless Chromium: a dead letter links to its root's
trace, which shows its state, why it is dead, its failures and its replays, every value from
the data escaped; the page and its JSON need the token like every other."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

import recovery
from tests.integration.test_trace import workflow

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A client that shows a redirect (to the login page) instead of following it."""

    def redirect_request(self, *args, **kwargs):
        return None


def test_a_dead_letter_links_to_its_roots_trace(spark, redis_url, redis_client, tmp_path, ui_server, page):
    run = recovery.submit(str(workflow(tmp_path)), spark=spark, redis=redis_url, run_id="traced-ui")
    recovery.Run.get(run.id, redis=redis_url, spark=spark).recover()
    letter = next(d for d in run.dead_letters() if d.values[0] == "poison <b>one</b>")
    root = letter.roots[0]

    page.goto(f"{ui_server.url}/runs/{run.id}/dead")
    page.locator(f'tr[data-key="check:{letter.task}:{letter.id}"] a.trace').click()
    expect(page).to_have_url(re.compile(rf"/runs/{run.id}/trace\?root={root}$"))
    expect(page.locator("h1")).to_contain_text(f"Root {root}")
    expect(page.locator("#state")).to_have_text("dead")
    expect(page.locator("#reason")).to_have_text("retries exhausted")
    offset = (tmp_path / "lines.txt").read_bytes().index(b"poison <b>one</b>")
    expect(page.locator("#message-id")).to_have_text(f"lines.txt:{offset}")
    rows = page.locator("#trace-failures tbody tr")
    expect(rows).to_have_count(3)
    # the error quotes the data: shown as text, never as markup
    expect(rows.first.locator("td.error")).to_have_text("ValueError: poison line: poison <b>one</b>")
    assert page.locator("#trace-failures b").count() == 0
    expect(page.locator("#trace-replays tbody tr")).to_have_count(2)
    expect(page.locator("#dead-letter")).to_contain_text(f"check:{letter.task}:{letter.id}")

    # its JSON is `trace --json`'s, with the token; without it, nothing
    api = f"{ui_server.url}/api/v1/runs/{run.id}/trace?root={root}"
    shown = json.loads(urllib.request.urlopen(urllib.request.Request(
        api, headers={"X-Recovery-Token": ui_server.token}), timeout=60).read())
    assert (shown["root"], shown["state"], len(shown["failures"])) == (root, "dead", 3)
    for url, status in ((api, 401), (f"{ui_server.url}/runs/{run.id}/trace?root={root}", 303)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.build_opener(NoRedirect).open(urllib.request.Request(url), timeout=60)
        assert refused.value.code == status and str(root) not in refused.value.read().decode(), url
    # a root the run does not know: the error page, 404
    page.goto(f"{ui_server.url}/runs/{run.id}/trace?root=12345")
    expect(page.locator("body")).to_contain_text(f"run {run.id} holds nothing of root 12345")
    run.clear()
