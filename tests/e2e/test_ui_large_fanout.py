"""The run page of a 100,000-child fan-out in a real browser, on both backends: the fan-out is
one bar on its SPAWNER (not 100,000 nodes), its long tail is computed, and its children are
paged and filtered. The fan-out is made in bulk (`bench.large_fanout`), not through HTTP.
How long the first screen takes is measured in bench/ui_first_screen.py, not asserted here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.large_fanout import Shape, build_large_fanout
from tests.conftest import REDIS_TEST_URL, _create_pg_database, _drop_pg_database, require_service
from tests.e2e.browser_harness import (
    FIT_JS,
    NARROW,
    DemoServer,
    assert_fits_a_phone,
    chromium,
    opened,
    serve_demo,
    server_env,
    shoot,
    stop,
)

pytestmark = pytest.mark.slow

CHILDREN = 100_000


@pytest.fixture(scope="module", params=["embedded", "server"])
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str | None, Path]]:
    workdir = tmp_path_factory.mktemp(f"large-{request.param}")
    if request.param == "embedded":
        yield f"sqlite+aiosqlite:///{workdir / 'sb.db'}", None, workdir
        return
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    name = asyncio.run(_create_pg_database())
    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}", REDIS_TEST_URL, workdir
    finally:
        client.flushdb()
        client.close()
        asyncio.run(_drop_pg_database(name))


@pytest.fixture(scope="module")
def large(database: tuple[str, str | None, Path]) -> Iterator[tuple[DemoServer, str]]:
    url, redis_url, workdir = database
    run_id = asyncio.run(build_large_fanout(url, children=CHILDREN, redis_url=redis_url))
    server = serve_demo(workdir, server_env(workdir, url, redis_url))
    try:
        yield server, run_id
    finally:
        stop(server)


@pytest.fixture(scope="module")
def browser(large: tuple[DemoServer, str]) -> Iterator[Any]:
    with chromium() as found:
        yield found


def test_a_100000_child_fan_out_renders_and_pages(
    large: tuple[DemoServer, str], browser: Any
) -> None:
    server, run_id = large
    succeeded, failed = Shape(CHILDREN).counts()
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        figures = page.locator(".fanout-figures")
        figures.wait_for()
        assert "of 100,000 children ended" in figures.inner_text()
        bar = page.locator(".fanout[role=progressbar]")
        assert bar.get_attribute("aria-valuenow") == str(succeeded + failed)
        # One vertex per step: the fan-out is a bar on its SPAWNER.
        assert page.locator("svg.dag .node").count() == 3
        spawner = page.locator('svg.dag .node[data-vertex="each"]')
        assert "100,000" in (spawner.text_content() or "")
        tail = page.locator(".long-tail")
        tail.locator("dd").first.wait_for()
        assert "durations of the 99,700 children that succeeded or failed" in tail.inner_text()
        # 2 % of the children take 20 s or more: the p99 is in the tail, the p50 is not.
        p50, _, p99, _ = [float(t.split()[0]) for t in tail.locator("dd").all_inner_texts()]
        assert p50 < 5 and p99 >= 20
        assert tail.locator(".slowest li").count() == 5
        assert tail.locator(".running-longest li").count() == 5

        rows = page.locator(".children-table tbody tr")
        assert rows.count() == 50
        assert rows.first.locator("td").first.inner_text() == "0"
        page.get_by_role("button", name="Next →").last.click()
        page.locator(".page-range", has_text="items 50 … 99").wait_for()
        page.get_by_role("button", name="Next →").last.click()
        page.locator(".page-range", has_text="items 100 … 149").wait_for()
        page.get_by_role("button", name="← Previous").last.click()
        page.locator(".page-range", has_text="items 50 … 99").wait_for()
        page.select_option('select[name="child-status"]', "FAILED")
        page.locator(".page-range", has_text="items 498 … ").wait_for()
        statuses = page.locator(".children-table tbody .badge").all_inner_texts()
        assert len(statuses) == 50 and all("failed" in s for s in statuses)
        shoot(page, "run-100000-children")
        # A child of the tail opens its own page.
        tail.locator(".slowest li a").first.click()
        page.locator("h1", has_text="ui-large-child").wait_for()


def test_the_fan_out_s_counts_are_whole_on_its_node(
    large: tuple[DemoServer, str], browser: Any
) -> None:
    """A tour's 20,000-child fan-out drew "✕ 378 fa…" under its SPAWNER's bar, in a graph with
    room to spare: the node was widened for its id, type and status, not for that line."""
    server, run_id = large
    _, failed = Shape(CHILDREN).counts()
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        note = page.locator("svg.dag .node-fanout-failed")
        note.wait_for()
        assert note.text_content() == f"✕ {failed:,} failed"
        done = page.locator("svg.dag .node-fanout").text_content()
        assert done == f"{CHILDREN - 300:,}/{CHILDREN:,}"


def test_a_spawner_s_steps_row_fits_a_phone(large: tuple[DemoServer, str], browser: Any) -> None:
    """On a phone the steps list cut a tour's "waiting for its children (18,827 of 20,000
    ended)" at the screen's edge, and its table scrolled sideways: the cell kept the
    table's no-wrap rule in the row-blocks layout."""
    server, run_id = large
    with opened(browser, f"{server.ui}#/runs/{run_id}", viewport=NARROW) as (page, _):
        status = page.locator("table.steps td[data-label=Status]", has_text="of 100,000 ended")
        status.wait_for()
        assert_fits_a_phone(page.evaluate(FIT_JS, ["table.steps", "td"]))
        shoot(page, "run-100000-steps-phone", narrow=False, widths=(NARROW["width"],))


def test_previous_after_a_reload_goes_back_one_page(
    large: tuple[DemoServer, str], browser: Any
) -> None:
    """A tour paged the runs list to page 5 and reloaded it: "← Previous" then opened page 1,
    the cursors paged through having been kept in the page's memory only. They are kept for
    the tab now, in the runs list and in a run's children; a page opened from a link, whose
    earlier pages the tab never read, offers "First page" instead of a "Previous" that
    skipped to page 1."""
    server, run_id = large
    rows = "table.runs tbody tr[data-run]"
    with opened(browser, f"{server.ui}#/runs?children=1") as (page, _):
        page.locator(rows).first.wait_for()
        firsts = [page.locator(rows).first.get_attribute("data-run")]
        moved = "([rows, was]) => (document.querySelector(rows)?.dataset.run ?? was) !== was"
        for _ in range(2):
            page.get_by_role("button", name="Next →").click()
            page.wait_for_function(moved, arg=[rows, firsts[-1]])
            firsts.append(page.locator(rows).first.get_attribute("data-run"))
        linked = page.url
        page.reload()
        page.locator(f"{rows}[data-run='{firsts[2]}']").wait_for()
        page.get_by_role("button", name="← Previous").click()
        page.locator(f"{rows}[data-run='{firsts[1]}']").wait_for()
        assert page.locator(rows).first.get_attribute("data-run") == firsts[1]

        page.goto(f"{server.ui}#/runs/{run_id}")
        page.locator(".page-range", has_text="items 0 … 49").wait_for()
        for shown in ("items 50 … 99", "items 100 … 149"):
            page.get_by_role("button", name="Next →").last.click()
            page.locator(".page-range", has_text=shown).wait_for()
        page.reload()
        page.locator(".page-range", has_text="items 100 … 149").wait_for()
        page.get_by_role("button", name="← Previous").last.click()
        page.locator(".page-range", has_text="items 50 … 99").wait_for()
        children = page.url

    for url, first in ((linked, "table.runs tbody tr[data-run]"), (children, ".page-range")):
        with opened(browser, url) as (page, _):
            page.locator(first).first.wait_for()
            back = page.get_by_role("button", name="⇤ First page").last
            back.click()
            page.wait_for_url(lambda now: "cursor=" not in now)
    with opened(browser, children) as (page, _):
        page.locator(".page-range", has_text="items 50 … 99").wait_for()
        assert page.get_by_role("button", name="← Previous").count() == 0
