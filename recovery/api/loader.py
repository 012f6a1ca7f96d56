"""Loading the Python classes a workflow names (`class="package.module:ClassName"`).

The workflow's code folder (Workflow.code_folder: the copy shipped with the job in a cluster's
tasks, else the workflow's folder, Workflow.base_dir) goes first on sys.path, so
`class="wordcount.components:SplitSentence"` in workflows/wordcount.xml is
workflows/wordcount/components.py. Importing writes no bytecode files.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from recovery.api.components import Bolt, Spout
from recovery.errors import WorkflowError
from recovery.model.workflow import ClassImpl, Component, Workflow

__all__ = ["ClassLoadError", "load_class", "check_classes", "class_errors", "component_class"]


class ClassLoadError(WorkflowError):
    """A component's class cannot be used: its module does not import, the class is missing,
    or it is not a recovery Spout / Bolt of the component's kind."""

    def __init__(self, message: str, component: str | None = None, ref: str | None = None,
                 file: str | None = None, line: int | None = None):
        self.ref = ref
        super().__init__(message, file, line, component=component)


@contextmanager
def _on_sys_path(base_dir: str | None) -> Iterator[None]:
    """base_dir first on sys.path (it stays there: classes loaded later may import lazily),
    and no .pyc written while importing."""
    if base_dir:
        path = os.path.abspath(base_dir)
        if not sys.path or sys.path[0] != path:
            if path in sys.path:
                sys.path.remove(path)
            sys.path.insert(0, path)
        # The finders of this folder and its packages forget what they listed (a module
        # written there since is found). importlib.invalidate_caches() would also make every
        # zip on sys.path (PySpark's own, in a Spark worker) read its whole directory again,
        # at every task.
        inside = path + os.sep
        for entry, finder in list(sys.path_importer_cache.items()):
            # (a path entry finder need not have invalidate_caches: the protocol leaves it out)
            invalidate = getattr(finder, "invalidate_caches", None)
            if invalidate is not None and (entry == path or entry.startswith(inside)):
                invalidate()
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


def _forget_shadowed(module_name: str, base_dir: str | None) -> None:
    """Two workflows may ship packages of the same name from different folders (copies of
    one example, say). If the package already imported is not the one under base_dir, drop
    it from sys.modules so this workflow gets its own code."""
    if not base_dir:
        return
    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    root = os.path.abspath(base_dir)
    if not (os.path.isdir(os.path.join(root, top)) or os.path.isfile(os.path.join(root, top + ".py"))):
        return
    files = [getattr(loaded, "__file__", None) or ""] + list(getattr(loaded, "__path__", []) or [])
    if any(os.path.abspath(f).startswith(root + os.sep) for f in files if f):
        return
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]


# The source files of the workflow modules imported, as they were then (mtime, size).
_IMPORTED: dict[str, tuple[int, int]] = {}


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _workflow_package(module_name: str, base_dir: str | None) -> str | None:
    """The top package of `module_name` when it is the workflow's own (in `base_dir`)."""
    top = module_name.split(".")[0]
    if not base_dir:
        return None
    root = os.path.abspath(base_dir)
    if os.path.isdir(os.path.join(root, top)) or os.path.isfile(os.path.join(root, top + ".py")):
        return top
    return None


def _modules_of(top: str) -> list[str]:
    return [m for m in sys.modules if m == top or m.startswith(top + ".")]


def _forget_changed(module_name: str, base_dir: str | None) -> None:
    """A long-lived process (a reused Spark worker, a notebook's driver) imported a workflow's
    package before its code was changed on disk (a bug fixed, then `recover --code-changed`):
    drop the package from sys.modules so the code as it is now is imported."""
    top = _workflow_package(module_name, base_dir)
    if top is None:
        return
    names = _modules_of(top)
    paths = [getattr(sys.modules[n], "__file__", None) for n in names]
    if any(p in _IMPORTED and _stamp(p) != _IMPORTED[p] for p in paths if p):
        for name, path in zip(names, paths):
            del sys.modules[name]
            _IMPORTED.pop(path or "", None)


def _remember(module_name: str, base_dir: str | None) -> None:
    top = _workflow_package(module_name, base_dir)
    for name in _modules_of(top) if top else ():
        path = getattr(sys.modules[name], "__file__", None)
        if path and path not in _IMPORTED and (stamp := _stamp(path)) is not None:
            _IMPORTED[path] = stamp


def _who(component: str | None, ref: str) -> str:
    return f"component {component!r}: class {ref!r}" if component else f"class {ref!r}"


def _short(err: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(err), err)).strip().splitlines()[-1]


def load_class(ref: str, base_dir: str | None = None, *, component: str | None = None,
               kind: Literal["spout", "bolt"] | None = None) -> type:
    """Import "module:Class" (the class part may be dotted) with `base_dir` first on sys.path.

    With `kind`, the class must subclass recovery.Spout (kind "spout") or recovery.Bolt
    (kind "bolt"); without it, either. Raises ClassLoadError (a WorkflowError) naming the
    component (when given) and the ref.
    """
    who = _who(component, ref)
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise ClassLoadError(f'{who}: expected "package.module:ClassName"', component, ref)
    with _on_sys_path(base_dir):
        _forget_shadowed(module_name, base_dir)
        _forget_changed(module_name, base_dir)
        try:
            module = importlib.import_module(module_name)
            _remember(module_name, base_dir)
        except ModuleNotFoundError as err:
            if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
                where = f" (searched {os.path.abspath(base_dir)} first)" if base_dir else ""
                raise ClassLoadError(f"{who}: no module named {err.name!r}{where}",
                                     component, ref) from None
            raise ClassLoadError(f"{who}: importing {module_name!r} failed: {_short(err)}",
                                 component, ref) from None
        except BaseException as err:   # a module can raise anything (SystemExit too)
            if isinstance(err, KeyboardInterrupt):
                raise
            raise ClassLoadError(f"{who}: importing {module_name!r} failed: {_short(err)}",
                                 component, ref) from None
    obj: object = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = getattr(module, "__file__", None) or module_name
            raise ClassLoadError(f"{who}: module {module_name!r} ({where}) has no "
                                 f"{attr_path!r}", component, ref) from None
    if not isinstance(obj, type):
        raise ClassLoadError(f"{who}: {attr_path!r} is a {type(obj).__name__}, not a class",
                             component, ref)
    want: tuple[type, ...] = {"spout": (Spout,), "bolt": (Bolt,)}.get(kind or "", (Spout, Bolt))
    if not issubclass(obj, want):
        if kind == "spout" and issubclass(obj, Bolt):
            why = "is a Bolt, but the component is a <spout>"
        elif kind == "bolt" and issubclass(obj, Spout):
            why = "is a Spout, but the component is a <bolt>"
        else:
            names = " or ".join(f"recovery.{w.__name__}" for w in want)
            why = f"is not a subclass of {names}"
        raise ClassLoadError(f"{who} {why}", component, ref)
    return obj


def component_class(wf: Workflow, component: Component | str) -> type:
    """The class of a component implemented by class= (load_class with the workflow's code
    folder: its shipped copy in a cluster's task, else base_dir; the component's id and kind)."""
    c = wf.component(component) if isinstance(component, str) else component
    if not isinstance(c.impl, ClassImpl):
        raise ClassLoadError(f"component {c.id!r} is not implemented by a class", c.id, None)
    return load_class(c.impl.ref, wf.code_folder, component=c.id, kind=c.kind)


def class_errors(wf: Workflow) -> list[ClassLoadError]:
    """One error per component whose class does not load (each naming its component); [] when
    all do."""
    problems = []
    for c in wf.components:
        if isinstance(c.impl, ClassImpl):
            try:
                component_class(wf, c)
            except ClassLoadError as err:
                problems.append(err)
    return problems


def check_classes(wf: Workflow) -> list[str]:
    """One message per component whose class does not load; [] when all do."""
    return [err.message for err in class_errors(wf)]
