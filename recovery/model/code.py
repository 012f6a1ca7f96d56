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
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from recovery.errors import WorkflowError
from recovery.model.workflow import ClassImpl, ShellImpl, Workflow

NEVER_SHIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})
NEVER_SHIPPED_SUFFIXES = (".pyc", ".pyo")
# a zip's entries carry this time, not the files': equal code makes equal zips
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_CHUNK = 1 << 20
ARCHIVE_PREFIX = "recovery-code-"
# the zip holds the workflow's code (and whatever <include> adds): its owner's alone
ARCHIVE_MODE = 0o600


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
        return f"{ARCHIVE_PREFIX}{self.digest[:16]}"


class _Walk:
    """Finds the files that ship under the workflow's folder `root`, refusing a link whose target
    lies outside it (it would ship what it points to: a key, a password file). A link inside the
    folder ships as what it points to; a folder linked twice on one path (a loop) is walked once."""

    def __init__(self, root: Path, patterns: tuple[str, ...]):
        self.root = root
        self.real_root = os.path.realpath(root)
        self.patterns = patterns

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root.rstrip(os.sep) + os.sep)

    def _check_link(self, rel: PurePosixPath) -> None:
        full = self.root / rel
        if not os.path.islink(full):
            return
        target = os.readlink(full)
        if not self._inside(os.path.realpath(full)):
            raise WorkflowError(
                f"<resources>: {rel.as_posix()} is a link to {target}, outside the workflow's folder "
                f"{self.root}: it would ship what it points to; copy what the job needs into the folder, "
                f'or leave the link out with <exclude pattern="{rel.as_posix()}"/>')
        if not full.exists():
            raise WorkflowError(f"<resources>: {rel.as_posix()} is a link to {target}, which does not exist")

    def _check_path(self, rel: PurePosixPath) -> None:
        """`rel` and each folder on the way to it: no link out of the workflow's folder."""
        for depth in range(1, len(rel.parts) + 1):
            self._check_link(PurePosixPath(*rel.parts[:depth]))

    def _left_out(self, rel: PurePosixPath, is_dir: bool) -> bool:
        name = rel.name
        if is_dir:
            return name in NEVER_SHIPPED_DIRS or any(
                fnmatch.fnmatchcase(rel.as_posix(), p) or fnmatch.fnmatchcase(name, p) for p in self.patterns)
        return _excluded(rel.as_posix(), self.patterns)

    def file(self, rel: PurePosixPath) -> list[str]:
        """`rel` when it ships: a regular file (or a link to one inside the folder) not excluded."""
        if self._left_out(rel, False):
            return []
        self._check_path(rel)
        full = self.root / rel
        if full.is_file():
            return [rel.as_posix()]
        if full.exists() and not full.is_dir():
            raise WorkflowError(f"<resources>: {rel.as_posix()} is not a regular file (a pipe, socket or "
                                f'device does not ship); leave it out with <exclude pattern="{rel.as_posix()}"/>')
        return []

    def __call__(self, rel: PurePosixPath) -> list[str]:
        """Every file that ships under `rel` (or `rel` itself when it is a file), relative, in order."""
        full = self.root / rel
        if not full.is_dir():
            return self.file(rel)
        if rel.parts and self._left_out(rel, True):
            return []
        self._check_path(rel)
        out: list[str] = []
        self._folder(rel, frozenset({os.path.realpath(full)}), out)
        return out

    def _folder(self, rel: PurePosixPath, on_path: frozenset[str], out: list[str]) -> None:
        for name in sorted(os.listdir(self.root / rel)):
            child = rel / name
            full = self.root / child
            if full.is_dir():
                if self._left_out(child, True):
                    continue
                self._check_link(child)
                real = os.path.realpath(full)
                if real not in on_path:     # (a link to a folder above it: walked once)
                    self._folder(child, on_path | {real}, out)
            else:
                out.extend(self.file(child))


def _class_roots(wf: Workflow, root: Path) -> list[PurePosixPath]:
    out = []
    for c in wf.components:
        if isinstance(c.impl, ClassImpl):
            top = c.impl.ref.partition(":")[0].split(".")[0]
            if (root / top).is_dir() or os.path.islink(root / top):
                out.append(PurePosixPath(top))
            elif (root / f"{top}.py").is_file() or os.path.islink(root / f"{top}.py"):
                out.append(PurePosixPath(f"{top}.py"))
    return out


def _script_files(impl: ShellImpl, root: Path, walk: _Walk) -> list[str]:
    script = impl.script
    if not script or script.startswith("-") or os.path.isabs(script):
        return []
    rel = PurePosixPath(Path(os.path.normpath(script)).as_posix())
    if rel.parts and rel.parts[0] == "..":
        return []
    if len(rel.parts) > 1:
        return walk(rel.parent)
    if not ((root / rel).exists() or os.path.islink(root / rel)):
        return []
    suffix = rel.suffix
    beside = [n for n in sorted(os.listdir(root)) if suffix and n.endswith(suffix) and not (root / n).is_dir()]
    return sorted({*walk.file(rel), *(f for n in beside for f in walk.file(PurePosixPath(n)))})


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    if rel.endswith(NEVER_SHIPPED_SUFFIXES):
        return True
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def code_files(wf: Workflow) -> tuple[str, ...]:
    """The files the workflow ships (module doc), relative to its folder, sorted; () without a
    folder (a workflow built in code). WorkflowError for a link out of the folder."""
    if not wf.base_dir:
        return ()
    root = Path(wf.base_dir)
    walk = _Walk(root, wf.resources.exclude)
    files: set[str] = set()
    for top in _class_roots(wf, root):
        files.update(walk(top))
    for c in wf.components:
        if isinstance(c.impl, ShellImpl):
            files.update(_script_files(c.impl, root, walk))
    for include in wf.resources.include:
        walk._check_path(PurePosixPath(include))
        if not (root / include).exists():
            raise WorkflowError(f"<resources>: <include path={include!r}> does not exist in {root}")
        files.update(walk(PurePosixPath(include)))
    return tuple(sorted(files))


def _size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check(wf: Workflow, file: str | None = None) -> tuple[str, ...]:
    """The files the workflow ships (`code_files`), refused when they add up to more than
    recovery.ship.max.bytes: a WorkflowError (naming `file`, the workflow file, when given) that
    names the largest ones. Sizes only: nothing is read."""
    try:
        files = code_files(wf)
        cap = wf.settings().ship_max_bytes
        sizes = {rel: os.stat(Path(wf.base_dir or "") / rel).st_size for rel in files}
    except WorkflowError as err:
        raise WorkflowError(err.message, file or err.file, err.line) from None
    total = sum(sizes.values())
    if total > cap:
        largest = sorted(sizes, key=lambda rel: (-sizes[rel], rel))[:3]
        raise WorkflowError(
            f"<resources>: the workflow's code to ship is {_size_text(total)} in {len(files)} files, over "
            f"recovery.ship.max.bytes ({_size_text(cap)}); the largest: "
            + ", ".join(f"{rel} ({_size_text(sizes[rel])})" for rel in largest)
            + '; leave data out with <resources><exclude pattern="..."/> (sources and sinks read shared '
              "storage), or raise recovery.ship.max.bytes", file)
    return files


def digest(base_dir: str, files: tuple[str, ...]) -> str:
    """sha256 over each file's relative path, size and contents, in order: the same code, the
    same digest, wherever the folder is. Files are read in chunks, never whole."""
    h = hashlib.sha256()
    for rel in files:
        with open(Path(base_dir) / rel, "rb") as fh:
            h.update(rel.encode() + b"\0" + str(os.fstat(fh.fileno()).st_size).encode() + b"\0")
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def bundle(wf: Workflow, file: str | None = None) -> CodeBundle:
    """The workflow's code, not yet packed: its files (`check`ed) and their digest."""
    files = check(wf, file)
    return CodeBundle(wf.base_dir or "", files, digest(wf.base_dir or "", files))


def archive_name(code_digest: str) -> str:
    """The file name of the zip of the code whose digest is `code_digest` (see `pack`)."""
    return f"{CodeBundle('', (), code_digest).name}.zip"


def pack(code: CodeBundle, folder: str | os.PathLike[str]) -> CodeBundle:
    """`code` zipped into `folder` as `<name>.zip` (written once: its name is its digest's)."""
    target = Path(folder) / archive_name(code.digest)
    if target.exists():
        os.chmod(target, ARCHIVE_MODE)   # (one packed before archives were private)
    else:
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, ARCHIVE_MODE)
        os.fchmod(fd, ARCHIVE_MODE)   # whatever the umask
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for rel in code.files:
                with open(Path(code.base_dir) / rel, "rb") as source:
                    st = os.fstat(source.fileno())
                    info = zipfile.ZipInfo(rel, _ZIP_TIME)
                    info.external_attr = (st.st_mode & 0o777 | 0o444) << 16   # keeps x bits
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.file_size = st.st_size   # (decides whether the entry needs zip64)
                    with zf.open(info, "w") as entry:
                        shutil.copyfileobj(source, entry, _CHUNK)   # streamed: never a whole file in memory
        os.replace(partial, target)
    return CodeBundle(code.base_dir, code.files, code.digest, str(target))
