"""The workflow model from a validated XML tree (recovery/model/xml/document.py), with the
checks a schema cannot express: property names and values against their declarations
(recovery/model/config.py), unique ids, exactly one implementation per component, required
source/sink attributes, a table sink's url and table, a spark source's attributes; then the
graph's checks (recovery/model/xml/check.py). Each problem is a WorkflowError naming the file
and the line of the element at fault."""
from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

from lxml import etree
from pydantic import ValidationError

from recovery.errors import RecoveryError, WorkflowError
from recovery.model import config as config_decl
from recovery.model import kafka_source
from recovery.model.config import PropertyError
from recovery.model.workflow import (
    DEAD_LETTER_SINK_ID,
    DEAD_LETTER_SOURCE_ID,
    DEFAULT_STREAM,
    FILE_SINK_TYPES,
    SINK_TYPES,
    SPARK_FILE_FORMATS,
    SPARK_PATHLESS_FORMATS,
    SPARK_SOURCE_ATTRIBUTES,
    SPARK_UNORDERED_FORMATS,
    TABLE_SINK_TYPES,
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
    check_topic,
)
from recovery.model.xml.check import ElementLines, check_graph, check_source_paths, check_table_sinks
from recovery.model.xml.document import children, local_name

# Attributes each built-in source / sink type requires (besides `type`).
SOURCE_REQUIRED: dict[str, tuple[str, ...]] = {
    "file": ("path",),
    "redis-stream": ("topic",),
    "queue": ("component", "tasks"),
    "spark": (),          # format, path / table, id-field: _spark_source checks them
    "kafka": ("bootstrap", "topic"),
}
SINK_REQUIRED: dict[str, tuple[str, ...]] = {name: t.required for name, t in SINK_TYPES.items()}
FILE_FORMATS = ("text", "jsonl")
RESERVED_STREAMS = ("__tick", "__heartbeat", "__system", "__ack_init", "__ack_ack", "__ack_fail")


def _props(config_el: etree._Element, file: str | None, what: str) -> tuple[tuple[str, str], ...]:
    """The properties of a <config>, each checked against its declaration (recovery/model/config.py)."""
    seen: dict[str, int | None] = {}
    out = []
    for p in children(config_el, "property"):
        name, value = _required(p, "name"), _required(p, "value")
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


def _required(el: etree._Element, attr: str) -> str:
    """An attribute the schema requires: the schema check before the model is built ensures it."""
    value = el.get(attr)
    if value is None:                                 # pragma: no cover - the schema check
        raise ValueError(f"<{local_name(el)}> on line {el.sourceline} has no {attr}= attribute")
    return value


def _fields(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def _bool(value: str | None) -> bool:
    return (value or "false").strip() in ("true", "1")


def _params(el: etree._Element) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in el.attrib.items() if k != "type")


_RUN_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def table_sink_problem(typ: str, el: etree._Element) -> str | None:
    """What is wrong with a postgres or delta sink's attributes (None: nothing). A password
    never sits in the XML: libpq reads it from PGPASSWORD or ~/.pgpass."""
    run_column = el.get("run-column")
    if run_column is not None and not _RUN_COLUMN.match(run_column):
        return (f"run-column must be a column name (letters, digits and _, not starting with a "
                f"digit), got {run_column!r}")
    if typ != "postgres":
        return None
    url = el.get("url", "")
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError as err:
        return f"url is not a URL ({err}): {url!r}"
    if parts.scheme not in ("postgresql", "postgres"):
        return f"url must be a postgresql:// URL (postgresql://user@host:port/database), got {url!r}"
    if password is not None or any(k.lower() == "password" for k, _ in parse_qsl(parts.query)):
        return ("url holds a password: a workflow file must not; give it through PGPASSWORD or "
                "~/.pgpass (libpq reads them), and write the url without it")
    table = el.get("table", "")
    names = table.split(".")
    if len(names) > 2 or not all(n.strip() for n in names):
        return f"table must be name or schema.name, got {table!r}"
    return None


def _options(source: etree._Element, what: str, typ: str, file: str | None) -> tuple[tuple[str, str], ...]:
    """A source's <option name= value=> children, in order; only spark sources take them."""
    seen: dict[str, int | None] = {}
    out = []
    for param in children(source, "param"):
        raise WorkflowError(f'{what}: <source type="{typ}"> takes no <param> (only kafka sources pass '
                            "settings to a client)", file, param.sourceline)
    for opt in children(source, "option"):
        if typ != "spark":
            raise WorkflowError(f'{what}: <source type="{typ}"> takes no <option> (only spark '
                                "sources pass options to a reader)", file, opt.sourceline)
        name = _required(opt, "name")
        if name in seen:
            raise WorkflowError(f"{what}: option {name!r} is set twice (first on line {seen[name]})",
                                file, opt.sourceline)
        seen[name] = opt.sourceline
        out.append((name, _required(opt, "value")))
    return tuple(out)


def _kafka_params(source: etree._Element, what: str, file: str | None) -> tuple[tuple[str, str], ...]:
    """A kafka source's attributes checked, and its <param> children as options: a setting
    given by file= or env= is kept under its name with kafka_source.FILE_SUFFIX / ENV_SUFFIX."""
    attrs = {k: v for k, v in source.attrib.items() if k != "type"}
    problem = kafka_source.settings_problem(attrs, [])
    if problem:
        raise WorkflowError(f'{what}: <source type="kafka"> {problem}', file, source.sourceline)
    params = []
    seen: dict[str, int | None] = {}
    for opt in children(source):
        if local_name(opt) != "param":
            raise WorkflowError(f'{what}: <source type="kafka"> takes <param name="kafka.<setting>"> '
                                f"children, not <{local_name(opt)}>", file, opt.sourceline)
        name = _required(opt, "name")
        if name in seen:
            raise WorkflowError(f"{what}: param {name!r} is set twice (first on line {seen[name]})",
                                file, opt.sourceline)
        seen[name] = opt.sourceline
        pattrs = {k: v for k, v in opt.attrib.items() if k != "name"}
        problem = kafka_source.settings_problem(attrs, [(name, pattrs)])
        if problem:
            raise WorkflowError(f'{what}: <source type="kafka"> {problem}', file, opt.sourceline)
        how = next(k for k in ("value", "file", "env") if k in pattrs)
        suffix = {"value": "", "file": kafka_source.FILE_SUFFIX, "env": kafka_source.ENV_SUFFIX}[how]
        params.append((name + suffix, pattrs[how]))
    return tuple(params)


def _spark_source(source: etree._Element, what: str, file: str | None) -> None:
    """What a <source type="spark"> needs: a format (unless it names a table); exactly one of
    path= and table= for Spark's file formats, neither for jdbc and kafka (their options name
    the data), at most one for other formats; and an id-field= where rows have no stable
    position to take an id from (jdbc, kafka, a table; other formats are checked at submit)."""
    line = source.sourceline
    unknown = [a for a in source.attrib if a != "type" and a not in SPARK_SOURCE_ATTRIBUTES]
    if unknown:
        raise WorkflowError(f'{what}: <source type="spark"> has no {unknown[0]}= attribute (it takes '
                            f"{', '.join(a + '=' for a in SPARK_SOURCE_ATTRIBUTES)}, and <option> "
                            "children)", file, line)
    for attr in SPARK_SOURCE_ATTRIBUTES:
        value = source.get(attr)
        if value is not None and not value.strip():
            raise WorkflowError(f'{what}: <source type="spark"> has an empty {attr}=', file, line)
    fmt, path, table = source.get("format"), source.get("path"), source.get("table")
    if fmt is None and table is None:
        raise WorkflowError(f'{what}: <source type="spark"> needs a format= (parquet, orc, csv, json, '
                            "text, jdbc, kafka, ...) or a table=", file, line)
    if fmt in SPARK_PATHLESS_FORMATS:
        if path is not None or table is not None:
            raise WorkflowError(f'{what}: <source type="spark" format="{fmt}"> takes no '
                                f"{'path' if path is not None else 'table'}= (its <option>s name "
                                "the data)", file, line)
    elif path is not None and table is not None:
        raise WorkflowError(f'{what}: <source type="spark"> takes path= or table=, not both', file, line)
    elif path is None and table is None and fmt in SPARK_FILE_FORMATS:
        raise WorkflowError(f'{what}: <source type="spark" format="{fmt}"> needs a path= (the data) '
                            "or a table= (a catalog table)", file, line)
    if source.get("id-field") is None and (fmt in SPARK_UNORDERED_FORMATS or table is not None):
        reads = f'format="{fmt}"' if fmt in SPARK_UNORDERED_FORMATS else "a table"
        raise WorkflowError(f'{what}: <source type="spark"> reading {reads} needs an id-field= (the '
                            "column whose value is each row's message id): its rows have no stable "
                            "position to derive one from", file, line)


def _sink(child: etree._Element, what: str, file: str | None) -> SinkImpl:
    """A `<sink>` whose required attributes were checked: its mode and a table's attributes."""
    typ, line = _required(child, "type"), child.sourceline
    mode = child.get("mode")
    if mode is not None and typ in TABLE_SINK_TYPES and mode != "append":
        raise WorkflowError(f'{what}: <sink type="{typ}"> appends to its table: mode= can '
                            f'only be "append" (got "{mode}"); rows are never replaced '
                            "or removed by a run", file, line)
    if mode is not None and typ not in FILE_SINK_TYPES + TABLE_SINK_TYPES:
        raise WorkflowError(f'{what}: <sink type="{typ}"> takes no mode= (only '
                            f"{' and '.join(FILE_SINK_TYPES)} sinks write part files)",
                            file, line)
    if typ in TABLE_SINK_TYPES:
        problem = table_sink_problem(typ, child)
        if problem:
            raise WorkflowError(f'{what}: <sink type="{typ}"> {problem}', file, line)
    params = tuple(p for p in _params(child) if p[0] != "mode")
    return SinkImpl(type=typ, mode=mode, params=params)


def _dead_letters(el: etree._Element, file: str | None) -> SinkImpl:
    """`<dead-letters><sink .../></dead-letters>` (the schema allows one sink of a type that
    can take dead letters)."""
    sink = children(el, "sink")[0]
    typ = _required(sink, "type")
    for attr in SINK_REQUIRED.get(typ, ()):
        if not (sink.get(attr) or "").strip():
            raise WorkflowError(f'<dead-letters>: <sink type="{typ}"> needs a non-empty {attr}= attribute',
                                file, sink.sourceline)
    return _sink(sink, "<dead-letters>", file)


def _build_component(el: etree._Element, file: str | None) -> tuple[Component, ElementLines]:
    kind = local_name(el)
    cid = _required(el, "id")
    what = f"{kind} {cid!r}"
    lines = ElementLines(component=el.sourceline)

    # Implementation: exactly one of class=, <shell>, <source> (spouts), <sink> (bolts).
    impls: list[tuple[str, int | None, object]] = []
    if el.get("class") is not None:
        impls.append(("class=", el.sourceline, ClassImpl(ref=el.get("class"))))
    config: tuple[tuple[str, str], ...] = ()
    config_line: int | None = None
    streams: list[StreamDef] = []
    stream_lines: dict[str, int | None] = {}
    inputs: list[Input] = []
    for child in children(el):
        name, line = local_name(child), child.sourceline
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
            typ = _required(child, "type")
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
            if name == "source" and typ == "redis-stream":
                try:
                    check_topic(child.get("topic", ""))
                except RecoveryError as err:
                    raise WorkflowError(f'{what}: <source type="redis-stream"> {err}', file, line) from None
            if name == "source" and typ == "queue":
                tasks = child.get("tasks", "").split()
                if not all(t.isdigit() and int(t) >= 1 for t in tasks):
                    raise WorkflowError(f'{what}: <source type="queue"> tasks= must be '
                                        f"space-separated task ids (positive integers), got "
                                        f"{child.get('tasks')!r}", file, line)
            if name == "source" and typ == "spark":
                _spark_source(child, what, file)
            if name == "source":
                options = _kafka_params(child, what, file) if typ == "kafka" else _options(child, what, typ, file)
                impls.append(("<source>", line, SourceImpl(type=typ, params=_params(child), options=options)))
            else:
                impls.append(("<sink>", line, _sink(child, what, file)))
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
    impl = impls[0][2]
    if isinstance(impl, SourceImpl) and impl.type == "spark" and not (streams and streams[0].fields):
        raise WorkflowError(f'{what}: a <source type="spark"> needs a <stream fields="..."/>: its '
                            "fields select the columns it reads", file,
                            lines.streams[0] if streams else lines.impl)
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


def _check_injected_components(root: etree._Element, ids: list[str], file: str | None) -> None:
    """Each fault injection's .component, in any <config>, names a component of the workflow."""
    configs = [("workflow", c) for c in children(root, "config")]
    configs += [(f"{local_name(el)} {el.get('id')!r}", c) for el in children(root) if local_name(el) != "config"
                for c in children(el, "config")]
    for what, config_el in configs:
        for p in children(config_el, "property"):
            try:
                config_decl.check_injection_components({_required(p, "name"): _required(p, "value")}, ids)
            except PropertyError as err:
                raise WorkflowError(f"{what}: {err}", file, p.sourceline) from None


def build_workflow(root: etree._Element, file: str | None, base_dir: str | None,
                   check_paths: bool) -> Workflow:
    """The model of a validated document (`file` names it in errors); with `check_paths`, the
    files its sources read must exist under `base_dir`."""
    config: tuple[tuple[str, str], ...] = ()
    resources = Resources()
    dead_letters: SinkImpl | None = None
    comps: list[Component] = []
    lines: dict[str, ElementLines] = {}
    for el in children(root):
        name = local_name(el)
        if name == "config":
            config = _props(el, file, "workflow")
            continue
        if name == "resources":
            resources = _resources(el, file)
            continue
        if name == "dead-letters":
            dead_letters = _dead_letters(el, file)
            continue
        cid = _required(el, "id")
        if cid in lines:
            raise WorkflowError(f"duplicate component id {cid!r} (first defined on line "
                                f"{lines[cid].component})", file, el.sourceline)
        comp, comp_lines = _build_component(el, file)
        comps.append(comp)
        lines[cid] = comp_lines
    if dead_letters is not None:
        for taken in (DEAD_LETTER_SINK_ID, DEAD_LETTER_SOURCE_ID):
            if taken in lines:
                raise WorkflowError(f"component id {taken!r} is the dead-letter sink's when the workflow has "
                                    "<dead-letters>: rename the component", file, lines[taken].component)
    _check_injected_components(root, [c.id for c in comps], file)
    check_graph(comps, lines, file)
    check_table_sinks(comps, lines, file)
    if check_paths and base_dir is not None:
        check_source_paths(comps, lines, base_dir, file)
    return Workflow(name=root.get("name"), config=config, resources=resources, components=tuple(comps),
                    dead_letters=dead_letters, base_dir=base_dir)


def _resources(el: etree._Element, file: str | None) -> Resources:
    """`<resources>`: an include's path stays inside the workflow's folder (relative, no `..`)."""
    include, exclude = [], []
    for child in children(el):
        if local_name(child) == "include":
            path = _required(child, "path")
            parts = path.replace("\\", "/").split("/")
            if path.startswith("/") or os.path.isabs(path) or ".." in parts:
                raise WorkflowError(f"<include path={path!r}>: give a path inside the workflow's folder "
                                    "(relative, without '..')", file, child.sourceline)
            include.append(path)
        else:
            exclude.append(_required(child, "pattern"))
    return Resources(include=tuple(include), exclude=tuple(exclude))
