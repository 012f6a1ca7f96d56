"""`recovery plan RUN`: the recovery workflow `recover` would run next."""
from __future__ import annotations

import click

from recovery import run as api
from recovery.cli import common
from recovery.cli.options import redis_option
from recovery.cli.safe_text import visible
from recovery.errors import RecoveryError
from recovery.model import render


def _with_chains_comment(xml: str, chains: list[list[str]]) -> str:
    """The recovery workflow's XML with its chains said in a comment after the declaration (as
    `recovery graph` shows them): a user reading it sees which components run as one stage."""
    if not chains:
        return xml
    note = "".join(f"\n  chain: {' -> '.join(c)} (one Spark stage)" for c in chains)
    comment = "<!--" + note.replace("--", "- -") + "\n-->"   # "--" may not appear in a comment
    head, sep, rest = xml.partition("?>")
    if sep and head.lstrip().startswith("<?xml"):
        return f"{head}?>\n{comment}{rest}"
    return f"{comment}\n{xml}"


@click.command()
@click.argument("run_id", callback=common.run_id_arg)
@click.option("--format", "-f", "fmt", type=click.Choice(["xml", "text", "dot", "mermaid"]),
              default="xml", show_default=True)
@redis_option
def plan(run_id: str, fmt: str, redis_url: str | None) -> None:
    """The recovery workflow `recover` would run next: as XML, or the original topology
    drawn with the failed positions marked and the part that re-runs set apart."""
    run = api.Run.get(run_id, redis=redis_url)
    p = run.plan()
    if fmt != "xml":
        original = run.workflow()
        dim = {c.id for c in original.components} - set(p.rerun)
        # component names and marks come from the run: escaped, the drawing's lines kept
        click.echo(visible(render.render(original, fmt, p.marks, dim, chains=p.chains, modes=p.modes), multiline=True))
        return
    if p.xml is None:
        raise RecoveryError(f"run {run_id} has no failed positions: nothing to recover")
    click.echo(visible(_with_chains_comment(p.xml, p.chains), multiline=True))
