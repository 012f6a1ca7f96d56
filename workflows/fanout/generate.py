"""Deterministic input for workflows/fanout.xml: the integers 1..n, shuffled, one a line.

    cd workflows && python -m fanout.generate [--n 300] [--seed 1] [--out data/numbers.txt]
"""
from __future__ import annotations

import argparse
import os
import random

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "numbers.txt")


def numbers(n: int, seed: int = 1) -> list[int]:
    """1..n in a seeded order (distinct, so each number's two halves pair up exactly once)."""
    out = list(range(1, n + 1))
    random.Random(seed).shuffle(out)
    return out


def generate(path: str = DEFAULT_OUT, n: int = 300, seed: int = 1) -> int:
    """Write the numbers to path; returns n."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(f"{k}\n" for k in numbers(n, seed))
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="how many numbers (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output file (default: %(default)s)")
    args = ap.parse_args(argv)
    generate(args.out, args.n, args.seed)
    print(f"wrote {args.n} numbers to {args.out}")


if __name__ == "__main__":
    main()
