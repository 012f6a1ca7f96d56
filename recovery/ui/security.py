"""Who may use the web view, and what keeps other web pages and other hosts from driving it.

A browser sends requests to 127.0.0.1 on behalf of any site its user visits, and every local
account reaches 127.0.0.1 too, so binding to loopback is not enough (docs/guarantees.md, the web
view). Every request goes through :class:`SecurityMiddleware`:

- **Host allow-list** (DNS rebinding): the Host header must be ``127.0.0.1``, ``localhost`` or
  ``[::1]`` with the server's port, the ``--host`` given, or an ``--allow-host`` name; anything
  else gets 421, on every route (pages, static files, API, the login page).
- **The token on every request**, loopback included: the per-server token (``X-Recovery-Token``
  header, ``Authorization: Bearer TOKEN`` or ``token TOKEN``), or the session cookie a browser
  gets in exchange for it. The token reaches a browser once: the URL `recovery ui` prints
  (``/?token=…``) sets the cookie (HttpOnly, SameSite=Strict) and redirects to the same page
  without it, or the login page takes it typed in. Programs' paths (the API, Prometheus'
  ``/metrics``) take the token in a header only: a ``?token=`` URL gets 401 there, and no
  cookie. Without either, a page request is sent to the login page and anything else (the
  API, a page's event stream, static files) gets 401; the login page and its style sheet are
  the only things served to anyone.
  The cookie holds a signed random session id, never the token, and no page holds the token.
- **State-changing requests** (any method but GET and HEAD: the actions are POST or DELETE):
  their ``Origin`` (or, failing that, ``Referer``) must be this server's own, a browser's
  ``Sec-Fetch-Site`` must say ``same-origin``, and they must carry the token in a header, or the
  session cookie together with the session's CSRF value (an HMAC of the cookie: the ``csrf``
  field the pages' forms hold). A hostile page's request carries the cookie, but cannot know
  the CSRF value.
- ``recovery ui --no-token`` (loopback only) serves every request without the token; a browser
  still gets a session cookie, and its forms' posts still need their CSRF value.
- **Security headers** on every response: a Content-Security-Policy without inline script or
  style, ``X-Frame-Options: DENY``, ``Referrer-Policy: same-origin``, ``nosniff``.

Refusals are one line, as the CLI prints errors (JSON ``{"error": ...}`` under /api/ and for
event streams, a short page otherwise), and are sent before the app sees the request: a
refused request changes nothing.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recovery.errors import RecoveryError
from recovery.ui.access import HostRule, is_loopback

TOKEN_HEADER = "X-Recovery-Token"
TOKEN_FIELD = "token"          # the printed URL's ?token=, and the login form's field
CSRF_FIELD = "csrf"            # the pages' forms' hidden field
LOGIN_PATH = "/login"
# what the login page needs, served to anyone: the page and its style sheet
PUBLIC_PATHS = frozenset({LOGIN_PATH, "/static/style.css"})
SAFE_METHODS = frozenset({"GET", "HEAD"})
# Starlette's in-process test client's Host: allowed only when the app has no port, which a
# listening server (the `recovery ui` command, the tests' BackgroundServer) always gives it.
TEST_CLIENT_HOST = "testserver"
MAX_FORM_BYTES = 1 << 20       # the pages' forms post a few keys; more is not one of them
FORM_TYPE = "application/x-www-form-urlencoded"

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'",
    "connect-src 'self'",      # htmx's requests and the SSE extension's EventSource
    "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'"))
SECURITY_HEADERS = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),
    ("x-content-type-options", "nosniff"),
)

Refuse = Callable[[str, int, str], Response]   # (path, status, one-line message) -> response


def new_token() -> str:
    return secrets.token_urlsafe(32)


def wants_json(path: str) -> bool:
    """Whether a refusal of `path` is JSON (the API, a page's event stream, Prometheus' /metrics)
    rather than a page (or the login page)."""
    return path.startswith("/api/") or path == "/metrics" or (
        path.startswith("/runs/") and path.count("/") == 3 and path.endswith("/events"))


def header_only(path: str) -> bool:
    """Whether `path` answers programs, which send the token in a header: the API and
    Prometheus' /metrics. A ``?token=`` URL admits no such request (it would stay in scrape
    configs, logs and histories) and none is given a session cookie."""
    return path.startswith("/api/") or path == "/metrics"


def local_target(target: str | None) -> str:
    """Where the login page sends the browser next: a path of this server, else the runs list
    (a `next` naming another site would make the login page an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@dataclass(frozen=True)
class Guard(HostRule):
    """The rules of one server: its token, and the host names it answers to and its port
    (HostRule, which the metrics endpoint of `submit --follow` applies too)."""
    token: str = ""
    open: bool = False         # --no-token: every request is served without the token (loopback only)

    @classmethod
    def for_server(cls, host: str = "127.0.0.1", port: int | None = None, token: str | None = None,
                   allowed_hosts: Iterable[str] = (), no_token: bool = False) -> Guard:
        if no_token and not is_loopback(host):
            raise RecoveryError(f"--no-token: the web view serves without its token on loopback only, "
                                f"not on --host {host}")
        names = HostRule.of(host, port, allowed_hosts).names
        if port is None:
            names |= {TEST_CLIENT_HOST}
        return cls(token=token or new_token(), names=names, port=port, open=no_token)

    @property
    def cookie_name(self) -> str:
        # cookies are shared by every port of a host: one name per server
        return f"recovery_ui_session_{self.port}" if self.port is not None else "recovery_ui_session"

    def matches(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())

    # --- sessions: what a browser holds instead of the token ---------------------------------
    def _mac(self, purpose: str, text: str) -> str:
        digest = hmac.new(self.token.encode(), f"{purpose}\0{text}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def new_session(self) -> str:
        """A session cookie's value: a random id signed with the token (so a server started
        again with the same token knows it, and one with another token does not)."""
        session_id = secrets.token_urlsafe(18)
        return f"{session_id}.{self._mac('session', session_id)}"

    def session_valid(self, value: str | None) -> bool:
        if not value or "." not in value:
            return False
        session_id, _, signature = value.partition(".")
        return hmac.compare_digest(signature.encode(), self._mac("session", session_id).encode())

    def csrf_for(self, session: str) -> str:
        """The CSRF value of a session, which its pages' forms carry (never the token)."""
        return self._mac("csrf", session)

    def csrf_matches(self, session: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf_for(session).encode())

    def session_cookie(self, response: Response, session: str) -> None:
        """Set `session` on `response`: HttpOnly (no script reads it), SameSite=Strict (no
        other site's request carries it)."""
        response.set_cookie(self.cookie_name, session, httponly=True, samesite="strict", path="/")


def _origin_of(headers: Headers) -> str | None:
    """The Origin header, or, failing that, the origin of the Referer; None when neither."""
    origin = headers.get("origin")
    if origin is not None:
        return origin.strip()
    referer = headers.get("referer")
    if referer:
        parts = urlsplit(referer.strip())
        return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else referer
    return None


def _presented_token(headers: Headers) -> str | None:
    """The token a client sent in a header: X-Recovery-Token, or Authorization."""
    if TOKEN_HEADER.lower() in headers:
        return headers[TOKEN_HEADER.lower()].strip()
    scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() in ("bearer", "token") and credentials.strip():
        return credentials.strip()
    return None


def _cookie(headers: Headers, name: str) -> str | None:
    # Starlette's lenient parser: other local apps' odd cookies (127.0.0.1 is shared by every
    # port) must not hide ours, as they can from http.cookies
    return cookie_parser(headers.get("cookie", "")).get(name)


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


NO_TOKEN = ("this web view needs its token: open the URL `recovery ui` printed (…/?token=…) or "
            f"log in at {LOGIN_PATH}; API clients send the {TOKEN_HEADER} header or Authorization: Bearer")


class SecurityMiddleware:
    """The checks above, as pure ASGI middleware around the whole app (its error pages too)."""

    def __init__(self, app: ASGIApp, guard: Guard, refuse: Refuse):
        self.app = app
        self.guard = guard
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":        # lifespan (the app serves no websocket)
            await self.app(scope, receive, send)
            return
        guard = self.guard
        path = scope.get("path", "")
        method = scope["method"]
        headers = Headers(scope=scope)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        session = _cookie(headers, guard.cookie_name)
        if not guard.session_valid(session):
            session = None
        new_session: str | None = None

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                extra = list(SECURITY_HEADERS)
                if not path.startswith("/static/"):
                    extra.append(("cache-control", "no-store"))   # pages hold a session's CSRF value
                headers += [(k.encode(), v.encode()) for k, v in extra if k.encode() not in present]
                if new_session is not None:
                    cookie = Response()
                    guard.session_cookie(cookie, new_session)
                    headers += [(k, v) for k, v in cookie.raw_headers if k == b"set-cookie"]
                message = {**message, "headers": headers}
            await send(message)

        try:
            self._check_host(headers)
            if method in SAFE_METHODS and path not in PUBLIC_PATHS and TOKEN_FIELD in query \
                    and not header_only(path) and not path.startswith("/static/") \
                    and guard.matches(query[TOKEN_FIELD][0]):
                await self._enter(scope, query)(scope, receive, send_with_headers)
                return
            by_token = guard.matches(_presented_token(headers))
            if path not in PUBLIC_PATHS and not (by_token or session or guard.open):
                if method in SAFE_METHODS and not wants_json(path) and not path.startswith("/static/"):
                    await self._to_login(scope)(scope, receive, send_with_headers)
                    return
                raise _Refused(401, NO_TOKEN)
            if session is None and guard.open and not by_token and not header_only(path):
                session = new_session = guard.new_session()   # a browser's forms need a CSRF value
            if method not in SAFE_METHODS:
                self._check_origin(headers)
                if not by_token and path != LOGIN_PATH:
                    receive = await self._check_csrf(headers, session, receive)
        except _Refused as refusal:
            await self.refuse(path, refusal.status, str(refusal))(scope, receive, send_with_headers)
            return
        if session is not None:
            scope.setdefault("state", {})[CSRF_FIELD] = guard.csrf_for(session)   # for the pages' forms
        await self.app(scope, receive, send_with_headers)

    def _check_host(self, headers: Headers) -> None:
        host = headers.get("host", "")
        if not self.guard.host_allowed(host):
            raise _Refused(421, f"host {host!r} is not this web view's: it answers to "
                                f"{', '.join(self.guard.allowed)} (other names are refused against DNS "
                                "rebinding; `recovery ui --allow-host NAME` adds one)")

    def _check_origin(self, headers: Headers) -> None:
        origin = _origin_of(headers)
        if origin is not None:
            parts = urlsplit(origin)
            own = parts.scheme in ("http", "https") and self.guard.host_allowed(parts.netloc) and (
                self.guard.port is not None or parts.netloc.lower() == headers.get("host", "").lower())
            if not own:
                raise _Refused(403, f"refused: a request from {origin!r} cannot recover, requeue or clear; "
                                    "only the web view's own pages can")
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            raise _Refused(403, f"refused: a {site} request cannot recover, requeue or clear; "
                                "only the web view's own pages can")

    async def _check_csrf(self, headers: Headers, session: str | None, receive: Receive) -> Receive:
        """An action without the token header: a page's form, which must carry its session's
        CSRF value. Returns the `receive` that gives the app the body read here. With
        --no-token, a request that is no form (an API client's) needs nothing more."""
        is_form = headers.get("content-type", "").split(";")[0].strip().lower() == FORM_TYPE
        if self.guard.open and not is_form:
            return receive
        if session is None:
            raise _Refused(401, NO_TOKEN)
        presented, body = await self._form_field(headers, receive, CSRF_FIELD) if is_form else (None, b"")
        if not self.guard.csrf_matches(session, presented):
            raise _Refused(403, "refused: recover, requeue and clear need the token (the "
                                f"{TOKEN_HEADER} header) or one of the web view's own forms, whose "
                                f"{CSRF_FIELD} value this one lacks or does not match (reload the page)")
        return _replay(body, receive)

    async def _form_field(self, headers: Headers, receive: Receive, name: str) -> tuple[str | None, bytes]:
        """The field `name` of a form body, and the body (read here, replayed to the app)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Refused(400, "the request ended before its body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                raise _Refused(413, f"a form of more than {MAX_FORM_BYTES} bytes is not one of the web view's")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(name)
        return (values[0] if values else None), body

    def _enter(self, scope: Scope, query: dict[str, list[str]]) -> Response:
        """A page opened with the printed ?token= URL: a session cookie for the browser, and the
        token out of the address bar (and of its history)."""
        rest = {k: v for k, v in query.items() if k != TOKEN_FIELD}
        target = scope.get("path", "/") + ("?" + urlencode(rest, doseq=True) if rest else "")
        response = RedirectResponse(target, status_code=303)
        self.guard.session_cookie(response, self.guard.new_session())
        return response

    @staticmethod
    def _to_login(scope: Scope) -> Response:
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope.get("path", "/") + (f"?{query}" if query else "")
        return RedirectResponse(f"{LOGIN_PATH}?" + urlencode({"next": target}), status_code=303)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body the middleware read, then the real messages."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()
    return replayed
