"""The run page's header and steps in a real browser, against one `schemabridge serve --demo`
(embedded store) for the module: the operator's actions match what the API accepts for the
run's status (as it changes, too), and a run with a long vertex id reads on a phone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import (
    NARROW,
    DemoServer,
    chromium,
    opened,
    serve_demo,
    server_env,
    shoot,
    stop,
)

pytestmark = pytest.mark.slow

LONG_VERTEX = "reconcile-the-customer-ledger-with-the-billing-provider-mmmmmmmm"
"""As long as a vertex id may be (64 characters), with wide letters at the end."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    workdir = tmp_path_factory.mktemp("ui-run-page")
    env = server_env(workdir, f"sqlite+aiosqlite:///{workdir / 'sb.db'}")
    running = serve_demo(workdir, env)
    try:
        yield running
    finally:
        stop(running)


@pytest.fixture(scope="module")
def browser(server: DemoServer) -> Iterator[Any]:
    with chromium() as found:
        yield found


@pytest.fixture(autouse=True)
def quick_downstream(server: DemoServer) -> Iterator[None]:
    server.latency(0)
    yield
    server.latency(0)


def ticket(server: DemoServer, tenant: str, wait: bool = False) -> str:
    """Submit a support-ticket run; its id."""
    body = {"input": {"customerId": "cus_1", "subject": "hello"}, "tenantId": tenant}
    answer = server.call(f"/workflows/support-ticket/runs{'?wait=true' if wait else ''}", body)
    return str(answer.get("id") or answer["details"]["runId"])


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

RED = "rgb(180, 35, 24)"
"""--bad, the colour of a button that destroys something."""


def actions(page: Any) -> dict[str, dict[str, Any]]:
    bar = page.get_by_role("toolbar", name="Operator actions")
    return {b["label"]: b for b in bar.evaluate(BUTTONS_JS)}


def test_a_finished_run_offers_no_cancel(server: DemoServer, browser: Any) -> None:
    """The API refuses to cancel a SUCCEEDED or FAILED run (409 `run_ended`) and a CANCELLED
    one has nothing left to cancel. Like the page's other unavailable actions, Cancel then
    stays in its place but disabled: drawn like them (not red), out of the tab order, with a
    tooltip saying why."""
    succeeded = ticket(server, "finished", wait=True)
    server.script("/helpdesk/tickets", {"status": 422, "body": {"error": "validation_failed"}})
    failed = ticket(server, "finished", wait=True)
    server.latency(5_000)
    cancelled = ticket(server, "finished")
    server.call(f"/runs/{cancelled}/cancel", {})
    server.latency(0)
    for run_id, status in [(succeeded, "SUCCEEDED"), (failed, "FAILED")]:
        assert server.run_status(run_id) == status
        assert server.call(f"/runs/{run_id}/cancel", {})["code"] == "run_ended"
    assert server.call(f"/runs/{cancelled}/cancel", {})["changed"] is False

    with opened(browser, f"{server.ui}#/runs/{succeeded}") as (page, _):
        for run_id, word, why in [
            (succeeded, "succeeded", "only a pending or running run can be cancelled"),
            (failed, "failed", "only a pending or running run can be cancelled"),
            (cancelled, "cancelled", "already cancelled"),
        ]:
            page.goto(f"{server.ui}#/runs/{run_id}")
            page.locator("h1 .badge", has_text=word).wait_for()
            shown = actions(page)
            cancel, unavailable = shown["Cancel"], shown["Reprocess dead letters"]
            assert cancel["disabled"] and not cancel["focusable"], (word, cancel)
            assert cancel["background"] != RED, (word, cancel)
            assert why in cancel["title"], (word, cancel)
            assert unavailable["disabled"], (word, unavailable)
            for look in ("background", "color", "border"):
                assert cancel[look] == unavailable[look], (word, look, cancel, unavailable)
            if word != "failed":  # Retry is unavailable too, and looks it
                assert shown["Retry"]["disabled"], (word, shown["Retry"])
                assert shown["Retry"]["background"] == unavailable["background"], word
            shoot(page, f"run-actions-{word}")


def test_cancel_is_withdrawn_when_a_live_run_ends(server: DemoServer, browser: Any) -> None:
    """Opened while the run is going, Cancel is offered (and red); when the run succeeds
    while the page is open (its events arrive over SSE) Cancel turns unavailable."""
    server.latency(2_500)
    run_id = ticket(server, "live-end")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator(".live", has_text="live").wait_for()
        cancel = actions(page)["Cancel"]
        assert not cancel["disabled"] and cancel["focusable"], cancel
        assert cancel["background"] == RED, cancel
        shoot(page, "run-actions-live")
        server.latency(0)
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        page.locator(".actions button[disabled]", has_text="Cancel").wait_for()
        cancel = actions(page)["Cancel"]
        assert cancel["disabled"] and not cancel["focusable"], cancel
        assert cancel["background"] != RED, cancel
        shoot(page, "run-actions-live-ended")


FIT_JS = """() => {
  const section = document.querySelector('section[aria-labelledby="steps-title"]');
  const wrap = section.querySelector('.table-wrap');
  const cells = [...section.querySelectorAll('td')].filter((cell) => cell.offsetParent)
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
    table: wrap.scrollWidth, box: wrap.clientWidth, cells,
  };
}"""
"""How wide the page and the steps table are against what shows of them, and each cell."""


def test_the_steps_table_fits_a_phone(server: DemoServer, browser: Any) -> None:
    """At 420 px a 64-character vertex id wraps inside its cell (its link names it whole,
    in its title too), the table scrolls neither the page nor itself sideways, and every
    other column shows, named and unclipped, on the screen, the error too. The timeline's
    shortened label names the step whole in its tooltip."""
    path = "/run-page/long"
    server.call(
        "/workflows",
        {
            "name": "ui-run-page-long",
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
    answer = server.call("/workflows/ui-run-page-long/runs", {"input": {}, "tenantId": "phone"})
    run_id = str(answer["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.set_viewport_size(NARROW)
        link = page.locator("table.steps").get_by_role("button", name=LONG_VERTEX)
        link.wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        fit = page.evaluate(FIT_JS)
        shoot(page, "run-steps-long-id")
        assert fit["page"] <= fit["window"], fit
        assert fit["table"] <= fit["box"], {k: v for k, v in fit.items() if k != "cells"}
        for cell in fit["cells"]:
            assert cell["left"] >= 0 and cell["right"] <= NARROW["width"], cell
            assert not cell["clipped"], cell
        box = link.bounding_box()
        assert box is not None and box["x"] + box["width"] <= NARROW["width"], box
        assert link.get_attribute("title") == LONG_VERTEX
        # The other columns are each named beside their value, as the headers are off screen.
        named = [cell["named"] for cell in fit["cells"][:5]]
        assert named == ["none", '"Type"', '"Status"', '"Executions"', '"Duration"'], named
        assert "HTTP 422" in fit["cells"][5]["text"], fit["cells"][5]
        label = page.locator("svg.timeline .tl-label").first
        assert label.evaluate("(text) => text.firstChild.nodeValue").endswith("…")
        assert LONG_VERTEX in (label.locator("title").text_content() or "")
