"""The checks of a parsed workflow that a schema cannot express, each naming the file and line:
inputs naming a known component and stream, groupings consistent with the upstream stream,
no cycles (graph.find_cycle), and the files sources read exist."""
from __future__ import annotations

import difflib
import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from recovery.errors import WorkflowError
from recovery.model.graph import find_cycle
from recovery.model.workflow import TABLE_SINK_TYPES, Component, Grouping, SinkImpl, SourceImpl, is_uri


@dataclass
class ElementLines:
    """Where things are in the file, for error messages."""
    component: int | None = None
    inputs: list[int | None] = field(default_factory=list)
    streams: list[int | None] = field(default_factory=list)
    impl: int | None = None


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_graph(comps: list[Component], lines: dict[str, ElementLines], file: str | None) -> None:
    by_id = {c.id: c for c in comps}
    for c in comps:
        seen: dict[tuple[str, str], int | None] = {}
        for inp, line in zip(c.inputs, lines[c.id].inputs):
            what = f"bolt {c.id!r}"
            key = (inp.source, inp.stream)
            if key in seen:
                raise WorkflowError(f"{what} reads stream {inp.stream!r} of {inp.source!r} twice "
                                    f"(first on line {seen[key]})", file, line)
            seen[key] = line
            up = by_id.get(inp.source)
            if up is None:
                raise WorkflowError(f"{what} reads from unknown component {inp.source!r}"
                                    + _suggest(inp.source, by_id), file, line)
            stream = up.stream(inp.stream)
            if stream is None:
                declared = ", ".join(repr(s.id) for s in up.streams)
                raise WorkflowError(
                    f"{what} reads stream {inp.stream!r} of {inp.source!r}, which "
                    + (f"declares only {declared}" if declared else "declares no streams")
                    + _suggest(inp.stream, [s.id for s in up.streams]), file, line)
            if inp.grouping is Grouping.FIELDS:
                if not inp.fields:
                    raise WorkflowError(f'{what}: grouping="fields" needs fields="..." (the '
                                        "fields to group by)", file, line)
                for f in inp.fields:
                    if f not in stream.fields:
                        have = " ".join(stream.fields) or "none"
                        raise WorkflowError(
                            f"{what} groups by field {f!r}, which stream {stream.id!r} of "
                            f"{up.id!r} does not declare (its fields: {have})", file, line)
            elif inp.fields:
                raise WorkflowError(f'{what}: fields= only goes with grouping="fields" (this '
                                    f'input has grouping="{inp.grouping.value}")', file, line)
            if inp.grouping is Grouping.DIRECT and not stream.direct:
                raise WorkflowError(f'{what}: grouping="direct" needs stream {stream.id!r} of '
                                    f'{up.id!r} to be declared direct="true"', file, line)
            if stream.direct and inp.grouping is not Grouping.DIRECT:
                raise WorkflowError(f"{what}: stream {stream.id!r} of {up.id!r} is direct, so "
                                    f'its inputs need grouping="direct" (got '
                                    f'"{inp.grouping.value}")', file, line)
    check_cycles(comps, lines, file)


def check_cycles(comps: list[Component], lines: dict[str, ElementLines], file: str | None) -> None:
    """The first cycle in document order (graph.find_cycle), named at the input that closes it."""
    cycle = find_cycle(comps)
    if cycle is None:
        return
    cid = cycle.closed_at
    msg = (f"bolt {cid!r} reads from itself" if len(cycle.path) == 2
           else f"cycle: {' -> '.join(cycle.path)}")
    raise WorkflowError(f"{msg} (a workflow must be acyclic)", file, lines[cid].inputs[cycle.input_index])


def check_table_sinks(comps: list[Component], lines: dict[str, ElementLines], file: str | None) -> None:
    """A postgres or delta sink writes its inputs' fields into columns of the same names: every
    input stream declares fields, and the run column (run-column=) is not one of them."""
    by_id = {c.id: c for c in comps}
    for c in comps:
        if not (isinstance(c.impl, SinkImpl) and c.impl.type in TABLE_SINK_TYPES):
            continue
        what = f'bolt {c.id!r}: <sink type="{c.impl.type}">'
        run_column = c.impl.param("run-column")
        for inp, line in zip(c.inputs, lines[c.id].inputs):
            stream = by_id[inp.source].stream(inp.stream)   # check_graph made sure both exist
            if stream is None or not stream.fields:
                raise WorkflowError(f"{what} writes fields into columns of the same names, but stream "
                                    f"{inp.stream!r} of {inp.source!r} declares no fields", file, line)
            if run_column in stream.fields:
                raise WorkflowError(f"{what}: run-column {run_column!r} is also a field of stream "
                                    f"{inp.stream!r} of {inp.source!r}: name the run column otherwise",
                                    file, lines[c.id].impl)


def check_source_paths(comps: list[Component], lines: dict[str, ElementLines], base_dir: str,
                 file: str | None) -> None:
    for c in comps:
        if not isinstance(c.impl, SourceImpl):
            continue
        path = c.impl.param("path") or ""
        # a path may be a URI (s3://, hdfs://, file://), a spark source's may use Hadoop's
        # {a,b} globs: only plain local ones are checked
        if c.impl.type == "file" and not is_uri(path) or (
                c.impl.type == "spark" and path and not is_uri(path) and "{" not in path):
            full = path if os.path.isabs(path) else os.path.join(base_dir, path)
            exists = (bool(glob.glob(full)) if glob.has_magic(full) else os.path.exists(full))
            if not exists:
                noun = "file" if c.impl.type == "file" else "path"
                raise WorkflowError(f"spout {c.id!r} reads {noun} {path!r}, which does not exist "
                                    f"(looked for {os.path.normpath(full)})", file,
                                    lines[c.id].impl)
