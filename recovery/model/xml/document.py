"""A workflow file as an XML tree: the safe parse and the schema.

`parse_tree` refuses any DOCTYPE before libxml2 sees the document (so no entity can resolve
or expand: XXE and "billion laughs" are refused), then parses without DTD loading, network or
huge trees (an item over 10 MB or nesting over 256 levels is refused, in words); `validate`
checks the tree against recovery/model/xml/workflow.xsd (namespace ``urn:recovery:workflow:1``),
with friendlier messages first for the mistakes the schema would report cryptically. Each
problem is a WorkflowError naming the file and line.
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from lxml import etree

from recovery.errors import RecoveryError, WorkflowError
from recovery.model.workflow import NAMESPACE

# Package data, so that an installed wheel validates too; schemas/workflow.xsd at the top of
# the repository, where the docs point, is a link to it (one file).
SCHEMA_RESOURCE = resources.files("recovery.model.xml").joinpath("workflow.xsd")

_NS = "{%s}" % NAMESPACE


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


# The safe parser's size limits (libxml2's defaults without its "huge" mode, which stays off so
# that a hostile file cannot make the parser take unbounded memory).
MAX_ITEM_BYTES = 10_000_000
MAX_DEPTH = 256


def _limit_hit(msg: str) -> str | None:
    """The words for a size limit the parser stopped at (libxml2 words them with a flag a user
    cannot set), or None when `msg` is another error."""
    if re.search(r"(Comment|PI .*) too big", msg):
        return (f"a comment or processing instruction is longer than {MAX_ITEM_BYTES:,} bytes, the "
                "most a workflow file may hold in one item: shorten it")
    if "Excessive depth" in msg:
        return (f"elements are nested more than {MAX_DEPTH} levels deep, the most a workflow file "
                "may nest: a workflow needs a few levels")
    if "Resource limit exceeded" in msg or "XML_PARSE_HUGE" in msg:
        return (f"an attribute value, element text or name is longer than {MAX_ITEM_BYTES:,} bytes, "
                "the most a workflow file may hold in one item: keep large data in a file the "
                "workflow reads, not in the XML")
    return None


def parse_tree(data: bytes | str, file: str | None) -> etree._Element:
    _reject_doctype(data, file)
    if isinstance(data, str):
        # lxml refuses str input that carries an encoding declaration; the str is decoded.
        data = _ENCODING_DECL.sub(r"\1", data, count=1)
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as err:
        msg = err.msg or str(err)
        msg = " ".join(re.sub(r",? line \d+, column \d+$", "", msg).split())   # one line
        limit = _limit_hit(msg)
        if limit is not None:
            raise WorkflowError(limit, file, err.lineno or None) from None
        raise WorkflowError(f"malformed XML: {msg}", file, err.lineno or None) from None
    except ValueError as err:
        raise WorkflowError(f"malformed XML: {err}", file, None) from None
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:   # belt and braces
        raise WorkflowError("DOCTYPE declarations are not allowed in a workflow file "
                            "(no DTDs, no entities)", file, 1)
    return root


def local_name(el: etree._Element) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag[len(_NS):] if tag.startswith(_NS) else tag


def children(el: etree._Element, name: str | None = None) -> list[etree._Element]:
    return [c for c in el if isinstance(c.tag, str) and c.tag.startswith(_NS)
            and (name is None or local_name(c) == name)]


def _clean_schema_message(msg: str) -> str:
    msg = msg.replace(_NS, "")
    msg = re.sub(r"\{urn:[^}]*\}", "", msg)
    return msg


def _prechecks(root: etree._Element, file: str | None) -> None:
    """Friendly messages for mistakes the schema would report cryptically."""
    if root.tag != _NS + "workflow":
        if local_name(root) == "workflow" or root.tag == "workflow":
            raise WorkflowError(f'the <workflow> element must be in namespace {NAMESPACE}: '
                                f'write <workflow xmlns="{NAMESPACE}" name="...">',
                                file, root.sourceline)
        raise WorkflowError(f"the root element is <{local_name(root)}>, expected "
                            f'<workflow xmlns="{NAMESPACE}">', file, root.sourceline)
    for comp in root:
        kind = local_name(comp)
        if kind not in ("spout", "bolt") or not str(comp.tag).startswith(_NS):
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
        for child in children(comp):
            name = local_name(child)
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


def validate(root: etree._Element, file: str | None) -> None:
    """The root element, then the whole tree against the schema: WorkflowError(message, file,
    line) at the first problem."""
    _prechecks(root, file)
    xsd = schema()
    if xsd.validate(root):
        return
    err = xsd.error_log[0] if len(xsd.error_log) else None
    if err is None:                                   # pragma: no cover - lxml always logs
        raise WorkflowError("schema violation", file, root.sourceline)
    raise WorkflowError(f"schema violation: {_clean_schema_message(err.message)}", file,
                        err.line or None)
