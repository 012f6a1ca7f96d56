"""Regenerate docs/ui-run.png: the run page of the demo's failed run, as the browser tests see it.

    .venv/bin/python scripts/screenshot.py [--out docs/ui-run.png] [--redis URL] [--keep]

Submits the demo's workflow (cdn_logs with 2% transient failures injected at `aggregate`, as
`make demo` does) with the CLI, serves `recovery ui` on a free loopback port and takes a
full-page screenshot with headless Chromium (Playwright, executable /usr/bin/chromium). Without
--redis it uses an embedded Redis in a temporary RECOVERY_HOME, stopped and removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "ui-run.png"))
    ap.add_argument("--redis", default=None, metavar="URL", help="a Redis to use (default: a throwaway embedded one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (workflow copy, Redis state)")
    ap.add_argument("--width", type=int, default=1280)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="recovery-screenshot-"))
    os.environ["RECOVERY_HOME"] = str(work / "home")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.path.insert(0, str(REPO))
    from recovery.controlplane import connection
    from recovery.controlplane import embedded as redis_embedded
    from recovery.demo import INJECT, copy_example
    from tests.ui_server import BackgroundServer, launch_chromium

    embedded = None if args.redis else redis_embedded.EmbeddedServer()
    url = connection.resolve_url(args.redis)
    try:
        xml = copy_example(work / "run")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "recovery", "submit", str(xml), *INJECT, "--json",
                               "--redis", url], capture_output=True, text=True, env=env, cwd=REPO)
        if done.returncode != 0:
            print(done.stderr.strip(), file=sys.stderr)
            return done.returncode
        run_id = json.loads(done.stdout)["run_id"]
        print(f"submitted {run_id}")
        from playwright.sync_api import sync_playwright
        client = connection.connect(url)
        with BackgroundServer(client, url, work / "ui-logs") as server, sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": args.width, "height": 900})
            page.goto(server.printed_url)        # the session cookie, as a user gets it
            page.goto(f"{server.url}/runs/{run_id}")
            page.wait_for_selector("svg.topology g.node.failed")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
        print(f"wrote {args.out}")
        return 0
    finally:
        if embedded is not None:
            embedded.stop()
        if not args.keep:
            import shutil
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
