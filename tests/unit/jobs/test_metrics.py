"""recovery/jobs/metrics.py on fakeredis: the collector's figures are `status --json`'s (a run
with failures, then recovered), counters add up every round, clearing a run drops its series,
the token's forms, and the endpoints refuse a request without it."""
from __future__ import annotations

import http.client
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from recovery import testing
from recovery.errors import RecoveryError
from recovery.jobs import clear, follow_events, metrics, reports, summary
from recovery.model.record import RoundRecord
from recovery.tracking import runs
from recovery.ui.access import HostRule
from tests.unit.jobs.test_recover import WORDS, shouting

FAILING = {"recovery.inject.f.component": "shout", "recovery.inject.f.rate": "0.35",
           "recovery.retry.delay.period.ms": "0"}
TOKEN = "metrics-unit-token"


def parse(text: str) -> dict[str, dict[tuple, float]]:
    """name -> {labels as sorted pairs: value} of a scrape's text (prometheus_client's parser)."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(client, run_ids=None) -> dict[str, dict[tuple, float]]:
    body, _ = metrics.exposition(metrics.registry_for(client, run_ids))
    return parse(body.decode())


def one(got: dict, name: str, **labels: str) -> float:
    return got[name][tuple(sorted(labels.items()))]


def check_against_status(got: dict, client, run_id: str) -> dict:
    """Every figure of `got` (a parsed scrape) for `run_id` is what `status --json` (and the
    rounds report) says now."""
    status = reports.run_status(client, run_id)
    run = {"run": run_id, "workflow": status["workflow"]}
    assert one(got, "recovery_run_status", **run, status=status["status"]) == 1
    for state in ("complete", "pending", "failed", "dead", "in_flight"):
        assert one(got, "recovery_run_roots", **run, state=state) == status[state]
    assert one(got, "recovery_run_roots_read_total", **run) == status["roots"]
    assert one(got, "recovery_dead_letters", **run) == status["dead_tuples"]
    queued: dict[str, int] = {}
    for p in status["failed_positions"]:
        queued[p["component"]] = queued.get(p["component"], 0) + p["count"]
    assert {dict(k)["component"]: v for k, v in got.get("recovery_queued_tuples", {}).items()
            if dict(k)["run"] == run_id} == queued
    for p in status.get("partitions") or []:
        part = {**run, "topic": p["topic"], "partition": str(p["partition"])}
        assert one(got, "recovery_partition_lag", **part) == p["lag"]
        assert one(got, "recovery_partition_committed_offset", **part) == p["committed"]
        assert one(got, "recovery_partition_end_offset", **part) == p["end"]
    per_round = reports.rounds(client, run_id).rounds
    total = summary.sum_components([RoundRecord(round=r.round, components=r.components) for r in per_round],
                                   runs.get(client, run_id).original_workflow())
    for comp, st in total.items():
        for k in metrics.TUPLE_COUNTERS:
            assert one(got, f"recovery_tuples_{k}_total", **run, component=comp) == getattr(st, k)
    recovery_rounds = [r for r in per_round if r.replayed or any(c.startswith("replay-") for c in r.components)]
    assert one(got, "recovery_recovery_rounds_total", **run) == len(recovery_rounds)
    # (fakeredis has no MEMORY USAGE: the series is left out; a real Redis is in the integration test)
    assert "recovery_run_redis_bytes" not in got or one(got, "recovery_run_redis_bytes", **run) > 0
    assert one(got, "recovery_redis_up") == 1
    return got


def test_figures_are_status_json_s_before_and_after_recover(fake_redis):
    run = testing.run_local(shouting(), fake_redis, run_id="m1", inputs={"words": WORDS}, config=FAILING)
    before = check_against_status(scrape(fake_redis), fake_redis, "m1")
    labels = {"run": "m1", "workflow": "shouting"}
    assert one(before, "recovery_run_roots", **labels, state="pending") > 0
    assert one(before, "recovery_tuples_failed_total", **labels, component="shout") > 0
    assert one(before, "recovery_recovery_rounds_total", **labels) == 0
    assert sum(before["recovery_failed_positions"].values()) >= 1
    # no recovery yet: the last-recovery time is the run's start
    started = one(before, "recovery_run_started_timestamp_seconds", **labels)
    assert one(before, "recovery_last_recovery_timestamp_seconds", **labels) == started
    testing.recover_local(run)
    after = check_against_status(scrape(fake_redis), fake_redis, "m1")
    assert one(after, "recovery_run_roots", **labels, state="complete") == len(WORDS)
    assert one(after, "recovery_run_roots", **labels, state="pending") == 0
    assert one(after, "recovery_recovery_rounds_total", **labels) == 1
    assert one(after, "recovery_last_recovery_timestamp_seconds", **labels) > started
    assert "recovery_queued_tuples" not in after and "recovery_failed_positions" not in after
    # counters only go up: every counter of the first scrape is still there, not lower
    for name, series in before.items():
        if name.endswith("_total"):
            for key, value in series.items():
                assert after[name][key] >= value, (name, key)


def test_clearing_a_run_drops_its_series_and_a_run_filter_exports_only_its_run(fake_redis):
    testing.run_local(shouting(), fake_redis, run_id="a", inputs={"words": WORDS[:5]})
    testing.run_local(shouting(), fake_redis, run_id="b", inputs={"words": WORDS[:7]})
    got = scrape(fake_redis)
    assert {dict(k)["run"] for k in got["recovery_run_round"]} == {"a", "b"}
    assert one(got, "recovery_runs") == 2
    only = scrape(fake_redis, lambda: ["b"])
    assert {dict(k)["run"] for k in only["recovery_run_round"]} == {"b"}
    clear.clear(fake_redis, "a")
    got = scrape(fake_redis)
    assert all(dict(k).get("run") in (None, "b") for series in got.values() for k in series)


def test_a_redis_that_cannot_be_read_is_up_0_not_an_error():
    import fakeredis
    server = fakeredis.FakeServer()
    server.connected = False            # every command: ConnectionError
    got = scrape(fakeredis.FakeRedis(server=server))
    assert one(got, "recovery_redis_up") == 0


@pytest.mark.parametrize(("authorization", "header", "want"), [
    ("Bearer abc", None, "abc"), ("bearer  abc ", None, "abc"), ("Basic abc", None, None), ("Bearer", None, None),
    (None, None, None), (None, "xyz", "xyz"), ("Bearer abc", "xyz", "xyz")])
def test_the_token_is_a_bearer_token_or_the_web_views_header(authorization, header, want):
    assert metrics.presented_token(authorization, header) == want


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _has_ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_the_follow_runs_server_needs_its_token_when_it_has_one(fake_redis):
    testing.run_local(shouting(), fake_redis, run_id="s1", inputs={"words": WORDS[:3]})
    watch = metrics.RunWatch()
    server = metrics.MetricsServer(metrics.registry_for(fake_redis, watch.ids), "127.0.0.1", 0, TOKEN)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert _get(url)[0] == 401
        assert _get(url, "wrong")[0] == 401
        status, body = _get(url, TOKEN)
        assert status == 200 and 'run="s1"' not in body and "recovery_redis_up 1.0" in body
        watch.on_event(follow_events.Started("s1"))          # the follow run names its run
        status, body = _get(url, TOKEN)
        assert status == 200 and 'recovery_run_round{run="s1",workflow="shouting"}' in body
    finally:
        server.close()
    if _has_ipv6_loopback():
        six = metrics.MetricsServer(metrics.registry_for(fake_redis), "::1", 0, None)
        try:
            assert _get(f"http://[::1]:{six.port}/metrics")[0] == 200
        finally:
            six.close()
    with pytest.raises(RecoveryError, match=r"--metrics-port: cannot listen on 127\.0\.0\.1:"):
        busy = metrics.MetricsServer(metrics.registry_for(fake_redis), "127.0.0.1", 0, None)
        try:
            metrics.MetricsServer(metrics.registry_for(fake_redis), "127.0.0.1", busy.port, None)
        finally:
            busy.close()


def test_the_web_views_metrics_need_its_token_even_on_loopback_unless_it_has_none(fake_redis, tmp_path):
    from recovery.ui.app import create_app
    testing.run_local(shouting(), fake_redis, run_id="w1", inputs={"words": WORDS[:3]})
    app = create_app(fake_redis, "redis://fake", tmp_path / "ui", port=8080, token=TOKEN)
    web = TestClient(app, base_url="http://127.0.0.1:8080")
    refused = web.get("/metrics")           # 401, not the login page a browser's page request gets
    assert refused.status_code == 401 and "token" in refused.json()["error"]
    assert web.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = web.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(ok.text)}
    assert {"recovery_run_roots", "recovery_tuples_executed", "recovery_dead_letters"} <= names
    assert web.get("/metrics", headers={"X-Recovery-Token": TOKEN}).status_code == 200
    open_app = create_app(fake_redis, "redis://fake", tmp_path / "ui2", port=8080, no_token=True)
    assert TestClient(open_app, base_url="http://127.0.0.1:8080").get("/metrics").status_code == 200


def test_the_dashboard_and_the_alert_rules_use_only_exported_metrics(fake_redis):
    """docs/grafana-dashboard.json and docs/prometheus-alerts.yml name only metrics a scrape has."""
    import json
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[3] / "docs"
    testing.run_local(shouting(), fake_redis, run_id="d1", inputs={"words": WORDS}, config=FAILING)
    body, _ = metrics.exposition(metrics.registry_for(fake_redis))
    families = {f.name for f in text_string_to_metric_families(body.decode())}   # (with or without samples)
    exported = families | {f + "_total" for f in families}
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append((docs / "prometheus-alerts.yml").read_text())
    used = {m for e in exprs for m in re.findall(r"\brecovery_[a-z_]+", e)}
    assert len(used) >= 10 and used <= exported, used - exported


def test_a_round_not_settled_has_no_root_counts_only_counts_known_0(fake_redis):
    from tests.unit.run_records import create_run
    create_run(fake_redis, "u1")                 # round 0 under way: its counts are not known
    assert reports.run_status(fake_redis, "u1")["counts_known"] is False
    got = scrape(fake_redis)
    assert one(got, "recovery_run_counts_known", run="u1", workflow="wf") == 0
    assert "recovery_run_roots" not in got and "recovery_run_roots_read_total" not in got


def test_the_endpoint_applies_the_web_views_host_rule(fake_redis):
    server = metrics.MetricsServer(metrics.registry_for(fake_redis), "127.0.0.1", 0, None,
                                   hosts=lambda port: HostRule.of("127.0.0.1", port))
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for host, status in ((f"evil.example:{server.port}", 421), (f"127.0.0.1:{server.port}", 200),
                             (f"localhost:{server.port}", 200), ("127.0.0.1:1", 421)):
            conn.request("GET", "/metrics", headers={"Host": host})
            response = conn.getresponse()
            response.read()
            assert response.status == status, host
        conn.close()
    finally:
        server.close()
