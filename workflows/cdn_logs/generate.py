"""Deterministic CDN access-log lines for workflows/cdn_logs.xml, with a chosen fraction of
invalid ones: half of them do not parse (truncated or garbage), half have status code 0.

    cd workflows && python -m cdn_logs.generate [--n 1000] [--seed 4] [--invalid 0.02] [--out data/cdn.log]
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

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "cdn.log")


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of lines (default 1000)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--invalid", type=float, default=0.02,
                    help="fraction of invalid lines (default 0.02)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output file (default: %(default)s)")
    args = ap.parse_args(argv)
    bad = generate(args.out, args.n, args.seed, args.invalid)
    print(f"wrote {args.n} log lines ({bad} invalid) to {args.out}")


if __name__ == "__main__":
    main()
