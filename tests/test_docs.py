"""The project's documents stay true to the repository: every path a document, a docstring or
a comment cites exists, every Markdown link to a section finds it, docs/xml.md names every
element, attribute and type the schema and the parser accept, and docs/configuration.md is what
scripts/gen_config_docs.py writes from the property declarations."""
from __future__ import annotations

import ast
import fnmatch
import importlib.util
import io
import re
import subprocess
import tokenize
from functools import lru_cache
from pathlib import Path

import pytest
from lxml import etree

ROOT = Path(__file__).resolve().parents[1]
XS = "{http://www.w3.org/2001/XMLSchema}"

# --------------------------------------------------------------------------- cited paths

# A cited path: segments joined by "/", the first a name (after any ../), not inside a URL or
# a longer path. Placeholders (<run id>, {name}), globs (*) and ellipses (000…004) may fill a
# segment.
PATH = re.compile(r"(?<![\w/.:~$@-])((?:\.\.?/)*[A-Za-z_][\w.-]*(?:/[\w.*<>{}…-]+)+/?)")
EXTENSIONS = (".py", ".md", ".xml", ".xsd", ".json", ".svg", ".png", ".txt", ".toml", ".csv", ".log",
              ".html", ".css", ".js", ".cfg", ".sh", ".spill")
OUTSIDE = "sha" "red"   # the notes folder beside a checkout, spelled so that a grep for it finds no citation here
# What the tool or a user makes at run time, named in documents as examples: not in the repository.
RUNTIME = ("out/", "data/", ".recovery/", "RECOVERY_HOME/", "workflows/out/")


@lru_cache(maxsize=1)
def repo_files() -> tuple[str, ...]:
    """The repository's files (tracked, and new ones not ignored), relative to ROOT."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the documents are checked in one")
    return tuple(sorted(line for line in out.splitlines() if (ROOT / line).exists()))


@lru_cache(maxsize=1)
def repo_dirs() -> frozenset[str]:
    return frozenset(str(Path(f).parents[i]) for f in repo_files() for i in range(len(Path(f).parts) - 1))


def top_level_names() -> set[str]:
    # (and the folder of working notes that sits beside a checkout: never part of the project)
    return {Path(f).parts[0] for f in repo_files() if len(Path(f).parts) > 1} | {OUTSIDE}


def exists(rel: str) -> bool:
    """A file or folder of the repository, or a module's attribute (`bench/_common.run_plain`);
    a placeholder (<run id>, {name}, NAME) or a glob matches at least one."""
    rel = rel.rstrip("/")
    if rel in repo_dirs() or rel in repo_files():
        return True
    head, _, last = rel.rpartition("/")
    module = f"{head}/{last.split('.', 1)[0]}" if head else last.split(".", 1)[0]
    if "." in last and not last.endswith(EXTENSIONS) and (f"{module}.py" in repo_files() or module in repo_dirs()):
        return True
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}|…|\b[A-Z][A-Z_]+\b", "*", rel)
    if "*" not in pattern:
        return False
    return any(fnmatch.fnmatch(p, pattern) for p in (*repo_files(), *repo_dirs()))


def cited_paths(text: str) -> list[str]:
    """The repository paths `text` cites: those starting with a top-level folder of the
    repository (or the notes folder beside it, which is not one), and relative ones ending in a known extension
    whose first folder is one of the repository's (`model/config.py`; not an example such as
    `folder/x.xml`)."""
    tops = top_level_names()
    names = {Path(d).name for d in repo_dirs()}
    out = []
    for m in PATH.finditer(text):
        path = m[1].rstrip(".")
        first = re.sub(r"^(\.\.?/)+", "", path).split("/", 1)[0]
        if path.startswith(RUNTIME):
            continue
        if first in tops or (path.rstrip("/").endswith(EXTENSIONS) and (first in names or path.startswith("."))):
            out.append(path)
    return out


def resolves(path: str, citing: str) -> bool:
    """Relative to the repository, to the citing file's folder or one of its parents, or to the
    package (docstrings name modules by their path inside it)."""
    here = Path(citing).parent
    bases = [here, *here.parents, Path("recovery")]
    for base in bases:
        rel = (base / path).as_posix()
        parts: list[str] = []
        for part in rel.split("/"):
            if part == "..":
                if not parts:
                    break
                parts.pop()
            elif part not in (".", ""):
                parts.append(part)
        else:
            if exists("/".join(parts)):
                return True
    return False


def prose_of_python(source: str) -> str:
    """A module's docstrings and comments (its code's strings are not documentation)."""
    chunks = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                chunks.append(doc)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            chunks.append(tok.string)
    return "\n".join(chunks)


# The project's documents (Markdown and workflow files), and the docstrings and comments of its code.
DOCUMENTS = ("README.md", "docs/*.md", "bench/*.md", "workflows/*.md", "workflows/*.xml")
CODE = ("bench/*.py", "workflows/*/*.py", "recovery/*.py", "recovery/**/*.py", "tests/*.py", "tests/**/*.py",
        "scripts/*.py")


def documents() -> list[str]:
    return [f for f in repo_files() if any(fnmatch.fnmatch(f, g) for g in (*DOCUMENTS, *CODE))]


MARKDOWN_NAME = re.compile(r"(?<![\w/.-])([A-Za-z][\w-]*\.md)\b")


def broken_citations(rel: str, text: str) -> list[str]:
    """The paths `text` cites that are not in the repository, and the Markdown documents it
    names without a folder (a bare file name) that no folder of the repository holds."""
    prose = prose_of_python(text) if rel.endswith(".py") else text
    broken = [p for p in cited_paths(prose) if not resolves(p, rel)]
    names = {Path(f).name for f in repo_files()}
    broken += [m[1] for m in MARKDOWN_NAME.finditer(prose) if m[1] not in names]
    return broken


def test_the_checker_finds_paths_that_are_not_there_and_accepts_those_that_are():
    text = (f"see {OUTSIDE}/inputs/004 and {OUTSIDE}/notes.md, tests/unit/<layer>/test_<module>.py, "
            "workflows/*.xml, recovery/tracking/ledger.py, `../docs/xml.md`, out/cdn_logs/part-x.jsonl, "
            "https://storm.apache.org/releases/current/Multilang-protocol.html, recovery/nowhere.py, "
            "a missing docs/nothing.md, tracking/spill.py, bench/_common.run_plain, folder/example.xml, "
            "bench/NAME.py")
    assert broken_citations("recovery/tracking/tracker.py", text) == [
        f"{OUTSIDE}/inputs/004", f"{OUTSIDE}/notes.md", "recovery/nowhere.py", "docs/nothing.md"]
    assert broken_citations("workflows/README.md", "[refs](../docs/references.md) [x](../docs/none.md)") == [
        "../docs/none.md"]
    assert broken_citations("docs/x.md", "as VENDORED.md and README.md say, and PLAN.md") == ["PLAN.md"]


def test_python_code_strings_are_not_documents_but_docstrings_and_comments_are():
    source = f'def f():\n    """See {OUTSIDE}/notes.md."""\n    return "out/x/y.json"  # and docs/none.md\n'
    assert broken_citations("recovery/x.py", source) == [f"{OUTSIDE}/notes.md", "docs/none.md"]


@pytest.mark.parametrize("rel", documents())
def test_every_cited_path_exists(rel):
    text = (ROOT / rel).read_text(encoding="utf-8")
    assert broken_citations(rel, text) == [], f"{rel} cites paths that are not in the repository"


# --------------------------------------------------------------------------- Markdown sections

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


MARKDOWN = [f for f in ("README.md", "bench/README.md", "workflows/README.md") if (ROOT / f).exists()] + \
    sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("rel", MARKDOWN)
def test_every_markdown_link_finds_its_file_and_section(rel):
    here = (ROOT / rel).parent
    bad = []
    for target in LINK.findall((ROOT / rel).read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (here / file).resolve() if file else ROOT / rel
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            bad.append(target)
    assert bad == [], f"{rel}: links to nothing"


# --------------------------------------------------------------------------- the XML reference

XSD = ROOT / "recovery" / "model" / "xml" / "workflow.xsd"


def xml_reference() -> str:
    return (ROOT / "docs" / "xml.md").read_text(encoding="utf-8")


def builder_module():
    """Where the model is built from the XML: the attributes each source and sink type needs."""
    from recovery.model.xml import build
    return build


def schema_names() -> tuple[set[str], set[str], dict[str, list[str]]]:
    """(element names, attribute names, enumerations by simple type) the schema declares."""
    tree = etree.parse(str(XSD))
    elements = {e.get("name") for e in tree.iter(f"{XS}element") if e.get("name")}
    attributes = {a.get("name") for a in tree.iter(f"{XS}attribute") if a.get("name")}
    enums = {t.get("name"): [e.get("value") for e in t.iter(f"{XS}enumeration")]
             for t in tree.iter(f"{XS}simpleType") if list(t.iter(f"{XS}enumeration"))}
    return elements, attributes, enums


def type_section(doc: str, element: str, typ: str) -> str:
    """The text of the section headed `<element type="typ">` (up to the next heading of its level)."""
    m = re.search(rf'^(#+) `<{element} type="{re.escape(typ)}">`\s*$', doc, re.MULTILINE)
    assert m, f'docs/xml.md has no section headed `<{element} type="{typ}">`'
    level = len(m[1])
    rest = doc[m.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def attributes_read_by_the_code() -> set[str]:
    """Source and sink attributes the package reads (`impl.param("name")`)."""
    names = set()
    for path in (ROOT / "recovery").rglob("*.py"):
        names |= set(re.findall(r"""\.param\(\s*["']([a-z][a-z-]*)["']""", path.read_text(encoding="utf-8")))
    return names


def test_every_element_of_the_schema_is_documented():
    elements, _, _ = schema_names()
    assert elements >= {"workflow", "config", "property", "spout", "bolt", "shell", "source", "option", "sink",
                        "stream", "input"}
    doc = xml_reference()
    assert [e for e in sorted(elements) if f"<{e}>" not in doc] == []


def test_every_attribute_of_the_schema_and_of_the_parser_is_documented():
    _, attributes, _ = schema_names()
    build = builder_module()
    from recovery.model.workflow import SPARK_SOURCE_ATTRIBUTES
    accepted = set(attributes) | set(SPARK_SOURCE_ATTRIBUTES) | attributes_read_by_the_code()
    for required in (*build.SOURCE_REQUIRED.values(), *build.SINK_REQUIRED.values()):
        accepted |= set(required)
    assert {"key-field", "run-column", "format", "id-field"} <= accepted
    doc = xml_reference()
    assert [a for a in sorted(accepted) if f"`{a}=`" not in doc] == []


def test_every_enumerated_value_is_documented():
    _, _, enums = schema_names()
    assert {"groupingType", "sourceTypeName", "sinkTypeName", "sinkModeType"} <= set(enums)
    doc = xml_reference()
    missing = [(t, v) for t, values in enums.items() for v in values if f"`{v}`" not in doc]
    assert missing == []


def test_each_source_and_sink_type_has_a_section_naming_the_attributes_it_takes():
    _, _, enums = schema_names()
    build = builder_module()
    from recovery.model.workflow import SPARK_SOURCE_ATTRIBUTES
    doc = xml_reference()
    for element, enum, required in (("source", "sourceTypeName", build.SOURCE_REQUIRED),
                                    ("sink", "sinkTypeName", build.SINK_REQUIRED)):
        for typ in enums[enum]:
            section = type_section(doc, element, typ)
            takes = set(required.get(typ, ())) | (set(SPARK_SOURCE_ATTRIBUTES) if typ == "spark" else set())
            assert [a for a in sorted(takes) if f"`{a}=`" not in section] == [], f'<{element} type="{typ}">'
    file_section = type_section(doc, "source", "file")
    assert all(f"`{fmt}`" in file_section for fmt in build.FILE_FORMATS)
    assert "<option>" in type_section(doc, "source", "spark")


def test_the_type_comments_of_the_schema_name_only_documented_attributes():
    """The schema's comments say which attributes each type takes ("path (required)", ...):
    every name they give is in docs/xml.md."""
    text = XSD.read_text(encoding="utf-8")
    comments = " ".join(re.findall(r"<!--(.*?)-->", text, re.DOTALL))
    named = set(re.findall(r"\b([a-z][a-z-]*) \(required", comments))
    type_names = {v for values in schema_names()[2].values() for v in values}
    named |= {w for w in re.findall(r"\b([a-z]+(?:-[a-z]+)+)\b", comments)
              if w not in type_names and not w.endswith("-separated")}
    assert {"path", "topic", "url", "table", "key-field", "run-column", "id-field"} <= named
    doc = xml_reference()
    assert [a for a in sorted(named) if f"`{a}=`" not in doc] == []


# --------------------------------------------------------------------------- the configuration reference

def generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_is_what_the_declarations_generate():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == generator().markdown(), "run `.venv/bin/python scripts/gen_config_docs.py`"


def test_the_configuration_reference_names_every_property_with_its_default():
    from recovery.model import config
    text = generator().markdown()
    for name, default in config.DEFAULTS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"`{default}`" in row, name
    assert all(f"`recovery.inject.NAME.{a}`" in text for a in config.INJECTION_ATTRIBUTES)
