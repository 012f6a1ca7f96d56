"""The web view's request checks (recovery/ui/security.py) without a server: Host parsing and the
allow-list, run ids, the token and the sessions it opens, the CSRF and Origin checks and the
security headers, through Starlette's ASGI test client over fakeredis (an empty Redis: no run
is needed to be refused)."""
from __future__ import annotations

import os

import fakeredis
import pytest
from starlette.testclient import TestClient

from recovery.errors import RecoveryError
from recovery.tracking.keys import is_run_id
from recovery.ui.access import check_token, is_wildcard, read_token_file, split_authority
from recovery.ui.app import create_app
from recovery.ui.security import Guard, local_target

TOKEN = "unit-test-token"


OWN = {"Origin": "http://127.0.0.1:8080"}


def client_for(tmp_path, host: str = "127.0.0.1", port: int | None = 8080, headers: dict | None = None,
               **kwargs) -> TestClient:
    app = create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui", host=host, port=port,
                     token=TOKEN, **kwargs)
    shown = f"[{host}]" if ":" in host else host
    return TestClient(app, base_url=f"http://{shown}:{port or 8080}", headers=headers)


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
    assert not guard.host_allowed("ui.example:8080") and not guard.open
    remote = Guard.for_server("192.168.1.5", 8080)
    assert not remote.open and remote.host_allowed("192.168.1.5:8080") and remote.host_allowed("localhost:8080")
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


def logged_in(client: TestClient) -> str:
    """Open the printed URL as a browser does: returns the session's CSRF value (from a form)."""
    r = client.get("/?token=" + TOKEN, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    name, _, value = cookie.split(";")[0].partition("=")
    assert name == "recovery_ui_session_8080" and TOKEN not in cookie
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/" in cookie
    client.cookies.set(name, value)
    page = client.get("/runs/x/clear")       # (no such run: the error page has no form)
    assert page.status_code == 404
    return Guard.for_server("127.0.0.1", 8080, TOKEN).csrf_for(value)


def test_every_response_has_the_security_headers(tmp_path):
    with client_for(tmp_path) as client:
        for response in (client.get("/", follow_redirects=False), client.get("/login"), client.get("/static/style.css"),
                         client.get("/nope"), client.get("/api/v1/runs/x/recover"), client.post("/api/v1/runs/x/recover"),
                         client.get("/", headers={"Host": "evil.example:8080"}), client.get("/api/v1/runs/.x"),
                         client.get("/nope", headers={"X-Recovery-Token": TOKEN}),
                         client.get("/api/v1/runs/.x", headers={"X-Recovery-Token": TOKEN})):
            csp = response.headers["content-security-policy"]
            directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
            assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
            assert directives["frame-ancestors"] == "'none'" and directives["default-src"] == "'none'"
            assert "unsafe" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "same-origin"
            assert response.headers["x-content-type-options"] == "nosniff"


def test_refusals_are_one_line_json_for_the_api_and_events_and_a_page_otherwise(tmp_path):
    with client_for(tmp_path, headers={"X-Recovery-Token": TOKEN}) as client:
        r = client.get("/api/v1/runs/x/recover")
        assert r.status_code == 405 and r.json() == {
            "error": "GET /api/v1/runs/x/recover is not allowed: use POST (a GET never acts)"}
        r = client.post("/api/v1/runs/x/recover", headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "\n" not in r.json()["error"] and "'http://evil.example'" in r.json()["error"]
        r = client.get("/api/v1/runs/.x")
        assert r.status_code == 400 and r.json()["error"].startswith("invalid run id '.x'")
    with client_for(tmp_path) as client:
        r = client.post("/runs/x/clear", data={"confirm": "x"})
        assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
        assert 'id="error"' in r.text and "token" in r.text
        r = client.get("/runs/x/events")
        assert r.status_code == 401 and "token" in r.json()["error"]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_without_the_token_nothing_but_the_login_page_is_served(tmp_path, host):
    with client_for(tmp_path, host=host, allowed_hosts=("ui.example",)) as client:
        for path in ("/", "/runs/x", "/runs/x/dead", "/runs/x/clear", "/nope", "/?status=dead"):
            r = client.get(path, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
            assert "set-cookie" not in r.headers
        for path in ("/api/v1/runs", "/api/v1/runs/x", "/runs/x/events", "/static/vendor/htmx-2.0.11.min.js"):
            for headers in ({}, {"Authorization": "Bearer nope"}, {"X-Recovery-Token": TOKEN + "x"},
                            {"Cookie": f"recovery_ui_session_8080={TOKEN}"}, {"Cookie": "recovery_ui_session_8080=a.b"}):
                assert client.get(path, headers=headers).status_code == 401, (path, headers)
        for path in ("/api/v1/runs/x/recover", "/runs/x/recover", "/runs/x/dead/requeue"):
            assert client.post(path, data={"all": "1"}).status_code == 401, path
        assert client.delete("/api/v1/runs/x").status_code == 401
        # the token in an API URL does not admit (it would stay in logs and histories)
        assert client.get("/api/v1/runs?token=" + TOKEN).status_code == 401
        # what the login page needs, and only that
        login = client.get("/login?next=/runs/x")
        assert login.status_code == 200 and 'name="token"' in login.text and "<script" not in login.text
        assert client.get("/static/style.css").status_code == 200
        # the token admits: header, Authorization, the printed URL's cookie
        assert client.get("/api/v1/runs", headers={"X-Recovery-Token": TOKEN}).json() == {"runs": []}
        assert client.get("/", headers={"Authorization": f"token {TOKEN}", "Host": "ui.example:8080"}).status_code == 200
        assert client.get("/static/vendor/htmx-2.0.11.min.js", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        r = client.get("/runs/x?token=" + TOKEN + "&a=1", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/runs/x?a=1"
        client.cookies.set("recovery_ui_session_8080", r.headers["set-cookie"].split(";")[0].split("=", 1)[1])
        assert client.get("/").status_code == 200 and client.get("/api/v1/runs").status_code == 200


def test_the_login_page_trades_the_token_for_a_session(tmp_path):
    with client_for(tmp_path) as client:
        r = client.post("/login", data={"token": "wrong", "next": "/runs/x"}, headers=OWN)
        assert r.status_code == 401 and "not this web view" in r.text and "set-cookie" not in r.headers
        r = client.post("/login", data={"token": TOKEN, "next": "/runs/x?a=1"}, headers=OWN, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/runs/x?a=1"
        assert TOKEN not in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
        # another site's page cannot log a browser in
        assert client.post("/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}).status_code == 403
    for target, kept in (("/runs/x", "/runs/x"), ("//evil.example/", "/"), ("http://evil.example", "/"),
                         ("/\\evil.example", "/"), (None, "/"), ("", "/")):
        assert local_target(target) == kept


def test_pages_carry_the_sessions_csrf_value_never_the_token(tmp_path):
    with client_for(tmp_path) as client:
        csrf = logged_in(client)
        for path in ("/", "/login", "/runs/x", "/api/v1/runs"):
            assert TOKEN not in client.get(path).text, path
        assert csrf != TOKEN and len(csrf) >= 40
        # another session has another value
        other = Guard.for_server("127.0.0.1", 8080, TOKEN)
        assert other.csrf_for(other.new_session()) != csrf


def test_an_action_needs_its_sessions_csrf_value_or_the_token_header(tmp_path):
    with client_for(tmp_path) as client:
        csrf = logged_in(client)
        for data in ({"confirm": "x"}, {"confirm": "x", "csrf": csrf + "x"}, {"confirm": "x", "csrf": ""},
                     {"confirm": "x", "csrf": TOKEN}, {"confirm": "x", "token": TOKEN}):
            r = client.post("/runs/x/clear", data=data, headers=OWN)
            assert r.status_code == 403 and "csrf" in r.text, data
        # the cookie alone does not act through the API either
        assert client.delete("/api/v1/runs/x", headers=OWN).status_code == 403
        # the body the middleware read to check the value is the one the action parses: its
        # `confirm` gets through, and the (empty) Redis answers that there is no such run
        r = client.post("/runs/x/clear", data={"confirm": "x", "csrf": csrf}, headers=OWN, follow_redirects=False)
        assert r.status_code == 404 and "no run &#39;x&#39;" in r.text
        r = client.post("/runs/x/clear", content=b"x" * (2 << 20), headers={
            "Content-Type": "application/x-www-form-urlencoded", **OWN})
        assert r.status_code == 413
        # the token header admits an API client (no cookie, no Origin)
        client.cookies.clear()
        assert client.post("/api/v1/runs/x/recover", headers={"X-Recovery-Token": TOKEN}).status_code == 404


def test_no_token_serves_loopback_and_still_checks_a_forms_csrf(tmp_path):
    with client_for(tmp_path, no_token=True) as client:
        r = client.get("/", follow_redirects=False)
        assert r.status_code == 200 and "recovery_ui_session_8080=" in r.headers["set-cookie"]
        assert client.get("/api/v1/runs").json() == {"runs": []}
        assert client.post("/api/v1/runs/x/recover").status_code == 404           # an API client
        assert client.post("/runs/x/clear", data={"confirm": "x"}, headers=OWN).status_code == 403
        assert client.post("/api/v1/runs/x/recover", headers={"Origin": "http://evil.example"}).status_code == 403
    with pytest.raises(RecoveryError, match="--no-token.*loopback only"):
        client_for(tmp_path, host="0.0.0.0", no_token=True)


def test_the_token_comes_from_the_environment_when_not_given(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOVERY_UI_TOKEN", "from-the-env")
    app = create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui")
    assert app.state.token == "from-the-env"
    # an in-process client without a port: its own Host name, and still no other
    with TestClient(app) as client:
        assert client.get("/", headers={"X-Recovery-Token": "from-the-env"}).status_code == 200
        assert client.get("/", headers={"Host": "evil.example", "X-Recovery-Token": "from-the-env"}).status_code == 421
        assert client.post("/api/v1/runs/x/recover", headers={"X-Recovery-Token": "from-the-env"}).status_code == 404
    assert not Guard.for_server("127.0.0.1", 8080).host_allowed("testserver")
    monkeypatch.setenv("RECOVERY_UI_TOKEN", "not a token")
    with pytest.raises(RecoveryError, match="RECOVERY_UI_TOKEN"):
        create_app(fakeredis.FakeRedis(), "redis://127.0.0.1:1/0", tmp_path / "ui")


def test_a_token_file_must_be_its_owners_alone(tmp_path):
    path = tmp_path / "token"
    path.write_text("file-token.1\n")
    for mode in (0o644, 0o640, 0o604, 0o660, 0o622):
        os.chmod(path, mode)
        with pytest.raises(RecoveryError, match=f"--token-file {path}: mode 0{mode:o} .*chmod 600") as err:
            read_token_file(path)
        assert "file-token" not in str(err.value) and "\n" not in str(err.value)
    for mode in (0o600, 0o400):
        os.chmod(path, mode)
        assert read_token_file(path) == "file-token.1"
    os.chmod(path, 0o600)
    path.write_text("two words")
    with pytest.raises(RecoveryError, match="a token is one or more letters"):
        read_token_file(path)
    with pytest.raises(RecoveryError, match="cannot read it"):
        read_token_file(tmp_path / "missing")
    with pytest.raises(RecoveryError, match="not a regular file"):
        read_token_file(tmp_path)


def test_an_event_stream_is_told_from_a_page_whatever_the_run_id():
    from recovery.ui.security import wants_json
    assert wants_json("/api/v1/runs") and wants_json("/runs/r1/events")
    assert not wants_json("/runs/events") and not wants_json("/runs/events/dead") and not wants_json("/")


def test_metrics_takes_the_token_in_a_header_only_and_sets_no_cookie(tmp_path):
    with client_for(tmp_path) as client:
        r = client.get("/metrics?token=" + TOKEN, follow_redirects=False)
        assert r.status_code == 401 and "set-cookie" not in r.headers
        assert r.json() == {"error": r.json()["error"]} and "Authorization: Bearer" in r.json()["error"]
        for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"X-Recovery-Token": TOKEN}):
            r = client.get("/metrics", headers=headers)
            assert r.status_code == 200 and "set-cookie" not in r.headers
            assert r.headers["content-type"].startswith("text/plain")
    with client_for(tmp_path, no_token=True) as client:   # served without the token, and still no cookie
        r = client.get("/metrics")
        assert r.status_code == 200 and "set-cookie" not in r.headers
