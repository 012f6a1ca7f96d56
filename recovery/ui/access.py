"""Who may reach the web view, in the terms `recovery ui` takes them: listening addresses
(loopback, every address) and the form of a token. No web stack is imported here: the command
reads these before it loads Starlette, and the app's security checks use them too."""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from recovery.errors import RecoveryError
from recovery.home import read_private

TOKEN_ENV = "RECOVERY_UI_TOKEN"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# what a token may hold: it travels in a header, a cookie and a URL unquoted
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]+")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or ::: every address of the machine."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


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


@dataclass(frozen=True)
class HostRule:
    """The Host headers a server answers to (against DNS rebinding: a hostile name that resolves
    to this machine): the loopback names, the address it listens on and the names allowed, each
    with its port. The web view refuses any other with 421, and so does the metrics endpoint of
    `submit --follow --metrics-port`."""
    names: frozenset[str]
    port: int | None           # None: no socket (an in-process ASGI client); names are checked alone

    @classmethod
    def of(cls, host: str = "127.0.0.1", port: int | None = None, allowed_hosts: Iterable[str] = ()) -> HostRule:
        """The rule of a server listening on `host`:`port` that also answers to `allowed_hosts`."""
        return cls(frozenset({*LOOPBACK_NAMES, host_name(host), *(host_name(h) for h in allowed_hosts)}), port)

    @property
    def allowed(self) -> list[str]:
        """The Host headers this server answers to, for messages."""
        suffix = f":{self.port}" if self.port is not None else ""
        return sorted(n + suffix for n in self.names)

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


def check_token(token: str) -> str:
    if not TOKEN_RE.fullmatch(token):
        raise RecoveryError(f"--token / {TOKEN_ENV}: a token is one or more letters, digits, "
                            "'.', '_', '~', '+', '/', '=' or '-' (it travels in headers and URLs)")
    return token


def read_token_file(path: Path, option: str = "--token-file") -> str:
    """The token in `path` (surrounding white space dropped): a file its owner alone may read,
    or write, as ssh wants of a key (mode 0600 or stricter: home.read_private)."""
    text = read_private(path, f"{option} {path}", limit=4096).strip()
    if not text:
        raise RecoveryError(f"{option} {path}: the file is empty")
    try:
        return check_token(text)
    except RecoveryError:
        raise RecoveryError(f"{option} {path}: a token is one or more letters, digits, '.', '_', '~', "
                            "'+', '/', '=' or '-' (it travels in headers)") from None
