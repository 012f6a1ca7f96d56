"""Who may reach the web view, in the terms `recovery ui` takes them: listening addresses
(loopback, every address) and the form of a token. No web stack is imported here: the command
reads these before it loads Starlette, and the app's security checks use them too."""
from __future__ import annotations

import ipaddress
import os
import re
import stat
from pathlib import Path

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


def read_token_file(path: Path, option: str = "--token-file") -> str:
    """The token in `path` (surrounding white space dropped): a file its owner alone may read,
    or write, as ssh wants of a key (mode 0600 or stricter)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):   # (a pipe would block the open)
            raise RecoveryError(f"{option} {path}: not a regular file")
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            text = fh.read(4096).decode("utf-8", "replace").strip()
    except OSError as err:
        raise RecoveryError(f"{option} {path}: cannot read it: {err.strerror or err}") from None
    if mode & 0o077:
        raise RecoveryError(f"{option} {path}: mode {stat.S_IMODE(mode):04o} lets other accounts read or "
                            f"change it; `chmod 600 {path}`")
    if not text:
        raise RecoveryError(f"{option} {path}: the file is empty")
    try:
        return check_token(text)
    except RecoveryError:
        raise RecoveryError(f"{option} {path}: a token is one or more letters, digits, '.', '_', '~', "
                            "'+', '/', '=' or '-' (it travels in headers)") from None
