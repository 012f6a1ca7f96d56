"""The package's shape, checked over recovery/**: no module over 500 lines, no private name used
across modules, no import cycle. And the suite's own list of its long files names files that
exist (tests/conftest.py hands them out first)."""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "recovery"
MAX_LINES = 500

# Private names that stay legal: the library's own underscore API (lxml's element classes, the
# process exit without clean-up a dying worker needs, a caller's frame).
# (PySpark has no public handle on its gateway JVM's process, which the driver waits for
# before keeping the JVM's class archive: engine/class_archive.py; sc._jsc: PySpark's
# JavaSparkContext, the documented way to the JVM for what PySpark has no Python API for:
# the application's executor ids)
ALLOWED_PRIVATE = {("etree", "_Element"), ("etree", "_ElementTree"), ("os", "_exit"), ("sys", "_getframe"),
                   ("SparkContext", "_active_spark_context"), ("SparkContext", "_gateway"), ("sc", "_jsc")}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path


def long_modules() -> dict[str, int]:
    out = {}
    for name, path in modules():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            out[name] = n
    return out


def test_no_module_is_over_500_lines():
    assert long_modules() == {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_here(tree: ast.Module) -> set[str]:
    """The private names a module defines itself (functions, classes, assignments, attributes
    it sets on self/cls/other objects of its classes, keyword names of its dataclasses)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if _is_private(n)}


def _owner(node: ast.expr) -> str | None:
    """`self`, `cls`, `super()` (a class's own attribute) or the dotted name an attribute is on."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
        return "super()"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def private_uses_in(name: str, source: str) -> list[tuple[str, int, str]]:
    """(module, line, what) for each private name module `name` takes from another: `from m
    import _x`, or `obj._x` where obj is not self, cls or super() and the module does not
    define `_x`."""
    tree = ast.parse(source, name)
    own = _defined_here(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _is_private(alias.name):
                    found.append((name, node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = _owner(node.value)
            if owner in ("self", "cls", "super()") or (owner, node.attr) in ALLOWED_PRIVATE:
                continue
            if node.attr in own:   # a private name of this module's own (another instance of its class)
                continue
            found.append((name, node.lineno, f"{owner or '<expr>'}.{node.attr}"))
    return found


def private_uses() -> list[tuple[str, int, str]]:
    return [u for name, path in modules() for u in private_uses_in(name, path.read_text(encoding="utf-8"))]


def test_the_private_name_finder_finds_names_taken_from_another_module_only():
    source = """from m import _helper, public
import os
from lxml import etree
os._exit(1)
etree._Element
other._state
class Box:
    _size = 1
    def same(self, box):
        return self._size + box._size + super()._grow() + self._new
    def __init__(self):
        self._new = 2
"""
    assert [(line, what) for _, line, what in private_uses_in("m.py", source)] == \
        [(1, "from m import _helper"), (6, "other._state")]


def test_no_private_name_is_used_across_modules():
    assert private_uses() == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (or a node importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges) + 100))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle():
    """Between recovery's modules, every import counted (a lazy one in a function too): grimp's
    graph, which import-linter builds its contracts on."""
    graph = grimp.build_graph("recovery", cache_dir=None)   # TYPE_CHECKING imports counted too
    ours = set(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & ours for m in ours}
    assert _cycles(edges) == []


def test_the_long_test_files_listed_exist():
    from tests.conftest import LONG_FILES
    assert [f for f in LONG_FILES if not (ROOT / "tests" / f).is_file()] == []


# --- one owner for the failed-tuple queue and the dead letters ----------------------------------
QUEUE_OWNER = "recovery/tracking/queue/"
QUEUE_MODULES = ("recovery.tracking.queue", "recovery.tracking.queue.store")
#: The run_key/spread_key segments of the queue's and the dead letters' keys (recovery/tracking/queue/store.py).
QUEUE_SEGMENTS = ("failed", "due", "dead", "deadroots", "deadflush", "deadflushes", "gone")


def _names_a_queue_segment(node: ast.Call) -> bool:
    """`keys.run_key(run_id, "dead")`, `keys.spread_key(run_id, f"queue:{c}:{t}")`: a queue key
    built from the layout instead of asked of its owner."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("run_key", "spread_key") or len(node.args) < 2:
        return False
    seg = node.args[1]
    if isinstance(seg, ast.Constant) and isinstance(seg.value, str):
        return seg.value in QUEUE_SEGMENTS or seg.value.startswith("queue:")
    if isinstance(seg, ast.JoinedStr) and seg.values:
        first = seg.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("queue:")
    return False


def queue_key_uses_in(name: str, source: str, owned: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """(module, line, what) for each use of one of the `owned` key builders of the queue package:
    `from recovery.tracking.queue import dead_letters_key`, or `Q.dead_letters_key` where Q is the
    package or its store module (however it was imported or renamed); and each queue key built
    from tracking/keys.py's layout (`_names_a_queue_segment`)."""
    tree = ast.parse(source, name)
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("recovery.tracking", "recovery.tracking.queue"):
            aliases.update(a.asname or a.name for a in node.names if a.name in ("queue", "store"))
        if isinstance(node, ast.ImportFrom) and node.module in QUEUE_MODULES:
            found += [(name, node.lineno, f"from {node.module} import {a.name}") for a in node.names if a.name in owned]
        elif isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name in QUEUE_MODULES and a.asname)
        elif isinstance(node, ast.Call) and _names_a_queue_segment(node):
            found.append((name, node.lineno, ast.unparse(node)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in owned:
            value = node.value
            if isinstance(value, ast.Name) and value.id in aliases:
                found.append((name, node.lineno, f"{value.id}.{node.attr}"))
            elif ast.unparse(value) in QUEUE_MODULES:
                found.append((name, node.lineno, f"{ast.unparse(value)}.{node.attr}"))
    return found


def test_the_queue_key_finder_finds_every_way_of_naming_a_key():
    source = """from recovery.tracking import queue as q, runs
from recovery.tracking.queue import dead_letters_key, read
import recovery.tracking.queue.store
q.queue_key("r", "c", 1)
q.read
runs.queue_key
recovery.tracking.queue.store.failed_key("r")
keys.run_key(run_id, "deadroots")
keys.spread_key(run_id, f"queue:{c}:{t}")
keys.run_key(run_id, "log")
"""
    owned = ("dead_letters_key", "queue_key", "failed_key")
    assert [(line, what) for _, line, what in queue_key_uses_in("m.py", source, owned)] == [
        (2, "from recovery.tracking.queue import dead_letters_key"), (8, "keys.run_key(run_id, 'deadroots')"),
        (9, "keys.spread_key(run_id, f'queue:{c}:{t}')"), (4, "q.queue_key"),
        (7, "recovery.tracking.queue.store.failed_key")]


def test_only_the_queue_package_names_the_queue_and_dead_letter_keys():
    """Changing how failed tuples and dead letters are stored means changing one package."""
    from recovery.tracking import keys, queue
    from recovery.tracking.queue import store

    assert all(callable(getattr(store, n, None)) for n in queue.OWNED_KEYS)
    assert not any(hasattr(keys, n) for n in (*queue.OWNED_KEYS, "failed_set", "queue", "dead", "dead_flush"))
    uses = [u for name, path in modules() if not name.startswith(QUEUE_OWNER)
            for u in queue_key_uses_in(name, path.read_text(encoding="utf-8"), queue.OWNED_KEYS)]
    assert uses == []


# The flags mypy's --strict turns on (mypy cannot set `strict` per module).
STRICT_FLAGS = ("disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_unused_ignores", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks")
STRICT_PACKAGES = ("recovery.jobs", "recovery.cli", "recovery.ui")
STRICT_GLOBAL_FLAGS = ("warn_unused_configs", "warn_redundant_casts", "warn_unused_ignores")


def test_mypy_is_strict_on_the_jobs_the_command_line_and_the_web_view():
    import tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert all(config.get(flag) is True for flag in STRICT_GLOBAL_FLAGS)
    strict: dict[str, set[str]] = {}
    for override in config.get("overrides", []):
        names = override["module"] if isinstance(override["module"], list) else [override["module"]]
        on = {flag for flag in STRICT_FLAGS if override.get(flag) is True}
        for name in names:
            strict.setdefault(name, set()).update(on)
        assert not any(override.get(flag) is False for flag in STRICT_FLAGS), override
    for package in STRICT_PACKAGES:
        assert strict.get(package + ".*") == set(STRICT_FLAGS), package
        assert (PACKAGE / package.split(".")[1]).is_dir()
