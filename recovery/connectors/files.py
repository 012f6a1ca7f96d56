"""The file source (`<source type="file">`), read by the spout's Spark tasks (never by the
driver); the failed-tuple queue source is in queue.py.

A source is a generator over a TaskRunner: it calls `runner.spout_record(...)` per record and
yields now and then so the runner can hand finished chunks to Spark while the source is still read.

Its `path` is a file, a folder or a glob: a local path (relative to the workflow file), a
`file://` URI, or a URI pyarrow.fs opens (`s3://bucket/in/`, `hdfs://nn/in/*.txt`, `gs://…`),
opened as the spill store opens its location (recovery/tracking/spill_files.py).
"""
from __future__ import annotations

import fnmatch
import glob
import io
import json
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from recovery.connectors.runner import SourceRunner
from recovery.errors import WorkflowError
from recovery.model.workflow import FILE_SINK_TYPES, SINK_TYPES, SinkImpl, SourceImpl, Workflow, is_uri, resolve_path
from recovery.tracking.spill_files import READ_BUFFER, ArrowFiles, bare_uri, local_path


def resolve(path: str, base_dir: str | None) -> str:
    """A path of the workflow: relative against its folder; absolute paths and URIs as written."""
    return resolve_path(path, base_dir)


# the sources and sinks whose `path` the executors open (a file sink's defaults to "out")
PATH_SOURCES = ("file", "spark")
BLOCK = 1024   # lines a file source hands over at once (the task's collector, spout_block)
PATH_SINKS = tuple(name for name, t in SINK_TYPES.items() if "path" in t.required)


def check_paths_reach_executors(wf: Workflow, master: str, file: str | None = None) -> None:
    """At submit with a master that is not local: every source's and sink's path must be one
    that every executor reaches. A relative path resolves against the workflow's folder on
    the driver's disk, which other hosts do not have: refused, naming the component. An
    absolute path is taken as a shared mount (the same path on every host), a URI as the store
    it names."""
    if master.startswith("local") or master == "in-process":   # (recovery.testing's: tasks in this process)
        return
    for c in wf.with_dead_letter_sink().components:
        impl = c.impl
        if isinstance(impl, SourceImpl) and impl.type in PATH_SOURCES:
            path = impl.param("path")
            what = f"spout {c.id!r} ({impl.type} source)"
        elif isinstance(impl, SinkImpl) and impl.type in PATH_SINKS:
            path = impl.param("path") or ("out" if impl.type in FILE_SINK_TYPES else None)
            what = f"sink {c.id!r} ({impl.type})"
        else:
            continue
        if path and not is_uri(path) and not os.path.isabs(path):
            raise WorkflowError(f"{what}: path {path!r} is relative to the workflow's folder on this host, "
                                f"which executors of master {master} do not reach: give an absolute path on "
                                "storage every executor mounts, or a URI (s3://, hdfs://, gs://, file:///)", file,
                                component=c.id)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))   # as Spark and pyarrow.dataset skip them


@dataclass(frozen=True)
class SourceFile:
    """One file a file source reads: `path` on the local disk (`fs` None), or inside the
    pyarrow filesystem `fs`. Its base name is the file's part of its records' message ids."""
    path: str
    fs: Any = None
    shown: str = ""   # its URI as messages show it (no query, no credentials)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path) if self.fs is not None else os.path.basename(self.path)

    def size(self) -> int:
        if self.fs is None:
            return os.path.getsize(self.path)
        info = self.fs.get_file_info(self.path)
        if info.size is None:
            raise FileNotFoundError(f"{self.shown}: no such file")
        return int(info.size)

    def open(self) -> BinaryIO:
        """Seekable and buffered (on an object store each read is a ranged GET)."""
        if self.fs is None:
            return open(self.path, "rb")   # noqa: SIM115 (the reader closes it)
        return io.BufferedReader(self.fs.open_input_file(self.path), buffer_size=READ_BUFFER)


def source_file(where: str | SourceFile) -> SourceFile:
    """A file named by a local path or a URI."""
    if isinstance(where, SourceFile):
        return where
    path = local_path(where)
    if path is not None:
        return SourceFile(path)
    files = ArrowFiles(where, bare_uri(where))
    return SourceFile(files.base, files.fs, files.shown)


def source_files(impl: SourceImpl, base_dir: str | None) -> list[SourceFile]:
    """The files of a file source: a file, a folder (its files, sorted) or a glob."""
    where = resolve(impl.param("path") or "", base_dir)
    path = local_path(where)
    if path is None:
        return _uri_files(where)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if not _hidden(f) and os.path.isfile(os.path.join(path, f)))
    elif glob.has_magic(path):
        files = sorted(glob.glob(path))
    else:
        files = [path]
    return [SourceFile(f) for f in files]


def _uri_files(where: str) -> list[SourceFile]:
    """source_files of a URI: its file, its folder's files, or the files its glob matches
    (`*`, `?` and `[…]` within a segment, as glob does)."""
    from pyarrow import fs as pafs
    files = ArrowFiles(where, bare_uri(where))
    shown_root = files.shown[:len(files.shown) - len(files.base)] if files.shown.endswith(files.base) else ""

    def found(paths: list[str]) -> list[SourceFile]:
        return [SourceFile(p, files.fs, shown_root + p) for p in sorted(paths)]

    base, fs = files.base, files.fs
    if not glob.has_magic(base):
        if fs.get_file_info(base).type == pafs.FileType.Directory:
            listed = fs.get_file_info(pafs.FileSelector(base))
            return found([i.path for i in listed if i.type == pafs.FileType.File and not _hidden(i.base_name)])
        return found([base])
    parts = base.split("/")
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    top = "/".join(parts[:fixed])
    if fs.get_file_info(top).type != pafs.FileType.Directory:
        return []
    listed = fs.get_file_info(pafs.FileSelector(top, recursive=len(parts) - fixed > 1))
    return found([i.path for i in listed if i.type == pafs.FileType.File and _matches(i.path.split("/"), parts)])


def _matches(segments: list[str], pattern: list[str]) -> bool:
    return len(segments) == len(pattern) and all(fnmatch.fnmatchcase(s, p) for s, p in zip(segments, pattern))


def _split_lines(path: str | SourceFile, index: int, tasks: int) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of the lines that *start* in this task's byte range, as Hadoop splits
    text: every line goes to exactly one task, whatever the number of tasks."""
    source = source_file(path)
    size = source.size()
    start, end = size * index // tasks, size * (index + 1) // tasks
    with source.open() as fh:
        pos = start
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                skipped = fh.readline()
                pos = start + len(skipped)
            fh.seek(pos)
        while pos < end:
            line = fh.readline()
            if not line:
                break
            yield pos, line
            pos += len(line)


def decoder(fmt: str, fields: tuple[str, ...]):
    """raw line (bytes) -> values; raises on an undecodable record."""
    if fmt in ("text", ""):
        def decode_text(raw: bytes) -> list:
            return [raw.rstrip(b"\r\n").decode("utf-8")]
        return decode_text
    if fmt == "utf8":          # a kafka record's value, whole
        def decode_utf8(raw: bytes) -> list:
            return [bytes(raw).decode("utf-8")]
        return decode_utf8
    if fmt == "bytes":
        def decode_bytes(raw: bytes) -> list:
            return [bytes(raw)]
        return decode_bytes
    if fmt == "oversized":     # a kafka record over its source's max-bytes (only its first bytes kept)
        def refuse(raw: bytes) -> list:
            raise ValueError("the message was larger than its source's max-bytes (only its first "
                             f"{len(raw)} bytes were kept)")
        return refuse
    if fmt in ("jsonl", "json"):
        def decode_json(raw: bytes) -> list:
            obj = json.loads(raw.decode("utf-8"))
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            missing = [f for f in fields if f not in obj]
            if missing:
                raise KeyError(f"record has no field {missing[0]!r}")
            return [obj[f] for f in fields]
        return decode_json
    raise ValueError(f"unknown source format {fmt!r}")


def file_source(runner: SourceRunner) -> Iterator[None]:
    comp = runner.comp
    impl = comp.impl
    assert isinstance(impl, SourceImpl)   # the factory runs a source only for a <source>
    stream = comp.streams[0] if comp.streams else None
    stream_id = stream.id if stream else "default"
    fmt = impl.param("format", "text")
    decode = decoder(fmt, stream.fields if stream else ())
    files = source_files(impl, runner.wf.base_dir)
    for source in files:
        name = source.name
        offsets: list[int] = []
        raws: list[bytes] = []
        for offset, raw in _split_lines(source, runner.index, comp.parallelism):
            if not raw.strip():
                continue
            offsets.append(offset)
            raws.append(raw)
            if len(raws) == BLOCK:
                runner.spout_block(name, offsets, raws, decode, stream_id, fmt)
                offsets, raws = [], []
                yield None
        if raws:
            runner.spout_block(name, offsets, raws, decode, stream_id, fmt)
    yield None
