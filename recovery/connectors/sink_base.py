"""What every built-in sink is: a bolt that makes its input durable, then acks it (commit, then
ack), and the errors a sink's place (a folder, a table) raises. A tuple that fails in a sink is
never counted as written."""
from __future__ import annotations

from typing import Any

from recovery.api.components import Bolt
from recovery.api.tuples import Tuple
from recovery.connectors.arrow_encoding import python_rows
from recovery.errors import RecoveryError
from recovery.model.graph import TaskContext
from recovery.model.workflow import SinkImpl


class SinkFolderError(RecoveryError):
    """A file sink's folder cannot take this run's output (names the sink and the folder)."""


class SinkTableError(RecoveryError):
    """A table sink's database or table cannot take this run's rows (names the sink and the
    table): refused on the driver before a run starts; raised by a sink task's write, it fails
    the task's part (its tuples are queued for `recover`)."""


class BufferedSink(Bolt):
    """Buffers the task's tuples, writes them once at the end of the input, then acks them.

    The batch path (runtime.batch.sink, when every input of the sink is a batch component)
    drives the same sink a chunk at a time: `encode_batch` encodes a record batch's rows as
    `encode` encodes each tuple, `chunk_of` makes a chunk of row encodings, and `write_chunks`
    writes the task's chunks as one part, the bytes `write` would."""

    def __init__(self, impl: SinkImpl, base_dir: str):
        self.impl = impl
        self.base_dir = base_dir
        self.pending: list[Tuple] = []
        self.encoded: list[Any] = []

    context: TaskContext   # (set by bind, before prepare)

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            return
        self.encoded.append(self.encode(tup))   # an unencodable tuple fails here, alone
        self.pending.append(tup)

    def encode(self, tup: Tuple) -> Any:
        return tup.as_dict() if tup.fields else {"values": tup.values}

    def finish(self) -> None:
        if self.pending:
            self.write(self.encoded)
        for tup in self.pending:
            self.ack(tup)
        self.pending, self.encoded = [], []

    def write(self, encoded: list[Any]) -> None:
        """Make the task's encoded tuples durable (before they are acked)."""
        raise NotImplementedError

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
        """A chunk of row encodings (what `encode` returned) for `write_chunks`."""
        return encoded

    def write_chunks(self, chunks: list[Any]) -> None:
        """`write` of the rows of `chunks`, in order."""
        self.write([e for chunk in chunks for e in chunk])
