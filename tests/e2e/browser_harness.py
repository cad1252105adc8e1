"""Driving the web run monitor in a real browser: Debian's Chromium through Playwright (never a
browser Playwright downloads), against a live `schemabridge serve` on loopback.

Every page a test opens is watched: a JavaScript error or a console error fails the test, and
any request that would leave loopback is blocked and fails it too. `shoot` keeps a screenshot
of each page in `tests/e2e/screenshots/` (git-ignored) for people to look at.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import IN_CI
from tests.e2e.rest_harness import Service
from tests.integration.operations_harness import two_versions

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 420, "height": 800}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
TIMEOUT_MS = 20_000
"""The longest a page may take to show what a test waits for."""


def require_chromium() -> None:
    """Fail in CI, skip elsewhere, without Debian's Chromium (`apt-get install chromium`)."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} is missing: apt-get install chromium"
    if IN_CI:
        pytest.fail(f"{message} (.ci/run installs it)")
    pytest.skip(message)


@dataclass
class Watch:
    """What a page did that a test must not accept: errors and requests off loopback."""

    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    allowed_errors: list[str] = field(default_factory=list)
    """Substrings of console errors a test expects (a 401 it provokes on purpose)."""

    def check(self) -> None:
        unexpected = [e for e in self.errors if not any(a in e for a in self.allowed_errors)]
        assert unexpected == [], f"errors in the page: {unexpected}"
        assert self.blocked == [], f"requests that would leave loopback: {self.blocked}"


def watch(page: Any) -> Watch:
    """Record the page's errors; block and record every request to a host off loopback."""
    found = Watch()

    def on_console(message: Any) -> None:
        if message.type == "error":
            found.errors.append(f"console: {message.text}")

    def on_route(route: Any) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
            route.continue_()
        else:
            found.blocked.append(route.request.url)
            route.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda error: found.errors.append(f"page: {error}"))
    page.route("**/*", on_route)
    return found


def shoot(page: Any, name: str, *, narrow: bool = True, widths: tuple[int, ...] = ()) -> None:
    """Keep a full-page screenshot at 1280 x 800 (and one at 420 px wide), and one at each of
    `widths` (`<name>-<width>.png`)."""
    SCREENSHOTS.mkdir(exist_ok=True)
    size = page.viewport_size
    page.set_viewport_size(WIDE)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    if narrow:
        page.set_viewport_size(NARROW)
        page.screenshot(path=str(SCREENSHOTS / f"{name}-narrow.png"), full_page=True)
    for width in widths:
        page.set_viewport_size({"width": width, "height": WIDE["height"]})
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    if size:
        page.set_viewport_size(size)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's), closed at the end."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def opened(browser: Any, url: str, **context: Any) -> Iterator[tuple[Any, Watch]]:
    """A page on `url` in a fresh context (`context`: `new_context`'s options; the viewport
    WIDE unless given), watched; its errors fail the test at the end."""
    ctx = browser.new_context(**{"viewport": WIDE, **context})
    ctx.set_default_timeout(TIMEOUT_MS)
    page = ctx.new_page()
    found = watch(page)
    try:
        page.goto(url)
        yield page, found
        found.check()
    finally:
        # A live page's refresh may be inside a test's route handler as the page closes:
        # its `route.fetch()` then fails, and that error surfaced in the next test's first
        # call to the browser (a CI failure of a test that routes nothing).
        for routed in (page, ctx):
            routed.unroute_all(behavior="ignoreErrors")
        ctx.close()


FIT_JS = """([tableSelector, cellSelector]) => {
  const table = document.querySelector(tableSelector);
  const wrap = table.closest('.table-wrap');
  const edge = wrap.getBoundingClientRect();
  const cells = [...table.querySelectorAll(cellSelector)].filter((cell) => cell.offsetParent)
    .map((cell) => {
      const box = cell.getBoundingClientRect();
      return {
        text: cell.textContent, left: box.left, right: box.right, width: box.width,
        clipped: cell.scrollWidth > cell.clientWidth + 1,
        named: getComputedStyle(cell, '::before').content,
      };
    });
  return {
    page: document.documentElement.scrollWidth, window: window.innerWidth,
    table: wrap.scrollWidth, box: wrap.clientWidth, left: edge.left, right: edge.right, cells,
  };
}"""
"""How wide the page and a table (`[table selector, cell selector]`) are against what shows of
them, and each of the table's cells that is drawn."""


def assert_fits_a_phone(fit: dict[str, Any], width: int = NARROW["width"]) -> None:
    """What `FIT_JS` measured at 420 px (or `width`) scrolls neither the page nor its table
    sideways, and each cell drawn is whole and on the screen."""
    assert fit["page"] <= fit["window"], fit
    assert fit["table"] <= fit["box"], {k: v for k, v in fit.items() if k != "cells"}
    for cell in fit["cells"]:
        assert cell["left"] >= 0 and cell["right"] <= width, cell
        assert not cell["clipped"], cell


LINES_JS = """(selector) => [...document.querySelectorAll(selector)].filter((e) => e.offsetParent)
  .map((element) => {
    const lines = [];
    let top = null;
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const box = [...range.getClientRects()].find((r) => r.width > 0);
        if (!box) {
          // a space the line ends with, collapsed: it ends that line
          if (lines.length) lines[lines.length - 1] += node.data[i];
          continue;
        }
        if (top === null || box.top > top + box.height / 2) {
          lines.push("");
          top = box.top;
        }
        lines[lines.length - 1] += node.data[i];
      }
    }
    return lines;
  })"""
"""The lines each element drawn that `selector` finds is drawn on, as text: where the browser
broke it."""

WORD_ENDS = ("-", "_", ".", " ", "\u00a0")
"""What a line may end with when a name wraps: its separators, or a space."""


def assert_wraps_between_words(names: list[list[str]], where: Any = None) -> None:
    """Every name `LINES_JS` read wraps only after a hyphen, an underscore, a dot or a space:
    never inside a word."""
    for lines in names:
        inside = [pair for pair in itertools.pairwise(lines) if not pair[0].endswith(WORD_ENDS)]
        assert not inside, (where, lines)


# ── the service ─────────────────────────────────────────────────────────────────────────────


@dataclass
class DemoServer:
    """A `schemabridge serve --demo` process: the API's URL and its demo downstream's."""

    service: Service
    url: str
    downstream: str

    @property
    def ui(self) -> str:
        return f"{self.url}/ui/"

    def call(self, path: str, body: Any = None, method: str | None = None) -> Any:
        """A JSON call to the API (the test acting as a client, not through the page)."""
        return http_json(f"{self.url}{path}", body, method)

    def publish_versions(self, name: str, *, failing: bool) -> None:
        """`two_versions` of `name` on the demo downstream's /orders, published as v1 and v2."""
        for version, document in enumerate(
            two_versions(name, f"{self.downstream}/orders", failing=failing), start=1
        ):
            answer = self.call("/workflows", document)
            assert answer["version"] == version, answer

    def script(self, path: str, *answers: Any) -> None:
        """Queue answers of the demo downstream for `path` (each used once)."""
        http_json(f"{self.downstream}/_script", {"path": path, "responses": list(answers)})

    def latency(self, ms: float) -> None:
        http_json(f"{self.downstream}/_config", {"latencyMs": ms})

    def items_at_once(self, count: int) -> None:
        """The next `/items` (a renewals run's collect) answers `count` items at once, past
        the downstream's latency: a test that slows the children's calls need not wait for
        the parent's first call too."""
        items = [{"id": i, "name": f"item-{i}"} for i in range(count)]
        self.script("/items", {"sleep_ms": 0, "body": {"items": items}})

    def run_status(self, run_id: str) -> str:
        return str(self.call(f"/runs/{run_id}")["status"])

    def wait_status(self, run_id: str, statuses: set[str], timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.run_status(run_id)
            if status in statuses:
                return status
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} is still {self.run_status(run_id)}")


def http_json(url: str, body: Any = None, method: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    try:
        with opener.open(request, timeout=30) as answer:
            return json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return json.loads(error.read() or b"null")


def serve_demo(workdir: Path, env: dict[str, str], *args: str) -> DemoServer:
    """Start `schemabridge serve --demo --port 0` with `env`; read its two URLs."""
    service = Service(
        ["serve", "--demo", "--port", "0", "--no-access-log", *args], env, workdir / "serve.log"
    )
    url = service.wait_for_url()
    downstream = next(
        line.rsplit(" ", 1)[1]
        for line in service.stdout().splitlines()
        if line.startswith("demo downstream at ")
    )
    return DemoServer(service, url, downstream)


def server_env(workdir: Path, database_url: str, redis_url: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["SCHEMABRIDGE_DATABASE_URL"] = database_url
    env.pop("SCHEMABRIDGE_REDIS_URL", None)
    if redis_url is not None:
        env["SCHEMABRIDGE_REDIS_URL"] = redis_url
    env["SCHEMABRIDGE_HEALTH_DIR"] = str(workdir / "health")
    return env


def stop(server: DemoServer) -> None:
    code = server.service.stop()
    assert code == 0, server.service.stderr()[-2000:]


@contextlib.contextmanager
def demo_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, name: str, settings: Mapping[str, str] | None = None
) -> Iterator[DemoServer]:
    """`serve --demo` on a fresh SQLite file in a directory of its own (`name`), stopped (and
    its exit code checked) at the end: a test module's `server` fixture. `settings`: more
    `SCHEMABRIDGE_*` variables for the process."""
    workdir = tmp_path_factory.mktemp(name)
    env = server_env(workdir, f"sqlite+aiosqlite:///{workdir / 'sb.db'}")
    env.update(settings or {})
    running = serve_demo(workdir, env)
    try:
        yield running
    finally:
        stop(running)


def eventually(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def open_on_own_clock(page: Any, url: str) -> None:
    """Install the page's own clock (running, from now) and open `url` on it: the test can
    then run it past a timer of the page (`page.clock.run_for`) instead of waiting."""
    page.clock.install(time=time.time())
    page.goto(url)


def pause_clock(page: Any) -> None:
    """Stop the page's installed clock now. `pause_at` takes a time ahead of the page's: one
    read a moment before can be behind by then on a loaded host ("Cannot fast-forward to the
    past"), so the time asked is a second ahead, and asked again, a few times, if still
    behind. A timer falling due in that second fires at the jump, before the test's next
    step, as it would have a moment earlier."""
    for _ in range(5):
        try:
            page.clock.pause_at(page.evaluate("() => Date.now() / 1000") + 1.0)
            return
        except Exception as refused:
            if "to the past" not in str(refused):
                raise
    raise AssertionError("the page's clock ran ahead of every pause asked for")


def clean_screenshots() -> None:
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)


LONG_VERTEX = "reconcile-the-customer-ledger-with-the-billing-provider-mmmmmmmm"
"""As long as a vertex id may be (64 characters), with wide letters at the end."""


def ticket(server: DemoServer, tenant: str = "acme", wait: bool = False) -> str:
    """Submit a support-ticket run of the demo; its id."""
    body = {"input": {"customerId": "cus_1", "subject": "hello"}, "tenantId": tenant}
    answer = server.call(f"/workflows/support-ticket/runs{'?wait=true' if wait else ''}", body)
    return str(answer.get("id") or answer["details"]["runId"])


def failed_long_vertex_run(server: DemoServer, workflow: str, tenant: str) -> str:
    """Publish `workflow`: the step `LONG_VERTEX` (its downstream answers 422 once), then
    `open-ticket`; submit it for `tenant` and wait until it FAILED at `LONG_VERTEX`. Its id."""
    path = f"/{workflow}/long"
    server.call(
        "/workflows",
        {
            "name": workflow,
            "vertices": {
                LONG_VERTEX: {"type": "GATEWAY", "config": {"url": f"{server.downstream}{path}"}},
                "open-ticket": {
                    "type": "GATEWAY",
                    "dependsOn": [LONG_VERTEX],
                    "config": {"url": f"{server.downstream}/items?count=1"},
                },
            },
        },
    )
    server.script(path, {"status": 422, "body": {"error": "validation_failed"}})
    answer = server.call(f"/workflows/{workflow}/runs", {"input": {}, "tenantId": tenant})
    run_id = str(answer["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    return run_id


BUTTONS_JS = """(bar) => {
  const found = [...bar.querySelectorAll("button")].map((b) => {
    const style = getComputedStyle(b);
    b.focus();
    return {
      label: b.textContent, disabled: b.disabled, title: b.title,
      background: style.backgroundColor, color: style.color, border: style.borderColor,
      focusable: document.activeElement === b,
    };
  });
  document.activeElement.blur();
  return found;
}"""
"""Each operator action as the page shows it, and whether it can take the focus."""


def actions(page: Any) -> dict[str, dict[str, Any]]:
    bar = page.get_by_role("toolbar", name="Operator actions")
    return {b["label"]: b for b in bar.evaluate(BUTTONS_JS)}
