"""The spill store: a task's in-flight output, kept out of Redis (docs/protocol.md).

A tracked task writes its output chunks, as it produces them, into a file of its own, under its
final name from the start: the name carries a token unique to the attempt, so a Spark retry or a
speculative attempt never writes into another attempt's file. At its commit the file is finished
(its end marker written, closed), and the commit transaction stores the file's reference
(`SpillRef`: its path inside the run's folder, size, chunk count, CRC-32) next to the task's done
marker in Redis. That reference, not a rename, is what makes a file count: the commit renames
nothing, so it holds the same on a filesystem without an atomic rename (S3, where a move is a copy
then a delete) as on a local folder. A committed task that runs again reads its file back instead
of executing. A file that nothing references (an attempt that died before its commit, whole or
half written) is never read: it goes with its round's folder, or the run's.

    <location>/<run id>/r<round>/<component>/<index>-<token>.spill

A file is the magic bytes, frames (a u32 length, then a zstandard-compressed msgpack list of
[routing key, blob] pairs), then an end marker (u32 0xFFFFFFFF, u64 chunk count, u32 CRC-32 of
every byte before the marker). A file that ends before its end marker is truncated; one whose
size, count or CRC differ from its reference, or that does not decode, is corrupt: reading it
raises SpillError naming the file and the task.

The location is a local folder (folders 0700, files 0600: they hold tuple values) or a
filesystem URI that `pyarrow.fs.FileSystem.from_uri` opens (file://, hdfs://, s3://); by
default RECOVERY_HOME/spill. On a cluster it must be a place the driver and every executor
reach (`recovery.spill.dir`, or `--spill-dir`). An S3 URI takes pyarrow's options in its query
(`s3://bucket/prefix?endpoint_override=http://host:9000&region=us-east-1&scheme=http`), kept
whole in the run record and given to every task; credentials come from the environment of the
driver and the executors (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Messages show a location
with the secrets of its query and user info masked (`redact`). On an object store an object is
visible only once its upload completes (at the commit's close): an attempt that died while
writing leaves an incomplete multipart upload, which no listing shows and the bucket's
AbortIncompleteMultipartUpload lifecycle rule removes.
"""
from __future__ import annotations

import logging
import os
import re
import secrets
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import msgpack
import zstandard

from recovery import home
from recovery.errors import RecoveryError, SpillError
from recovery.model.record import RunRecord
from recovery.tracking.spill_files import (  # noqa: F401 (redact & co. are used as spill.redact)
    MASK,
    Files,
    error_text,
    location_secrets,
    open_location,
    redact,
    redact_text,
    secrets_of,
)

log = logging.getLogger(__name__)

MAGIC = b"RCSPILL1"
END = 0xFFFFFFFF
_LEN = struct.Struct(">I")
_TAIL = struct.Struct(">QI")
FRAME_BYTES = 256 * 1024        # raw bytes buffered before a frame is compressed and written
ZSTD_LEVEL = 1                  # the success path pays for it: the fastest level
SUFFIX = ".spill"


# --- where ------------------------------------------------------------------------------------
def default_location() -> str:
    """RECOVERY_HOME/spill (absolute: tasks must not resolve it against their own cwd)."""
    return str(home.state_home() / "spill")


def location(explicit: str | None = None, configured: str | None = None) -> str:
    """The spill location a run uses: `--spill-dir`, else `recovery.spill.dir`, else the default;
    a plain folder is made absolute (the driver decides it once, for every task)."""
    chosen = (explicit or "").strip() or (configured or "").strip() or default_location()
    if "://" in chosen:
        return chosen
    return str(Path(chosen).expanduser().absolute())


def run_location(rec: RunRecord | None) -> str:
    """Where a run's spill files are: its record's location, else its workflow's
    recovery.spill.dir, else the default (a record from before the spill store, or none)."""
    if rec is None:
        return location()
    if rec.spill_dir:
        return rec.spill_dir
    try:
        configured = rec.original_workflow().settings().spill_dir
    except (KeyError, ValueError) as err:   # a damaged record: the default location
        log.info("run %s: no workflow in its record (%s); its spill files are looked for at the "
                 "default location", rec.run_id, err)
        configured = None
    return location(None, configured)


def check_reaches_executors(explicit: str | None, configured: str | None, master: str) -> None:
    """With a master that is not local, the spill location must be one every executor reaches:
    the default one, under RECOVERY_HOME on the driver's disk, is not. Refused in one line."""
    if master.startswith("local") or master == "in-process":   # (recovery.testing's: tasks in this process)
        return
    chosen = (explicit or "").strip() or (configured or "").strip()
    if not chosen or chosen == default_location():   # (a run's record names its default location)
        raise RecoveryError(f"master {master} runs tasks on other hosts, which do not reach the spill folder "
                            "under RECOVERY_HOME on this one: give --spill-dir (or the property "
                            "recovery.spill.dir) a folder every executor mounts, or a URI (s3://, hdfs://)")
    if "://" not in chosen and not os.path.isabs(os.path.expanduser(chosen)):
        raise RecoveryError(f"spill location {chosen!r} is relative to this host's current folder, which "
                            f"executors of master {master} do not reach: give an absolute path on storage "
                            "every executor mounts, or a URI (s3://, hdfs://)")


def safe_name(name: str) -> str:
    """A run id or component id as one path segment ("/", "..", spaces escaped)."""
    out = quote(name, safe="-_.")
    return "%2E" + out[1:] if out.startswith(".") else out or "%00"


def task_label(component: str, index: int, round_no: int) -> str:
    return f"{component}:{index}, round {round_no}"


# --- the reference a commit stores ------------------------------------------------------------
@dataclass(frozen=True)
class SpillRef:
    """A committed task's spill file: its path inside the run's folder, and what it must be."""
    path: str
    size: int
    chunks: int
    crc: int

    def pack(self) -> bytes:
        return msgpack.packb([self.path, self.size, self.chunks, self.crc])

    @classmethod
    def unpack(cls, raw: bytes) -> SpillRef:
        path, size, chunks, crc = msgpack.unpackb(raw)
        return cls(path, size, chunks, crc)


_stores: dict[str, SpillStore] = {}


class SpillStore:
    """The spill store at one location: where each run's files live."""

    def __init__(self, where: str):
        self.location = where              # whole: the run record keeps it, tasks open it
        self.shown = redact(where)         # in messages
        # and the environment's, should the store's client ever quote them
        self._secrets = location_secrets(where)
        try:
            self.files: Files = open_location(where, default=default_location())
        except (OSError, ValueError, ImportError) as err:   # pyarrow raises ArrowInvalid (a ValueError)
            raise SpillError(f"spill location {self.shown}: cannot open it: {self.why(err)}") from None

    @staticmethod
    def at(where: str | None) -> SpillStore:
        """The store at `where` (None: the default location), one per location per process."""
        key = where or default_location()
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = SpillStore(key)
        return store

    def why(self, err: BaseException) -> str:
        """An error of this location, fit for a message: its first line, credentials masked."""
        return error_text(err, self._secrets)

    def run_dir(self, run_id: str) -> str:
        return safe_name(run_id)

    def describe(self, run_id: str, rel: str = "") -> str:
        return self.files.describe(f"{self.run_dir(run_id)}/{rel}" if rel else self.run_dir(run_id))

    def ensure_run_dir(self, run_id: str) -> None:
        """The run's folder exists (the driver checks the location this way before a round:
        a location it cannot write is an error naming it, before anything runs)."""
        try:
            self.files.makedirs(self.run_dir(run_id))
        except (OSError, ValueError) as err:
            raise SpillError(f"spill location {self.shown}: cannot create {self.describe(run_id)}: "
                             f"{self.why(err)} (set --spill-dir or recovery.spill.dir)") from None

    def writer(self, run_id: str, round_no: int, component: str, index: int) -> SpillWriter:
        return SpillWriter(self, run_id, round_no, component, index)

    def read(self, run_id: str, ref: SpillRef, task: str) -> Iterator[tuple[tuple, bytes]]:
        return read(self, run_id, ref, task)

    def remove(self, run_id: str, refs: Iterable[SpillRef]) -> None:
        """Files whose consumers all committed (nothing can read them again)."""
        for ref in refs:
            self.files.remove(f"{self.run_dir(run_id)}/{ref.path}")

    def remove_round(self, run_id: str, round_no: int) -> None:
        """A settled round's folder, orphans of dead attempts included."""
        self.files.remove_tree(f"{self.run_dir(run_id)}/r{round_no}")

    def remove_run(self, run_id: str) -> None:
        """The run's whole folder (`recovery clear`)."""
        try:
            self.files.remove_tree(self.run_dir(run_id))
        except (OSError, ValueError) as err:
            raise SpillError(f"cannot remove spill folder {self.describe(run_id)}: {self.why(err)} "
                             "(remove it by hand)") from None

    def run_files(self, run_id: str) -> list[str]:
        """Every file under the run's folder, relative to the location (for tests and reports)."""
        return self.files.list_files(self.run_dir(run_id))


# --- writing ------------------------------------------------------------------------------------
class SpillWriter:
    """One attempt's output file, under its final name from the start: chunks buffered into
    frames and written as they come, then `close()` at the commit (end marker, reference) or
    `discard()`."""

    def __init__(self, store: SpillStore, run_id: str, round_no: int, component: str, index: int):
        self.store = store
        self.run_id = run_id
        self.task = task_label(component, index, round_no)
        folder = f"r{round_no}/{safe_name(component)}"
        name = f"{index}-{secrets.token_hex(8)}"
        self.rel_dir = f"{store.run_dir(run_id)}/{folder}"
        self.rel_path = f"{folder}/{name}{SUFFIX}"     # inside the run's folder: what the ref names
        self._file = f"{self.rel_dir}/{name}{SUFFIX}"  # inside the location
        self._fh: BinaryIO | None = None
        self._pending: list[list] = []
        self._pending_bytes = 0
        self._compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        # a failed write breaks the file for good: reported at close(), which fails the task (a
        # Spark retry writes a new file), never inside an emit, where it would fail a tuple
        self.error: SpillError | None = None
        self.chunks = 0
        self.size = 0
        self.crc = 0

    def _failed(self, what: str, path: str, err: BaseException) -> SpillError:
        return SpillError(f"cannot {what} spill file {self.store.files.describe(path)} of task "
                          f"{self.task} (run {self.run_id}): {self.store.why(err)}")

    def add(self, key: tuple, blob: bytes) -> None:
        if self.error is not None:
            return
        self._pending.append([list(key), blob])
        self._pending_bytes += len(blob)
        self.chunks += 1
        if self._pending_bytes >= FRAME_BYTES:
            self._flush()

    def _write(self, data: bytes) -> None:
        assert self._fh is not None
        self._fh.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        try:
            if self._fh is None:
                self.store.files.prepare(self.rel_dir)
                self._fh = self.store.files.create(self._file)
                self._write(MAGIC)
            frame = self._compressor.compress(msgpack.packb(self._pending))
            self._write(_LEN.pack(len(frame)) + frame)
        except (OSError, ValueError) as err:
            self.error = self._failed("write", self._file, err)
            # info, not warning: close() raises it, and the driver prints it (a warning in a
            # Spark worker, which has no logging set up, reached the terminal a second time)
            log.info("%s", self.error)
        self._pending = []
        self._pending_bytes = 0

    def close(self) -> SpillRef | None:
        """Finish the file (its end marker; on an object store the upload completes, and the
        object appears whole): its reference, or None when the task emitted nothing (no file).
        No rename: the commit that stores the reference is what makes the file count."""
        if not self.chunks:
            return None
        self._flush()
        if self.error is not None:
            raise self.error
        checksum = self.crc   # of every byte before the end marker
        try:
            self._write(_LEN.pack(END) + _TAIL.pack(self.chunks, checksum))
            assert self._fh is not None
            self._fh.close()
            self._fh = None
        except (OSError, ValueError) as err:
            raise self._failed("finish", self._file, err) from None
        return SpillRef(self.rel_path, self.size, self.chunks, checksum)

    def discard(self) -> None:
        """Nothing will reference this attempt's file (its run was cleared): remove it, and the
        folders it leaves empty, so a cleared run keeps no file."""
        try:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            self.store.files.remove(self._file)
            self.store.files.remove_empty_dirs(self.rel_dir)
        except (OSError, ValueError) as err:   # best effort: `clear` removes the folder anyway
            log.info("spill file of task %s (run %s) not removed: %s", self.task, self.run_id, self.store.why(err))


# --- reading ------------------------------------------------------------------------------------
def _bad(store: SpillStore, run_id: str, ref: SpillRef, task: str, what: str) -> SpillError:
    where = store.files.describe(f"{store.run_dir(run_id)}/{ref.path}")
    return SpillError(f"spill file {where} of task {task} (run {run_id}) is {what}; put it back, "
                      f"then `recovery recover {run_id}` resumes the run")


def check_file(store: SpillStore, run_id: str, ref: SpillRef, task: str) -> None:
    """The file there at the size its commit recorded, or SpillError as `read` raises it. What a
    driver checks of every file a resumed round will read, before Spark starts (a file changed
    in place is found by `read`'s checksum)."""
    rel = f"{store.run_dir(run_id)}/{ref.path}"
    try:
        size = store.files.size(rel)
    except FileNotFoundError:
        raise _bad(store, run_id, ref, task, "missing") from None
    except (OSError, ValueError) as err:
        raise _bad(store, run_id, ref, task, f"unreadable ({store.why(err)})") from None
    if size < ref.size:
        raise _bad(store, run_id, ref, task, f"truncated ({size} of {ref.size} bytes)")
    if size > ref.size:
        raise _bad(store, run_id, ref, task, f"corrupt ({size} bytes, its commit recorded {ref.size})")


def read(store: SpillStore, run_id: str, ref: SpillRef, task: str) -> Iterator[tuple[tuple, bytes]]:
    """A committed task's output chunks, in the order it wrote them. SpillError (one line naming
    the file and the task) when the file is missing, truncated or corrupt; records read before
    a fault is found were already yielded, but the task fails, so Spark keeps none of them."""
    rel = f"{store.run_dir(run_id)}/{ref.path}"

    def bad(what: str) -> SpillError:
        return _bad(store, run_id, ref, task, what)

    check_file(store, run_id, ref, task)
    try:
        fh = store.files.open(rel)
    except FileNotFoundError:
        raise bad("missing") from None
    except (OSError, ValueError) as err:
        raise bad(f"unreadable ({store.why(err)})") from None
    decompressor = zstandard.ZstdDecompressor()
    crc, chunks = 0, 0
    with fh:
        def take(n: int) -> bytes:
            nonlocal crc
            data = fh.read(n)
            if len(data) < n:
                raise bad("truncated (it ends before its end marker)")
            crc = zlib.crc32(data, crc)
            return data

        if take(len(MAGIC)) != MAGIC:
            raise bad("corrupt (not a spill file)")
        while True:
            head = fh.read(_LEN.size)
            if len(head) < _LEN.size:
                raise bad("truncated (it ends before its end marker)")
            (n,) = _LEN.unpack(head)
            if n == END:   # its CRC covers every byte before the marker
                tail = fh.read(_TAIL.size)
                if len(tail) < _TAIL.size:
                    raise bad("truncated (its end marker is cut)")
                count, checksum = _TAIL.unpack(tail)
                if count != chunks or chunks != ref.chunks or checksum != crc or crc != ref.crc:
                    raise bad("corrupt (its chunk count or checksum does not match)")
                if fh.read(1):
                    raise bad("corrupt (bytes after its end marker)")
                return
            crc = zlib.crc32(head, crc)
            frame = take(n)
            try:
                pairs = msgpack.unpackb(decompressor.decompress(frame))
            except (zstandard.ZstdError, ValueError, TypeError) as err:
                raise bad(f"corrupt (undecodable: {error_text(err)})") from None
            for key, blob in pairs:
                chunks += 1
                yield tuple(key), blob


def error_line(text: str) -> str | None:
    """The SpillError message inside a Spark failure's text (a Python worker's traceback), or
    None: the driver shows that one line."""
    found = re.findall(r"SpillError: (.+)", text)
    return found[-1].strip() if found else None
