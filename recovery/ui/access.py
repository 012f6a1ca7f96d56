"""Who may reach the web view, in the terms `recovery ui` takes them: listening addresses
(loopback, every address) and the form of a token. No web stack is imported here: the command
reads these before it loads Starlette, and the app's security checks use them too."""
from __future__ import annotations

import ipaddress
import re

from recovery.errors import RecoveryError

TOKEN_ENV = "RECOVERY_UI_TOKEN"
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


def check_token(token: str) -> str:
    if not TOKEN_RE.fullmatch(token):
        raise RecoveryError(f"--token / {TOKEN_ENV}: a token is one or more letters, digits, "
                            "'.', '_', '~', '+', '/', '=' or '-' (it travels in headers and URLs)")
    return token
