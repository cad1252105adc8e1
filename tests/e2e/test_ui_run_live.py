"""The run page of a live run in a real browser, against one `schemabridge serve --demo`
(embedded store) for the module: its times move on between the run's events (the page's
clock is Playwright's, moved by the test), every section counts the same children as the
fan-out's bar, the long tail never says "running" beside "running 0", and the children's
filter and page are in the URL, so Back returns to them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import (
    DemoServer,
    demo_on_sqlite,
    eventually,
    opened,
    shoot,
    ticket,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_downstream")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-run-live") as running:
        yield running


def fan_out_run(server: DemoServer, tenant: str, size: int) -> str:
    """A run of `nightly-subscription-renewals` over `size` subscriptions, the charge of
    subscription 3 declined (so one child failed); its id, once it has ended."""
    server.script("/billing/subscriptions/3/charges", {"status": 402, "body": {}})
    body = {"input": {"batchSize": size, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"})
    return run_id


TIMES_JS = """() => {
  const fact = (name) => [...document.querySelectorAll('.run-facts div')]
    .find((d) => d.querySelector('dt').textContent === name).querySelector('dd').textContent;
  const axis = [...document.querySelectorAll('svg.timeline')]
    .find((s) => s.getClientRects().length).querySelector('text[text-anchor=end]');
  const row = [...document.querySelectorAll('table.steps tbody tr')]
    .find((r) => r.textContent.includes('lookup'));
  const panel = [...document.querySelectorAll('.step-panel .facts div')]
    .find((d) => d.querySelector('dt').textContent === 'Duration');
  return {
    created: fact('Created'), duration: fact('Duration'), axis: axis.textContent,
    step: row.querySelector('td[data-label=Duration]').textContent,
    panel: panel.querySelector('dd').textContent,
  };
}"""
"""What the run page says of time: the header's Created and Duration, the timeline's span,
the running step's duration in the steps table and in the step's panel."""


def seconds(text: str) -> int:
    """The seconds "17 s" or "17 s ago" says."""
    found = re.fullmatch(r"(\d+) s( ago)?", text)
    assert found, text
    return int(found.group(1))


def test_a_live_run_s_times_move_on_between_its_events(server: DemoServer, browser: Any) -> None:
    """The tour: 15 s into a live run whose step holds a slow call (no event meanwhile) the
    header still said "Created just now · Duration 157 ms" and the timeline "+162 ms". The
    page's clock (stopped, then moved 15 s by the test) moves them on: created 15 s ago or
    more, a duration of 15 s or more in the header, the timeline, the steps table and the
    step's panel."""
    server.latency(40_000)
    run_id = ticket(server, "ticking")
    try:
        with opened(browser, "about:blank") as (page, _):
            page.clock.install()
            page.goto(f"{server.ui}#/runs/{run_id}")
            page.locator(".live", has_text="live").wait_for()
            page.locator("table.steps tr", has_text="running").wait_for()
            page.locator(".step-panel h3", has_text="lookup").wait_for()
            page.clock.pause_at(page.evaluate("() => Date.now() / 1000") + 0.5)
            before = page.evaluate(TIMES_JS)
            page.clock.run_for(15_000)
            after = page.evaluate(TIMES_JS)
            shoot(page, "run-live-ticking")
        assert server.run_status(run_id) == "RUNNING", "a status change redraws it all anyway"
    finally:
        server.latency(0)
        server.call(f"/runs/{run_id}/cancel", {})
    assert seconds(after["created"].removesuffix(" · by demo")) >= 15, (before, after)
    assert seconds(after["duration"]) >= 15, (before, after)
    assert seconds(after["axis"].removeprefix("+")) >= 15, (before, after)
    assert seconds(after["step"]) >= 15, (before, after)
    assert seconds(after["panel"]) >= 15, (before, after)


COUNTS_JS = """() => {
  const row = [...document.querySelectorAll('table.steps tbody tr')]
    .find((r) => r.querySelector('.step-id').textContent === 'renew');
  return {
    graph: document.querySelector('g.node[data-vertex="renew"] .node-fanout').textContent,
    section: document.querySelector('.fanout-section .fanout-figures').textContent,
    steps: row.textContent,
    tail: document.querySelector('.long-tail .read-at')?.textContent ?? null,
    children: document.querySelector('.children .filters .read-at')?.textContent ?? null,
  };
}"""
"""What each section of the run page says of the spawner renew's children, read at once."""


def test_every_section_counts_the_children_the_fan_out_counts(
    server: DemoServer, browser: Any
) -> None:
    """The tour: in one capture the graph said 311/500, the Fan-out section "311 of 500
    ended" and the Steps table "269 of 500 ended". Children end one by one while the page is
    open: the spawner's row in the Steps table counts what its node and its Fan-out section
    count, and the sections read on their own (the long tail, the page of children) say when
    they were read."""
    items = [{"id": i, "name": f"item-{i}"} for i in range(12)]
    server.script("/items", {"body": {"items": items}})
    for i in range(12):
        server.script(f"/billing/subscriptions/{i}/charges", {"sleep_ms": 2_000 + 600 * i})
    body = {"input": {"batchSize": 12, "renewalDate": "2025-07-01"}, "tenantId": "counts"}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    try:
        eventually(
            lambda: server.call(f"/runs/{run_id}")["fanout"]["total"] == 12, what="12 children"
        )
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            page.locator(".live", has_text="live").wait_for()
            ended = "() => Number(document.querySelector('.fanout')?.ariaValueNow) >= 8"
            page.wait_for_function(ended, timeout=30_000)
            shown = page.evaluate(COUNTS_JS)
            shoot(page, "run-live-counts")
        assert server.run_status(run_id) == "RUNNING"
    finally:
        server.call(f"/runs/{run_id}/cancel", {})
    done = re.fullmatch(r"(\d+)/12", shown["graph"])
    assert done, shown
    assert f" {done.group(1)} of 12 children ended" in shown["section"], shown
    assert f"({done.group(1)} of 12 ended)" in shown["steps"], shown
    assert shown["tail"] and shown["tail"].startswith("Read "), shown
    assert shown["children"] and shown["children"].startswith("Read "), shown


HELD_JS = """() => {
  const legend = document.querySelector('.fanout-section .legend')?.textContent ?? '';
  const tail = [...document.querySelectorAll('.running-longest li')].map((li) => li.textContent);
  return { legend, tail };
}"""


def test_the_long_tail_never_says_running_beside_running_0(
    server: DemoServer, browser: Any
) -> None:
    """The tour: "Running longest" listed "item 255 ▶ running" beside a bar saying "running
    0". Two children hold slow calls, the others wait for their tenant's rate (3 calls a
    minute, the parent's first call one of them); once the two calls end every child waits.
    The page's clock is stopped, so the long tail's next turn never comes: what it listed as
    running is read again as soon as the bar says no child is running, and it says
    "waiting" as the bar does."""
    tenant = "held-tail"
    server.call(f"/tenants/{tenant}/limits", {"ratePerMinute": 3}, method="PUT")
    server.latency(6_000)
    server.items_at_once(5)
    body = {"input": {"batchSize": 5, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])

    def fanout() -> dict[str, Any]:
        return dict(server.call(f"/runs/{run_id}")["fanout"])

    try:
        eventually(lambda: fanout()["running"] > 0, what="children held in their calls")
        with opened(browser, "about:blank") as (page, _):
            page.clock.install()
            page.goto(f"{server.ui}#/runs/{run_id}")
            page.locator(".running-longest li", has_text=" running · ").first.wait_for()
            page.clock.pause_at(page.evaluate("() => Date.now() / 1000") + 0.5)
            eventually(lambda: fanout()["running"] == 0, what="the held calls ended")
            agreed = """() => {
              const legend = document.querySelector('.fanout-section .legend').textContent;
              const lines = [...document.querySelectorAll('.running-longest li')];
              return /running 0(?!\\d)/.test(legend)
                && lines.length > 0 && lines.every((li) => li.textContent.includes(' waiting · '));
            }"""
            try:
                page.wait_for_function(agreed, timeout=15_000)
            except Exception as error:
                raise AssertionError(page.evaluate(HELD_JS)) from error
            shoot(page, "run-live-tail-waiting")
    finally:
        server.latency(0)
        server.call(f"/runs/{run_id}/cancel", {})
        server.call(f"/tenants/{tenant}/limits", {"ratePerMinute": None}, method="PUT")


def test_back_returns_to_the_children_s_filter_and_page(server: DemoServer, browser: Any) -> None:
    """The tour: after paging, filtering "succeeded", opening a child and pressing Back, the
    operator landed on "any status", page 1. The filter and the page's cursor are in the URL:
    Back returns to them ("← Previous" still leads to page 1), the URL is a link to that view,
    and a cursor that does not fit the filter (edited by hand) opens the filter's page 1."""
    run_id = fan_out_run(server, "children-url", size=60)
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, found):
        page.locator(".live", has_text="up to date").wait_for()
        page.select_option('select[name="child-status"]', "SUCCEEDED")
        page.wait_for_url(re.compile(r"children=SUCCEEDED"))
        # The filtered page, not the unfiltered one still shown while it loads (both have 50
        # rows; a Next clicked on the old one pages from item 49: the likely cause of a CI
        # failure). Item 2 failed, so the filtered page ends at item 50.
        page.locator(".page-range", has_text="items 0 … 50").wait_for()
        page.get_by_role("button", name="Next →").click()
        page.wait_for_url(re.compile(r"children=SUCCEEDED&cursor="))
        page.locator(".page-range", has_text="items 51").wait_for()
        paged = page.locator(".page-range").inner_text()
        linked = page.url
        child = page.locator(".children-table tbody a").first
        child_id = str(child.get_attribute("href")).rsplit("/", 1)[1]
        child.click()
        page.locator(".crumbs", has_text=child_id[:8]).wait_for()
        page.locator(".crumbs", has_text=run_id[:8]).wait_for(state="detached")
        page.go_back()
        page.locator(".crumbs", has_text=run_id[:8]).wait_for()
        page.locator(".page-range", has_text=paged).wait_for()
        assert page.url == linked
        assert page.locator('select[name="child-status"]').input_value() == "SUCCEEDED"
        words = page.locator(".children-table tbody .badge").all_inner_texts()
        assert words and all(w.endswith("succeeded") for w in words), words
        shoot(page, "run-children-back")
        page.get_by_role("button", name="← Previous").click()
        page.locator(".page-range", has_text="items 0 ").wait_for()
        assert "cursor=" not in page.url and "children=SUCCEEDED" in page.url
        # The link opens the same view in a page of its own.
        page.goto("about:blank")
        page.goto(linked)
        page.locator(".page-range", has_text=paged).wait_for()
        assert page.locator('select[name="child-status"]').input_value() == "SUCCEEDED"
        # A cursor of another filter (a URL edited by hand) opens that filter's page 1 (the
        # API refuses it first: 422 invalid_cursor).
        found.allowed_errors.append("422")
        page.goto("about:blank")
        page.goto(linked.replace("children=SUCCEEDED", "children=FAILED"))
        page.locator(".children-table tbody .badge", has_text="failed").wait_for()
        assert page.locator(".page-range").inner_text() == "items 3 … 3"
        page.wait_for_url(re.compile(r"children=FAILED$"))


def test_the_log_shows_each_line_once_however_many_reads_overlap(
    server: DemoServer, browser: Any
) -> None:
    """The run page reads its log from its first render, from a reload and from the live
    follow, which may overlap: two reads from the same cursor appended the same lines twice
    (a tour saw "lease expired; step requeued" and "run succeeded" twice, until a reload).
    Reads made while one runs wait for it and share one read after it."""
    run_id = ticket(server, wait=True)
    lines = [line["message"] for line in server.call(f"/runs/{run_id}/logs")["items"]]
    assert len(lines) >= 3, lines
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        texts, again = page.evaluate(
            """async (runId) => {
                const { RunLog } = await import("./js/run/log.js");
                const log = new RunLog(runId);
                await Promise.all([log.load(), log.load(), log.load()]);
                const texts = [...log.list.children].map((line) => line.textContent);
                await Promise.all([log.load(), log.load()]);
                return [texts, log.list.children.length];
            }""",
            run_id,
        )
    assert len(texts) == len(lines) == again, texts
    assert all(message in text for message, text in zip(lines, texts, strict=True)), texts
