"""Every page of the monitor, checked by axe-core (the accessibility rules engine browsers'
developer tools use, bundled by axe-playwright-python) in a real browser against `schemabridge
serve --demo` with something on each page: a fan-out whose join failed, a failed run with its
step selected, a workflow, the editor. A page with any violation (contrast, names, labels,
heading order, keyboard reach of what scrolls, ...) fails, each listed with where."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from axe_playwright_python.base import AXE_SCRIPT

from tests.e2e.browser_harness import NARROW, DemoServer, demo_on_sqlite, opened, ticket
from tests.e2e.test_ui_monitor_ops import failed_fan_out

pytestmark = pytest.mark.slow

RUN_AXE = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations.map(
  (v) => ({id: v.id, impact: v.impact, help: v.help,
           nodes: v.nodes.map((n) => ({target: n.target.join(' ')}))}))"""

SVG_TEXT_RULE = "label-content-name-mismatch"
"""axe reads a graph node's lines (SVG `text` elements, inline) as one word run together
("lookupGATEWAY✓ succeeded"), which no name spaced as a reader says it contains; the node's
name does hold its lines, in order, each once (graph.js, `nodeLabel`), which
`test_a_graph_nodes_name_holds_what_it_shows` checks."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-a11y") as running:
        yield running


@pytest.fixture(scope="module")
def scene(server: DemoServer) -> dict[str, str]:
    fan_out = failed_fan_out(server, "a11y", 4, failing={2})
    server.script("/helpdesk/tickets", {"status": 422, "body": {"error": "subject too short"}})
    failed = ticket(server, tenant="a11y")
    assert server.wait_status(failed, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    return {"fan_out": fan_out, "failed": failed}


def violations(page: Any) -> list[str]:
    """What axe finds on the page as it is drawn now, a line per element, the graph nodes'
    SVG text reading left out (`SVG_TEXT_RULE`)."""
    page.evaluate(AXE_SCRIPT)
    found = []
    for rule in page.evaluate(RUN_AXE):
        for node in rule["nodes"]:
            if rule["id"] == SVG_TEXT_RULE and "data-vertex" in node["target"]:
                continue
            found.append(f"[{rule['impact']}] {rule['id']} at {node['target']}: {rule['help']}")
    return found


PAGES = {
    "runs": ("#/runs", "table.runs tbody tr td.status-cell"),
    "workflows": ("#/workflows", "table tbody tr"),
    "workflow": ("#/workflows/support-ticket", "svg.dag"),
    "editor": ("#/editor", "svg.dag"),
    "deployments": ("#/deployments", "h1"),
    "destinations": ("#/destinations", ".destination"),
    "services": ("#/services", "tbody tr"),
}


@pytest.mark.parametrize("name", PAGES)
def test_each_page_has_no_violation(
    server: DemoServer, scene: Any, browser: Any, name: str
) -> None:
    path, drawn = PAGES[name]
    with opened(browser, f"{server.ui}{path}", bypass_csp=True) as (page, _):
        page.locator(drawn).first.wait_for()
        assert violations(page) == []


@pytest.mark.parametrize("which", ["fan_out", "failed"])
def test_a_run_page_with_its_step_selected_has_no_violation(
    server: DemoServer, scene: dict[str, str], browser: Any, which: str
) -> None:
    with opened(browser, f"{server.ui}#/runs/{scene[which]}", bypass_csp=True) as (page, _):
        page.locator(".error-box .error-title").first.wait_for()
        page.locator(".step-panel h3").wait_for()
        if which == "fan_out":
            page.locator(".long-tail h3").wait_for()
        for details in page.locator("details").all():  # what they hide is checked too
            details.evaluate("(d) => { d.open = true; }")
        assert violations(page) == []


def test_a_graph_nodes_name_holds_what_it_shows(
    server: DemoServer, scene: dict[str, str], browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/runs/{scene['failed']}") as (page, _):
        node = page.locator('svg.dag .node[data-vertex="open-ticket"]')
        node.wait_for()
        lines = node.locator("text").all_text_contents()
        assert lines == ["open-ticket", "GATEWAY", "✕ failed"], lines
        assert node.get_attribute("aria-label") == "open-ticket GATEWAY ✕ failed"


def test_an_actions_dialog_has_no_violation(
    server: DemoServer, scene: dict[str, str], browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/runs/{scene['failed']}", bypass_csp=True) as (page, _):
        page.get_by_role("button", name="Retry").first.click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        assert violations(page) == []
        dialog.get_by_role("button", name="Cancel").click()
    assert server.run_status(scene["failed"]) == "FAILED"


@pytest.mark.parametrize("path", ["#/runs", "RUN"])
def test_a_phone_sized_page_has_no_violation(
    server: DemoServer, scene: dict[str, str], browser: Any, path: str
) -> None:
    """The narrow layout is its own (tables read as cards, the header wraps): checked too."""
    url = f"{server.ui}{path.replace('RUN', '#/runs/' + scene['fan_out'])}"
    with opened(browser, url, bypass_csp=True, viewport=NARROW) as (page, _):
        page.locator("h1").first.wait_for()
        page.locator("table tbody tr").first.wait_for()
        assert violations(page) == []
