"""The run page of a live run in a real browser, against one `schemabridge serve --demo`
(embedded store) for the module: its times move on between the run's events (the page's
clock is Playwright's, moved by the test)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import (
    DemoServer,
    demo_on_sqlite,
    opened,
    shoot,
    ticket,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_downstream")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-run-live") as running:
        yield running


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
