"""Components of workflows/cdn_logs.xml: parse, validate and aggregate CDN access logs.

A log line (the generator's format, close to a CDN's combined log):

    61.135.2.17 - - [22/Nov/2026:10:15:32 +0800] "GET http://img.example.com/a/b.jpg HTTP/1.1" 200 5123 0.034

Unlike the bolts of the stalled topology in docs/references.md, which skipped a bad record
without acking it (so it timed out and was replayed for ever), these raise: the tuple fails
where it is, the rest goes on.
"""
from __future__ import annotations

import re
from datetime import datetime

from recovery import BasicBolt, Bolt, Tuple

LINE = re.compile(
    r'^(?P<clientip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] '
    r'"(?P<method>[A-Z]+) (?P<url>\S+) (?P<protocol>[A-Z]+)/(?P<version>[0-9.]+)" '
    r'(?P<code>\d+) (?P<size>\d+) (?P<dltime>[0-9.]+)$')
URL = re.compile(r"^(?:[a-z]+://)?(?P<host>[^/\s]+)(?P<path>/\S*)?$", re.IGNORECASE)
TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"


def parse_line(line: str) -> list[str]:
    """The ten fields of that topology's split bolt; ValueError when the line does not parse."""
    m = LINE.match(line.strip())
    url = URL.match(m["url"]) if m else None
    if m is None or url is None:
        shown = line if len(line) <= 80 else line[:77] + "..."
        raise ValueError(f"unparsable log line: {shown!r}")
    return [m["clientip"], m["time"], m["method"], url["host"], url["path"] or "/",
            m["protocol"], m["version"], m["code"], m["size"], m["dltime"]]


def normalize(host: str, time: str, code: str, size: str, dltime: str) -> list:
    """[key, host, minute, code, bytes, dltime]; ValueError for an invalid record (status
    code 0, as in that topology, or any code outside 100..599)."""
    status = int(code)
    if status == 0:
        raise ValueError("invalid log: status code 0")
    if not 100 <= status <= 599:
        raise ValueError(f"invalid log: status code {status}")
    host = host.lower().split(":", 1)[0]
    minute = datetime.strptime(time, TIME_FORMAT).strftime("%Y-%m-%dT%H:%M%z")
    return [f"{host} {minute}", host, minute, status, int(size), float(dltime)]


class SplitLog(BasicBolt):
    """line -> clientip time method host path protocol protocol-version code size dltime."""

    def process(self, tup: Tuple) -> None:
        self.emit(parse_line(tup["line"]))


class NormalizeLog(BasicBolt):
    """Validates and normalizes a parsed line; the key is host + minute."""

    def process(self, tup: Tuple) -> None:
        self.emit(normalize(tup["host"], tup["time"], tup["code"], tup["size"],
                            tup["dltime"]))


class AggregateLog(Bolt):
    """Requests and bytes per key (host and minute), kept in keyed state: the final aggregates,
    exact after any recovery, since each request is added once. Emits, anchored to each
    input, that request's share [key, 1, bytes]: a record that depends on its input alone,
    so after a recovery the sink holds exactly the records of a failure-free run, and their
    sums per key are the aggregates. (A running aggregate [key, requests so far, bytes so
    far] would not be: which requests came before a recovered one depends on arrival order.)"""

    def process(self, tup: Tuple) -> None:
        key, size = tup["key"], tup["bytes"]
        requests, total = self.state.get(key) or (0, 0)
        self.state.put(key, [requests + 1, total + size])
        self.emit([key, 1, size], anchors=[tup])
        self.ack(tup)
