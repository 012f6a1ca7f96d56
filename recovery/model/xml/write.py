"""Workflow model -> XML (the writer; parse.py reads it back to the same model)."""
from __future__ import annotations

from collections.abc import Iterable

from lxml import etree

from recovery.errors import WorkflowError
from recovery.model import kafka_source
from recovery.model.workflow import (
    DEFAULT_STREAM,
    NAMESPACE,
    ClassImpl,
    ShellImpl,
    SinkImpl,
    SourceImpl,
    Workflow,
)

_NS = "{%s}" % NAMESPACE


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
        if wf.resources.include or wf.resources.exclude:
            res = _el(root, "resources", ())
            for path in wf.resources.include:
                _el(res, "include", (("path", path),))
            for pattern in wf.resources.exclude:
                _el(res, "exclude", (("pattern", pattern),))
        if wf.dead_letters is not None:
            dl = wf.dead_letters
            _el(_el(root, "dead-letters", ()), dl.kind,
                [("type", dl.type), *dl.params, *([("mode", dl.mode)] if dl.mode is not None else [])])
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
                source = _el(el, impl.kind, [("type", impl.type), *impl.params])
                for name, value in impl.options:
                    if impl.type == kafka_source.SOURCE_TYPE:   # <param name= value=|file=|env=>
                        how = "file" if name.endswith(kafka_source.FILE_SUFFIX) else \
                            "env" if name.endswith(kafka_source.ENV_SUFFIX) else "value"
                        bare = name.rsplit("#", 1)[0] if how != "value" else name
                        _el(source, "param", (("name", bare), (how, value)))
                    else:
                        _el(source, "option", (("name", name), ("value", value)))
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
