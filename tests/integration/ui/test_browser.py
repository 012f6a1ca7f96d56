"""`recovery ui` in a real headless Chromium, against a real server, the session's real Redis
and runs made by real submits with injected failures. Every wait is on a state of the page
(Playwright's expect), never a sleep. The browser logs in as a user does, through the URL the
command prints; the page's own Recover, Requeue and Clear go through the same checks as any
request (the session's CSRF value, Origin), and no page may break the Content-Security-Policy
(the `page` fixture fails the test)."""
from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from tests.helpers import pretend_running, wait_for
from tests.integration.conftest import copy_workflow, submit
from tests.ui_server import CHROMIUM_ARGS, chromium_path

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect

INJECTED = {"recovery.inject.flaky.component": "aggregate", "recovery.inject.flaky.rate": "0.02",
            "recovery.retry.delay.period.ms": "10"}


def cli_json(redis_url: str, *args: str) -> dict:
    r = CliRunner().invoke(main, [*args, "--json"], env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_runs_list_run_page_svg_and_component_table(spark, redis_url, redis_client, tmp_path, ui_server, page):
    run = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path), INJECTED).run_id
    status = cli_json(redis_url, "status", run)
    assert status["status"] == "pending"

    # the runs list shows the run, with its status and counts
    page.goto(ui_server.url + "/")
    row = page.locator(f'#runs tr[data-run="{run}"]')
    expect(row).to_contain_text("pending")
    expect(row).to_contain_text("cdn_logs")
    expect(row.locator("td").nth(4)).to_have_text(str(status["roots"]))
    row.get_by_role("link", name=run).click()
    expect(page).to_have_url(re.compile(f"/runs/{run}$"))
    expect(page.locator("#run-status")).to_have_text("pending")

    # the topology marks each failed position's component in red, with its count
    failed_at: dict[str, int] = {}
    for p in status["failed_positions"]:
        failed_at[p["component"]] = failed_at.get(p["component"], 0) + p["count"]
    assert "aggregate" in failed_at
    for comp, n in failed_at.items():
        node = page.locator(f'svg.topology g.node.failed[data-component="{comp}"]')
        expect(node).to_have_attribute("data-failed", str(n))
        expect(node).to_contain_text(f"{n} failed")
    expect(page.locator('svg.topology g.node[data-component="logs"]')).not_to_have_class(re.compile(r"\bfailed\b"))
    assert page.locator('svg.topology g.node[data-component="logs"]').get_attribute("class").split().count("dim") == 1

    # the component table's numbers are `status --json`'s
    table = page.locator("#components-round-0")
    assert table.locator("tbody tr").count() == len(status["components"])
    for comp, counters in status["components"].items():
        for col in ("executed", "acked", "failed", "emitted", "roots", "seconds"):
            cell = table.locator(f'tr[data-component="{comp}"] td[data-col="{col}"]')
            assert float(cell.inner_text()) == counters.get(col, 0), (comp, col)
    # every column header says what its counter means
    assert all(table.locator("thead th").nth(i).get_attribute("title") for i in range(table.locator("thead th").count()))

    # failed positions, with the full error on demand
    failed_rows = page.locator("#failed-positions tbody tr")
    assert failed_rows.count() == len(status["failed_positions"])
    first = page.locator('#failed-positions tr[data-component="aggregate"]').first
    first.locator("summary").click()
    expect(first.locator("pre").first).to_contain_text("InjectedFailure")


def test_recover_from_the_page_ends_completed_live(spark, redis_url, redis_client, tmp_path, ui_server, page):
    xml = copy_workflow("wordcount", tmp_path)
    summary = submit(spark, redis_url, redis_client, xml, {"recovery.inject.flaky.component": "count",
                                                           "recovery.inject.flaky.rate": "0.05",
                                                           "recovery.retry.delay.period.ms": "10"})
    run = summary.run_id
    assert summary.status == "pending" and summary.failed > 0
    page.goto(f"{ui_server.url}/runs/{run}")
    expect(page.locator("#run-status")).to_have_text("pending")
    expect(page.locator("[sse-connect]")).to_have_count(0)     # nothing to follow until Recover
    page.evaluate("window.__no_reload = true")       # gone if the page were loaded again
    page.locator("#recover").click()
    expect(page.locator("#action-result")).to_contain_text("started")
    expect(page.locator("#recover-process")).to_be_visible()
    # the server's `recovery recover` process runs rounds in its own Spark; the page follows
    expect(page.locator("#run-status")).to_have_text("completed", timeout=300_000)
    expect(page.locator("#recover-process h2")).to_have_text("Recover finished", timeout=60_000)
    assert page.evaluate("window.__no_reload") is True
    # the run is over: the server said `done` and the page closed its stream (no reconnecting)
    page.wait_for_function("() => document.getElementById('run-body')['htmx-internal-data']"
                           "?.sseEventSource?.readyState === EventSource.CLOSED", timeout=60_000)
    expect(page.locator("#count-pending")).to_have_text("0")
    expect(page.locator("svg.topology g.node.failed")).to_have_count(0)
    expect(page.locator("#rounds tbody tr")).not_to_have_count(0)
    assert cli_json(redis_url, "status", run)["status"] == "completed"

    # a second recover of a run this page is recovering, or an unknown run: the CLI's refusal
    pretend_running(redis_client, run)
    page.locator("#recover").click()
    expect(page.locator("#action-result")).to_contain_text(f"run {run} is still running")


def test_requeue_from_the_dead_letters_page(spark, redis_url, redis_client, tmp_path, ui_server, page):
    # one attempt allowed: cdn_logs' poison lines are dead at once
    run = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path),
                 {"recovery.max.attempts": "1"}).run_id
    dead = cli_json(redis_url, "dead", run)["dead"]
    assert len(dead) >= 4
    page.goto(f"{ui_server.url}/runs/{run}/dead")
    rows = page.locator("table.dead tbody tr")
    expect(rows).to_have_count(len(dead))

    # one tuple
    one = rows.first.get_attribute("data-key")
    rows.first.get_by_role("button", name="Requeue").click()
    expect(page.locator("#message")).to_contain_text("requeued 1 dead tuple")
    expect(rows).to_have_count(len(dead) - 1)
    comp, task, tid = one.rsplit(":", 2)
    assert redis_client.hexists(failed_queue.queue_key(run, comp, int(task)), tid)
    assert not redis_client.hexists(failed_queue.dead_letters_key(run), one)

    # a selection
    picked = [rows.nth(i).get_attribute("data-key") for i in (0, 1)]
    for key in picked:
        page.get_by_label(f"select {key}").check()
    page.locator("#requeue-selected").click()
    expect(page.locator("#message")).to_contain_text("requeued 2 dead tuples")
    expect(rows).to_have_count(len(dead) - 3)
    for key in picked:
        comp, task, tid = key.rsplit(":", 2)
        assert redis_client.hexists(failed_queue.queue_key(run, comp, int(task)), tid)

    # all of them
    page.locator("#requeue-all").click()
    expect(page.locator("#no-dead")).to_be_visible()
    assert redis_client.hlen(failed_queue.dead_letters_key(run)) == 0
    queued = sum(redis_client.hlen(failed_queue.queue_key(run, *pos.decode().rsplit(":", 1)))
                 for pos in redis_client.smembers(failed_queue.failed_key(run)))
    assert queued == len(dead)
    assert cli_json(redis_url, "status", run)["status"] == "pending"


def test_clear_removes_the_run(spark, redis_url, redis_client, tmp_path, ui_server, page):
    run = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path)).run_id
    page.goto(f"{ui_server.url}/runs/{run}")
    page.get_by_role("link", name="Clear…").click()
    expect(page.locator("h1")).to_contain_text(f"Clear {run}?")
    page.locator("#confirm-clear").click()
    expect(page).to_have_url(re.compile(r"/\?message="))
    expect(page.locator(".flash")).to_contain_text(f"cleared {run}")
    expect(page.locator(f'#runs tr[data-run="{run}"]')).to_have_count(0)
    assert not redis_client.exists(runs.record_key(run))
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run)))
    # the page of a run that is gone says so, as the CLI does
    page.goto(f"{ui_server.url}/runs/{run}")
    expect(page.locator("#error")).to_have_text(f"no run {run!r} in this Redis (see `recovery runs`)")


XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def html_dead_run(spark, redis_url, redis_client, tmp_path) -> str:
    """A dead run (one attempt allowed) one of whose dead letters is a line of HTML."""
    xml = copy_workflow("cdn_logs", tmp_path)
    with open(xml.parent / "data" / "cdn.log", "a") as log:
        log.write(XSS + "\n")
    run = submit(spark, redis_url, redis_client, xml, {"recovery.max.attempts": "1"}).run_id
    assert cli_json(redis_url, "status", run)["status"] == "dead"
    assert any(d.get("values") == [XSS] for d in cli_json(redis_url, "dead", run)["dead"])
    return run


def test_a_dead_letter_that_is_html_shows_as_text(html_dead_run, ui_server, page):
    run = html_dead_run
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    # in the HTML the server sends: escaped
    request = urllib.request.Request(f"{ui_server.url}/runs/{run}/dead", headers={"X-Recovery-Token": ui_server.token})
    with urllib.request.urlopen(request) as response:
        html = response.read().decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and XSS not in html
    # in the browser: text, and no element made of it
    page.goto(f"{ui_server.url}/runs/{run}/dead")
    expect(page.locator("table.dead code", has_text=XSS)).to_have_count(1)
    expect(page.locator("main img")).to_have_count(0)
    page.goto(f"{ui_server.url}/runs/{run}")
    expect(page.locator("#run-status")).to_have_text("dead")
    expect(page.locator("main img")).to_have_count(0)
    assert dialogs == []


def test_a_finished_runs_page_opens_no_stream_and_lets_a_dump_dom_return(html_dead_run, ui_server, page, tmp_path):
    run = html_dead_run
    page.goto(f"{ui_server.url}/runs/{run}")
    expect(page.locator("#run-status")).to_have_text("dead")
    expect(page.locator("[sse-connect]")).to_have_count(0)
    # with the run's event stream left open for ever, this never returned
    done = subprocess.run([chromium_path(), *CHROMIUM_ARGS, f"--user-data-dir={tmp_path / 'profile'}",
                           "--virtual-time-budget=5000", "--dump-dom", f"{ui_server.url}/runs/{run}?token={ui_server.token}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert 'id="run-status"' in done.stdout and ">dead</span>" in done.stdout and "sse-connect" not in done.stdout


def test_the_csp_check_of_the_browser_tests_sees_a_violation(ui_server, page):
    """The `page` fixture fails a test whose pages break the policy: make sure it would."""
    page.goto(ui_server.url + "/")
    expect(page.locator("h1")).to_have_text("Runs")
    assert page.csp_violations == []
    with pytest.raises(sync_api.Error, match="Content Security Policy"):
        page.add_script_tag(content="window.inlineScriptRan = true")     # an inline script: blocked
    def both_reported() -> bool:
        """Chromium's console error and the page's own `securitypolicyviolation` event (it comes
        through an exposed function, possibly later); a call into the page lets Playwright's
        synchronous API deliver the events waiting for it."""
        page.evaluate("0")
        return (any("Content Security Policy" in v for v in page.csp_violations)
                and any(v.startswith("script-src") and " blocked " in v for v in page.csp_violations))

    wait_for(both_reported, 30, "both reports of the CSP violation")
    assert page.evaluate("window.inlineScriptRan") is None
    page.csp_violations.clear()       # expected here: not a failure of this test


def test_a_browser_without_the_token_gets_the_login_page_and_no_page_holds_the_token(
        html_dead_run, ui_server, blank_page):
    run = html_dead_run
    page = blank_page
    page.goto(f"{ui_server.url}/runs/{run}/dead")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    expect(page.locator("h1")).to_have_text("Log in")
    expect(page.locator("table")).to_have_count(0)         # nothing of the run but the path asked for
    assert "onerror" not in page.content()
    page.locator("#token").fill("not-the-token")
    page.locator("#log-in").click()
    expect(page.locator("#error")).to_contain_text("not this web view's token")
    page.locator("#token").fill(ui_server.token)
    page.locator("#log-in").click()
    expect(page).to_have_url(f"{ui_server.url}/runs/{run}/dead")
    expect(page.locator("table.dead tbody tr").first).to_be_visible()
    # the session cookie is out of scripts' reach, and no page holds the token
    assert page.evaluate("document.cookie") == ""
    cookie = next(c for c in page.context.cookies() if c["name"] == f"recovery_ui_session_{ui_server.port}")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and ui_server.token not in cookie["value"]
    for path in (f"/runs/{run}/dead", f"/runs/{run}", f"/runs/{run}/clear", "/"):
        page.goto(ui_server.url + path)
        assert ui_server.token not in page.content(), path
    # the forms carry the session's CSRF value: the requeue button works
    page.goto(f"{ui_server.url}/runs/{run}/dead")
    rows = page.locator("table.dead tbody tr")
    n = rows.count()
    rows.first.get_by_role("button", name="Requeue").click()
    expect(page.locator("#message")).to_contain_text("requeued 1 dead tuple")
    expect(rows).to_have_count(n - 1)
