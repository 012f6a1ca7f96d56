"""Deterministic purchase events for workflows/bench_pipeline.xml, one CSV line each:

    event_id,ts,user,item,qty,price        e.g.  17,1795831220,u01234,i0456,2,19.99

    cd workflows && python -m bench_pipeline.generate [--n 1000] [--seed 7] [--out bench_pipeline/data/events.csv]
"""
from __future__ import annotations

import argparse
import os
import random

USERS = 20_000
ITEMS = 2_000
START_TS = 1_795_831_200          # 2026-11-22T00:00:00Z

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "events.csv")


def lines(n: int, seed: int = 7):
    """n event lines; the same n and seed always give the same lines (a generator)."""
    rng = random.Random(seed)
    ts = START_TS
    for i in range(n):
        ts += rng.randrange(3)
        qty = 1 + int(rng.expovariate(1.0))
        price = rng.randrange(99, 50_000) / 100
        yield f"{i},{ts},u{rng.randrange(USERS):05d},i{rng.randrange(ITEMS):04d},{qty},{price:.2f}"


def generate(path: str = DEFAULT_OUT, n: int = 1000, seed: int = 7) -> int:
    """Write n event lines to path; returns n."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for line in lines(n, seed):
            fh.write(line + "\n")
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of events (default 1000)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output file (default: %(default)s)")
    args = ap.parse_args(argv)
    generate(args.out, args.n, args.seed)
    print(f"wrote {args.n} events to {args.out}")


if __name__ == "__main__":
    main()
