"""The web view's JSON API through Starlette's ASGI test client, on the session's real Redis
and a real submit: the same shapes as the CLI's --json, the CLI's refusals with its messages."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from recovery.cli import main
from recovery.tracking import keys, runs
from recovery.ui.access import is_loopback
from recovery.ui.app import create_app
from tests.helpers import pretend_running
from tests.integration.conftest import copy_workflow, submit


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def cli_json(redis_url: str, *args: str) -> dict:
    code, out, err = cli(redis_url, *args, "--json")
    assert code == 0, err
    return json.loads(out)


PORT = 8080     # the Host the test client sends; the app is told it listens there


@pytest.fixture
def api(redis_url, redis_client, tmp_path):
    """An API client as curl or a script is one: no Origin, the token in X-Recovery-Token."""
    app = create_app(redis_client, redis_url, tmp_path / "ui-logs", port=PORT)
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Recovery-Token": app.state.token}) as client:
        yield client


def test_api_shapes_are_the_clis(spark, redis_url, redis_client, tmp_path, api):
    run = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path),
                 {"recovery.max.attempts": "2"}).run_id
    assert api.get("/api/v1/runs").json() == cli_json(redis_url, "runs")
    assert api.get("/api/v1/runs?status=pending").json()["runs"][0]["run_id"] == run
    assert api.get("/api/v1/runs?status=completed").json() == {"runs": []}
    assert api.get(f"/api/v1/runs/{run}").json() == cli_json(redis_url, "status", run)
    assert api.get(f"/api/v1/runs/{run}/dead").json() == cli_json(redis_url, "dead", run)
    plan = api.get(f"/api/v1/runs/{run}/plan").json()
    assert cli(redis_url, "plan", run)[1] == plan["xml"] + "\n"      # (click.echo adds one)
    assert set(plan["failed"]) == {"split", "normalize"} and "logs" not in plan["rerun"]

    failed = api.get(f"/api/v1/runs/{run}/failed").json()["failed_positions"]
    assert {(p["component"], p["task"], p["count"]) for p in failed} == {
        (p["component"], p["task"], p["count"]) for p in cli_json(redis_url, "status", run)["failed_positions"]}
    assert all(t["traceback"].startswith("Traceback") and t["kind"] == "exception" for p in failed for t in p["tuples"])

    assert api.get(f"/api/v1/runs/{run}/components/nope").status_code == 404
    comp = api.get(f"/api/v1/runs/{run}/components/split").json()
    assert comp["rounds"][0]["executed"] == cli_json(redis_url, "status", run)["components"]["split"]["executed"]
    assert api.get(f"/api/v1/runs/{run}/rounds").json()["rounds"][0]["round"] == 0
    assert api.get(f"/api/v1/runs/{run}/partitions").json() == {"run_id": run, "partitions": []}

    # pages render (without JavaScript: everything is in the HTML)
    page = api.get(f"/runs/{run}")
    assert page.status_code == 200 and 'data-component="split"' in page.text and "data-failed=" in page.text
    assert api.get("/").status_code == 200 and run in api.get("/").text
    assert api.get("/static/vendor/htmx-2.0.11.min.js").status_code == 200


def test_api_requeue_and_clear(spark, redis_url, redis_client, tmp_path, api):
    run = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path),
                 {"recovery.max.attempts": "1"}).run_id
    dead = api.get(f"/api/v1/runs/{run}/dead").json()["dead"]
    assert len(dead) >= 2
    first = dead[0]["key"]
    r = api.post(f"/api/v1/runs/{run}/dead/requeue", json={"keys": [first]})
    assert r.json() == {"run_id": run, "requeued": 1}
    r = api.post(f"/api/v1/runs/{run}/dead/requeue", json={"keys": [first]})
    assert r.status_code == 409 and r.json()["error"] == f"run {run} has no dead tuple {first!r} (see `recovery dead {run}`)"
    assert api.post(f"/api/v1/runs/{run}/dead/requeue", content=b"{nope").status_code == 400
    assert api.post(f"/api/v1/runs/{run}/dead/requeue", json={"keys": first}).status_code == 400
    assert api.post(f"/api/v1/runs/{run}/dead/requeue").json()["requeued"] == len(dead) - 1

    r = api.delete(f"/api/v1/runs/{run}")
    assert runs.record_key(run) in r.json()["removed"][run]
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run)))


def refusal(error: str) -> str:
    """A refusal's one line without "error: ", the lease's remaining seconds masked: they count
    down between the CLI's call and the API's (a second apart on a loaded machine)."""
    return re.sub(r"lease valid \d+s more", "lease valid Ns more", error.strip().removeprefix("error: "))


def test_actions_refuse_what_the_cli_refuses(spark, redis_url, redis_client, tmp_path, api):
    # an unknown run: 404 with the CLI's one line (without its "error: ")
    _, _, err = cli(redis_url, "recover", "no-such-run")
    for method, path in (("get", "/api/v1/runs/no-such-run"), ("post", "/api/v1/runs/no-such-run/recover"),
                         ("delete", "/api/v1/runs/no-such-run"), ("get", "/api/v1/runs/no-such-run/dead"),
                         ("post", "/api/v1/runs/no-such-run/dead/requeue")):
        r = getattr(api, method)(path)
        assert r.status_code == 404 and r.json()["error"] == err.strip().removeprefix("error: "), path
    page = api.get("/runs/no-such-run")
    assert page.status_code == 404 and "no run &#39;no-such-run&#39;" in page.text

    # a run whose driver is alive (this process): recover, requeue and clear refuse as the CLI does
    run = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path)).run_id
    pretend_running(redis_client, run)
    _, _, err = cli(redis_url, "dead", run, "--requeue")
    assert "still running" in err
    assert "lease valid" in err
    for method, path in (("post", f"/api/v1/runs/{run}/recover"), ("post", f"/api/v1/runs/{run}/dead/requeue")):
        r = getattr(api, method)(path)
        assert r.status_code == 409 and refusal(r.json()["error"]) == refusal(err)
    _, _, err = cli(redis_url, "clear", run)
    r = api.delete(f"/api/v1/runs/{run}")
    assert r.status_code == 409 and refusal(r.json()["error"]) == refusal(err)
    r = api.post(f"/runs/{run}/recover", headers={"HX-Request": "true"})
    assert "still running" in r.text and 'class="flash error"' in r.text
    assert redis_client.exists(runs.record_key(run))


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                           ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False)])
def test_non_loopback_hosts_are_told_apart(host, loopback):
    assert is_loopback(host) is loopback


def test_ui_warns_on_a_non_loopback_host_and_rejects_a_bad_redis(redis_url):
    r = CliRunner().invoke(main, ["ui", "--host", "0.0.0.0", "--port", "1", "--redis", "redis://127.0.0.1:1/0"])
    assert r.exit_code == 2 and "127.0.0.1:1" in r.stderr and r.stderr.count("\n") == 1


def test_ui_on_a_port_in_use_is_one_line_and_exit_2(redis_url):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(main, ["ui", "--port", str(port), "--redis", redis_url])
    assert r.exit_code == 2 and r.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_cli_requeues_one_dead_tuple_by_key(spark, redis_url, redis_client, tmp_path):
    run = submit(spark, redis_url, redis_client, copy_workflow("cdn_logs", tmp_path),
                 {"recovery.max.attempts": "1"}).run_id
    dead = cli_json(redis_url, "dead", run)["dead"]
    key = dead[0]["key"]
    assert cli_json(redis_url, "dead", run, "--requeue", "--tuple", key) == {"run_id": run, "requeued": 1}
    assert [d["key"] for d in cli_json(redis_url, "dead", run)["dead"]] == [d["key"] for d in dead[1:]]
    code, _, err = cli(redis_url, "dead", run, "--requeue", "--tuple", key)
    assert code == 2 and err == f"error: run {run} has no dead tuple {key!r} (see `recovery dead {run}`)\n"
    assert cli(redis_url, "dead", run, "--tuple", key)[0] == 2
