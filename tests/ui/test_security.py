"""The web view's request checks (recovery/ui/security.py) without a server: Host parsing and the
allow-list, run ids, the token, the Origin check and the security headers, through Starlette's
ASGI test client over fakeredis (an empty Redis: no run is needed to be refused)."""
from __future__ import annotations

import fakeredis
import pytest
from starlette.testclient import TestClient

from recovery.errors import RecoveryError
from recovery.model.run import is_run_id
from recovery.ui.access import check_token, is_wildcard
from recovery.ui.app import create_app
from recovery.ui.security import Guard, split_authority

TOKEN = "unit-test-token"


def client_for(tmp_path, host: str = "127.0.0.1", port: int | None = 8080, **kwargs) -> TestClient:
    app = create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui", host=host, port=port,
                     token=TOKEN, **kwargs)
    shown = f"[{host}]" if ":" in host else host
    return TestClient(app, base_url=f"http://{shown}:{port or 8080}")


@pytest.mark.parametrize("authority,parsed", [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)), ("LOCALHOST:80", ("localhost", 80)), ("localhost", ("localhost", None)),
    ("[::1]:8080", ("[::1]", 8080)), ("[::1]", ("[::1]", None)), ("[::1", None), ("a:b", None), ("a:", None),
    ("", None), ("[::1]x", None)])
def test_host_headers_are_split_into_name_and_port(authority, parsed):
    assert split_authority(authority) == parsed


@pytest.mark.parametrize("host,allowed", [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("[::1]:8080", True), ("LocalHost:8080", True),
    ("127.0.0.1:8081", False), ("127.0.0.1", False), ("evil.example:8080", False), ("127.0.0.1.nip.io:8080", False),
    ("[::2]:8080", False), ("::1:8080", False), ("", False), ("localhost.:8080", False)])
def test_the_host_allow_list_is_loopback_names_with_the_servers_port(host, allowed):
    assert Guard.for_server("127.0.0.1", 8080).host_allowed(host) is allowed


def test_the_host_given_and_allowed_names_are_added_and_port_80_may_be_left_out():
    guard = Guard.for_server("::1", 80, allowed_hosts=("ui.example",))
    assert guard.host_allowed("[::1]") and guard.host_allowed("[::1]:80") and guard.host_allowed("ui.example")
    assert not guard.host_allowed("ui.example:8080") and not guard.require_token
    remote = Guard.for_server("192.168.1.5", 8080)
    assert remote.require_token and remote.host_allowed("192.168.1.5:8080") and remote.host_allowed("localhost:8080")
    assert len(remote.token) >= 32 and remote.token != Guard.for_server("192.168.1.5", 8080).token


@pytest.mark.parametrize("run_id,ok", [
    ("wordcount-20240101-abc", True), ("a.b_c-D9", True), ("x" * 128, True), ("x" * 129, False), ("", False),
    (".hidden", False), ("..", False), ("a/../b", False), ("a b", False), ("a\\b", False), ("é", False),
    ("a\n", False)])
def test_run_ids_outside_the_alphabet_are_told_apart(run_id, ok):
    assert is_run_id(run_id) is ok


def test_a_users_token_must_travel_unquoted():
    assert check_token("abc-DEF_1.2~+/=") == "abc-DEF_1.2~+/="
    for bad in ("", "with space", "semi;colon", "quote\"", "é"):
        with pytest.raises(RecoveryError, match="--token / RECOVERY_UI_TOKEN"):
            check_token(bad)
    assert is_wildcard("0.0.0.0") and is_wildcard("::") and not is_wildcard("127.0.0.1")


def test_every_response_has_the_security_headers(tmp_path):
    with client_for(tmp_path) as client:
        for response in (client.get("/"), client.get("/static/style.css"), client.get("/nope"),
                         client.get("/api/v1/runs/x/recover"), client.post("/api/v1/runs/x/recover"),
                         client.get("/", headers={"Host": "evil.example:8080"}), client.get("/api/v1/runs/.x")):
            csp = response.headers["content-security-policy"]
            directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
            assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
            assert directives["frame-ancestors"] == "'none'" and directives["default-src"] == "'none'"
            assert "unsafe" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "same-origin"
            assert response.headers["x-content-type-options"] == "nosniff"


def test_refusals_are_one_line_json_for_the_api_and_a_page_otherwise(tmp_path):
    with client_for(tmp_path) as client:
        r = client.get("/api/v1/runs/x/recover")
        assert r.status_code == 405 and r.json() == {
            "error": "GET /api/v1/runs/x/recover is not allowed: use POST (a GET never acts)"}
        r = client.post("/api/v1/runs/x/recover", headers={"Origin": "http://evil.example", "X-Recovery-Token": TOKEN})
        assert r.status_code == 403 and "\n" not in r.json()["error"] and "'http://evil.example'" in r.json()["error"]
        r = client.post("/runs/x/clear", data={"confirm": "x"})
        assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
        assert 'id="error"' in r.text and "token" in r.text
        r = client.get("/api/v1/runs/.x")
        assert r.status_code == 400 and r.json()["error"].startswith("invalid run id '.x'")


def test_the_form_field_token_admits_and_the_form_reaches_the_action(tmp_path):
    with client_for(tmp_path) as client:
        # the body the middleware read to find the token is the one the action parses: its
        # `confirm` gets through, and the (empty) Redis answers that there is no such run
        r = client.post("/runs/x/clear", data={"confirm": "x", "token": TOKEN},
                        headers={"Origin": "http://127.0.0.1:8080"}, follow_redirects=False)
        assert r.status_code == 404 and "no run &#39;x&#39;" in r.text
        r = client.post("/runs/x/clear", data={"confirm": "x", "token": TOKEN + "x"}, headers={"Origin": "http://127.0.0.1:8080"})
        assert r.status_code == 403
        r = client.post("/runs/x/clear", content=b"x" * (2 << 20), headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://127.0.0.1:8080"})
        assert r.status_code == 413


def test_a_non_loopback_host_needs_the_token_on_every_request(tmp_path):
    with client_for(tmp_path, host="0.0.0.0", allowed_hosts=("ui.example",)) as client:
        for path in ("/", "/api/v1/runs", "/static/style.css", "/runs/x", "/nope"):
            assert client.get(path).status_code == 403, path
            assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 403, path
        assert client.get("/api/v1/runs", headers={"X-Recovery-Token": TOKEN}).json() == {"runs": []}
        assert client.get("/", headers={"Authorization": f"token {TOKEN}", "Host": "ui.example:8080"}).status_code == 200
        assert client.get("/api/v1/runs?token=" + TOKEN).status_code == 200
        r = client.get("/runs/x?token=" + TOKEN, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/runs/x"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"recovery_ui_token_8080={TOKEN};") and "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        client.cookies.set("recovery_ui_token_8080", TOKEN)
        assert client.get("/").status_code == 200
        # the cookie reads, but does not act
        r = client.post("/api/v1/runs/x/recover", headers={"Origin": "http://0.0.0.0:8080"})
        assert r.status_code == 403


def test_on_loopback_pages_are_readable_without_the_token(tmp_path):
    with client_for(tmp_path) as client:
        assert client.get("/").status_code == 200 and client.get("/api/v1/runs").json() == {"runs": []}
        assert client.post("/api/v1/runs/x/recover").status_code == 403
        assert client.post("/api/v1/runs/x/recover", headers={"X-Recovery-Token": TOKEN}).status_code == 404


def test_the_token_comes_from_the_environment_when_not_given(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVERY_UI_TOKEN", "from-the-env")
    app = create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui")
    assert app.state.token == "from-the-env"
    # an in-process client without a port: its own Host name, and still no other
    with TestClient(app) as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 421
        assert client.post("/api/v1/runs/x/recover", headers={"X-Recovery-Token": "from-the-env"}).status_code == 404
    assert not Guard.for_server("127.0.0.1", 8080).host_allowed("testserver")
    monkeypatch.setenv("RECOVERY_UI_TOKEN", "not a token")
    with pytest.raises(RecoveryError, match="RECOVERY_UI_TOKEN"):
        create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui")
