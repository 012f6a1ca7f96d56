"""Deterministic CDN access-log lines for workflows/cdn_logs.xml, with a chosen fraction of
invalid ones: half of them do not parse (truncated or garbage), half have status code 0.
With --parquet, the same lines also as a Parquet dataset for workflows/cdn_logs_tables.xml:
a folder of part files (one column, `line`), the lines in order, split evenly over --parts.

    cd workflows && python -m cdn_logs.generate [--n 1000] [--seed 4] [--invalid 0.02] [--out data/cdn.log]
                                                [--parquet [data/cdn_logs.parquet]] [--parts 4]
"""
from __future__ import annotations

import argparse
import os
import random
from datetime import datetime, timedelta, timezone

HOSTS = ["img.example.com", "video.example.com", "static.example.net", "api.example.org",
         "dl.example.com"]
PATHS = ["/", "/index.html", "/static/app.js", "/static/app.css", "/img/logo.png",
         "/img/banner.jpg", "/v/clip-01.mp4", "/v/clip-02.mp4", "/api/v1/items",
         "/dl/setup.exe", "/favicon.ico"]
METHODS = ["GET"] * 12 + ["HEAD", "POST"]
CODES = [200] * 40 + [206] * 5 + [304] * 8 + [404] * 3 + [403, 500, 502]
START = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone(timedelta(hours=8)))

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
DEFAULT_OUT = os.path.join(DATA, "cdn.log")
DEFAULT_PARQUET = os.path.join(DATA, "cdn_logs.parquet")
PART = "part-{:05d}.parquet"


def _line(rng: random.Random, when: datetime, code: int | None = None) -> str:
    ip = f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    host, path = rng.choice(HOSTS), rng.choice(PATHS)
    code = rng.choice(CODES) if code is None else code
    size = 0 if code in (304, 0) else rng.randint(200, 2_000_000 if ".mp4" in path else 60_000)
    dltime = rng.randint(1, 4000) / 1000
    stamp = when.strftime("%d/%b/%Y:%H:%M:%S %z")
    return (f'{ip} - - [{stamp}] "{rng.choice(METHODS)} http://{host}{path} HTTP/1.1" '
            f"{code} {size} {dltime:.3f}")


def _garbage(rng: random.Random, when: datetime) -> str:
    kind = rng.randrange(3)
    if kind == 0:                                   # truncated in the middle of the request
        line = _line(rng, when)
        return line[:rng.randint(10, line.index('"') + 12)]
    if kind == 1:                                   # not a log line at all
        return "".join(rng.choice("abcdefghij#@!%&* ") for _ in range(rng.randint(5, 40)))
    line = _line(rng, when)                         # status is not a number
    return line.replace('" ', '" -', 1)


def lines(n: int, seed: int = 4, invalid: float = 0.02) -> list[str]:
    """n lines over about ten minutes; round(n * invalid) of them invalid (half unparsable,
    half status code 0), at seeded positions. Same arguments, same lines."""
    if not 0 <= invalid <= 1:
        raise ValueError("invalid must be a fraction between 0 and 1")
    rng = random.Random(seed)
    bad = round(n * invalid)
    bad_at = set(rng.sample(range(n), bad)) if bad else set()
    garbage_at = set(sorted(bad_at)[::2])
    out, when = [], START
    for i in range(n):
        when += timedelta(milliseconds=rng.randint(0, 1_200_000 // max(n, 1)))
        if i in garbage_at:
            out.append(_garbage(rng, when))
        elif i in bad_at:
            out.append(_line(rng, when, code=0))
        else:
            out.append(_line(rng, when))
    return out


def generate(path: str = DEFAULT_OUT, n: int = 1000, seed: int = 4,
             invalid: float = 0.02) -> int:
    """Write n log lines to path; returns how many of them are invalid."""
    data = lines(n, seed, invalid)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(line + "\n" for line in data)
    return round(n * invalid)


def generate_parquet(path: str = DEFAULT_PARQUET, n: int = 1000, seed: int = 4,
                     invalid: float = 0.02, parts: int = 4) -> int:
    """Write the same n lines as `generate`, in order, as a Parquet dataset: the folder `path`
    holding `parts` files part-00000.parquet, ... (a column `line`; the first files get one
    line more when n is not a multiple of parts), so that a spark source reads several
    partitions. Part files already there are replaced. Returns how many lines are invalid."""
    import pyarrow as pa  # only the Parquet dataset needs pyarrow
    import pyarrow.parquet as pq

    if parts < 1:
        raise ValueError("parts must be at least 1")
    data = lines(n, seed, invalid)
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):               # a previous dataset's parts, whatever their count
        if name.startswith("part-") and name.endswith(".parquet"):
            os.remove(os.path.join(path, name))
    size, extra = divmod(n, parts)
    start = 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        table = pa.table({"line": pa.array(data[start:end], pa.string())})
        pq.write_table(table, os.path.join(path, PART.format(i)))
        start = end
    return round(n * invalid)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of lines (default 1000)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--invalid", type=float, default=0.02,
                    help="fraction of invalid lines (default 0.02)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output file (default: %(default)s)")
    ap.add_argument("--parquet", nargs="?", const=DEFAULT_PARQUET, default=None, metavar="DIR",
                    help="also write the lines as a Parquet dataset, the folder DIR "
                         f"(default: {DEFAULT_PARQUET})")
    ap.add_argument("--parts", type=int, default=4,
                    help="part files of the Parquet dataset (default 4)")
    args = ap.parse_args(argv)
    if args.parts < 1:
        ap.error("--parts must be at least 1")
    bad = generate(args.out, args.n, args.seed, args.invalid)
    print(f"wrote {args.n} log lines ({bad} invalid) to {args.out}")
    if args.parquet is not None:
        generate_parquet(args.parquet, args.n, args.seed, args.invalid, args.parts)
        print(f"wrote them as {args.parts} Parquet part files to {args.parquet}")


if __name__ == "__main__":
    main()
