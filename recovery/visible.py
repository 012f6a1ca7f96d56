"""Text from data (tuple values, error messages, names read back from Redis) made safe to show:
every control character (C0, DEL, C1) and every bidirectional override becomes a visible
escape, as Python writes them (``\\x1b``, ``\\n``, ``\\u202e``). A terminal then cannot be made
to set its title, recolour, hide text or open a hyperlink, and a page shows what the data
holds. The CLI (recovery/cli/safe_text.py, which also escapes Rich markup) and the web view
both show data through this one function, so the same value reads the same in both."""
from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0),
             *range(0x202A, 0x202F), *range(0x2066, 0x206A)]    # the bidi embeddings, overrides, isolates
ONE_LINE = str.maketrans({code: _escape(code) for code in _CONTROLS})
# a multi-line field (a traceback) keeps its line breaks and tabs
MULTI_LINE = str.maketrans({code: _escape(code) for code in _CONTROLS if chr(code) not in "\n\t"})


# values this process must never show (secrets from a private file): `hide` adds them
_HIDDEN: list[str] = []
HIDDEN_TEXT = "***"


def hide(*secrets: str) -> None:
    """From now on, `visible` shows each of `secrets` as ``***``, wherever it appears (a Spark
    property's value from --properties-file that an error or a log line would quote)."""
    for secret in secrets:
        if secret and secret not in _HIDDEN:
            _HIDDEN.append(secret)
    _HIDDEN.sort(key=len, reverse=True)    # a secret that holds another is masked whole


def visible(text: object, *, multiline: bool = False) -> str:
    """`text` (any value: str() of it) with its control characters shown as escapes, and the
    values `hide` names as ``***``; with `multiline`, line feeds and tabs are kept."""
    out = str(text)
    for secret in _HIDDEN:
        out = out.replace(secret, HIDDEN_TEXT)
    return out.translate(MULTI_LINE if multiline else ONE_LINE)
