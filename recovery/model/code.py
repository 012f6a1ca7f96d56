"""The workflow's code as it ships with its job: which files of the workflow's folder the
executors need, a digest of them, and a zip of them.

Shipped, as paths relative to the workflow's folder (`Workflow.base_dir`):
- for each `class="module.sub:Class"`, the top-level module or package (`module.py`, or the
  folder `module/` with everything in it) when it is in the workflow's folder (a class of an
  installed package ships nothing: the executors' Python has it);
- for each shell component's `script`, the folder the script is in, with everything in it
  (Storm's `resources/`: the script and what it imports, storm.py say); a script directly in
  the workflow's folder ships with the files beside it that share its suffix;
- each `<resources><include path="..."/>` (a file, or a folder with everything in it);
minus every file an `<exclude pattern="..."/>` glob matches (its relative path or its name),
Python's caches (`__pycache__`, `*.pyc`) and version-control folders. Data files are not
shipped unless included: sources and sinks on a cluster read and write shared storage.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from recovery.errors import WorkflowError
from recovery.model.workflow import ClassImpl, ShellImpl, Workflow

NEVER_SHIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})
NEVER_SHIPPED_SUFFIXES = (".pyc", ".pyo")
# a zip's entries carry this time, not the files': equal code makes equal zips
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class CodeBundle:
    """What a workflow ships: its files (relative, sorted), their digest, the archive's name
    (the folder the executors unpack it into) and, once packed, the zip's path."""
    base_dir: str
    files: tuple[str, ...]
    digest: str
    path: str | None = None

    @property
    def name(self) -> str:
        return f"recovery-code-{self.digest[:16]}"


def _walk(root: Path, rel: PurePosixPath) -> list[str]:
    """Every file under `root / rel` (or `rel` itself when it is a file), relative, in order."""
    full = root / rel
    if full.is_file():
        return [rel.as_posix()]
    out: list[str] = []
    for folder, dirs, names in os.walk(full):
        dirs[:] = sorted(d for d in dirs if d not in NEVER_SHIPPED_DIRS)
        here = PurePosixPath(Path(folder).relative_to(root).as_posix())
        out.extend((here / n).as_posix() for n in sorted(names))
    return out


def _class_roots(wf: Workflow, root: Path) -> list[PurePosixPath]:
    out = []
    for c in wf.components:
        if isinstance(c.impl, ClassImpl):
            top = c.impl.ref.partition(":")[0].split(".")[0]
            if (root / top).is_dir():
                out.append(PurePosixPath(top))
            elif (root / f"{top}.py").is_file():
                out.append(PurePosixPath(f"{top}.py"))
    return out


def _script_files(impl: ShellImpl, root: Path) -> list[str]:
    script = impl.script
    if not script or script.startswith("-") or os.path.isabs(script):
        return []
    rel = PurePosixPath(Path(os.path.normpath(script)).as_posix())
    if rel.parts and rel.parts[0] == "..":
        return []
    if len(rel.parts) > 1:
        return _walk(root, rel.parent)
    suffix = rel.suffix
    beside = [n for n in sorted(os.listdir(root)) if suffix and n.endswith(suffix) and (root / n).is_file()]
    return sorted({rel.as_posix(), *beside}) if (root / rel).exists() else []


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    if rel.endswith(NEVER_SHIPPED_SUFFIXES):
        return True
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def code_files(wf: Workflow) -> tuple[str, ...]:
    """The files the workflow ships (module doc), relative to its folder, sorted; () without a
    folder (a workflow built in code)."""
    if not wf.base_dir:
        return ()
    root = Path(wf.base_dir)
    files: set[str] = set()
    for top in _class_roots(wf, root):
        files.update(_walk(root, top))
    for c in wf.components:
        if isinstance(c.impl, ShellImpl):
            files.update(_script_files(c.impl, root))
    for include in wf.resources.include:
        if not (root / include).exists():
            raise WorkflowError(f"<resources>: <include path={include!r}> does not exist in {root}")
        files.update(_walk(root, PurePosixPath(include)))
    return tuple(sorted(f for f in files if not _excluded(f, wf.resources.exclude)))


def digest(base_dir: str, files: tuple[str, ...]) -> str:
    """sha256 over each file's relative path and contents, in order: the same code, the same
    digest, wherever the folder is."""
    h = hashlib.sha256()
    for rel in files:
        data = (Path(base_dir) / rel).read_bytes()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def bundle(wf: Workflow) -> CodeBundle:
    """The workflow's code, not yet packed: its files and their digest."""
    files = code_files(wf)
    return CodeBundle(wf.base_dir or "", files, digest(wf.base_dir or "", files))


def pack(code: CodeBundle, folder: str | os.PathLike[str]) -> CodeBundle:
    """`code` zipped into `folder` as `<name>.zip` (written once: its name is its digest's)."""
    target = Path(folder) / f"{code.name}.zip"
    if not target.exists():
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for rel in code.files:
                source = Path(code.base_dir) / rel
                info = zipfile.ZipInfo(rel, _ZIP_TIME)
                info.external_attr = (source.stat().st_mode & 0o777 | 0o444) << 16   # keeps x bits
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, source.read_bytes())
        os.replace(partial, target)
    return CodeBundle(code.base_dir, code.files, code.digest, str(target))
