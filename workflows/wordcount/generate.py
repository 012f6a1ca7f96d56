"""Deterministic sentences for workflows/wordcount.xml.

    cd workflows && python -m wordcount.generate [--n 500] [--seed 1] [--out data/sentences.txt]
"""
from __future__ import annotations

import argparse
import os
import random

SUBJECTS = ["the cow", "a storm", "the spout", "my bolt", "every tuple", "the acker",
            "a little dog", "the old man", "four score", "the river", "snow white",
            "seven dwarfs", "an apple", "the moon"]
VERBS = ["jumped over", "ran past", "looked at", "emitted", "acked", "failed",
         "replayed", "counted", "followed", "sang to", "carried", "found"]
OBJECTS = ["the moon", "the fence", "seven years", "a tuple tree", "the spark", "the stream",
           "an old barn", "the queue", "nature", "the river", "a bolt", "the sea"]
ENDINGS = ["", " again", " at night", " and away", " twice", " for ever", " today"]

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "sentences.txt")


def sentences(n: int, seed: int = 1) -> list[str]:
    """n sentences; the same n and seed always give the same sentences."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        out.append(s + rng.choice(ENDINGS))
    return out


def generate(path: str = DEFAULT_OUT, n: int = 500, seed: int = 1) -> int:
    """Write n sentences to path (one per line); returns n."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for s in sentences(n, seed):
            fh.write(s + "\n")
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="number of sentences (default 500)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output file (default: %(default)s)")
    args = ap.parse_args(argv)
    generate(args.out, args.n, args.seed)
    print(f"wrote {args.n} sentences to {args.out}")


if __name__ == "__main__":
    main()
