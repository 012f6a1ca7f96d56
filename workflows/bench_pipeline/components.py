"""Components of workflows/bench_pipeline.xml: purchase events parsed, enriched from a
(deterministic, in-memory) catalog, counted per region and category in keyed state, and
formatted for the sink.

The aggregate emits the running count per key, so the sink's contents as a multiset do not
depend on the order tuples arrive in: a recovered run can be compared record for record with
a failure-free one (as workflows/wordcount's counts are).
"""
from __future__ import annotations

import zlib

from recovery import BasicBolt, Bolt, Tuple

REGIONS = ["north", "south", "east", "west", "centre", "islands", "coast", "mountains"]
CATEGORIES = ["books", "music", "video", "games", "garden", "kitchen", "toys", "sports",
              "tools", "beauty", "grocery", "office"]


def parse_event(line: str) -> list:
    """event_id,ts,user,item,qty,price -> [event_id, ts, user, item, qty, price]."""
    parts = line.strip().split(",")
    if len(parts) != 6:
        raise ValueError(f"expected 6 comma-separated fields, got {len(parts)}: {line[:80]!r}")
    event_id, ts, user, item, qty, price = parts
    if not user.startswith("u") or not item.startswith("i"):
        raise ValueError(f"bad user or item in {line[:80]!r}")
    return [int(event_id), int(ts), user, item, int(qty), float(price)]


def region_of(user: str) -> str:
    return REGIONS[zlib.crc32(user.encode()) % len(REGIONS)]


def category_of(item: str) -> str:
    return CATEGORIES[int(item[1:]) * 7 % len(CATEGORIES)]


class ParseEvent(BasicBolt):
    """line -> event_id ts user item qty price (a malformed line raises and fails here)."""

    def process(self, tup: Tuple) -> None:
        self.emit(parse_event(tup["line"]))


class Enrich(BasicBolt):
    """Looks up the user's region and the item's category; computes the amount."""

    def process(self, tup: Tuple) -> None:
        user, item = tup["user"], tup["item"]
        amount = round(tup["qty"] * tup["price"], 2)
        self.emit([tup["event_id"], region_of(user), category_of(item), amount])


class CountByKey(Bolt):
    """Events per (region, category), kept in keyed state; emits [region, category, n], the
    running count, anchored to each input (explicit anchoring and ack, as IRichBolt)."""

    def process(self, tup: Tuple) -> None:
        region, category = tup["region"], tup["category"]
        key = f"{region}/{category}"
        n = (self.state.get(key) or 0) + 1
        self.state.put(key, n)
        self.emit([region, category, n], anchors=[tup])
        self.ack(tup)


class Format(BasicBolt):
    """[region, category, n] -> [key, n, label] for the sink."""

    def process(self, tup: Tuple) -> None:
        key = f"{tup['region']}/{tup['category']}"
        n = tup["n"]
        self.emit([key, n, f"{key}#{n:07d}{' milestone' if n % 1000 == 0 else ''}"])


class PassThrough(BasicBolt):
    """Emits its input's values unchanged, anchored to it: the identity stage of
    workflows/bench_chain.xml (bench/framework_cost.py), so that what a chain of them costs is
    the framework's cost alone."""

    def process(self, tup: Tuple) -> None:
        self.emit(tup.values)
