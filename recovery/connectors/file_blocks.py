"""The text file source, a block of lines at a time, for a source whose every subscriber is a
batch component (runtime.modes.reads_in_batches): the same records as
connectors.files.file_source, read with numpy and emitted as Arrow columns."""
from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from recovery.connectors import files
from recovery.connectors.runner import BatchSourceRunner
from recovery.model.workflow import SourceImpl
from recovery.tracking import ids

READ_BYTES = 1 << 22   # the batched file source reads this much at a time
_BLANK = np.zeros(256, dtype=bool)
_BLANK[list(b" \t\n\r\x0b\x0c")] = True   # what bytes.strip() strips


def line_blocks(path: str | files.SourceFile, index: int, tasks: int,
                max_lines: int) -> Iterator[tuple[np.ndarray, Any]]:
    """The lines of task `index` of `tasks` (those that start in its byte range, as
    connectors.files splits a file) that are not blank, in blocks of at most `max_lines`: (their
    byte offsets as uint64, the lines as a pyarrow binary array, line ends included). Newlines
    are found with numpy over reads of READ_BYTES, not a readline per line."""
    import pyarrow as pa
    source = files.source_file(path)
    size = source.size()
    start, end = size * index // tasks, size * (index + 1) // tasks
    with source.open() as fh:
        pos = start
        if start > 0:   # a line begun before the range belongs to the task before
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                pos = start + len(fh.readline())
        fh.seek(pos)
        carry = b""   # the start of a line the previous read cut
        while pos < end:
            data = fh.read(READ_BYTES)
            buf = carry + data
            arr = np.frombuffer(buf, dtype=np.uint8)
            ends = np.flatnonzero(arr == 10) + 1
            if not data and len(buf) and (not len(ends) or ends[-1] != len(buf)):
                ends = np.r_[ends, len(buf)]   # the file's last line, without a newline
            starts = np.r_[0, ends[:-1]].astype(np.int64) if len(ends) else np.zeros(0, dtype=np.int64)
            inside = int(np.searchsorted(pos + starts, end))   # lines that start in the range
            starts, stops = starts[:inside], ends[:inside]
            # a line whose first byte is not blank is not blank; the others (rare), by bytes.strip
            nonblank = ~_BLANK[arr[starts]]
            for i in np.flatnonzero(~nonblank).tolist():
                nonblank[i] = bool(buf[starts[i]:stops[i]].strip())
            keep = np.flatnonzero(nonblank)
            for lo in range(0, len(keep), max_lines):
                sel = keep[lo:lo + max_lines]
                lengths = stops[sel] - starts[sel]
                offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
                if len(sel) == sel[-1] - sel[0] + 1:   # contiguous lines: a slice of the read
                    data_buf = pa.py_buffer(buf)[int(starts[sel[0]]):int(stops[sel[-1]])]
                else:
                    pieces = zip(starts[sel].tolist(), stops[sel].tolist())
                    data_buf = pa.py_buffer(b"".join(buf[a:b] for a, b in pieces))
                raw = pa.BinaryArray.from_buffers(pa.binary(), len(sel), [None, pa.py_buffer(offsets), data_buf])
                yield (pos + starts[sel]).astype(np.uint64), raw
            if not data or inside < len(ends):
                return
            done = int(ends[-1]) if len(ends) else 0
            carry, pos = buf[done:], pos + done


def file_source_blocks(runner: BatchSourceRunner) -> Iterator[None]:
    """connectors.files.file_source, a block of lines at a time: the same root ids (from the
    same (file, offset) message ids), tuple ids, routes and ledger contributions, with the
    lines sent to the batch consumers as Arrow chunks. A block with a line that is not UTF-8
    goes through file_source's own path (spout_record), so that line fails alone as there."""
    import pyarrow as pa
    import pyarrow.compute as pc
    comp = runner.comp
    impl = comp.impl
    assert isinstance(impl, SourceImpl)   # the engine runs a source only for a <source>
    stream = comp.streams[0]
    field = stream.fields[0] if stream.fields else "_0"
    decode = files.decoder("text", stream.fields)
    for source in files.source_files(impl, runner.wf.base_dir):
        name = source.name
        for offsets, raw in line_blocks(source, runner.index, comp.parallelism, runner.batch_size):
            hashes = ids.position_hashes(name, offsets)
            chosen = runner.select_roots(hashes)
            if chosen is not None:   # root replay: only the failed roots' lines
                if not chosen.any():
                    continue
                hashes, offsets, raw = hashes[chosen], offsets[chosen], raw.filter(pa.array(chosen))
            try:
                text = pc.utf8_rtrim(pc.cast(raw, pa.string()), characters="\r\n")
            except pa.ArrowInvalid:   # a line that is not UTF-8: the row path fails it alone
                for offset, line in zip(offsets.tolist(), raw.to_pylist()):
                    runner.spout_record((name, offset), functools.partial(decode, line), line, stream.id, "text")
                yield None
                continue
            runner.emit_roots(hashes, pa.RecordBatch.from_arrays([text], names=[field]), stream.id)
            yield None
