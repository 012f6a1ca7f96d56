"""How the CLI prints text that came from data (tuple values, errors, names of components,
runs, topics and files): control characters as visible escapes (recovery/visible.py) and,
where Rich renders it, as plain text, never markup. `--json` output does not go through here:
json.dumps escapes control characters itself and the values stay exact."""
from __future__ import annotations

from typing import TYPE_CHECKING

from recovery.visible import visible

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["plain", "rich_text", "visible"]


def plain(value: object) -> str:
    """`value` for click.echo (which renders no markup): one line, control characters escaped."""
    return visible(value)


def rich_text(value: object, style: str = "") -> Text:
    """`value` as a Rich Text: shown as written, never parsed as markup or emoji codes."""
    from rich.text import Text
    return Text(visible(value), style=style)
