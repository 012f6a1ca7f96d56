"""`recovery validate` and `recovery graph`: check workflow files, draw them."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import click

from recovery.api.runnable import validate_file
from recovery.cli.options import echo_json
from recovery.cli.safe_text import plain
from recovery.errors import WorkflowError
from recovery.model.config import describe
from recovery.model.graph import ChainPlan, Mode, TaskMap, topological_order
from recovery.model.render import render
from recovery.model.workflow import Workflow
from recovery.model.xml.parse import load
from recovery.runtime.modes import shown_modes


@dataclass(frozen=True)
class FileCheck:
    """One file as `validate` checked it: its workflow and the warnings, or the error."""
    path: str
    workflow: Workflow | None = None
    warnings: list[str] = field(default_factory=list)
    error: WorkflowError | None = None

    @classmethod
    def of(cls, path: str) -> FileCheck:
        try:
            wf, warnings = validate_file(path)
        except WorkflowError as err:
            return cls(path, error=err)
        return cls(path, wf, warnings)

    def to_json(self) -> dict[str, Any]:
        """The file's entry in `validate --json`."""
        if self.workflow is None:
            err = self.error
            assert err is not None
            return {"file": self.path, "ok": False,
                    "error": {"message": err.message, "file": err.file, "line": err.line, "text": str(err)}}
        wf = self.workflow
        return {"file": self.path, "ok": True, "workflow": wf.name, "components": len(wf.components),
                "spouts": len(wf.spouts), "bolts": len(wf.bolts), "warnings": self.warnings}


@click.command()
@click.argument("files", nargs=-1, required=True, type=str)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def validate(ctx: click.Context, files: tuple[str, ...], as_json: bool) -> None:
    """Check workflow FILES: XML, schema, graph, and that their classes import.

    Prints `ok FILE (N components)` per good file and `warning: ...` for classes that
    do not load; a bad file prints `error: FILE:LINE: message` and the exit code is 2.
    """

    checks, failed = [], False
    for path in files:
        check = FileCheck.of(path)
        checks.append(check)
        if check.error is not None:
            failed = True
            click.echo(f"error: {plain(check.error)}", err=True)
        elif not as_json and check.workflow is not None:
            n = len(check.workflow.components)
            click.echo(f"ok {plain(path)} ({n} component{'s' if n != 1 else ''})")
            for w in check.warnings:
                click.echo(f"warning: {plain(w)}")
    if as_json:
        echo_json({"ok": not failed, "files": [c.to_json() for c in checks]})
    if failed:
        ctx.exit(2)

@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def properties(as_json: bool) -> None:
    """List the configuration properties recovery reads: name, accepted values, default.

    Set them in a workflow's <config> (a component's own <config> overrides), with
    `submit -p KEY=VALUE`, or on a stored run with `recover RUN -p KEY=VALUE`. Other
    names than these pass through to the components as text, except under recovery.*,
    where an unknown name is an error."""

    rows = describe()
    if as_json:
        echo_json({"properties": [{"name": n, "accepts": a, "default": d or None,
                                   "help": h} for n, a, d, h in rows]})
        return
    for name, accepts, default, help_text in rows:
        click.echo(f"{name}  ({accepts}{', default ' + default if default else ''})")
        click.echo(f"    {help_text}")

def _value(mode: Mode | None) -> str | None:
    return mode.value if mode is not None else None


@click.command()
@click.argument("file", type=str)
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "dot", "mermaid"]),
              default="text", show_default=True, help="Drawing format.")
@click.option("--ascii", "ascii_only", is_flag=True,
              help="Text format without box-drawing characters.")
@click.option("--color/--no-color", default=None,
              help="Colour the text format (default: when writing to a terminal).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: the drawing plus the graph's structure.")
def graph(file: str, fmt: str, ascii_only: bool, color: bool | None, as_json: bool) -> None:
    """Draw the topology of workflow FILE (text, Graphviz DOT or Mermaid).

    The file gets every check `validate` makes except that the files its sources read
    need not exist yet. Pipe DOT to `dot -Tsvg`; paste Mermaid into Markdown.
    """

    wf = load(file, check_paths=False)   # drawing needs no input data
    if color is None:
        color = fmt == "text" and not as_json and sys.stdout.isatty()
    modes = shown_modes(wf)   # how each component's tasks run (None: its class does not load here)
    drawing = render(wf, fmt, color=color and fmt == "text", ascii_only=ascii_only, modes=modes)
    if not as_json:
        click.echo(drawing, nl=False, color=bool(color))
        return
    tasks = TaskMap.of(wf)
    echo_json({
        "workflow": wf.name, "file": file, "format": fmt, "drawing": drawing,
        "order": topological_order(wf),
        "components": [{"id": c.id, "kind": c.kind, "parallelism": c.parallelism,
                        "implementation": c.impl.kind, "mode": _value(modes[c.id]), "tasks": tasks.task_ids(c.id),
                        "streams": [s.model_dump() for s in c.streams]}
                       for c in wf.components],
        "edges": [{"from": i.source, "to": c.id, "stream": i.stream,
                   "grouping": i.grouping.value, "fields": list(i.fields)}
                  for c in wf.components for i in c.inputs],
        # the Spark stages a run makes: every component in one chain, most alone
        "chains": [{"name": ch.name, "members": list(ch.members), "parallelism": ch.parallelism}
                   for ch in ChainPlan.of_workflow(wf).chains if len(ch.members) > 1],
    })
