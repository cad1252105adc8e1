"""How long the monitor's run page takes to show its first screen for a 100,000-child fan-out.

    python -m bench.ui_first_screen [--children 100000] [--repeat 5] [--database URL]

Makes the fan-out in bulk (`bench.large_fanout`; default: a fresh SQLite file, or the empty
PostgreSQL database `--database` names), starts `schemabridge serve --demo` on it, and opens
the run page in Debian's Chromium `--repeat` times, each in a fresh browser context (nothing
cached). It prints, per load and as medians, the milliseconds from navigation to: the graph
drawn, the fan-out bar shown, the long tail's figures shown, and the first page of children
listed (the first screen is complete at the last of these), plus the time of each API call
the page makes, as the server answered it. Goal: the first screen under 2 s. Recorded in
bench/results-ui.md; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.browser import CHROMIUM, CHROMIUM_ARGS
from bench.common import start_serve
from bench.large_fanout import build_large_fanout

MARKS = {
    "graph": "svg.dag .node",
    "fan-out bar": ".fanout[role=progressbar]",
    "long tail": ".long-tail dd",
    "children": ".children-table tbody tr td",
}


def _load(browser: Any, url: str) -> tuple[dict[str, float], dict[str, float]]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    calls: dict[str, float] = {}

    def finished(request: Any) -> None:
        timing = request.timing
        path = request.url.split("://", 1)[1].split("/", 1)[1]
        if path.startswith(("runs", "workflows")) and timing["responseEnd"] > 0:
            calls[path.split("?")[0][:60]] = timing["responseEnd"] - timing["requestStart"]

    page.on("requestfinished", finished)
    page.goto(url, wait_until="commit")
    start = page.evaluate("performance.timeOrigin")
    marks = {}
    for name, selector in MARKS.items():
        page.locator(selector).first.wait_for(timeout=60_000)
        marks[name] = page.evaluate("Date.now()") - start
    # When the page's own code first asked the API for something: what came before is the
    # browser loading the page and its modules.
    calls["(first API request at)"] = page.evaluate(
        """() => Math.min(...performance.getEntriesByType('resource')
             .filter((e) => e.initiatorType === 'fetch').map((e) => e.startTime))"""
    )
    context.close()
    return marks, calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--children", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database", help="an empty database (default: a new SQLite file)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="sb-ui-bench-") as tmp:
        workdir = Path(tmp)
        database = args.database or f"sqlite+aiosqlite:///{workdir / 'sb.db'}"
        started = time.perf_counter()
        redis_url = os.environ.get("SB_BENCH_REDIS_URL") if args.database else None
        run_id = asyncio.run(
            build_large_fanout(database, children=args.children, redis_url=redis_url)
        )
        print(f"built {args.children:,} children in {time.perf_counter() - started:.1f} s")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        process, api = start_serve(database, workdir)
        try:
            url = f"{api}/ui/#/runs/{run_id}"
            loads = []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                _load(browser, url)  # warm-up: the server's caches, the browser's start
                for n in range(args.repeat):
                    marks, calls = _load(browser, url)
                    loads.append(marks)
                    shown = ", ".join(f"{k} {v:.0f}" for k, v in marks.items())
                    print(f"load {n + 1}: {shown} ms")
                    print("   API: " + ", ".join(f"{k} {v:.0f} ms" for k, v in calls.items()))
                browser.close()
            medians = {k: statistics.median(m[k] for m in loads) for k in MARKS}
            print("median: " + ", ".join(f"{k} {v:.0f} ms" for k, v in medians.items()))
            print(f"first screen complete (median): {max(medians.values()):.0f} ms (goal < 2000)")
        finally:
            process.terminate()
            process.wait(timeout=60)


if __name__ == "__main__":
    main()
