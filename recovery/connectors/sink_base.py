"""What every built-in sink is: a bolt that streams its input into what the task's attempt owns
(a staged file, an object, an open transaction, Delta data files), a bounded chunk at a time,
commits it once at the end of the input, then acks it (commit, then ack), and the errors a
sink's place (a folder, a table) raises. A tuple that fails in a sink is never counted as
written.

A sink task holds at most one chunk of its input (`CHUNK_RECORDS` tuples or `CHUNK_BYTES`
bytes, whichever comes first), never its partition: a written tuple leaves the task's
collector, and what its ack needs after the commit (its id and roots) is kept in compact
arrays (`Written`), what its failure needs (its values, for the queue) in a journal on local
disk (`Journal`), read back only when the part cannot be committed."""
from __future__ import annotations

import pickle
import tempfile
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from recovery.api.components import Bolt
from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import python_rows
from recovery.errors import RecoveryError
from recovery.model.graph import ComponentContext
from recovery.model.workflow import SinkImpl

# A chunk is written once it holds this many tuples or about this many bytes (their encodings').
CHUNK_RECORDS = 16_384
CHUNK_BYTES = 8 << 20
SIZE_SAMPLE = 16   # one tuple in this many is measured (approx_size) for the chunk's bytes


class SinkFolderError(RecoveryError):
    """A file sink's folder cannot take this run's output (names the sink and the folder)."""


class SinkTableError(RecoveryError):
    """A table sink's database or table cannot take this run's rows (names the sink and the
    table): refused on the driver before a run starts; raised by a sink task's write, it fails
    the task's part (its tuples are queued for `recover`)."""


def approx_size(value: Any) -> int:
    """About how many bytes `value` (an encoding, or a tuple's values) writes: its strings' and
    bytes' lengths, 8 a number, recursively. Cheap: it bounds a chunk, nothing more."""
    if isinstance(value, (bytes, bytearray, str)):
        return len(value) + 2
    if isinstance(value, dict):
        return sum(approx_size(k) + approx_size(v) for k, v in value.items()) + 2
    if isinstance(value, (list, tuple)):
        return sum(approx_size(v) for v in value) + 2
    return 8


class Written:
    """The ids and roots of the tuples a task wrote and has not acked yet, in compact arrays:
    about 20 bytes a tuple of one root, where a `Tuple` with its values costs hundreds."""

    __slots__ = ("ids", "counts", "roots")

    def __init__(self) -> None:
        self.ids = array("Q")
        self.counts = array("L")
        self.roots = array("Q")

    def add(self, tid: int, roots: tuple[int, ...]) -> None:
        self.ids.append(tid)
        self.counts.append(len(roots))
        self.roots.extend(roots)

    def add_tuples(self, tuples: list[Tuple]) -> None:
        self.ids.extend([t.id for t in tuples])
        self.counts.extend([len(t.roots) for t in tuples])
        self.roots.extend([r for t in tuples for r in t.roots])

    def __len__(self) -> int:
        return len(self.ids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, root offsets, roots): tuple i has roots roots[offsets[i]:offsets[i + 1]]."""
        counts = np.frombuffer(self.counts, dtype=np.dtype(f"u{self.counts.itemsize}")) if self.counts \
            else np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return (np.frombuffer(self.ids, dtype=np.uint64) if self.ids else np.zeros(0, dtype=np.uint64), offsets,
                np.frombuffer(self.roots, dtype=np.uint64) if self.roots else np.zeros(0, dtype=np.uint64))


class Journal:
    """What a sink task wrote and has not committed, pickled a chunk at a time into an unnamed
    temporary file (gone with the process): read back only when the part cannot be committed,
    to fail those tuples with their values (they go to the task's queue, as the sink's failed
    tuples always have). Nothing of it stays in memory."""

    def __init__(self) -> None:
        self._file: Any = None

    def add(self, piece: Any) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="recovery-sink-")   # noqa: SIM115 (open until close())
        pickle.dump(piece, self._file, protocol=pickle.HIGHEST_PROTOCOL)

    def pieces(self) -> Iterator[Any]:
        """What `add` was given, in order (our own file: nothing else can write it)."""
        if self._file is None:
            return
        self._file.flush()
        self._file.seek(0)
        while True:
            try:
                yield pickle.load(self._file)   # noqa: S301 (the task's own temporary file)
            except EOFError:
                return

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class StreamingSink(Bolt):
    """A built-in sink: encodes each tuple as it arrives (an unencodable tuple fails there,
    alone), writes a chunk of encodings at a time into the task's part (`write_chunk`, into what
    `open_part` opened for this attempt), and at the end of the input publishes the part once
    (`commit_part`), then acks every tuple it wrote from their ids and roots. A part that cannot
    be written or committed is dropped (`abort_part`: nothing of it is ever visible) and its
    tuples fail together with the error, as they always have.

    The batch path (runtime.batch.sink, when every input of the sink is a batch component)
    drives the same sink a chunk at a time: `encode_batch` encodes a record batch's rows as
    `encode` encodes each tuple, `add_chunk` queues such a chunk for the part, `commit` writes
    what is queued and publishes the part: the bytes the row path writes."""

    chunk_records = CHUNK_RECORDS
    chunk_bytes = CHUNK_BYTES

    def __init__(self, impl: SinkImpl, base_dir: str):
        self.impl = impl
        self.base_dir = base_dir
        self.encoded: list[Any] = []          # the chunk being filled: encodings (row path)
        self.chunk_tuples: list[Tuple] = []   # ... and their tuples, until it is written
        self.queued: list[Any] = []           # chunks of the batch path, not written yet
        self.queued_rows = 0
        self.size = 0                         # bytes of the chunk being filled (approx_size)
        self.written = Written()
        self.journal = Journal()
        self.held: list[Tuple] = []           # a collector that cannot take tuples back: held here
        self.part: Any = None                 # what this attempt writes into (open_part)
        # a chunk's write raised: the part is dropped, and every tuple of it fails at the end
        self.broken: BaseException | None = None

    context: ComponentContext   # (set by bind, before prepare)

    # -- the row path -------------------------------------------------------------------------
    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            return
        encoded = self.encode(tup)   # an unencodable tuple fails here, alone
        self.encoded.append(encoded)
        if not len(self.encoded) % SIZE_SAMPLE:   # the chunk's bytes, estimated from a sample
            self.size += SIZE_SAMPLE * self.size_of(encoded)
        # the task's collector takes written tuples off its hands; another (a test harness's)
        # keeps them, and they are held here until the commit acks them (looked up each time:
        # the runtime may bind the sink to another collector between tuples)
        detach = getattr(self._collector, "detach", None)
        if detach is not None:   # the task's collector holds it no more: its id and roots will do
            detach(tup)
            self.chunk_tuples.append(tup)
        else:
            self.held.append(tup)
        if len(self.encoded) >= self.chunk_records or self.size >= self.chunk_bytes:
            self._write_encoded()

    def encode(self, tup: Tuple) -> Any:
        return tup.as_dict() if tup.fields else {"values": tup.values}

    def size_of(self, encoded: Any) -> int:
        """About the bytes of one encoding (it bounds a chunk)."""
        return approx_size(encoded)

    def _write_encoded(self) -> None:
        if not self.encoded:
            return
        chunk = self.chunk_of(self.encoded)
        self.encoded, self.size = [], 0
        self._write(chunk)
        tuples = self.chunk_tuples
        if tuples:
            self.written.add_tuples(tuples)
            self.journal.add([(t.id, t.component, t.stream, t.task, t.values, t.fields, t.roots, t.source_task,
                               t.attempt) for t in tuples])
            self.chunk_tuples = []

    def finish(self) -> None:
        """The end of the input: the last chunk written, the part committed, then every tuple
        written acked (from their ids and roots); or, when any of it raises, the part dropped
        and its tuples handed back to the collector to fail with the error."""
        try:
            self._write_encoded()
            self._commit()
        except BaseException:
            self._give_back()
            raise
        finally:
            self.journal.close()
        ack_many = getattr(self._collector, "ack_many", None)
        if len(self.written) and ack_many is not None:
            ack_many(*self.written.arrays())
        self.written = Written()
        for tup in self.held:
            self.ack(tup)
        self.held = []

    def _give_back(self) -> None:
        """The tuples written but not committed, back in the collector's hands (it fails them)."""
        attach = getattr(self._collector, "attach", None)
        if attach is not None:
            for piece in self.journal.pieces():
                for rec in piece:
                    attach(Tuple(*rec))
            for tup in self.chunk_tuples:
                attach(tup)
        self.chunk_tuples, self.encoded, self.written = [], [], Written()

    # -- the part -------------------------------------------------------------------------------
    def _write(self, chunk: Any) -> None:
        """One chunk into the part. One that raises drops the part: the task's tuples all fail
        at its end, with that error (later chunks are not written)."""
        if self.broken is not None:
            return
        try:
            if self.part is None:
                self.part = self.open_part(chunk)
            self.write_chunk(self.part, chunk)
        except Exception as err:   # broad-except: what a write raises fails the part, at its end
            self.broken = err
            self._abort()

    def _commit(self) -> None:
        """Publish the part (nothing to publish when no tuple was written)."""
        if self.broken is not None:
            raise self.broken
        if self.part is None:
            return
        try:
            self.commit_part(self.part)
        except BaseException:
            self._abort()
            raise
        self.part = None

    def _abort(self) -> None:
        part, self.part = self.part, None
        if part is not None:
            self.abort_part(part)

    def write(self, encoded: list[Any]) -> None:
        """Write `encoded` (encodings of tuples, as `encode` returns them) as one whole part."""
        if encoded:
            self._write(self.chunk_of(encoded))
            self._commit()

    def open_part(self, chunk: Any) -> Any:
        """Open what this attempt writes its part into (called with the part's first chunk)."""
        raise NotImplementedError

    def write_chunk(self, part: Any, chunk: Any) -> None:
        """Write one chunk (`chunk_of`'s, or the batch path's) into the part."""
        raise NotImplementedError

    def commit_part(self, part: Any) -> None:
        """Make the part visible, once, after checking the task's fence (the commit)."""
        raise NotImplementedError

    def abort_part(self, part: Any) -> None:
        """Drop what the attempt wrote (best effort: nothing of it was visible)."""

    # -- the batch path ---------------------------------------------------------------------
    def encode_batch(self, batch: Any, fields: tuple[str, ...]) -> tuple[Any, dict[int, BaseException]]:
        """(a chunk of the encodings of `batch`'s rows that encode, {row: the exception `encode`
        raises for it}). `batch` holds one tuple a row, its columns the tuples' values, `fields`
        their names. This default encodes row by row, as `process` does."""
        encoded: list[Any] = []
        errors: dict[int, BaseException] = {}
        for i, values in enumerate(python_rows(batch)):
            try:
                encoded.append(self.encode(Tuple(0, "", "default", 0, values, fields, ())))
            except Exception as err:   # broad-except: whatever encode raises fails that row alone, as in process
                errors[i] = err
        return self.chunk_of(encoded), errors

    def chunk_of(self, encoded: list[Any]) -> Any:
        """A chunk of row encodings (what `encode` returned) for `write_chunk`."""
        return encoded

    def merged(self, chunks: list[Any]) -> Any:
        """One chunk of the rows of `chunks`, in order."""
        return [e for chunk in chunks for e in chunk]

    def chunk_size(self, chunk: Any) -> int:
        """About the bytes of a chunk."""
        if isinstance(chunk, (bytes, bytearray)):
            return len(chunk)
        nbytes = getattr(chunk, "nbytes", None)
        return int(nbytes) if nbytes is not None else sum(self.size_of(e) for e in chunk)

    def add_chunk(self, chunk: Any, rows: int) -> None:
        """Queue a chunk of `rows` rows for the part; written once the queue is a chunk's worth."""
        self.queued.append(chunk)
        self.queued_rows += rows
        self.size += self.chunk_size(chunk)
        if self.queued_rows >= self.chunk_records or self.size >= self.chunk_bytes:
            self._write_queued()

    def _write_queued(self) -> None:
        if not self.queued:
            return
        chunk = self.merged(self.queued)
        self.queued, self.queued_rows, self.size = [], 0, 0
        self._write(chunk)

    def commit(self) -> None:
        """The batch path's end: what is queued written, the part committed (or dropped, raising)."""
        try:
            self._write_queued()
        finally:
            self.queued, self.queued_rows, self.size = [], 0, 0
        self._commit()

    def write_chunks(self, chunks: list[Any]) -> None:
        """`chunks` (of the batch path) written and committed as one whole part."""
        self.queued.extend(chunks)
        self.commit()

    def cleanup(self) -> None:
        self.journal.close()
        self._abort()


# The name the sink registry and older callers use.
BufferedSink = StreamingSink
