"""Workflow XML <-> model.

Reading a workflow file runs, in order, and stops at the first problem with a
WorkflowError naming the file and the line of the element at fault:

1. a safe XML parse: no DOCTYPE at all (so no entity can resolve or expand: XXE and
   "billion laughs" are refused before libxml2 sees them), no DTD loading, no network,
   no huge trees;
2. validation against the schema, recovery/model/xml/workflow.xsd (namespace
   ``urn:recovery:workflow:1``);
3. the checks a schema cannot express: property names and values against their
   declarations (recovery/model/config.py), unique ids, exactly one implementation per
   component, required source/sink attributes, inputs naming a known component and
   stream, groupings consistent with what the upstream stream declares, no cycles;
4. (``load`` only) the files the sources read exist.

Nothing is written anywhere. Relative paths stay as written; the engine resolves them
against ``Workflow.base_dir`` (the XML file's folder).
"""
from __future__ import annotations

import difflib
import glob
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Iterable

from lxml import etree
from pydantic import ValidationError

from recovery.model import config as config_decl
from recovery.model.config import PropertyError
from recovery.errors import RecoveryError, WorkflowError
from recovery.model.workflow import (DEFAULT_STREAM, FILE_SINK_TYPES, NAMESPACE, ClassImpl, Component,
    Grouping, Input, ShellImpl, SinkImpl, SourceImpl, StreamDef, Workflow)

# Package data, so that an installed wheel validates too; schemas/workflow.xsd at the top of
# the repository is the documented copy (a test keeps the two identical).
SCHEMA_RESOURCE = resources.files("recovery.model.xml").joinpath("workflow.xsd")

_NS = "{%s}" % NAMESPACE

# Attributes each built-in source / sink type requires (besides `type`).
SOURCE_REQUIRED: dict[str, tuple[str, ...]] = {
    "file": ("path",),
    "redis-stream": ("topic",),
    "queue": ("component", "tasks"),
}
SINK_REQUIRED: dict[str, tuple[str, ...]] = {
    "jsonl": ("path",),
    "parquet": ("path",),
    "redis": ("key",),
}
FILE_FORMATS = ("text", "jsonl")
RESERVED_STREAMS = ("__tick", "__heartbeat", "__system", "__ack_init", "__ack_ack", "__ack_fail")

__all__ = ["SCHEMA_RESOURCE", "check_runnable", "load", "parse_string", "to_xml",
           "validate_file", "schema"]


# ---------------------------------------------------------------------------- parsing


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                           dtd_validation=False, huge_tree=False, remove_blank_text=False,
                           collect_ids=False)


@lru_cache(maxsize=1)
def schema() -> etree.XMLSchema:
    """The compiled workflow schema, recovery/model/xml/workflow.xsd (read once)."""
    try:
        data = SCHEMA_RESOURCE.read_bytes()
    except OSError as err:
        raise RecoveryError(f"cannot read the workflow schema {SCHEMA_RESOURCE}: "
                            f"{err.strerror}") from None
    return etree.XMLSchema(etree.fromstring(data, _parser()))


def _where(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _prescan_text(data: bytes | str) -> str:
    """A decoding of the document good enough to look at its prolog."""
    if isinstance(data, str):
        return data
    for bom, enc in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"),
                     (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
                     (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom):].decode(enc, errors="replace")
    return data.decode("latin-1")


def _reject_doctype(data: bytes | str, file: str | None) -> None:
    """Refuse any DOCTYPE before libxml2 parses it: a workflow needs no DTD, and a DTD is
    what XXE and entity-expansion attacks ride on."""
    text = _prescan_text(data)
    pos, n = 0, len(text)
    if text.startswith("\ufeff"):
        pos = 1
    while pos < n:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if text.startswith("<?", pos):
            end = text.find("?>", pos)
            if end < 0:
                return                       # malformed: the parser reports it
            pos = end + 2
        elif text.startswith("<!--", pos):
            end = text.find("-->", pos)
            if end < 0:
                return
            pos = end + 3
        elif text.startswith("<!", pos) and text[pos + 2:pos + 9].upper() == "DOCTYPE":
            raise WorkflowError("DOCTYPE declarations are not allowed in a workflow file "
                                "(no DTDs, no entities)", file, _where(text, pos))
        else:
            return


_ENCODING_DECL = re.compile(r"""^(\ufeff?<\?xml[^>]*?)\s+encoding\s*=\s*(["'])[^"']*\2""")


def _parse_tree(data: bytes | str, file: str | None) -> etree._Element:
    _reject_doctype(data, file)
    if isinstance(data, str):
        # lxml refuses str input that carries an encoding declaration; the str is decoded.
        data = _ENCODING_DECL.sub(r"\1", data, count=1)
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as err:
        msg = err.msg or str(err)
        msg = re.sub(r",? line \d+, column \d+$", "", msg)
        raise WorkflowError(f"malformed XML: {msg}", file, err.lineno or None) from None
    except ValueError as err:
        raise WorkflowError(f"malformed XML: {err}", file, None) from None
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:   # belt and braces
        raise WorkflowError("DOCTYPE declarations are not allowed in a workflow file "
                            "(no DTDs, no entities)", file, 1)
    return root


def _local(el: etree._Element) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag[len(_NS):] if tag.startswith(_NS) else tag


def _children(el: etree._Element, name: str | None = None) -> list[etree._Element]:
    return [c for c in el if isinstance(c.tag, str) and c.tag.startswith(_NS)
            and (name is None or _local(c) == name)]


def _clean_schema_message(msg: str) -> str:
    msg = msg.replace(_NS, "")
    msg = re.sub(r"\{urn:[^}]*\}", "", msg)
    return msg


def _prechecks(root: etree._Element, file: str | None) -> None:
    """Friendly messages for mistakes the schema would report cryptically."""
    if root.tag != _NS + "workflow":
        if _local(root) == "workflow" or root.tag == "workflow":
            raise WorkflowError(f'the <workflow> element must be in namespace {NAMESPACE}: '
                                f'write <workflow xmlns="{NAMESPACE}" name="...">',
                                file, root.sourceline)
        raise WorkflowError(f"the root element is <{_local(root)}>, expected "
                            f'<workflow xmlns="{NAMESPACE}">', file, root.sourceline)
    for comp in root:
        kind = _local(comp)
        if kind not in ("spout", "bolt") or not comp.tag.startswith(_NS):
            continue
        cid = comp.get("id", "?")
        p = comp.get("parallelism")
        if p is not None:
            try:
                ok = int(p.strip()) >= 1
            except ValueError:
                ok = False
            if not ok:
                raise WorkflowError(f"{kind} {cid!r}: parallelism must be a positive integer, "
                                    f"got {p!r}", file, comp.sourceline)
        for child in _children(comp):
            name = _local(child)
            if kind == "spout" and name == "sink":
                raise WorkflowError(f"spout {cid!r} cannot have a <sink>: sinks are bolts",
                                    file, child.sourceline)
            if kind == "spout" and name == "input":
                raise WorkflowError(f"spout {cid!r} cannot have an <input>: a spout reads "
                                    "from its <source>, <shell> or class", file,
                                    child.sourceline)
            if kind == "bolt" and name == "source":
                raise WorkflowError(f"bolt {cid!r} cannot have a <source>: sources are spouts",
                                    file, child.sourceline)


def _validate_schema(root: etree._Element, file: str | None) -> None:
    xsd = schema()
    if xsd.validate(root):
        return
    err = xsd.error_log[0] if len(xsd.error_log) else None
    if err is None:                                   # pragma: no cover - lxml always logs
        raise WorkflowError("schema violation", file, root.sourceline)
    raise WorkflowError(f"schema violation: {_clean_schema_message(err.message)}", file,
                        err.line or None)


# ---------------------------------------------------------------------- building the model


@dataclass
class _Lines:
    """Where things are in the file, for error messages."""
    component: int | None = None
    inputs: list[int | None] = field(default_factory=list)
    streams: list[int | None] = field(default_factory=list)
    impl: int | None = None


def _props(config_el: etree._Element, file: str | None, what: str) -> tuple[tuple[str, str], ...]:
    """The properties of a <config>, each checked against its declaration (recovery/model/config.py)."""
    seen: dict[str, int | None] = {}
    out = []
    for p in _children(config_el, "property"):
        name, value = p.get("name"), p.get("value")
        if name in seen:
            raise WorkflowError(f"{what}: property {name!r} is set twice (first on line "
                                f"{seen[name]})", file, p.sourceline)
        seen[name] = p.sourceline
        try:
            config_decl.check_property(name, value)
        except PropertyError as err:
            raise WorkflowError(f"{what}: {err}", file, p.sourceline) from None
        out.append((name, value))
    try:
        config_decl.check_injections(seen)
    except PropertyError as err:
        raise WorkflowError(f"{what}: {err}", file, seen[err.property]) from None
    return tuple(out)


def _fields(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def _bool(value: str | None) -> bool:
    return (value or "false").strip() in ("true", "1")


def _params(el: etree._Element) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in el.attrib.items() if k != "type")


def _build_component(el: etree._Element, file: str | None) -> tuple[Component, _Lines]:
    kind = _local(el)
    cid = el.get("id")
    what = f"{kind} {cid!r}"
    lines = _Lines(component=el.sourceline)

    # Implementation: exactly one of class=, <shell>, <source> (spouts), <sink> (bolts).
    impls: list[tuple[str, int | None, object]] = []
    if el.get("class") is not None:
        impls.append(("class=", el.sourceline, ClassImpl(ref=el.get("class"))))
    config: tuple[tuple[str, str], ...] = ()
    config_line: int | None = None
    streams: list[StreamDef] = []
    stream_lines: dict[str, int | None] = {}
    inputs: list[Input] = []
    for child in _children(el):
        name, line = _local(child), child.sourceline
        if name == "config":
            if config_line is not None:
                raise WorkflowError(f"{what} has more than one <config> (first on line "
                                    f"{config_line})", file, line)
            config_line = line
            config = _props(child, file, what)
        elif name == "shell":
            impls.append(("<shell>", line, ShellImpl(
                command=child.get("command"), script=child.get("script"),
                args=tuple((child.get("args") or "").split()))))
        elif name in ("source", "sink"):
            typ = child.get("type")
            required = (SOURCE_REQUIRED if name == "source" else SINK_REQUIRED).get(typ, ())
            for attr in required:
                if not (child.get(attr) or "").strip():
                    raise WorkflowError(f'{what}: <{name} type="{typ}"> needs a non-empty '
                                        f"{attr}= attribute", file, line)
            if name == "source" and typ == "file":
                fmt = child.get("format")
                if fmt is not None and fmt not in FILE_FORMATS:
                    raise WorkflowError(f'{what}: <source type="file"> format must be one of '
                                        f"{', '.join(FILE_FORMATS)}, got {fmt!r}", file, line)
            if name == "source" and typ == "queue":
                tasks = child.get("tasks", "").split()
                if not all(t.isdigit() and int(t) >= 1 for t in tasks):
                    raise WorkflowError(f'{what}: <source type="queue"> tasks= must be '
                                        f"space-separated task ids (positive integers), got "
                                        f"{child.get('tasks')!r}", file, line)
            if name == "source":
                impls.append(("<source>", line, SourceImpl(type=typ, params=_params(child))))
            else:
                mode = child.get("mode")
                if mode is not None and typ not in FILE_SINK_TYPES:
                    raise WorkflowError(f'{what}: <sink type="{typ}"> takes no mode= (only '
                                        f"{' and '.join(FILE_SINK_TYPES)} sinks write part files)",
                                        file, line)
                params = tuple(p for p in _params(child) if p[0] != "mode")
                impls.append(("<sink>", line, SinkImpl(type=typ, mode=mode, params=params)))
        elif name == "stream":
            sid = child.get("id") or DEFAULT_STREAM
            if sid in stream_lines:
                raise WorkflowError(f"{what} declares stream {sid!r} twice (first on line "
                                    f"{stream_lines[sid]})", file, line)
            if sid in RESERVED_STREAMS:
                raise WorkflowError(f"{what}: stream id {sid!r} is reserved for the system",
                                    file, line)
            stream_lines[sid] = line
            fields = _fields(child.get("fields"))
            dup = [f for i, f in enumerate(fields) if f in fields[:i]]
            if dup:
                raise WorkflowError(f"{what}: stream {sid!r} declares field {dup[0]!r} twice",
                                    file, line)
            streams.append(StreamDef(id=sid, fields=fields, direct=_bool(child.get("direct"))))
            lines.streams.append(line)
        elif name == "input":
            inputs.append(Input(source=child.get("from"),
                                stream=child.get("stream") or DEFAULT_STREAM,
                                grouping=Grouping(child.get("grouping") or "shuffle"),
                                fields=_fields(child.get("fields"))))
            lines.inputs.append(line)

    if not impls:
        extra = "<source>" if kind == "spout" else "<sink>"
        raise WorkflowError(f'{what} has no implementation: give class="module:Class", '
                            f"a <shell> or a {extra}", file, el.sourceline)
    if len(impls) > 1:
        names = " and ".join(n for n, _, _ in impls)
        raise WorkflowError(f"{what} has {len(impls)} implementations ({names}): give "
                            "exactly one", file, impls[1][1])
    lines.impl = impls[0][1]
    if kind == "bolt" and not inputs:
        raise WorkflowError(f"bolt {cid!r} has no <input>: a bolt must read from at least one "
                            "component", file, el.sourceline)
    try:
        comp = Component(id=cid, kind=kind, parallelism=int((el.get("parallelism") or "1").strip()),
                         impl=impls[0][2], streams=tuple(streams), inputs=tuple(inputs),
                         config=config)
    except ValidationError as err:                   # pragma: no cover - the checks above
        raise WorkflowError(f"{what}: {err.errors()[0]['msg']}", file, el.sourceline) from None
    return comp, lines


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_graph(comps: list[Component], lines: dict[str, _Lines], file: str | None) -> None:
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
    _check_cycles(comps, lines, file)


def _check_cycles(comps: list[Component], lines: dict[str, _Lines], file: str | None) -> None:
    """Depth-first search along inputs; reports the first cycle in document order."""
    by_id = {c.id: c for c in comps}
    WHITE, GREY, BLACK = 0, 1, 2
    color = {c.id: WHITE for c in comps}
    for start in comps:
        if color[start.id] != WHITE:
            continue
        # stack of (component id, index of next input to follow); path mirrors GREY nodes
        stack: list[tuple[str, int]] = [(start.id, 0)]
        path = [start.id]
        color[start.id] = GREY
        while stack:
            cid, i = stack[-1]
            c = by_id[cid]
            if i >= len(c.inputs):
                stack.pop()
                path.pop()
                color[cid] = BLACK
                continue
            stack[-1] = (cid, i + 1)
            src = c.inputs[i].source
            if color[src] == GREY:
                # path[k:] reads ... ; arrows point downstream (src feeds cid)
                k = path.index(src)
                cycle = path[k:] + [src]
                flow = " -> ".join(reversed(cycle))
                msg = (f"bolt {cid!r} reads from itself" if src == cid
                       else f"cycle: {flow}")
                raise WorkflowError(f"{msg} (a workflow must be acyclic)", file,
                                    lines[cid].inputs[i])
            if color[src] == WHITE:
                color[src] = GREY
                stack.append((src, 0))
                path.append(src)


def _check_paths(comps: list[Component], lines: dict[str, _Lines], base_dir: str,
                 file: str | None) -> None:
    for c in comps:
        if isinstance(c.impl, SourceImpl) and c.impl.type == "file":
            path = c.impl.param("path") or ""
            full = path if os.path.isabs(path) else os.path.join(base_dir, path)
            exists = (bool(glob.glob(full)) if glob.has_magic(full) else os.path.exists(full))
            if not exists:
                raise WorkflowError(f"spout {c.id!r} reads file {path!r}, which does not exist "
                                    f"(looked for {os.path.normpath(full)})", file,
                                    lines[c.id].impl)


def _build(root: etree._Element, file: str | None, base_dir: str | None,
           check_paths: bool) -> Workflow:
    config: tuple[tuple[str, str], ...] = ()
    comps: list[Component] = []
    lines: dict[str, _Lines] = {}
    for el in _children(root):
        name = _local(el)
        if name == "config":
            config = _props(el, file, "workflow")
            continue
        cid = el.get("id")
        if cid in lines:
            raise WorkflowError(f"duplicate component id {cid!r} (first defined on line "
                                f"{lines[cid].component})", file, el.sourceline)
        comp, comp_lines = _build_component(el, file)
        comps.append(comp)
        lines[cid] = comp_lines
    _check_graph(comps, lines, file)
    if check_paths and base_dir is not None:
        _check_paths(comps, lines, base_dir, file)
    return Workflow(name=root.get("name"), config=config, components=tuple(comps),
                    base_dir=base_dir)


# ------------------------------------------------------------------------- public API


def parse_string(text: str | bytes, file: str | None = None, base_dir: str | None = None,
                 check_paths: bool = False) -> Workflow:
    """Parse and check a workflow document. `file` is only used in error messages;
    `base_dir` is stored on the model (and, with `check_paths`, used to check that the
    files sources read exist). Raises WorkflowError(message, file, line)."""
    root = _parse_tree(text, file)
    _prechecks(root, file)
    _validate_schema(root, file)
    return _build(root, file, base_dir, check_paths)


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


def validate_file(path: str | os.PathLike) -> tuple[Workflow, list[str]]:
    """load(path) plus the checks that only warn: component classes that do not load (the
    engine refuses them at submit), shell commands not on PATH, shell scripts not found."""
    from recovery.api.loader import check_classes   # the loader imports user code: keep it lazy

    wf = load(path)
    warnings = check_classes(wf)
    warnings.extend(_shell_warnings(wf))
    return wf, warnings


def _component_lines(path: str) -> dict[str, dict[str, int | None]]:
    """Per component id, the line of its element and of each child element by name (the
    model keeps no lines: read them again, as graph errors do)."""
    with open(path, "rb") as fh:
        root = _parse_tree(fh.read(), path)
    out: dict[str, dict[str, int | None]] = {}
    for el in _children(root):
        if _local(el) in ("spout", "bolt"):
            lines: dict[str, int | None] = {"": el.sourceline}
            for child in _children(el):
                lines.setdefault(_local(child), child.sourceline)
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
    from recovery.api.loader import ClassLoadError, component_class   # imports user code: lazy

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
    import shutil

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


# --------------------------------------------------------------------------- writing


def _el(parent: etree._Element, name: str, attrs: Iterable[tuple[str, str]]) -> etree._Element:
    el = etree.SubElement(parent, _NS + name)
    for k, v in attrs:
        el.set(k, v)
    return el


def _config(parent: etree._Element, props: tuple[tuple[str, str], ...]) -> None:
    if props:
        cfg = _el(parent, "config", ())
        for k, v in props:
            _el(cfg, "property", (("name", k), ("value", v)))


def to_xml(wf: Workflow) -> str:
    """The workflow as a pretty-printed, namespaced XML document (str, with an XML
    declaration). parse_string(to_xml(wf)) == wf for every valid workflow."""
    try:
        root = etree.Element(_NS + "workflow", nsmap={None: NAMESPACE})
        root.set("name", wf.name)
        _config(root, wf.config)
        for c in wf.components:
            attrs = [("id", c.id), ("parallelism", str(c.parallelism))]
            if isinstance(c.impl, ClassImpl):
                attrs.append(("class", c.impl.ref))
            el = _el(root, c.kind, attrs)
            _config(el, c.config)
            impl = c.impl
            if isinstance(impl, ShellImpl):
                a = [("command", impl.command)]
                if impl.script is not None:
                    a.append(("script", impl.script))
                if impl.args:
                    a.append(("args", " ".join(impl.args)))
                _el(el, "shell", a)
            elif isinstance(impl, SourceImpl):
                _el(el, impl.kind, [("type", impl.type), *impl.params])
            elif isinstance(impl, SinkImpl):
                mode = [("mode", impl.mode)] if impl.mode is not None else []
                _el(el, impl.kind, [("type", impl.type), *impl.params, *mode])
            for i in c.inputs:
                a = [("from", i.source)]
                if i.stream != DEFAULT_STREAM:
                    a.append(("stream", i.stream))
                a.append(("grouping", i.grouping.value))
                if i.fields:
                    a.append(("fields", " ".join(i.fields)))
                _el(el, "input", a)
            for s in c.streams:
                a = []
                if s.id != DEFAULT_STREAM:
                    a.append(("id", s.id))
                if s.fields:
                    a.append(("fields", " ".join(s.fields)))
                if s.direct:
                    a.append(("direct", "true"))
                _el(el, "stream", a)
    except ValueError as err:
        raise WorkflowError(f"workflow {wf.name!r} cannot be written as XML: {err}") from None
    etree.indent(root, space="  ")
    body = etree.tostring(root, pretty_print=True, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body
