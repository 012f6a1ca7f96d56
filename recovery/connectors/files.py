"""The file source (`<source type="file">`), read by the spout's Spark tasks (never by the
driver); the failed-tuple queue source is in queue.py.

A source is a generator over a TaskRunner: it calls `runner.spout_record(...)` per record and
yields now and then so the runner can hand finished chunks to Spark while the source is still read.
"""
from __future__ import annotations

import functools
import glob
import json
import os
from collections.abc import Iterator

from recovery.connectors.runner import SourceRunner
from recovery.model.workflow import SourceImpl


def resolve(path: str, base_dir: str | None) -> str:
    return path if os.path.isabs(path) or not base_dir else os.path.join(base_dir, path)


def source_files(impl: SourceImpl, base_dir: str | None) -> list[str]:
    """The files of a file source: a file, a folder (its files, sorted) or a glob."""
    path = resolve(impl.param("path") or "", base_dir)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if not f.startswith((".", "_")) and os.path.isfile(os.path.join(path, f)))
    elif any(ch in path for ch in "*?["):
        files = sorted(glob.glob(path))
    else:
        files = [path]
    return files


def _split_lines(path: str, index: int, tasks: int) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of the lines that *start* in this task's byte range, as Hadoop splits
    text: every line goes to exactly one task, whatever the number of tasks."""
    size = os.path.getsize(path)
    start, end = size * index // tasks, size * (index + 1) // tasks
    with open(path, "rb") as fh:
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
    n = 0
    for file_no, path in enumerate(files):
        name = os.path.basename(path)
        for offset, raw in _split_lines(path, runner.index, comp.parallelism):
            if not raw.strip():
                continue
            runner.spout_record((name, offset), functools.partial(decode, raw), raw, stream_id, fmt)
            n += 1
            if n % 1024 == 0:
                yield None
    yield None
