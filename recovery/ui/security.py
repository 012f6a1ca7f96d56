"""What keeps other web pages, and other hosts, from driving the web view.

A browser sends requests to 127.0.0.1 on behalf of any site its user visits, so binding to
loopback is not enough (docs/guarantees.md, the web view). Every request goes through :class:`SecurityMiddleware`:

- **Host allow-list** (DNS rebinding): the Host header must be ``127.0.0.1``, ``localhost`` or
  ``[::1]`` with the server's port, the ``--host`` given, or an ``--allow-host`` name; anything
  else gets 421, on every route (pages, static files, API).
- **Token everywhere** when the server listens on a non-loopback address: the per-server token
  (``X-Recovery-Token`` header, ``Authorization: Bearer TOKEN`` or ``token TOKEN``, ``?token=``
  in the URL, or the cookie that URL sets) on every request, else 403. On loopback, pages and
  GETs of the API are readable without it.
- **State-changing requests** (any method but GET and HEAD: the actions are POST or DELETE):
  their ``Origin`` (or, failing that, ``Referer``) must be this server's own, a browser's
  ``Sec-Fetch-Site`` must say ``same-origin``, and they must carry the token in the header, the
  URL or the ``token`` field of a form (the pages' forms hold it hidden). An API client (curl,
  Python) sends no Origin: the token header alone admits it. The session cookie never admits an
  action: it is the one thing a hostile page's request carries without knowing the token.
- **Security headers** on every response: a Content-Security-Policy without inline script or
  style, ``X-Frame-Options: DENY``, ``Referrer-Policy: same-origin``, ``nosniff``.

Refusals are one line, as the CLI prints errors (JSON ``{"error": ...}`` under /api/, a short page
otherwise), and are sent before the app sees the request: a refused request changes nothing.
"""
from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recovery.ui.access import is_loopback

TOKEN_HEADER = "X-Recovery-Token"
TOKEN_FIELD = "token"          # the forms' hidden field, and the printed URL's ?token=
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# Starlette's in-process test client's Host: allowed only when the app has no port, which a
# listening server (the `recovery ui` command, the tests' BackgroundServer) always gives it.
TEST_CLIENT_HOST = "testserver"
MAX_FORM_BYTES = 1 << 20       # the pages' forms post a few keys; more is not one of them

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


def host_name(host: str) -> str:
    """``host`` as it appears in a URL or a Host header: lower case, an IPv6 address in brackets."""
    host = host.strip().lower()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def split_authority(authority: str) -> tuple[str, int | None] | None:
    """``name[:port]`` (a Host header, or a URL's netloc) as (name, port); None when malformed."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return None
        name, rest = authority[:end + 1], authority[end + 1:]
    else:
        name, sep, port_text = authority.rpartition(":")
        if not sep:
            return (authority, None) if authority else None
        rest = ":" + port_text
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit():
        return None
    return name, int(rest[1:])


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Guard:
    """The rules of one server: its token, the host names it answers to and its port."""
    token: str
    names: frozenset[str]
    port: int | None           # None: no socket (an in-process ASGI client); names are checked alone
    require_token: bool        # every request needs the token (a non-loopback --host)

    @classmethod
    def for_server(cls, host: str = "127.0.0.1", port: int | None = None, token: str | None = None,
                   allowed_hosts: Iterable[str] = ()) -> Guard:
        names = {*LOOPBACK_NAMES, host_name(host), *(host_name(h) for h in allowed_hosts)}
        if port is None:
            names.add(TEST_CLIENT_HOST)
        return cls(token=token or new_token(), names=frozenset(names), port=port,
                   require_token=not is_loopback(host))

    @property
    def allowed(self) -> list[str]:
        """The Host headers this server answers to, for messages."""
        suffix = f":{self.port}" if self.port is not None else ""
        return sorted(n + suffix for n in self.names)

    @property
    def cookie_name(self) -> str:
        # cookies are shared by every port of a host: one name per server
        return f"recovery_ui_token_{self.port}" if self.port is not None else "recovery_ui_token"

    def host_allowed(self, authority: str) -> bool:
        parsed = split_authority(authority)
        if parsed is None:
            return False
        name, port = parsed
        if name not in self.names:
            return False
        if self.port is None:
            return True
        # a browser leaves out the scheme's default port
        return port == self.port or (port is None and self.port == 80)

    def matches(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())


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


def _presented_token(headers: Headers, query: dict[str, list[str]]) -> str | None:
    """The token a client sent explicitly: header, Authorization, or ?token= (never the cookie)."""
    if TOKEN_HEADER.lower() in headers:
        return headers[TOKEN_HEADER.lower()].strip()
    scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() in ("bearer", "token") and credentials.strip():
        return credentials.strip()
    values = query.get(TOKEN_FIELD)
    return values[0] if values else None


def _cookie(headers: Headers, name: str) -> str | None:
    # Starlette's lenient parser: other local apps' odd cookies (127.0.0.1 is shared by every
    # port) must not hide ours, as they can from http.cookies
    return cookie_parser(headers.get("cookie", "")).get(name)


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


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
        path = scope.get("path", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                extra = list(SECURITY_HEADERS)
                if not path.startswith("/static/"):
                    extra.append(("cache-control", "no-store"))   # pages hold the token
                headers += [(k.encode(), v.encode()) for k, v in extra if k.encode() not in present]
                message = {**message, "headers": headers}
            await send(message)

        headers = Headers(scope=scope)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        try:
            self._check_host(headers)
            if self.guard.require_token:
                self._check_access(headers, query)
            if scope["method"] not in SAFE_METHODS:
                self._check_origin(headers)
                if not self.guard.matches(_presented_token(headers, query)):
                    body = await self._form_token(headers, receive)
                    if not self.guard.matches(body[0]):
                        raise _Refused(403, "refused: recover, requeue and clear need this web view's token "
                                            f"(the {TOKEN_HEADER} header, or the hidden field of the web "
                                            "view's own forms; `recovery ui` prints it when it starts)")
                    receive = _replay(body[1], receive)
        except _Refused as refusal:
            await self.refuse(path, refusal.status, str(refusal))(scope, receive, send_with_headers)
            return
        if scope["method"] == "GET" and TOKEN_FIELD in query and not path.startswith(("/api/", "/static/")) \
                and self.guard.matches(query[TOKEN_FIELD][0]):
            await self._enter(scope, query)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _check_host(self, headers: Headers) -> None:
        host = headers.get("host", "")
        if not self.guard.host_allowed(host):
            raise _Refused(421, f"host {host!r} is not this web view's: it answers to "
                                f"{', '.join(self.guard.allowed)} (other names are refused against DNS "
                                "rebinding; `recovery ui --allow-host NAME` adds one)")

    def _check_access(self, headers: Headers, query: dict[str, list[str]]) -> None:
        if self.guard.matches(_presented_token(headers, query)) or \
                self.guard.matches(_cookie(headers, self.guard.cookie_name)):
            return
        raise _Refused(403, "this web view needs its token: open the URL `recovery ui` printed "
                            f"(…/?{TOKEN_FIELD}=…), or send it in the {TOKEN_HEADER} header")

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

    async def _form_token(self, headers: Headers, receive: Receive) -> tuple[str | None, bytes]:
        """The `token` field of a form body, and the body (read here, replayed to the app)."""
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
            return None, b""
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
        values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(TOKEN_FIELD)
        return (values[0] if values else None), body

    def _enter(self, scope: Scope, query: dict[str, list[str]]) -> Response:
        """A page opened with the printed ?token= URL: the token goes into a cookie (HttpOnly,
        SameSite=Strict: a hostile page's requests do not carry it) and out of the address bar."""
        rest = {k: v for k, v in query.items() if k != TOKEN_FIELD}
        target = scope.get("path", "/") + ("?" + urlencode(rest, doseq=True) if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(self.guard.cookie_name, self.guard.token, httponly=True, samesite="strict", path="/")
        return response


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body the middleware read, then the real messages."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()
    return replayed
