"""`Topology`: a workflow written in Python, in the spirit of Storm's TopologyBuilder and
streamparse's `Topology`. It builds the same `Workflow` model the XML parser builds, through
the same checks: the builder writes its XML (`to_xml`) and reads it back with the parser, so a
topology and its XML are interchangeable, and every problem the parser finds is reported
naming the component and the line of Python that added it.

    t = Topology("cdn_logs", config={"recovery.max.attempts": 3})
    logs = t.spout("logs", source={"type": "file", "path": "data/cdn.log"}, fields="line")
    split = t.bolt("split", "cdn_logs.components:SplitLog", fields="...").input(logs, "local_or_shuffle")

Relative paths stay as written. `recovery.submit` resolves them against the working directory
at submit (a topology read from a file: against the file's folder, as the parser does).
"""
from __future__ import annotations

import html
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from recovery.api.loader import ClassLoadError, class_errors
from recovery.errors import WorkflowError
from recovery.model.workflow import (
    DEFAULT_STREAM,
    ClassImpl,
    Component,
    Grouping,
    Input,
    Resources,
    ShellImpl,
    SinkImpl,
    SourceImpl,
    StreamDef,
    Workflow,
)
from recovery.model.xml import parse as workflow_xml
from recovery.model.xml.document import children, local_name, parse_tree
from recovery.model.xml.write import to_xml

Fields = str | Iterable[str] | None
Where = tuple[str, int] | None      # (Python file, line) of the call that added something


def _caller() -> Where:
    """The file and line of the first frame outside this module: the user's call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back   # type: ignore[assignment]
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _text(value: Any) -> str:
    """A property or attribute value as the XML holds it: booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fields(fields: Fields) -> tuple[str, ...]:
    if fields is None:
        return ()
    if isinstance(fields, str):
        return tuple(fields.split())
    return tuple(str(f) for f in fields)


def _pairs(values: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), _text(v)) for k, v in (values or {}).items())


@dataclass
class _Spec:
    """One component as the builder holds it (mutable until `workflow()` freezes it)."""
    id: str
    kind: str
    impl: Any
    parallelism: int
    config: tuple[tuple[str, str], ...]
    where: Where
    streams: list[tuple[StreamDef, Where]] = field(default_factory=list)
    inputs: list[tuple[Input, Where]] = field(default_factory=list)


class ComponentHandle:
    """A component added to a `Topology`: `input` subscribes it to another one's stream and
    `stream` declares another output stream; both return the handle, so calls chain."""

    def __init__(self, topology: Topology, spec: _Spec):
        self._topology = topology
        self._spec = spec

    @property
    def id(self) -> str:
        return self._spec.id

    @property
    def kind(self) -> str:
        return self._spec.kind

    def input(self, other: ComponentHandle | str, grouping: str | Grouping = "shuffle", fields: Fields = None,
              stream: str | None = None) -> ComponentHandle:
        """Read `other`'s stream (`stream`, default "default") with a Storm grouping: shuffle,
        fields (with `fields=`), all, global, none, direct or local_or_shuffle."""
        where = _caller()
        source = other.id if isinstance(other, ComponentHandle) else other
        what = f"{self._spec.kind} {self._spec.id!r}"
        if self._spec.kind == "spout":
            raise _error(f"{what}: a spout reads no input (its source, class or shell emits)", where)
        try:
            group = Grouping(grouping)
        except ValueError:
            raise _error(f"{what}: input from {source!r}: unknown grouping {str(grouping)!r} (one of "
                         f"{', '.join(g.value for g in Grouping)})", where) from None
        try:
            inp = Input(source=str(source), stream=stream or DEFAULT_STREAM, grouping=group, fields=_fields(fields))
        except ValidationError as err:
            raise _error(f"{what}: input from {source!r}: {_first(err)}", where) from None
        for old, old_where in self._spec.inputs:
            if (old.source, old.stream) == (inp.source, inp.stream):
                raise _error(f"{what} reads stream {inp.stream!r} of {inp.source!r} twice (first at "
                             f"{_at(old_where)})", where)
        self._spec.inputs.append((inp, where))
        return self

    def stream(self, id: str = DEFAULT_STREAM, fields: Fields = None, direct: bool = False) -> ComponentHandle:
        """Declare an output stream (Storm's declareStream); `fields=` of `spout`/`bolt` declares
        the default one."""
        where = _caller()
        try:
            s = StreamDef(id=id, fields=_fields(fields), direct=direct)
        except ValidationError as err:
            raise _error(f"{self._spec.kind} {self._spec.id!r}: {_first(err)}", where) from None
        for old, old_where in self._spec.streams:
            if old.id == s.id:
                raise _error(f"{self._spec.kind} {self._spec.id!r} declares stream {s.id!r} twice (first at "
                             f"{_at(old_where)})", where)
        self._spec.streams.append((s, where))
        return self

    def __repr__(self) -> str:
        return f"<{self._spec.kind} {self._spec.id!r} of topology {self._topology.name!r}>"


def _first(err: ValidationError) -> str:
    msg = str(err.errors()[0]["msg"])
    return msg.removeprefix("Value error, ")


def _at(where: Where) -> str:
    return f"{where[0]}:{where[1]}" if where else "<topology>"


def _error(message: str, where: Where) -> WorkflowError:
    return WorkflowError(message, where[0], where[1]) if where else WorkflowError(message, "<topology>")


class Topology:
    """A workflow built in Python: `spout`, `bolt`, then `workflow()` (the checked model),
    `to_xml()`, or `recovery.submit(topology)`."""

    def __init__(self, name: str, config: Mapping[str, Any] | None = None, *,
                 resources: Mapping[str, Iterable[str]] | None = None):
        self.name = name
        self.config = dict(_pairs(config))
        res = resources or {}
        self.resources = Resources(include=tuple(res.get("include", ())), exclude=tuple(res.get("exclude", ())))
        self._specs: list[_Spec] = []
        self._where = _caller()
        # a topology read from a file: relative paths resolve against its folder, and errors
        # at submit name it (None: written in Python, paths resolve against the cwd at submit)
        self.base_dir: str | None = None
        self.file: str | None = None

    # --- building ---------------------------------------------------------------------------
    def spout(self, id: str, cls: str | None = None, *, source: Mapping[str, Any] | None = None,
              shell: Mapping[str, Any] | None = None, fields: Fields = None, parallelism: int = 1,
              config: Mapping[str, Any] | None = None) -> ComponentHandle:
        """A spout implemented by exactly one of: `cls` ("module:Class"), a built-in `source`
        ({"type": "file", "path": ..., "format": ...}; a spark source's reader options under
        "options"), or a multilang `shell` ({"command": ..., "script": ..., "args": ...})."""
        return self._add("spout", id, cls, source, shell, fields, parallelism, config)

    def bolt(self, id: str, cls: str | None = None, *, sink: Mapping[str, Any] | None = None,
             shell: Mapping[str, Any] | None = None, fields: Fields = None, parallelism: int = 1,
             config: Mapping[str, Any] | None = None) -> ComponentHandle:
        """A bolt implemented by exactly one of: `cls`, a built-in `sink` ({"type": "jsonl",
        "path": ..., "mode": ...}) or a multilang `shell`. Its inputs: `.input(...)`."""
        return self._add("bolt", id, cls, sink, shell, fields, parallelism, config)

    def _add(self, kind: str, cid: str, cls: str | None, builtin: Mapping[str, Any] | None,
             shell: Mapping[str, Any] | None, fields: Fields, parallelism: int,
             config: Mapping[str, Any] | None) -> ComponentHandle:
        where = _caller()
        what = f"{kind} {cid!r}"
        for old in self._specs:
            if old.id == cid:
                raise _error(f"duplicate component id {cid!r} (first added at {_at(old.where)})", where)
        element = "source" if kind == "spout" else "sink"
        given = [n for n, v in (("cls", cls), (element, builtin), ("shell", shell)) if v is not None]
        if len(given) != 1:
            raise _error(f"{what} has {'no' if not given else len(given)} implementation"
                         f"{'' if len(given) == 1 else 's'}{' (' + ' and '.join(given) + ')' if given else ''}: "
                         f"give exactly one of cls=\"module:Class\", {element}= or shell=", where)
        try:
            impl: Any
            if cls is not None:
                impl = ClassImpl(ref=cls)
            elif shell is not None:
                extra = sorted(set(shell) - {"command", "script", "args"})
                if extra or "command" not in shell:
                    raise _error(f"{what}: shell= takes command (required), script and args"
                                 + (f", not {extra[0]!r}" if extra else ""), where)
                args = shell.get("args") or ()
                impl = ShellImpl(command=str(shell["command"]),
                                 script=None if shell.get("script") is None else str(shell["script"]),
                                 args=tuple(args.split()) if isinstance(args, str) else tuple(map(str, args)))
            else:
                assert builtin is not None
                if "type" not in builtin:
                    raise _error(f"{what}: {element}= needs a type", where)
                params = {k: v for k, v in builtin.items() if k not in ("type", "options", "mode")}
                if kind == "spout":
                    impl = SourceImpl(type=str(builtin["type"]), params=_pairs(params),
                                      options=_pairs(builtin.get("options")))
                else:
                    if "options" in builtin:
                        raise _error(f"{what}: a sink takes no options", where)
                    impl = SinkImpl(type=str(builtin["type"]), mode=builtin.get("mode"), params=_pairs(params))
            spec = _Spec(cid, kind, impl, parallelism, _pairs(config), where)
            # the id and parallelism checked now, where the line that is wrong is the caller's
            Component(id=cid, kind=kind, parallelism=parallelism, impl=impl)
        except ValidationError as err:
            raise _error(f"{what}: {_first(err)}", where) from None
        if fields is not None:
            spec.streams.append((StreamDef(fields=_fields(fields)), where))
        self._specs.append(spec)
        return ComponentHandle(self, spec)

    def __getitem__(self, component_id: str) -> ComponentHandle:
        for spec in self._specs:
            if spec.id == component_id:
                return ComponentHandle(self, spec)
        raise KeyError(component_id)

    @property
    def components(self) -> list[ComponentHandle]:
        return [ComponentHandle(self, s) for s in self._specs]

    # --- the model and its XML --------------------------------------------------------------
    def _draft(self) -> Workflow:
        """The model as written, not yet checked (the parser checks it)."""
        try:
            comps = tuple(Component(id=s.id, kind=s.kind, parallelism=s.parallelism,
                                    impl=s.impl, config=s.config,
                                    streams=tuple(x for x, _ in s.streams),
                                    inputs=tuple(x for x, _ in s.inputs)) for s in self._specs)
            return Workflow(name=self.name, config=tuple(self.config.items()), resources=self.resources,
                            components=comps)
        except ValidationError as err:
            raise _error(f"workflow {self.name!r}: {_first(err)}", self._where) from None

    def to_xml(self) -> str:
        """The workflow's XML: the document `recovery validate`, `submit` and `plan` read. Written
        as the topology stands: `workflow()` (and `submit`) check it, as `validate` checks a file."""
        return to_xml(self._draft())

    def workflow(self, base_dir: str | None = None, *, check_classes: bool = True) -> Workflow:
        """The checked model, exactly what the XML parser builds from `to_xml()`; relative
        paths resolve against `base_dir` (default: the file's folder for a topology read from
        one, else none: `submit` gives the working directory). With `check_classes` (the
        default) every `cls=` is imported now, from the code folder first, as `submit` does;
        False builds a workflow whose code is not importable here. A problem is a
        WorkflowError naming the component and the line of Python that added it."""
        text = to_xml(self._draft())
        try:
            wf = workflow_xml.parse_string(text, base_dir=base_dir or self.base_dir)
        except WorkflowError as err:
            raise self._python_error(err, text) from None
        problems = class_errors(wf) if check_classes else []
        if problems:
            raise self.placed(problems[0])
        return wf

    def placed(self, err: WorkflowError) -> WorkflowError:
        """`err` placed at the Python line that added its component, when it names one of
        this topology's components and no file of its own (a check made after the model was
        built: a class that does not import, a path executors cannot reach); else `err`."""
        spec = next((s for s in self._specs if s.id == err.component), None)
        if spec is None or spec.where is None or err.file is not None:
            return err
        if isinstance(err, ClassLoadError):
            return ClassLoadError(err.message, err.component, err.ref, spec.where[0], spec.where[1])
        return WorkflowError(err.message, spec.where[0], spec.where[1], component=err.component)

    def _python_error(self, err: WorkflowError, text: str) -> WorkflowError:
        """The parser's error on the written XML, placed at the Python call that wrote the
        element at fault (the component's call, or its `input`/`stream` call)."""
        root = parse_tree(text, None)
        places: list[tuple[int, Where]] = []
        for el in children(root):
            name = local_name(el)
            if name not in ("spout", "bolt"):
                places.append((el.sourceline or 0, self._where))
                continue
            spec = next((s for s in self._specs if s.id == el.get("id")), None)
            if spec is None:
                continue
            places.append((el.sourceline or 0, spec.where))
            inputs = iter(spec.inputs)
            streams = iter(spec.streams)
            for child in children(el):
                child_name = local_name(child)
                if child_name == "input":
                    places.append((child.sourceline or 0, next(inputs, (None, spec.where))[1]))
                elif child_name == "stream":
                    places.append((child.sourceline or 0, next(streams, (None, spec.where))[1]))
                else:
                    places.append((child.sourceline or 0, spec.where))
        where = self._where
        for line, place in places:
            if err.line is not None and line <= err.line:
                where = place
        return _error(err.message, where)

    @classmethod
    def from_xml(cls, source: str | bytes | os.PathLike[str]) -> Topology:
        """A topology from a workflow file's path, or from its XML text."""
        if isinstance(source, bytes) or (isinstance(source, str) and source.lstrip().startswith("<")):
            return cls.from_workflow(workflow_xml.parse_string(source))
        path = os.fspath(source)
        t = cls.from_workflow(workflow_xml.load(path, check_paths=False))
        t.file = os.path.abspath(path)
        return t

    @classmethod
    def from_workflow(cls, wf: Workflow) -> Topology:
        """A topology holding `wf`'s components, to extend or to write out."""
        t = cls(wf.name, dict(wf.config))
        t.resources = wf.resources
        t.base_dir = wf.base_dir
        for c in wf.components:
            spec = _Spec(c.id, c.kind, c.impl, c.parallelism, c.config, t._where,
                         streams=[(s, t._where) for s in c.streams], inputs=[(i, t._where) for i in c.inputs])
            t._specs.append(spec)
        return t

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return self._draft() == other._draft()

    __hash__ = None   # type: ignore[assignment]   # mutable

    def __repr__(self) -> str:
        return f"<Topology {self.name!r}: {len(self._specs)} components>"

    def _repr_html_(self) -> str:
        """The topology drawn as the web view draws it (a notebook shows it)."""
        from recovery.ui import svg
        try:
            wf = self.workflow(check_classes=False)   # (drawing needs no code)
        except WorkflowError as err:
            return f"<pre>{html.escape(str(err))}</pre>"
        return f'<div class="recovery-topology">{svg.topology(wf)}</div>'
