"""Storm's multilang protocol on the wire: messages framed by "end" lines, what a child may send
(and how what it sent is quoted in errors), and the configuration passed in the handshake."""
from __future__ import annotations

import json
import re
from typing import Any

QUOTE_CHARS = 300           # how much of what a child sent an error quotes
ERROR_CHARS = 4000          # longest `error` message kept as a failure's error
MAX_MESSAGE_BYTES = 16 << 20
END_OF_MESSAGE = b"\nend\n"
LOG_LEVELS = {0: "trace", 1: "debug", 2: "info", 3: "warn", 4: "error"}
INT_RE = re.compile(r"[+-]?\d+")
FLOAT_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
dumps = json.dumps
encode_compact = json.JSONEncoder(separators=(",", ":")).encode   # tuples and task ids
loads = json.loads


class ProtocolError(Exception):
    """A message the child sent is not the protocol (the text says what it was)."""


class BadMessage:
    """A framed message that is not JSON."""
    __slots__ = ("raw", "reason")

    def __init__(self, raw: bytes, reason: str):
        self.raw = raw
        self.reason = reason


class EndOfOutput:
    """The child closed its stdout; `rest` is what came after the last complete message."""
    __slots__ = ("rest",)

    def __init__(self, rest: bytes):
        self.rest = rest


class StderrLine:
    __slots__ = ("line",)

    def __init__(self, line: str):
        self.line = line


def quote(data: Any, limit: int = QUOTE_CHARS) -> str:
    """A short, printable quotation of what a child sent."""
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).decode("utf-8", "replace")
    elif not isinstance(data, str):
        try:
            data = dumps(data)
        except (TypeError, ValueError):
            data = repr(data)
    if len(data) > limit:
        return repr(data[:limit]) + f"... ({len(data)} chars)"
    return repr(data)


def handshake_conf(conf: dict) -> dict:
    """Topology config as Storm sends it: "30" -> 30, "true" -> True, other text as is."""
    out: dict[str, Any] = {}
    for key, value in (conf or {}).items():
        if isinstance(value, str):
            text = value.strip()
            low = text.lower()
            if low in ("true", "false"):
                value = low == "true"
            elif INT_RE.fullmatch(text):
                value = int(text)
            elif FLOAT_RE.fullmatch(text):
                value = float(text)
        out[str(key)] = value
    return out

