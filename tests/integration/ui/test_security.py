"""What keeps other local accounts, other web pages and other hosts from reading or driving the
web view: four attacks against a live server, then every route of the app (table-driven over
`app.routes`, so a new route is covered) without the token, with a foreign Host, a foreign
Origin, no Origin, a wrong CSRF value and GET on actions; each refused request must change
nothing in Redis and start no recover. Then the token flow through the real command (the
printed URL, --no-token, --token-file). All on real runs in the session's Redis."""
from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from recovery.tracking import queue as failed_queue
from recovery.tracking import runs
from recovery.ui.app import create_app
from recovery.ui.security import wants_json
from tests.helpers import file_mode, wait_for
from tests.integration.conftest import copy_workflow, submit
from tests.ui_server import BackgroundServer

PORT = 8080
OWN = f"http://127.0.0.1:{PORT}"
EVIL = "http://evil.example"
SECURITY_HEADERS = {"x-frame-options": "DENY", "referrer-policy": "same-origin"}
XSS = "<img src=x onerror=alert(1)>"


def redis_state(client) -> dict[bytes, bytes]:
    """Every key and its serialized value: equal before and after means nothing changed."""
    return {k: client.dump(k) for k in sorted(client.scan_iter())}


def dead_run(spark, redis_url, redis_client, tmp_path) -> str:
    """cdn_logs with one attempt: its poison lines (and a line that is HTML) are dead letters."""
    xml = copy_workflow("cdn_logs", tmp_path)
    with open(xml.parent / "data" / "cdn.log", "a") as log:
        log.write(XSS + "\n")
    run = submit(spark, redis_url, redis_client, xml, {"recovery.max.attempts": "1"}).run_id
    assert redis_client.hlen(failed_queue.dead_letters_key(run)) >= 2
    return run


def assert_secure_headers(response, what: str) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (what, name)
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp, what


def log_in(client: TestClient, token: str) -> str:
    """Open the printed URL as a browser does (the client keeps the cookie); returns the
    session's CSRF value (what its pages' forms hold)."""
    r = client.get(f"/?token={token}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    name, value = r.headers["set-cookie"].split(";")[0].split("=", 1)
    assert token not in value and client.cookies.get(name) == value     # the client keeps it, as a browser
    return client.app.state.ui.guard.csrf_for(value)


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


@pytest.fixture
def dead_run_app(spark, redis_url, redis_client, tmp_path):
    run = dead_run(spark, redis_url, redis_client, tmp_path)
    app = create_app(redis_client, redis_url, tmp_path / "ui-logs", port=PORT)
    with TestClient(app, base_url=OWN) as client:
        yield run, app, client


# --- cross-site attacks (a hostile page, DNS rebinding, GET actions), against a live server ---
def raw_request(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""):
    """One request with exactly these headers (Host included), as a hostile page's browser sends."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.headers, response.read().decode()   # headers: case-insensitive
    finally:
        conn.close()


def test_cross_site_rebinding_and_get_attacks_are_refused_and_change_nothing(spark, redis_url, redis_client, tmp_path):
    run = dead_run(spark, redis_url, redis_client, tmp_path)
    with BackgroundServer(redis_client, redis_url, tmp_path / "ui-logs") as server:
        host = f"127.0.0.1:{server.port}"
        before = redis_state(redis_client)
        form = {"Host": host, "Origin": EVIL, "Content-Type": "application/x-www-form-urlencoded"}

        # 0. another local account reads a page for its token, and acts with it
        for path in (f"/runs/{run}", f"/runs/{run}/dead", f"/runs/{run}/clear"):
            status, headers, body = raw_request(server.port, "GET", path, {"Host": host})
            assert status == 303 and headers["Location"].startswith("/login?next=") and server.token not in body
        status, _, body = raw_request(server.port, "GET", f"/api/v1/runs/{run}/dead", {"Host": host})
        assert status == 401 and run not in body
        status, _, body = raw_request(server.port, "POST", f"/api/v1/runs/{run}/dead/requeue", {"Host": host})
        assert status == 401 and "token" in body
        # 1. an <img src> is enough to send a GET: it must start nothing, even with the token
        status, _, body = raw_request(server.port, "GET", f"/api/v1/runs/{run}/recover",
                                      {"Host": host, "X-Recovery-Token": server.token})
        assert status == 405 and "POST" in body
        # 2. a hostile page's form requeues every dead letter (the browser holds a session:
        # were the cookie sent, which SameSite=Strict prevents, the Origin is refused)
        session = {"Cookie": f"recovery_ui_session_{server.port}={server.app.state.ui.guard.new_session()}"}
        status, headers, body = raw_request(server.port, "POST", f"/runs/{run}/dead/requeue", form, b"all=1")
        assert status == 401 and headers["Content-Type"].startswith("text/html")
        status, headers, body = raw_request(server.port, "POST", f"/runs/{run}/dead/requeue", {**form, **session},
                                            b"all=1")
        assert status == 403 and "refused" in body and headers["Content-Type"].startswith("text/html")
        # 3. ... or clears the run
        status, _, body = raw_request(server.port, "POST", f"/runs/{run}/clear", {**form, **session},
                                      f"confirm={run}".encode())
        assert status == 403 and "refused" in body
        # 4. DNS rebinding: a hostile name resolved to 127.0.0.1 reads the API
        status, _, body = raw_request(server.port, "GET", "/api/v1/runs", {"Host": f"evil.example:{server.port}"})
        assert status == 421 and run not in body and "evil.example" in body

        assert redis_state(redis_client) == before
        assert server.app.state.ui.processes.state(run) is None
        assert not (tmp_path / "ui-logs").exists()


# --- every route ------------------------------------------------------------------------------
def concrete_requests(app, run: str, root: int) -> list[tuple[str, str, str]]:
    """(method, path, route) for every route and method of the app, with the run's id and a
    component of it filled in, and a trace's root (a dead root of the run); static files by one file."""
    out = []
    for route in app.routes:
        if isinstance(route, Route):
            path = route.path.replace("{run_id:str}", run).replace("{component:str}", "split")
            assert "{" not in path, f"a path parameter the test does not know: {route.path}"
            if path.endswith("/trace"):
                path += f"?root={root}"
            out += [(m, path, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
        elif isinstance(route, Mount):
            out.append(("GET", route.path + "/style.css", route.path))
        else:
            raise AssertionError(f"a route of another kind: {route!r}")
    return out


ACTING_FORM = {"all": "1", "confirm": "{run}"}        # what would act if the request got through


def test_every_route_refuses_foreign_hosts_origins_and_missing_tokens(dead_run_app, redis_client):
    run, app, client = dead_run_app
    token = app.state.token
    csrf = log_in(client, token)
    session = dict(client.cookies)
    client.cookies.clear()
    requests = concrete_requests(app, run, failed_queue.dead_letters(redis_client, run)[0].roots[0])
    unsafe = [(m, p, r) for m, p, r in requests if m not in ("GET", "HEAD")]
    assert {(m, r) for m, _, r in unsafe} >= {("POST", "/runs/{run_id:str}/recover"),
                                              ("POST", "/runs/{run_id:str}/preview"),
                                              ("POST", "/runs/{run_id:str}/dead/requeue"),
                                              ("POST", "/runs/{run_id:str}/clear"),
                                              ("POST", "/api/v1/runs/{run_id:str}/recover"),
                                              ("POST", "/api/v1/runs/{run_id:str}/dead/requeue"),
                                              ("DELETE", "/api/v1/runs/{run_id:str}")}
    form = {k: v.format(run=run) for k, v in ACTING_FORM.items()}
    before = redis_state(redis_client)

    def send(method, path, headers, data=None, csrf_field=False, cookie=False):
        body = dict(data or form)
        if csrf_field:
            body["csrf"] = csrf
        if cookie:
            headers = {**headers, "Cookie": "; ".join(f"{k}={v}" for k, v in session.items())}
        return client.request(method, path, headers=headers, data=body if method == "POST" else None,
                              follow_redirects=False)

    for method, path, route in requests:
        what = f"{method} {path}"
        # a foreign Host, even with the token: 421 on every route, pages, static and API alike
        r = send(method, path, {"Host": f"evil.example:{PORT}", "X-Recovery-Token": token})
        assert r.status_code == 421, what
        assert_secure_headers(r, what)
        r = send(method, path, {"Host": f"127.0.0.1:{PORT + 1}", "X-Recovery-Token": token})
        assert r.status_code == 421, what + " (another port)"
        # no token, no session (another local account): nothing but the login page and its style
        for headers in ({}, {"X-Recovery-Token": "wrong"}, {"Authorization": f"Bearer {token}x"},
                        {"Cookie": f"recovery_ui_session_{PORT}={token}"}):
            r = send(method, path, headers)
            public = route in ("/login", "/static") and method == "GET"
            if public:
                assert r.status_code == 200 and token not in r.text, (what, headers)
            elif method == "GET" and not wants_json(path) and not path.startswith("/static/"):   # a page
                assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), (what, headers)
            else:
                assert r.status_code in (401, 403) if route == "/login" else r.status_code == 401, (what, headers)
            assert_secure_headers(r, what)
        if method in ("GET", "HEAD"):
            # safe: served whatever the Origin (a foreign page cannot read the answer: no CORS)
            for headers, cookie in (({"Origin": EVIL, "X-Recovery-Token": token}, False), ({"Origin": EVIL}, True)):
                r = send(method, path, headers, cookie=cookie)
                assert r.status_code == 200, what
                assert_secure_headers(r, what)
                assert token not in r.text, what
            continue
        if route == "/login":
            continue
        # a state-changing request: a foreign Origin or Referer is refused even with the token
        for headers in ({"Origin": EVIL, "X-Recovery-Token": token},
                        {"Origin": "null", "X-Recovery-Token": token},
                        {"Referer": EVIL + "/page", "X-Recovery-Token": token},
                        {"Origin": f"http://127.0.0.1:{PORT + 1}", "X-Recovery-Token": token},
                        {"Sec-Fetch-Site": "cross-site", "X-Recovery-Token": token}):
            r = send(method, path, headers, csrf_field=True, cookie=True)
            assert r.status_code == 403, (what, headers)
            assert_secure_headers(r, what)
        # no token: refused, with no Origin (a form post, curl) or the UI's own
        for headers in ({}, {"Origin": OWN}, {"X-Recovery-Token": "wrong"},
                        {"Origin": OWN, "Authorization": "Bearer wrong"}):
            r = send(method, path, headers, csrf_field=True)
            assert r.status_code == 401, (what, headers)
            assert ("application/json" in r.headers["content-type"]) is path.startswith("/api/"), what
            line = r.json()["error"] if path.startswith("/api/") else r.text
            assert "token" in line, what
        # a session without its CSRF value (a hostile page's request, were the cookie sent), with
        # another session's, or with the token in a form field: refused
        other = app.state.ui.guard.csrf_for(app.state.ui.guard.new_session())
        for data in (form, {**form, "csrf": other}, {**form, "token": token}, {**form, "csrf": token}):
            r = send(method, path, {"Origin": OWN}, data=data, cookie=True)
            assert r.status_code == 403, (what, data)
        # GET on an action: 405 (or the page of the same path, which only shows)
        if not any(m == "GET" and p == path for m, p, _ in requests):
            r = send("GET", path, {"X-Recovery-Token": token})
            assert r.status_code == 405, what
        assert redis_state(redis_client) == before, f"{what} changed Redis"

    assert redis_state(redis_client) == before
    assert app.state.ui.processes.state(run) is None
    assert redis_client.hlen(failed_queue.dead_letters_key(run)) >= 2 and redis_client.exists(runs.record_key(run))


def test_the_pages_forms_and_api_clients_with_the_token_are_admitted(dead_run_app, redis_client):
    run, app, client = dead_run_app
    token = app.state.token
    dead = sorted(k.decode() for k in redis_client.hkeys(failed_queue.dead_letters_key(run)))
    expected = log_in(client, token)
    # a page fetched with the session holds its CSRF value in every form, and never the token
    for path in ("/", f"/runs/{run}", f"/runs/{run}/dead", f"/runs/{run}/clear", f"/runs/{run}/events"):
        assert token not in client.get(path).text, path
    page = client.get(f"/runs/{run}/dead").text
    csrf = csrf_of(page)
    assert csrf == expected and page.count(f'name="csrf" value="{csrf}"') == page.count("<form") == 1
    assert 'name="token"' not in page
    r = client.post(f"/runs/{run}/dead/requeue", data={"one": dead[0], "csrf": csrf},
                    headers={"Origin": OWN}, follow_redirects=False)
    assert r.status_code == 303 and not redis_client.hexists(failed_queue.dead_letters_key(run), dead[0])
    # a browser that sends a Referer but no Origin
    r = client.post(f"/runs/{run}/dead/requeue", data={"one": dead[1], "csrf": csrf},
                    headers={"Referer": f"{OWN}/runs/{run}/dead", "Sec-Fetch-Site": "same-origin"},
                    follow_redirects=False)
    assert r.status_code == 303 and not redis_client.hexists(failed_queue.dead_letters_key(run), dead[1])
    client.cookies.clear()
    # curl or Python: no Origin, the token as a header, or as Authorization: Bearer / token
    r = client.post(f"/api/v1/runs/{run}/dead/requeue", headers={"X-Recovery-Token": token}, json={"keys": dead[2:3]})
    assert r.status_code == 200 and r.json()["requeued"] == len(dead[2:3])
    r = client.post(f"/api/v1/runs/{run}/dead/requeue", headers={"Authorization": f"token {token}"})
    assert r.json()["requeued"] == len(dead) - 3
    r = client.delete(f"/api/v1/runs/{run}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and not redis_client.exists(runs.record_key(run))


def test_a_run_id_outside_the_alphabet_is_refused_before_anything(dead_run_app, redis_client, tmp_path):
    run, app, client = dead_run_app
    token = app.state.token
    before = redis_state(redis_client)
    # (quoted as they travel: each decodes to a run id outside the alphabet)
    for quoted in (".hidden", "...", "a%20b", "x" * 129, "a%5C..%5Cb", "a%2500b", "%2E%2E"):
        for method, path in (("GET", f"/runs/{quoted}"), ("POST", f"/runs/{quoted}/recover"),
                             ("POST", f"/api/v1/runs/{quoted}/recover"), ("GET", f"/api/v1/runs/{quoted}/dead")):
            r = client.request(method, path, headers={"X-Recovery-Token": token})
            assert r.status_code == 400 and "invalid run id" in r.text, path
    # a slash never reaches a handler: a path separator is no part of a run id
    r = client.post("/api/v1/runs/a%2F..%2F..%2Fb/recover", headers={"X-Recovery-Token": token})
    assert r.status_code in (400, 404)
    assert redis_state(redis_client) == before
    assert not (tmp_path / "ui-logs").exists() and not list(tmp_path.glob("*.recover.log"))
    with pytest.raises(Exception, match="invalid run id"):
        app.state.ui.processes.log_path("a/../../b")


def test_the_events_of_a_finished_run_end_and_its_page_opens_none(dead_run_app, redis_client):
    run, app, client = dead_run_app
    log_in(client, app.state.token)
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "dead"
    page = client.get(f"/runs/{run}").text
    assert 'id="run-body"' in page and "sse-connect" not in page
    with client.stream("GET", f"/runs/{run}/events") as events:
        assert events.status_code == 200
        text = "".join(events.iter_text())       # returns: the server ended the stream
    assert text.startswith("event: live\n") and text.endswith("event: done\ndata: done\n\n")


def test_a_running_runs_page_follows_it_until_done(dead_run_app, redis_client):
    from tests.helpers import pretend_running
    run, app, client = dead_run_app
    log_in(client, app.state.token)
    pretend_running(redis_client, run)
    page = client.get(f"/runs/{run}").text
    assert re.search(r'sse-connect="/runs/[^"]+/events"[^>]*sse-close="done"', page)


def test_recover_logs_are_private_whatever_the_umask(spark, redis_url, redis_client, tmp_path):
    run = submit(spark, redis_url, redis_client, copy_workflow("wordcount", tmp_path)).run_id
    log_dir = tmp_path / "home" / "ui"
    # the recover process fails at once (its Redis URL leads nowhere): only its log matters here
    app = create_app(redis_client, "redis://127.0.0.1:1/0", log_dir, port=PORT)
    old = os.umask(0)
    try:
        with TestClient(app, base_url=OWN, headers={"X-Recovery-Token": app.state.token}) as client:
            r = client.post(f"/api/v1/runs/{run}/recover")
            assert r.status_code == 202, r.text
            wait_for(lambda: not app.state.ui.processes.state(run).running, 120, "the recover process to exit")
    finally:
        os.umask(old)
    log = log_dir / f"{run}.recover.log"
    assert file_mode(log_dir) == 0o700 and file_mode(log) == 0o600
    assert "127.0.0.1:1" in log.read_text()
    # a folder and a log an older version left open are tightened when the server starts
    os.chmod(log_dir, 0o755)
    os.chmod(log, 0o644)
    app.state.ui.processes.make_private()
    assert file_mode(log_dir) == 0o700 and file_mode(log) == 0o600


# --- a non-loopback --host: the token on every request, through the real command ----------------
def get(port: int, path: str, headers: dict[str, str]):
    return raw_request(port, "GET", path, {"Host": f"127.0.0.1:{port}", **headers})


@pytest.fixture
def ui_command(redis_url, tmp_path):
    """`recovery ui` as a user starts it, on a free port; yields start(*args), which returns the
    port, the line it printed and the process."""
    procs = []

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, subprocess.Popen]:
        proc = subprocess.Popen([sys.executable, "-m", "recovery", "ui", "--port", "0", "--redis", redis_url, *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "RECOVERY_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1",
                                     **(env or {})})
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.startswith("recovery ui: http://"), (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(re.search(r":(\d+)/", line).group(1))
        return port, line, proc

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_non_loopback_host_needs_the_printed_token_everywhere(ui_command, redis_client, tmp_path):
    ui_dir = tmp_path / "home" / "ui"
    ui_dir.mkdir(parents=True, mode=0o755)
    (ui_dir / "old.recover.log").write_text("Traceback ... values\n")
    os.chmod(ui_dir / "old.recover.log", 0o644)
    port, line, _ = ui_command("--host", "0.0.0.0")
    token = re.search(r"\?token=([A-Za-z0-9_-]+)", line).group(1)
    assert file_mode(ui_dir) == 0o700 and file_mode(ui_dir / "old.recover.log") == 0o600
    assert_printed_url_flow(port, token)


def assert_printed_url_flow(port: int, token: str) -> None:
    """What a client without the token gets (the login page, 401), and what the printed URL gives."""
    for path in ("/", "/runs/nope"):
        status, headers, body = get(port, path, {})
        assert status == 303 and headers["Location"].startswith("/login?next=") and token not in body, path
        assert headers["X-Frame-Options"] == "DENY", path
    for path in ("/api/v1/runs", "/static/vendor/htmx-2.0.11.min.js", "/runs/nope/events"):
        status, headers, body = get(port, path, {})
        assert status == 401 and "token" in body, path
        assert get(port, path, {"X-Recovery-Token": "not-" + token})[0] == 401, path
    assert get(port, "/login", {})[0] == 200 and get(port, "/static/style.css", {})[0] == 200
    assert get(port, "/api/v1/runs", {"X-Recovery-Token": token})[0] == 200
    assert get(port, "/api/v1/runs", {"Authorization": f"Bearer {token}"})[0] == 200
    assert get(port, "/static/vendor/htmx-2.0.11.min.js", {"X-Recovery-Token": token})[0] == 200
    assert get(port, "/api/v1/runs", {"Host": f"evil.example:{port}", "X-Recovery-Token": token})[0] == 421

    # the printed URL: a session cookie (HttpOnly, SameSite=Strict), and the token out of the URL
    status, headers, _ = get(port, "/?" + urlencode({"token": token, "status": "dead"}), {})
    assert status == 303 and headers["Location"] == "/?status=dead"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and token not in cookie
    name_value = cookie.split(";")[0]
    status, _, body = get(port, "/?status=dead", {"Cookie": name_value})
    assert status == 200 and "<h1>Runs</h1>" in body and token not in body
    # the cookie reads pages, but an action needs the token header or a page's CSRF value
    status, _, body = raw_request(port, "DELETE", "/api/v1/runs/nope",
                                  {"Host": f"127.0.0.1:{port}", "Cookie": name_value, "Origin": f"http://127.0.0.1:{port}"})
    assert status == 403
    status, _, body = raw_request(port, "DELETE", "/api/v1/runs/nope", {"Host": f"127.0.0.1:{port}", "X-Recovery-Token": token})
    assert status == 404 and "no run 'nope'" in body


def test_on_loopback_too_only_the_token_admits(ui_command):
    port, line, _ = ui_command()
    token = re.search(r"\?token=([A-Za-z0-9_-]+)", line).group(1)
    assert line.startswith(f"recovery ui: http://127.0.0.1:{port}/?token={token} ")
    assert_printed_url_flow(port, token)


def test_a_users_token_from_the_environment_is_not_printed(ui_command):
    port, line, _ = ui_command(env={"RECOVERY_UI_TOKEN": "my-own-token.1"})
    assert "my-own-token.1" not in line and "RECOVERY_UI_TOKEN" in line
    assert get(port, "/api/v1/runs", {})[0] == 401
    status, _, _ = raw_request(port, "POST", "/api/v1/runs/nope/recover", {"Host": f"127.0.0.1:{port}"})
    assert status == 401
    status, _, body = raw_request(port, "POST", "/api/v1/runs/nope/recover",
                                  {"Host": f"127.0.0.1:{port}", "X-Recovery-Token": "my-own-token.1"})
    assert status == 404 and "no run 'nope'" in body


def ui_refusal(redis_url: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recovery", "ui", "--port", "0", "--redis", redis_url, *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "RECOVERY_HOME": str(tmp_path / "home")})


def test_a_token_file_is_read_when_only_its_owner_may_read_it(ui_command, redis_url, tmp_path):
    path = tmp_path / "ui-token"
    path.write_text("token-from-a-file.7\n")
    os.chmod(path, 0o644)
    done = ui_refusal(redis_url, tmp_path, "--token-file", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: --token-file {path}: mode 0644 lets other accounts read or change it; `chmod 600 {path}`\n"
    os.chmod(path, 0o600)
    port, line, proc = ui_command("--token-file", str(path))
    assert "token-from-a-file" not in line and str(path) in line
    # not in `ps`: the process's arguments name the file, not the token
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    assert b"token-from-a-file" not in cmdline and str(path).encode() in cmdline
    assert get(port, "/api/v1/runs", {})[0] == 401
    assert get(port, "/api/v1/runs", {"Authorization": "Bearer token-from-a-file.7"})[0] == 200


def test_no_token_is_for_loopback_only_and_warns(ui_command, redis_url, tmp_path):
    for host in ("0.0.0.0", "192.0.2.1", "::"):
        done = ui_refusal(redis_url, tmp_path, "--no-token", "--host", host)
        assert done.returncode == 2 and done.stderr.startswith("error: --no-token is for loopback only"), done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == ""
    done = ui_refusal(redis_url, tmp_path, "--no-token", "--token-file", str(tmp_path / "x"))
    assert done.returncode == 2 and "--no-token" in done.stderr and done.stderr.count("\n") == 1
    port, line, proc = ui_command("--no-token")
    assert "?token=" not in line and "no token" in line
    assert get(port, "/", {})[0] == 200 and get(port, "/api/v1/runs", {})[0] == 200
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert err.startswith("warning: --no-token: every local account")


def test_ui_help_says_how_the_token_is_sent():
    from click.testing import CliRunner

    from recovery.cli import main
    text = CliRunner().invoke(main, ["ui", "--help"]).output
    assert "without authentication" not in text
    assert "X-Recovery-Token" in text and "--token" in text and "RECOVERY_UI_TOKEN" in text


def test_the_readme_says_how_an_api_client_sends_the_token():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## The web view", 1)[1].split("\n## ", 1)[0]
    assert "X-Recovery-Token" in section and "RECOVERY_UI_TOKEN" in section
    assert "no authentication" not in section


def test_pages_show_the_datas_control_characters_as_escapes(spark, redis_url, redis_client, tmp_path):
    """Errors holding terminal escapes: the pages show them as the CLI does (\\x1b), and the
    JSON API keeps them exact."""
    from tests.integration.test_cli_escaping import HOSTILE, hostile_workflow
    pending = submit(spark, redis_url, redis_client, hostile_workflow(tmp_path / "a")).run_id   # failed
    dead = submit(spark, redis_url, redis_client, hostile_workflow(tmp_path / "b"),
                  {"recovery.max.attempts": "1"}).run_id
    app = create_app(redis_client, redis_url, tmp_path / "ui-logs", port=PORT)
    with TestClient(app, base_url=OWN, headers={"X-Recovery-Token": app.state.token}) as client:
        for path in (f"/runs/{pending}", f"/runs/{dead}/dead"):
            html = client.get(path).text
            assert "\x1b" not in html and "\x07" not in html, path
            assert "\\x1b]0;TITLE\\x07" in html and "\\x1b[31mred" in html, path
            assert "[link=http://evil.example]click[/link]" in html, path
        errors = [d["error"] for d in client.get(f"/api/v1/runs/{dead}/dead").json()["dead"]]
        assert len(errors) == 3 and all(HOSTILE in e for e in errors)
