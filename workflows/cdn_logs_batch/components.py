"""Components of workflows/cdn_logs_batch.xml: cdn_logs's split, normalize and aggregate as
BatchBolts, vectorized with pyarrow.compute, emitting exactly the records of cdn_logs's row
bolts (cdn_logs.components) for the same input.

Rows the vectorized path does not vouch for (a line the regular expression does not match, a
status outside 100..599, a number too long for int64) go through the row functions, which
decide their values or their error; so a failing row fails alone, at its position, with the
row bolt's message (fail_rows), and the rest of the batch flows on.
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cdn_logs.components import TIME_FORMAT, normalize, parse_line

from recovery import BatchBolt

# cdn_logs.components.LINE with the url split by cdn_logs.components.URL, in RE2's syntax (named
# groups as (?P<...>) work in both); rows it does not match are parsed by parse_line
LINE = (r'^(?P<clientip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] '
        r'"(?P<method>[A-Z]+) (?:[a-zA-Z]+://)?(?P<host>[^/\s]+)(?P<path>/\S*)? (?P<protocol>[A-Z]+)/'
        r'(?P<version>[0-9.]+)" (?P<code>\d+) (?P<size>\d+) (?P<dltime>[0-9.]+)$')
SPLIT_FIELDS = ["clientip", "time", "method", "host", "path", "protocol", "protocol-version", "code",
                "size", "dltime"]
GROUPS = ["clientip", "time", "method", "host", "path", "protocol", "version", "code", "size", "dltime"]


def _error(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


class SplitLogBatch(BatchBolt):
    """line -> the ten fields of cdn_logs's SplitLog, a batch at a time."""

    def process_batch(self, batch: pa.RecordBatch) -> None:
        lines = batch.column("line")
        parts = pc.extract_regex(pc.utf8_trim_whitespace(lines), LINE)
        matched = pc.is_valid(parts)
        columns = [pc.struct_field(parts, g) for g in GROUPS]
        path = columns[4]
        columns[4] = pc.if_else(pc.equal(path, ""), "/", path)   # an absent group is ""
        if pc.all(matched).as_py():
            self.emit_batch(pa.RecordBatch.from_arrays(columns, names=SPLIT_FIELDS))
            return
        ok = np.flatnonzero(matched.to_numpy(zero_copy_only=False))
        rest = np.flatnonzero(~matched.to_numpy(zero_copy_only=False))
        out = pa.RecordBatch.from_arrays(columns, names=SPLIT_FIELDS).take(pa.array(ok))
        self.emit_batch(out, anchors=ok)
        bad_rows, errors, rows, anchors = [], [], [], []
        for i, line in zip(rest.tolist(), pc.take(lines, pa.array(rest)).to_pylist()):
            try:
                rows.append(parse_line(line))
                anchors.append(i)
            except ValueError as err:
                bad_rows.append(i)
                errors.append(_error(err))
        if rows:
            self.emit_batch(pa.RecordBatch.from_pylist([dict(zip(SPLIT_FIELDS, r)) for r in rows]),
                            anchors=anchors)
        self.fail_rows(bad_rows, errors)


def _minutes(times: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(minute string or null, error or null) per row: datetime.strptime per distinct time (a
    log's seconds repeat), exactly cdn_logs's normalize."""
    encoded = pc.dictionary_encode(times).combine_chunks() if isinstance(times, pa.ChunkedArray) \
        else pc.dictionary_encode(times)
    minutes, errors = [], []
    for t in encoded.dictionary.to_pylist():
        try:
            minutes.append(datetime.strptime(t, TIME_FORMAT).strftime("%Y-%m-%dT%H:%M%z"))
            errors.append(None)
        except ValueError as err:
            minutes.append(None)
            errors.append(_error(err))
    return (pc.take(pa.array(minutes, pa.string()), encoded.indices),
            pc.take(pa.array(errors, pa.string()), encoded.indices))


class NormalizeLogBatch(BatchBolt):
    """cdn_logs's NormalizeLog, a batch at a time: [key host minute code bytes dltime]."""

    def process_batch(self, batch: pa.RecordBatch) -> None:
        try:
            status = pc.cast(batch.column("code"), pa.int64())
            size = pc.cast(batch.column("size"), pa.int64())
            dltime = pc.cast(batch.column("dltime"), pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            self._row_by_row(batch)   # a value Arrow does not parse as Python would: rows decide
            return
        valid = pc.and_(pc.greater_equal(status, 100), pc.less_equal(status, 599))
        minute, time_error = _minutes(batch.column("time"))
        ok = pc.and_(valid, pc.is_null(time_error))
        host = pc.list_element(pc.split_pattern(pc.utf8_lower(batch.column("host")), ":", max_splits=1), 0)
        key = pc.binary_join_element_wise(host, minute, " ")
        out = pa.RecordBatch.from_arrays([key, host, minute, status, size, dltime],
                                         names=["key", "host", "minute", "code", "bytes", "dltime"])
        if pc.all(ok).as_py():
            self.emit_batch(out)
            return
        keep = np.flatnonzero(ok.to_numpy(zero_copy_only=False))
        self.emit_batch(out.take(pa.array(keep)), anchors=keep)
        bad = np.flatnonzero(~ok.to_numpy(zero_copy_only=False)).tolist()
        errors = []
        for i in bad:   # the row function's own error (status first, as it checks)
            try:
                normalize(*(batch.column(f)[i].as_py() for f in ("host", "time", "code", "size", "dltime")))
                errors.append("normalize accepted a row the batch refused")   # not expected
            except ValueError as err:
                errors.append(_error(err))
        self.fail_rows(bad, errors)

    def _row_by_row(self, batch: pa.RecordBatch) -> None:
        rows, anchors, bad, errors = [], [], [], []
        for i, r in enumerate(batch.to_pylist()):
            try:
                rows.append(normalize(r["host"], r["time"], r["code"], r["size"], r["dltime"]))
                anchors.append(i)
            except ValueError as err:
                bad.append(i)
                errors.append(_error(err))
        if rows:
            names = ["key", "host", "minute", "code", "bytes", "dltime"]
            self.emit_batch(pa.RecordBatch.from_pylist([dict(zip(names, r)) for r in rows]), anchors=anchors)
        self.fail_rows(bad, errors)


class AggregateLogBatch(BatchBolt):
    """cdn_logs's AggregateLog, a batch at a time: requests and bytes per key in keyed state
    (one get and put per distinct key of the batch, by a grouped aggregate), and per input its
    share [key, 1, bytes]."""

    def process_batch(self, batch: pa.RecordBatch) -> None:
        table = pa.Table.from_batches([batch.select(["key", "bytes"])])
        per_key = table.group_by("key").aggregate([("bytes", "sum"), ("bytes", "count")])
        for key, total, count in zip(per_key.column("key").to_pylist(), per_key.column("bytes_sum").to_pylist(),
                                     per_key.column("bytes_count").to_pylist()):
            requests, so_far = self.state.get(key) or (0, 0)
            self.state.put(key, [requests + count, so_far + total])
        ones = pa.array(np.ones(batch.num_rows, dtype=np.int64))
        self.emit_batch(pa.RecordBatch.from_arrays([batch.column("key"), ones, batch.column("bytes")],
                                                   names=["key", "requests", "bytes"]))
