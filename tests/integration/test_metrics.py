"""Prometheus metrics on a real Redis with a real follow run (recovery/jobs/metrics.py): the
follow run's own endpoint and the web view's /metrics, scraped while the run reads its topic with
injected failures and after `recover`, agree with `status --json`; a scrape without the token is
refused; the command refuses a metrics address off loopback without a token file."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from click.testing import CliRunner

from recovery.cli import main
from recovery.connectors.redis_stream import topics
from recovery.jobs import follow, metrics, recover, reports
from recovery.jobs import follow_events as events
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import runs
from tests.integration.conftest import topic_copy_xml
from tests.ui_server import BackgroundServer
from tests.unit.jobs.test_metrics import check_against_status, one, parse

TOKEN = "integration-metrics-token"

FLAKY_XML = topic_copy_xml("metrics_follow", config={
    "topology.max.spout.pending": "1000", "recovery.retry.delay.period.ms": "0",
    "recovery.inject.flaky.component": "out", "recovery.inject.flaky.rate": "0.05"})


def _records(start: int, n: int) -> list[tuple[str, bytes]]:
    return [(f"w{i % 11}", json.dumps({"id": i, "word": f"w{i % 11}"}).encode()) for i in range(start, start + n)]


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _scrape(url: str) -> dict:
    status, body = _get(url, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200, body
    return parse(body)


def test_a_follow_run_with_failures_scraped_during_the_run_and_after_recover(spark, redis_url, redis_client,
                                                                             tmp_path):
    xml = tmp_path / "flaky.xml"
    xml.write_text(FLAKY_XML)
    topics.produce(redis_client, "events", _records(0, 400), 3, "jsonl")
    wf = workflow_xml.load(xml)
    watch = metrics.RunWatch()
    own = metrics.MetricsServer(metrics.registry_for(redis_client, watch.ids), "127.0.0.1", 0, TOKEN)
    own_url = f"http://127.0.0.1:{own.port}/metrics"
    during: list[tuple[str, dict]] = []
    lags: list[float] = []

    def on_event(event: events.FollowEvent) -> None:
        watch.on_event(event)
        if isinstance(event, events.Batch):
            # the batch settled: the endpoint's figures are the status command's now
            got = _scrape(own_url)
            check_against_status(got, redis_client, event.run_id)
            during.append((event.run_id, got))
            if len(during) == 1:
                topics.produce(redis_client, "events", _records(400, 50))
                lagged = _scrape(own_url)      # 50 messages the run has not read: its lag
                check_against_status(lagged, redis_client, event.run_id)
                lags.append(sum(lagged["recovery_partition_lag"].values()))

    try:
        outcome = follow.follow(spark, redis_client, redis_url, wf, FLAKY_XML, str(xml), max_batches=2,
                                on_event=on_event)
        assert outcome.summary is not None
        run_id = outcome.summary.run_id
        assert [r for r, _ in during] == [run_id, run_id]
        first = during[0][1]
        labels = {"run": run_id, "workflow": "metrics_follow"}
        assert one(first, "recovery_run_roots", **labels, state="pending") > 0
        assert one(first, "recovery_tuples_failed_total", **labels, component="out") > 0
        assert sum(first["recovery_partition_lag"].values()) == 0 and lags == [50]
        assert one(first, "recovery_run_redis_bytes", **labels) > 0
        # a scrape without the token, or with another one, is refused
        assert _get(own_url)[0] == 401
        assert _get(own_url, {"Authorization": "Bearer wrong"})[0] == 401

        with BackgroundServer(redis_client, redis_url, tmp_path / "ui", token=TOKEN) as ui:
            ui_url = ui.url + "/metrics"
            assert _get(ui_url)[0] == 401
            pending = check_against_status(_scrape(ui_url), redis_client, run_id)
            assert one(pending, "recovery_recovery_rounds_total", **labels) == 0
            assert runs.status_of(runs.get(redis_client, run_id)) == runs.PENDING

            result = recover.recover(spark, redis_client, redis_url, run_id)
            assert result.pending == 0
            for url in (own_url, ui_url):
                after = check_against_status(_scrape(url), redis_client, run_id)
                assert one(after, "recovery_run_roots", **labels, state="pending") == 0
                assert one(after, "recovery_run_roots", **labels, state="complete") == 450
                assert one(after, "recovery_recovery_rounds_total", **labels) == result.rounds >= 1
                assert one(after, "recovery_recovery_round_seconds_total", **labels) > 0
                assert "recovery_queued_tuples" not in after
                assert reports.run_status(redis_client, run_id)["status"] == runs.COMPLETED
                assert one(after, "recovery_run_status", **labels, status=runs.COMPLETED) == 1
    finally:
        own.close()


def test_submit_refuses_a_metrics_address_off_loopback_without_a_token_file(redis_url, tmp_path):
    xml = tmp_path / "flaky.xml"
    xml.write_text(FLAKY_XML)
    runner = CliRunner()
    base = ["submit", str(xml), "--redis", redis_url]
    r = runner.invoke(main, [*base, "--follow", "--metrics-port", "0", "--metrics-host", "0.0.0.0"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--metrics-token-file" in r.stderr
    r = runner.invoke(main, [*base, "--metrics-port", "0"])
    assert r.exit_code == 2 and "--metrics-port needs --follow" in r.stderr
    token = tmp_path / "token"
    token.write_text(TOKEN)
    os.chmod(token, 0o640)
    r = runner.invoke(main, [*base, "--follow", "--metrics-port", "0", "--metrics-host", "0.0.0.0",
                             "--metrics-token-file", str(token)])
    assert r.exit_code == 2 and "--metrics-token-file" in r.stderr and "mode 0640 lets other accounts" in r.stderr


def test_submit_follow_serves_its_own_runs_metrics_with_the_token_of_its_file(spark, redis_url, redis_client,
                                                                               tmp_path, monkeypatch):
    xml = tmp_path / "flaky.xml"
    xml.write_text(FLAKY_XML)
    topics.produce(redis_client, "events", _records(0, 120), 2, "jsonl")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    os.chmod(token, 0o600)
    scraped: list[tuple[tuple[int, str], tuple[int, str]]] = []
    close = metrics.MetricsServer.close

    def scrape_then_close(server: metrics.MetricsServer) -> None:
        """The command's server, scraped just before the command closes it (its run has ended)."""
        url = f"http://127.0.0.1:{server.port}/metrics"
        scraped.append((_get(url), _get(url, {"Authorization": f"Bearer {TOKEN}"})))
        close(server)

    monkeypatch.setattr(metrics.MetricsServer, "close", scrape_then_close)
    res = CliRunner().invoke(main, ["submit", str(xml), "--follow", "--max-batches", "1", "--metrics-port", "0",
                                    "--metrics-token-file", str(token), "--json", "--redis", redis_url],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert "metrics: http://127.0.0.1:" in res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    [(refused, (status, body))] = scraped
    assert refused[0] == 401 and status == 200
    got = check_against_status(parse(body), redis_client, run_id)
    assert {dict(k)["run"] for k in got["recovery_run_round"]} == {run_id}
    assert one(got, "recovery_run_roots_read_total", run=run_id, workflow="metrics_follow") == 120


def test_submit_follows_endpoint_refuses_host_names_it_was_not_started_for(spark, redis_url, redis_client,
                                                                          tmp_path, monkeypatch):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 must not read the series. The
    web view's Host rule, on the endpoint of a real `submit --follow --metrics-port` run."""
    xml = tmp_path / "flaky.xml"
    xml.write_text(FLAKY_XML)
    topics.produce(redis_client, "events", _records(0, 60), 2, "jsonl")
    probes: list[dict[str, tuple[int, str]]] = []
    close = metrics.MetricsServer.close

    def probe_then_close(server: metrics.MetricsServer) -> None:
        """The command's server, asked under several Host names before the command closes it."""
        url = f"http://127.0.0.1:{server.port}/metrics"
        probes.append({name: _get(url, {"Host": f"{name}:{server.port}"})
                       for name in ("rebound.example", "127.0.0.1", "localhost", "metrics.internal")}
                      | {"no port": _get(url, {"Host": "127.0.0.1"})})
        close(server)

    monkeypatch.setattr(metrics.MetricsServer, "close", probe_then_close)
    res = CliRunner().invoke(main, ["submit", str(xml), "--follow", "--max-batches", "1", "--metrics-port", "0",
                                    "--metrics-allow-host", "metrics.internal", "--json", "--redis", redis_url],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    [answers] = probes
    status, body = answers["rebound.example"]
    assert status == 421 and body.count("\n") == 1
    assert body.startswith("host 'rebound.example:") and "127.0.0.1:" in body and "metrics.internal:" in body
    assert "recovery_run" not in body
    assert answers["no port"][0] == 421            # the port is part of the name the server answers to
    for name in ("127.0.0.1", "localhost", "metrics.internal"):
        status, body = answers[name]
        assert status == 200, (name, body)
        assert one(parse(body), "recovery_run_roots_read_total", run=run_id, workflow="metrics_follow") == 60
