"""The runs list's progress bars, in a real browser against `schemabridge serve --demo`: a bar
says what its figures say. Its list is the API's answer as written here (`GET /runs` answered
by the page's route), so each case is exact and at hand: a fan-out that failed with all its
children ended, a cancelled one, one under way, a plain run done. Every page fails its test on
a JavaScript or console error, or on a request off loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.browser_harness import DemoServer, demo_on_sqlite, opened, shoot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-runs-progress") as running:
        yield running


def run(n: int, workflow: str, status: str, progress: dict[str, Any]) -> dict[str, Any]:
    """A run as `GET /runs` lists it."""
    ended = None if status == "RUNNING" else 1_700_000_001.0
    return {
        "id": f"0000000{n}-aaaa-4000-8000-000000000000",
        "workflow": workflow,
        "version": 1,
        "tenantId": "default",
        "status": status,
        "createdAt": 1_700_000_000.0,
        "startedAt": 1_700_000_000.0,
        "endedAt": ended,
        "progress": progress,
    }


def children(succeeded: int, failed: int, cancelled: int, total: int = 12) -> dict[str, int]:
    return {"total": total, "succeeded": succeeded, "failed": failed, "cancelled": cancelled}


LISTED = {
    "items": [
        run(
            1, "batch-failed", "FAILED", {"steps": 4, "stepsDone": 2, "children": children(9, 3, 0)}
        ),
        run(
            2,
            "batch-cancelled",
            "CANCELLED",
            {"steps": 2, "stepsDone": 0, "children": children(0, 0, 12)},
        ),
        run(
            3,
            "batch-running",
            "RUNNING",
            {"steps": 3, "stepsDone": 1, "children": children(6, 0, 0)},
        ),
        run(4, "plain-done", "SUCCEEDED", {"steps": 2, "stepsDone": 2}),
    ],
    "nextCursor": None,
}

BARS_JS = """() => [...document.querySelectorAll('tr[data-run]')].map((row) => {
  const bar = row.querySelector('.mini-bar');
  const fill = bar.querySelector('.mini-fill');
  return { words: row.querySelector('.progress-cell').textContent,
           full: Math.round(100 * fill.getBoundingClientRect().width / bar.clientWidth),
           fill: getComputedStyle(fill).backgroundColor };
})"""
"""Each row's progress words, how full its bar is (percent of its track) and the fill's colour."""


def test_a_bar_is_as_full_as_the_runs_steps_and_coloured_as_its_status(
    server: DemoServer, browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        page.route("**/runs?*", lambda route: route.fulfill(json=LISTED))
        page.reload()
        page.locator("tr[data-run] .progress-cell").first.wait_for()
        bars = page.evaluate(BARS_JS)
        colours = page.evaluate(
            "() => { const s = getComputedStyle(document.documentElement);"
            " return ['--bad', '--off', '--accent'].map((v) => s.getPropertyValue(v).trim()); }"
        )
        shoot(page, "runs-progress", widths=(390,))
    rgb = [rgb_of(c) for c in colours]
    bad, off, accent = rgb
    assert [(b["words"], b["full"], b["fill"]) for b in bars] == [
        ("2/4 steps · 12/12 children · 3 failed", 50, bad),
        ("0/2 steps · 12/12 children · 12 cancelled", 0, off),
        # Under way: one step done, and half of the fan-out's children ended.
        ("1/3 steps · 6/12 children", 50, accent),
        ("2/2 steps", 100, accent),
    ]


def rgb_of(hex_colour: str) -> str:
    """ "#b42318" → "rgb(180, 35, 24)", as getComputedStyle says a colour."""
    value = hex_colour.lstrip("#")
    red, green, blue = (int(value[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({red}, {green}, {blue})"


def test_the_list_shows_when_each_run_was_created_as_it_sorts_and_filters(
    server: DemoServer, browser: Any
) -> None:
    """A rerun starts anew (its `startedAt`), but the list is sorted and filtered by creation:
    a "Started" column then showed a retried run "2 min ago" among old rows and outside its
    own "since" filter. The column and the filter say Created, and show `createdAt`; the
    filter chosen, the list asks `GET /runs` for the runs created since then
    (`createdAfter`), not started."""
    now = time.time()
    rerun = run(5, "retried", "RUNNING", {"steps": 2, "stepsDone": 1})
    rerun |= {"createdAt": now - 3 * 86_400, "startedAt": now - 60, "endedAt": None}
    asked: list[str] = []
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        page.route("**/runs?*", lambda route: route.fulfill(json={"items": [rerun]}))
        page.reload()
        page.locator("tr[data-run]").first.wait_for()
        headers = page.locator("table.runs thead th").all_inner_texts()
        cells = page.locator("tr[data-run] td").all_inner_texts()
        since = page.locator("label", has=page.locator("select[name=since]")).inner_text()
        page.on("request", lambda request: asked.append(request.url))
        before = time.time()
        page.select_option("select[name=since]", "24h")
        page.wait_for_url("**since=24h*")
        # Wait (through the page's own clock, so its requests are heard) for a list request
        # that names when: the newest one is the new filter's.
        for _ in range(100):
            if any("createdAfter" in q for q in runs_queries(asked)):
                break
            page.wait_for_timeout(100)
        after = time.time()
    assert headers[5] == "Created", headers
    assert cells[5] == "3 d ago", cells
    assert since.startswith("Created"), since
    assert runs_queries(asked), asked
    query = runs_queries(asked)[-1]
    assert "createdAfter" in query, query
    assert "startedAfter" not in query, query
    (created_after,) = query["createdAfter"]
    # The page's clock minus a day, read between the choice and the request (whole seconds).
    assert before - 86_400 - 1 <= float(created_after) <= after - 86_400, (query, before, after)


def runs_queries(urls: list[str]) -> list[dict[str, list[str]]]:
    """The query of each `GET /runs?…` among `urls` (a list's page, not a run's)."""
    found = [urlsplit(url) for url in urls]
    return [parse_qs(url.query) for url in found if url.path == "/runs" and url.query]


def test_leaving_a_page_cancels_the_dialog_opened_on_it(server: DemoServer, browser: Any) -> None:
    """A tour opened "Retry all matching…", went to a run's page, and found the dialog still
    modal over it, offering to retry what was no longer shown."""
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        page.locator("table.runs").wait_for()
        answer = page.evaluate_handle(
            "() => import('./js/dialog.js').then((m) => { window.asked = m.confirmAction("
            "{ title: 'Retry all?', text: 'They run again.', confirm: 'Retry' }); })"
        )
        answer.dispose()
        page.locator("dialog[open]").wait_for()
        page.evaluate("() => { location.hash = '#/workflows'; }")
        page.locator("table.workflows").wait_for()
        assert page.locator("dialog").count() == 0
        assert page.evaluate("() => window.asked") is False  # cancelled, not confirmed


def test_a_phone_shows_why_a_run_waits_under_its_bar(server: DemoServer, browser: Any) -> None:
    """On a phone the progress words are left to the run's page, and the "waiting: breaker
    open" note under the bar went with them: the one line that said why a run made no
    progress. It shows, whole, on the screen, and the list still does not scroll sideways."""
    waiting = run(6, "billing-fanout", "RUNNING", {"steps": 2, "stepsDone": 0})
    waiting["progress"]["waiting"] = "breaker_open"
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        page.set_viewport_size({"width": 390, "height": 844})
        page.route("**/runs?*", lambda route: route.fulfill(json={"items": [waiting]}))
        page.reload()
        note = page.locator("tr[data-run] .list-wait")
        note.wait_for()
        box = note.evaluate(
            "(e) => { const r = e.getBoundingClientRect(); return { left: r.left, right: r.right,"
            " width: r.width, clipped: e.scrollWidth > e.clientWidth + 1,"
            " page: document.documentElement.scrollWidth,"
            " table: e.closest('.table-wrap').scrollWidth,"
            " box: e.closest('.table-wrap').clientWidth }; }"
        )
        words = note.inner_text()
        shoot(page, "runs-waiting-phone", narrow=False, widths=(390,))
    assert words == "waiting: breaker open"
    assert box["width"] > 20 and box["left"] >= 0 and box["right"] <= 390, box
    assert not box["clipped"], box
    assert box["page"] <= 390 and box["table"] <= box["box"], box
