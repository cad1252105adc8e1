"""The monitor's forms, in a real browser against `schemabridge serve --demo`: the editor's
graph when the text stops being JSON (marked as the last valid drawing, in words, until the
text is JSON again). Every page fails its test on a JavaScript or console error, or on a
request off loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import (
    DemoServer,
    chromium,
    demo_on_sqlite,
    opened,
    shoot,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-forms") as running:
        yield running


@pytest.fixture(scope="module")
def browser(server: DemoServer) -> Iterator[Any]:
    with chromium() as found:
        yield found


# ── the editor ──────────────────────────────────────────────────────────────────────────────

PASTED = {
    "name": "ed-test",
    "vertices": {"pull": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/pull"}}},
}


def test_the_graph_of_text_that_is_not_json_is_marked_as_the_last_valid_one(
    server: DemoServer, browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        page.locator("figcaption", has_text="my-workflow").wait_for()
        stale = page.locator(".graph-stale")
        assert stale.count() == 0

        text = json.dumps(PASTED, indent=2)
        broken = text[:-2] + ",\n}"  # a trailing comma after the last member
        page.fill("#document", broken)
        page.locator(".editor-state.bad", has_text="not JSON").wait_for()
        line = page.locator(".problem").first.get_attribute("data-line")
        stale.wait_for()
        note = stale.inner_text()
        assert "Showing the last text that was JSON" in note
        assert f"fix line {line} to update" in note
        graphs = page.locator(".editor-graphs")
        assert "stale" in (graphs.get_attribute("class") or "")
        assert graphs.get_attribute("aria-describedby") == stale.get_attribute("id")
        shoot(page, "editor-graph-stale")

        page.fill("#document", text)
        page.locator("figcaption", has_text="ed-test").wait_for()
        page.locator(".editor-state.ok").wait_for()
        assert stale.count() == 0
        assert "stale" not in (graphs.get_attribute("class") or "")
        assert graphs.get_attribute("aria-describedby") is None
        assert page.locator("figcaption", has_text="my-workflow").count() == 0
