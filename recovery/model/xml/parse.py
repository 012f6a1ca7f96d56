"""Reading a workflow: XML -> model (write.py goes the other way).

Reading a workflow file runs, in order, and stops at the first problem with a
WorkflowError naming the file and the line of the element at fault:

1. a safe XML parse: no DOCTYPE at all (so no entity can resolve or expand: XXE and
   "billion laughs" are refused before libxml2 sees them), no DTD loading, no network,
   no huge trees (document.py);
2. validation against the schema, recovery/model/xml/workflow.xsd (namespace
   ``urn:recovery:workflow:1``; document.py);
3. building the model (build.py), with the checks a schema cannot express: property names
   and values against their declarations (recovery/model/config.py), unique ids, exactly one
   implementation per component, required source/sink attributes, inputs naming a known
   component and stream, groupings consistent with what the upstream stream declares, no
   cycles (check.py);
4. (``load`` only) the files the sources read exist.

Nothing is written anywhere. Relative paths stay as written; the engine resolves them
against ``Workflow.base_dir`` (the XML file's folder).
"""
from __future__ import annotations

import os

from recovery.errors import WorkflowError
from recovery.model.workflow import Workflow
from recovery.model.xml.build import build_workflow
from recovery.model.xml.document import SCHEMA_RESOURCE, children, parse_tree, schema, validate

__all__ = ["SCHEMA_RESOURCE", "load", "parse_string", "parse_tree", "schema", "source_line"]


def parse_string(text: str | bytes, file: str | None = None, base_dir: str | None = None,
                 check_paths: bool = False) -> Workflow:
    """Parse and check a workflow document. `file` is only used in error messages;
    `base_dir` is stored on the model (and, with `check_paths`, used to check that the
    files sources read exist). Raises WorkflowError(message, file, line)."""
    root = parse_tree(text, file)
    validate(root, file)
    return build_workflow(root, file, base_dir, check_paths)


def source_line(text: str | bytes, component_id: str) -> int | None:
    """The line of the <source> of spout `component_id` in a workflow document (the model keeps
    no lines: errors found after parsing, at submit, read them again)."""
    root = parse_tree(text, None)
    for el in children(root, "spout"):
        if el.get("id") == component_id:
            found = children(el, "source")
            return found[0].sourceline if found else el.sourceline
    return None


def load(path: str | os.PathLike, check_paths: bool = True) -> Workflow:
    """Read a workflow file; base_dir is the file's folder. Checks the files its sources
    read exist unless `check_paths` is False."""
    file = os.fspath(path)
    try:
        with open(file, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise WorkflowError("no such file", file) from None
    except IsADirectoryError:
        raise WorkflowError("is a directory, not a workflow file", file) from None
    except OSError as err:
        raise WorkflowError(f"cannot read: {err.strerror}", file) from None
    base_dir = os.path.dirname(os.path.abspath(file))
    return parse_string(data, file=file, base_dir=base_dir, check_paths=check_paths)
