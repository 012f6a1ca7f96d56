"""Whether a parsed workflow can run here: its component classes load (user code: this is the
layer that imports it) and its shell commands and scripts exist. Problems are warnings at
validate time and errors at submit."""
from __future__ import annotations

import os
import shutil

from recovery.api.loader import ClassLoadError, check_classes, component_class
from recovery.errors import WorkflowError
from recovery.model import code
from recovery.model.workflow import ClassImpl, ShellImpl, Workflow
from recovery.model.xml.document import children, local_name, parse_tree
from recovery.model.xml.parse import load


def validate_file(path: str | os.PathLike) -> tuple[Workflow, list[str]]:
    """load(path) plus the checks that only warn: component classes that do not load (the
    engine refuses them at submit), shell commands not on PATH, shell scripts not found."""
    wf = load(path)
    code.check(wf, os.fspath(path))   # what would ship: no link out of its folder, under the size cap
    warnings = check_classes(wf)
    warnings.extend(_shell_warnings(wf))
    return wf, warnings


def _component_lines(path: str) -> dict[str, dict[str, int | None]]:
    """Per component id, the line of its element and of each child element by name (the
    model keeps no lines: read them again, as graph errors do)."""
    with open(path, "rb") as fh:
        root = parse_tree(fh.read(), path)
    out: dict[str, dict[str, int | None]] = {}
    for el in children(root):
        if local_name(el) in ("spout", "bolt"):
            lines: dict[str, int | None] = {"": el.sourceline}
            for child in children(el):
                lines.setdefault(local_name(child), child.sourceline)
            out[el.get("id", "")] = lines
    return out


def _missing_script(wf: Workflow, impl: ShellImpl) -> str | None:
    """The full path of a shell component's script when it does not exist here (a script
    beginning with "-" is an option of the command, as multilang.py reads it)."""
    script = impl.script
    if not script or script.startswith("-"):
        return None
    full = os.path.join(os.path.abspath(wf.base_dir or "."), script)
    return None if os.path.exists(full) else os.path.normpath(full)


def check_runnable(path: str | os.PathLike, wf: Workflow, local: bool) -> None:
    """What `submit` refuses where `validate` only warns, with the file and line: a class=
    that does not load, and, when the executors are this machine (`local`), a shell script
    that does not exist (on a cluster it may exist on the executors only)."""
    file = os.fspath(path)
    lines: dict[str, dict[str, int | None]] | None = None
    for c in wf.components:
        problem, element = None, ""
        if isinstance(c.impl, ClassImpl):
            try:
                component_class(wf, c)
            except ClassLoadError as err:
                problem = err.message
        elif local and isinstance(c.impl, ShellImpl):
            full = _missing_script(wf, c.impl)
            if full is not None:
                problem = (f"{c.kind} {c.id!r}: shell script {c.impl.script!r} not found "
                           f"(looked for {full}); in local mode every tuple would fail")
                element = "shell"
        if problem is not None:
            if lines is None:
                lines = _component_lines(file)
            where = lines.get(c.id, {})
            raise WorkflowError(problem, file, where.get(element) or where.get(""))


def _shell_warnings(wf: Workflow) -> list[str]:
    out = []
    for c in wf.components:
        if not isinstance(c.impl, ShellImpl):
            continue
        cmd = c.impl.command
        base = wf.base_dir or "."
        if os.sep in cmd or (os.altsep and os.altsep in cmd):
            full = cmd if os.path.isabs(cmd) else os.path.join(base, cmd)
            if not os.path.exists(full):
                out.append(f"{c.kind} {c.id!r}: shell command {cmd!r} does not exist")
        elif shutil.which(cmd) is None:
            out.append(f"{c.kind} {c.id!r}: shell command {cmd!r} is not on PATH")
        script = c.impl.script
        if script:
            full = script if os.path.isabs(script) else os.path.join(base, script)
            if not os.path.exists(full):
                out.append(f"{c.kind} {c.id!r}: shell script {script!r} not found (looked for "
                           f"{os.path.normpath(full)})")
    return out
