"""The file systems the spill store writes to (recovery/tracking/spill.py says what it stores):
a local folder with private modes, or any filesystem pyarrow.fs opens. Neither renames.

A location is a local path, a `file://` URI (a local path too), or any other URI that
`pyarrow.fs.FileSystem.from_uri` opens (s3://, gs://, hdfs://), its options in its query
(`?endpoint_override=…&region=…`) and its credentials in the environment, as pyarrow reads
them. The file sinks and the file source open their URIs here too (`open_location`), and
show them as the spill store does: user info and credential parameters masked (`redact`)."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlparse

from recovery import home

DIR_MODE = home.PRIVATE_DIR_MODE
FILE_MODE = home.PRIVATE_FILE_MODE
READ_BUFFER = 1 << 20          # bytes read ahead on a URI location (an S3 read is a GET)


# --- how a location is shown ------------------------------------------------------------------
# the query parameters that hold credentials (pyarrow's access_key, secret_key, session_token;
# any other store's password or token); on an object store the user info is an access key and
# its secret (`s3://KEY:SECRET@bucket/`): all of it is masked
_SECRET_PARAM = re.compile(r"(^|[?&])([^=&]*(?:key|secret|token|password|credential)[^=&]*)=([^&#\s]*)", re.I)
_USER_INFO = re.compile(r"^([a-z][a-z0-9+.-]*://)([^/@?#\s]*)@", re.I)
_URI_USER_INFO = re.compile(r"\b([a-z][a-z0-9+.-]*://)([^/@?#\s]*)@", re.I)
MASK = "***"
ENV_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def redact(where: str) -> str:
    """A location as messages show it: its user info and the values of its query's credentials
    masked, anything else as given."""
    if "://" not in where:
        return where
    where = _USER_INFO.sub(rf"\1{MASK}@", where)
    head, sep, query = where.partition("?")
    return head + sep + _SECRET_PARAM.sub(rf"\1\2={MASK}", query) if sep else head


def secrets_of(where: str) -> list[str]:
    """The literal credentials in a location (as written and percent-decoded), to scrub from
    messages that quote them outside a URI (an error of the store's client)."""
    found: list[str] = []
    user = _USER_INFO.match(where)
    if user:
        found += [part for part in user.group(2).split(":") if part]
    if "?" in where:
        found += [m.group(3) for m in _SECRET_PARAM.finditer(where.split("?", 1)[1]) if m.group(3)]
    found += [unquote(f) for f in found]
    return sorted({f for f in found if len(f) >= 3}, key=len, reverse=True)


def redact_text(text: str, hidden: Iterable[str] = ()) -> str:
    """Free text (an error's message) with every URI's user info and credential parameters
    masked as `redact` masks them, and any of `hidden` wherever it appears."""
    for secret in hidden:
        text = text.replace(secret, MASK)
    text = _URI_USER_INFO.sub(rf"\1{MASK}@", text)
    return _SECRET_PARAM.sub(rf"\1\2={MASK}", text)



def location_secrets(where: str) -> list[str]:
    """The credentials `redact_text` hides in a location's errors: those the location holds,
    and the environment's, should the store's client ever quote them."""
    return secrets_of(where) + [v for v in map(os.environ.get, ENV_SECRETS) if v and len(v) >= 3]


def error_text(err: BaseException, hidden: Iterable[str] = ()) -> str:
    """An error's first line, any credential it quotes (pyarrow may quote the URI) masked."""
    return redact_text((getattr(err, "strerror", None) or str(err) or type(err).__name__).splitlines()[0], hidden)


def bare_uri(where: str) -> str:
    """A URI without what only reaches the store: its query (options) and its user info
    (credentials); how a file of the location is named in messages."""
    return _USER_INFO.sub(r"\1", where.split("?", 1)[0].split("#", 1)[0].rstrip("/"))


def local_path(where: str) -> str | None:
    """The local path a location names (a plain path, or a `file://` URI of this host), or None
    for a location only pyarrow.fs opens."""
    if "://" not in where:
        return where
    parsed = urlparse(where)
    return unquote(parsed.path) if parsed.scheme == "file" and parsed.netloc in ("", "localhost") else None


def open_location(where: str, default: str | None = None) -> Files:
    """The files at a location: a local folder (`default`: the spill store's own, kept private
    as RECOVERY_HOME is), or the filesystem pyarrow.fs opens for the URI. Raises OSError,
    ValueError (pyarrow's ArrowInvalid) or ImportError."""
    path = local_path(where)
    if path is not None:
        return LocalFiles(Path(path), is_default=str(Path(path)) == default)
    return ArrowFiles(where, bare_uri(where))



class LocalFiles:
    """A local (or mounted, shared) folder: private modes (folders 0700, files 0600)."""

    def __init__(self, root: Path, is_default: bool = False):
        self.root = root
        self.is_default = is_default   # RECOVERY_HOME/spill: kept private as the home is

    def describe(self, rel: str) -> str:
        return str(self.root / rel)

    def prepare(self, rel: str) -> None:
        """The folder a file is about to be written in exists."""
        self.makedirs(rel)

    def makedirs(self, rel: str) -> None:
        if self.is_default:
            # RECOVERY_HOME and its spill folder private, as the embedded server makes them
            if not self.root.is_dir():
                home.ensure_home()
                os.makedirs(self.root, mode=DIR_MODE, exist_ok=True)
            if stat.S_IMODE(self.root.stat().st_mode) != DIR_MODE:   # a umask's, or an earlier version's
                os.chmod(self.root, DIR_MODE)
        elif not self.root.is_dir():
            # a location given may be a shared folder of someone's: made if missing, never chmodded
            os.makedirs(self.root, mode=DIR_MODE, exist_ok=True)
        # the folders made inside a location given take its own modes: a shared folder opened to
        # the executors' user or group (a cluster's workers may run as another user than the
        # driver) stays open to them, a private one stays private; the setgid bit is kept
        mode = DIR_MODE if self.is_default else stat.S_IMODE(self.root.stat().st_mode) & 0o2777
        path = self.root
        for part in Path(rel).parts:
            path = path / part
            try:
                os.mkdir(path, mode)
            except FileExistsError:
                continue
            st = os.stat(path)   # made under a umask that cut group/other bits
            if stat.S_IMODE(st.st_mode) != mode:
                os.chmod(path, mode)

    def create(self, rel: str) -> BinaryIO:
        fd = os.open(self.root / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
            return os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise

    def open(self, rel: str) -> BinaryIO:
        return open(self.root / rel, "rb")   # noqa: SIM115 (the reader closes it)

    def size(self, rel: str) -> int:
        return os.stat(self.root / rel).st_size

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / rel)

    def remove_tree(self, rel: str) -> None:
        shutil.rmtree(self.root / rel, ignore_errors=False, onerror=missing_is_fine)

    def remove_empty_dirs(self, rel: str) -> None:
        path = self.root / rel
        while path != self.root:
            try:
                os.rmdir(path)
            except OSError:
                return
            path = path.parent

    def list_files(self, rel: str) -> list[str]:
        base = self.root / rel
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file()) \
            if base.is_dir() else []


def missing_is_fine(func: Any, path: str, exc_info: Any) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


class ArrowFiles:
    """Any filesystem pyarrow.fs opens (hdfs://, s3://, gs://, ...). Nothing here renames: an
    object store has none (S3's move is a copy, then a delete). On an object store there are no
    folders either: an object's key is its whole path, written without making its parents
    first, and a "folder" is a key prefix (pyarrow keeps empty-marker objects for the ones it
    made, and `delete_dir` removes every object under the prefix)."""

    def __init__(self, uri: str, shown: str):
        from pyarrow import fs as pafs  # lazy: only a URI location needs pyarrow here
        self._pafs = pafs
        self.fs, base = pafs.FileSystem.from_uri(uri)
        self.base = base.rstrip("/")
        self.shown = shown   # the URI as messages show it (no options, no credentials)
        self.object_store = self.fs.type_name in ("s3", "gcs")

    def _p(self, rel: str) -> str:
        return f"{self.base}/{rel}" if self.base else rel

    def describe(self, rel: str) -> str:
        return f"{self.shown}/{rel}"

    def _type(self, rel: str) -> Any:
        return self.fs.get_file_info(self._p(rel)).type

    def prepare(self, rel: str) -> None:
        if not self.object_store:   # (on S3 a marker object per level: requests for nothing)
            self.makedirs(rel)

    def makedirs(self, rel: str) -> None:
        self.fs.create_dir(self._p(rel), recursive=True)

    def create(self, rel: str) -> BinaryIO:
        return cast(BinaryIO, self.fs.open_output_stream(self._p(rel), compression=None))

    def open(self, rel: str) -> BinaryIO:
        # buffered: the reader takes a frame's length, then the frame (on S3 each read a GET)
        return cast(BinaryIO, self.fs.open_input_stream(self._p(rel), compression=None,
                                                        buffer_size=READ_BUFFER))

    def size(self, rel: str) -> int:
        info = self.fs.get_file_info(self._p(rel))
        if info.type != self._pafs.FileType.File:
            raise FileNotFoundError(self.describe(rel))
        return int(info.size or 0)

    def remove(self, rel: str) -> None:
        if self._type(rel) == self._pafs.FileType.File:
            self.fs.delete_file(self._p(rel))

    def remove_tree(self, rel: str) -> None:
        if self._type(rel) == self._pafs.FileType.Directory:
            self.fs.delete_dir(self._p(rel))

    def remove_empty_dirs(self, rel: str) -> None:
        """`rel` and its parents up to the location, while empty (on S3: a prefix that holds
        only pyarrow's marker object, which deleting a folder's last file leaves behind)."""
        parts = rel.split("/")
        while parts:
            path = self._p("/".join(parts))
            if self.fs.get_file_info(path).type != self._pafs.FileType.Directory \
                    or self.fs.get_file_info(self._pafs.FileSelector(path)):
                return
            self.fs.delete_dir(path)
            parts.pop()

    def list_files(self, rel: str) -> list[str]:
        base = self._p(rel)
        if self.fs.get_file_info(base).type != self._pafs.FileType.Directory:
            return []
        sel = self._pafs.FileSelector(base, recursive=True)
        prefix = f"{self.base}/" if self.base else ""
        return sorted(i.path[len(prefix):] for i in self.fs.get_file_info(sel)
                      if i.type == self._pafs.FileType.File)


Files = LocalFiles | ArrowFiles
