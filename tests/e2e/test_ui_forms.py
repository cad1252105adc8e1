"""The monitor's forms, in a real browser against `schemabridge serve --demo`: the editor's
graph when the text stops being JSON (marked as the last valid drawing, in words, until the
text is JSON again), and the Deploy form's checks of whole numbers and ranges (the limits the
API publishes in /openapi.json, named by the form's labels) and its refusals from the API
(said once, stage pointers named by the field). Every page fails its test on a JavaScript or
console error, or on a request off loopback."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from api.cli.text import parse_duration
from tests.e2e.browser_harness import (
    LONG_VERTEX,
    NARROW,
    SCREENSHOTS,
    WIDE,
    DemoServer,
    demo_on_sqlite,
    failed_long_vertex_run,
    opened,
    shoot,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-forms") as running:
        yield running


# ── the first screen ────────────────────────────────────────────────────────────────────────


def test_a_demo_server_says_what_to_try_until_it_is_dismissed(
    server: DemoServer, browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        hint = page.locator("aside.demo-hint")
        hint.wait_for()
        text = hint.inner_text()
        assert text.startswith("A demo server: authentication is off")
        assert "Open a FAILED run" in text and "press Retry" in text
        assert "Reprocess dead letters" in text
        hint.get_by_role("link", name="Editor").wait_for()
        shoot(page, "runs-demo-hint")
        hint.get_by_role("link", name="FAILED run").click()
        page.wait_for_url("**#/runs?status=FAILED")
        assert page.locator("select[name=status]").input_value() == "FAILED"
        hint.get_by_role("button", name="Got it").click()
        assert hint.count() == 0
        page.reload()
        page.get_by_role("heading", name="Runs").wait_for()
        dismissed = page.evaluate("async () => (await import('./js/demo.js')).demoHint()")
        assert dismissed is None
        assert page.locator("aside.demo-hint").count() == 0


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


def test_a_key_written_twice_is_shown_at_its_line_and_blocks_publishing(
    server: DemoServer, browser: Any
) -> None:
    # JSON.parse keeps the last value: the editor would have sent DELETE as "✓ Valid".
    config = '{"url": "http://127.0.0.1:9/pull",\n "method": "POST",\n "method": "DELETE"}'
    text = '{"name": "ed-twice", "vertices": {"pull": {"type": "GATEWAY", "config": ' + config
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        page.fill("#document", text + "}}}")
        page.locator(".editor-state.bad", has_text='The key "method" is written twice').wait_for()
        problem = page.locator(".problem").first
        assert problem.get_attribute("data-line") == "3"
        assert '"method" appears more than once in this object' in problem.inner_text()
        assert "duplicate_key" in problem.inner_text()
        assert page.get_by_role("button", name="Publish").is_disabled()


CYCLE = {
    "name": "ed-cycle",
    "vertices": {
        "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/a"}},
        "c": {"type": "GATEWAY", "dependsOn": ["d"], "config": {"url": "http://127.0.0.1:9/c"}},
        "d": {"type": "GATEWAY", "dependsOn": ["c"], "config": {"url": "http://127.0.0.1:9/d"}},
        "f": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/f"}},
    },
}
"""c and d wait for each other; a and f, laid out beside them in one layer, for nothing."""

EDGES_JS = """() => [...document.querySelectorAll('svg.dag .edge')].map((edge) => {
  const nodes = [...document.querySelectorAll('svg.dag .node')].map((node) => {
    const box = node.querySelector('.node-box');
    return { id: node.dataset.vertex, x: +box.getAttribute('x'), y: +box.getAttribute('y'),
             w: +box.getAttribute('width'), h: +box.getAttribute('height') };
  });
  const length = edge.getTotalLength();
  const inside = [];
  for (let i = 0; i <= 100; i++) {
    const p = edge.getPointAtLength((length * i) / 100);
    for (const n of nodes) {
      if (p.x > n.x + 1 && p.x < n.x + n.w - 1 && p.y > n.y + 1 && p.y < n.y + n.h - 1) {
        inside.push(n.id);
      }
    }
  }
  const end = edge.getPointAtLength(length);
  const ends = nodes.filter((n) => end.x >= n.x - 1 && end.x <= n.x + n.w + 1
    && end.y >= n.y - 1 && end.y <= n.y + n.h + 1).map((n) => n.id);
  return { edge: edge.dataset.edge, cycle: edge.classList.contains('cycle'),
           inside: [...new Set(inside)], ends };
})"""
"""Each edge of the drawn graph: the nodes any point of it lies inside (an edge drawn through
a node hides behind it and seems to come from elsewhere), and the nodes its arrowhead's tip
touches."""


def test_every_vertex_of_a_cycle_is_marked_and_its_edges_drawn_around_the_nodes(
    server: DemoServer, browser: Any
) -> None:
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        page.fill("#document", json.dumps(CYCLE, indent=2))
        page.locator("figcaption", has_text="ed-cycle").wait_for()
        problem = page.locator('.problem[data-pointer="/vertices/c/dependsOn/0"]')
        assert "(cycle)" in problem.inner_text()
        marked = {
            vertex: "has-problem"
            in (page.locator(f'svg.dag .node[data-vertex="{vertex}"]').get_attribute("class") or "")
            for vertex in "acdf"
        }
        assert marked == {"a": False, "c": True, "d": True, "f": False}
        label = page.locator('svg.dag .node[data-vertex="d"]').get_attribute("aria-label")
        assert label == "d GATEWAY; 1 problem"
        edges = sorted(page.evaluate(EDGES_JS), key=lambda e: e["edge"])
        assert edges == [
            {"edge": "c→d", "cycle": True, "inside": [], "ends": ["d"]},
            {"edge": "d→c", "cycle": True, "inside": [], "ends": ["c"]},
        ]
        shoot(page, "editor-cycle")


def test_problems_are_listed_in_the_order_they_are_written(
    server: DemoServer, browser: Any
) -> None:
    # The API sorts by pointer: /vertices/a/type, /vertices/m/dependsOn/0, /vertices/z/...
    text = """{
  "name": "ed-order",
  "vertices": {
    "z": {"type": "GATEWAY", "config": {"url": "127.0.0.1/z"}},
    "m": {"type": "GATEWAY", "dependsOn": ["ghost"], "config": {"url": "http://127.0.0.1:9/m"}},
    "a": {"type": "gateway", "config": {"url": "127.0.0.1/a"}}
  }
}"""
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        page.fill("#document", text)
        page.locator("figcaption", has_text="ed-order").wait_for()
        listed = [
            (p.get_attribute("data-line"), p.get_attribute("data-pointer"))
            for p in page.locator(".problem").all()
        ]
        assert listed == [
            ("4", "/vertices/z/config/url"),
            ("5", "/vertices/m/dependsOn/0"),
            ("6", "/vertices/a/type"),  # before its url: further left on the line
            ("6", "/vertices/a/config/url"),
        ]


# ── the Deploy form ─────────────────────────────────────────────────────────────────────────


def open_the_form(page: Any) -> Any:
    """On v2's page (opened at `#/workflows/<name>?v=2`): the Deploy dialog."""
    page.locator(".deploy-state-line", has_text="v2 does not serve yet").wait_for()
    page.get_by_role("button", name="Deploy v2…").click()
    dialog = page.locator("dialog.deploy-dialog")
    dialog.wait_for()
    return dialog


def refused(page: Any, dialog: Any, field: str, value: str) -> str:
    """Type `value` into `field`, press Deploy: what the dialog says."""
    page.fill(field, value)
    dialog.get_by_role("button", name="Deploy v2").click()
    state = dialog.locator(".deploy-state.error-box")
    state.wait_for()
    return str(state.inner_text())


OUT_OF_RANGE = [
    ("#deploy-min-runs", "-1", "✕ Runs per stage: -1 is not from 0 to 1,000,000,000"),
    ("#deploy-max-failure-ratio", "1.5", "✕ Maximum failure ratio: 1.5 is not from 0 to 1"),
    ("#deploy-margin", "2", "✕ Margin over serving: 2 is not from 0 to 1"),
    ("#deploy-min-finished", "3.5", "✕ Finished runs before judging: 3.5 is not a whole number"),
    ("#deploy-stages", "0, 100", "✕ Stages: 0 is not over 0 and at most 100"),
    ("#deploy-stages", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100", "✕ Stages: 11 weights, at most 10"),
    (
        "#deploy-min-duration",
        "9999999",
        "✕ Time per stage: 9999999 is not from 0 to 2,592,000 seconds",
    ),
    (
        "#deploy-min-duration",
        "31d",
        "✕ Time per stage: 31d (2,678,400 s) is not from 0 to 2,592,000 seconds",
    ),
    (
        "#deploy-min-duration",
        "soon",
        '✕ Time per stage: "soon" is not a duration: seconds (90) or a span (60s, 5m, 2h, 1d)',
    ),
]
"""A field, a value the API refuses, what the form says of it (the limits are the API's)."""


def test_the_deploy_form_checks_whole_numbers_and_ranges_before_sending(
    server: DemoServer, browser: Any
) -> None:
    from playwright.sync_api import expect  # after the harness found Chromium

    server.publish_versions("forms-ranges", failing=False)
    with opened(browser, f"{server.ui}#/workflows/forms-ranges?v=2") as (page, _):
        sent: list[str] = []

        def on_request(request: Any) -> None:
            if request.method == "POST" and "/deployments" in request.url:
                sent.append(request.url)

        page.on("request", on_request)
        dialog = open_the_form(page)
        page.set_viewport_size(NARROW)  # the dialog scrolls: the refusal is brought into view
        page.fill("#deploy-min-runs", "2.5")
        page.keyboard.press("Enter")  # from the field: no click scrolls the dialog down
        state = dialog.locator(".deploy-state.error-box")
        assert state.inner_text() == "✕ Runs per stage: 2.5 is not a whole number"
        assert state.get_attribute("role") == "alert"
        expect(state).to_be_in_viewport(ratio=0.9)  # all of it, give or take a pixel
        # as it is seen at 420 px (shoot's own narrow shot lays the page out again first)
        page.screenshot(path=str(SCREENSHOTS / "deploy-form-whole-number-narrow.png"))
        page.set_viewport_size(WIDE)
        shoot(page, "deploy-form-whole-number", narrow=False)
        page.fill("#deploy-min-runs", "20")
        for field, value, said in OUT_OF_RANGE:
            kept = page.input_value(field)
            assert refused(page, dialog, field, value) == said
            page.fill(field, kept)
        assert sent == []  # every one refused in the browser

        page.fill("#deploy-stages", "50, 100")
        # The span the CLI's --min-duration takes ("30s" was "not a number" here).
        page.fill("#deploy-min-duration", "30s")
        dialog.get_by_role("button", name="Deploy v2").click()
        page.wait_for_url("**#/deployments/*")
        deployment_id = page.url.rsplit("/", 1)[1]
    # The start's preview (nothing to warn of here), then the start itself.
    assert [url.rsplit("/workflows/forms-ranges/", 1)[1] for url in sent] == [
        "deployments/preview",
        "deployments",
    ]
    stages = server.call(f"/deployments/{deployment_id}")["stages"]
    assert [s["minDurationSeconds"] for s in stages] == [30, 30]
    server.call(f"/deployments/{deployment_id}/abort", {})


SPANS = ["90", "30s", "5m", "1h", "2 h", "1.5m", "1d", "1w", "10 sec", "3MIN", " 60 ", "0"]
NOT_SPANS = ["soon", "-5", "5x", "", "m", "1.5.2s", "5 minutes"]


def test_the_form_reads_a_span_by_the_clis_rule(server: DemoServer, browser: Any) -> None:
    """One rule at both front doors: the form's parser answers what `--min-duration` does."""
    with opened(browser, f"{server.ui}#/workflows") as (page, _):
        read = page.evaluate(
            """async (texts) => {
                const { parseSpan } = await import("./js/format.js");
                return texts.map((text) => {
                    try { return parseSpan(text); } catch (error) { return error.message; }
                });
            }""",
            [*SPANS, *NOT_SPANS],
        )
    assert read[: len(SPANS)] == [parse_duration(text) for text in SPANS]
    for text, said in zip(NOT_SPANS, read[len(SPANS) :], strict=True):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(text)
        assert isinstance(said, str) and "is not a duration" in said, (text, said)


def test_a_refusal_from_the_api_is_said_once_with_the_fields_label(
    server: DemoServer, browser: Any
) -> None:
    """A server that publishes no limits (an older one, or /openapi.json turned off): the
    form sends what it cannot check and says the API's refusal once, by the field's label."""
    server.publish_versions("forms-refusal", failing=False)
    with opened(browser, f"{server.ui}#/workflows/forms-refusal?v=2") as (page, found):
        found.allowed_errors += ["status of 404", "status of 422"]  # /openapi.json; the refusal
        page.route("**/openapi.json", lambda route: route.fulfill(status=404, body="{}"))
        dialog = open_the_form(page)
        page.fill("#deploy-stages", "50, 100")
        said = refused(page, dialog, "#deploy-min-runs", "2.5")
        assert said == (
            "✕ Runs per stage: Input should be a valid integer, got a number with a "
            "fractional part (invalid_request)"
        )
        assert "/stages/" not in said
        shoot(page, "deploy-form-api-refusal", narrow=False)


# ── the start of a run ──────────────────────────────────────────────────────────────────────


def test_the_start_form_fills_in_the_required_fields_of_the_input(
    server: DemoServer, browser: Any
) -> None:
    """The form starts from the inputSchema's required fields with blank values of their
    types, and names them, instead of `{}` and a refusal (a tour's first run)."""
    document = {
        "name": "forms-skeleton",
        "inputSchema": {
            "type": "object",
            "required": ["customerId", "count", "options"],
            "properties": {
                "customerId": {"type": "string"},
                "count": {"type": "integer", "minimum": 0},
                "options": {
                    "type": "object",
                    "required": ["mode"],
                    "properties": {"mode": {"enum": ["fast", "slow"]}},
                },
                "note": {"type": "string"},
            },
        },
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{server.downstream}/orders"}}},
    }
    assert server.call("/workflows", document)["version"] == 1
    with opened(browser, f"{server.ui}#/workflows/forms-skeleton") as (page, _):
        field = page.locator("#run-input")
        field.wait_for()
        prefilled = json.loads(field.input_value())
        said = page.locator(".start-form p.muted").inner_text()
        page.get_by_role("button", name="Start a run of v1").click()
        page.wait_for_url(re.compile(r".*#/runs/[0-9a-f-]{36}$"))
    assert prefilled == {"customerId": "", "count": 0, "options": {"mode": "fast"}}
    assert "it needs customerId (string), count (integer), options (object)" in said, said


def test_the_start_form_says_what_a_workflow_without_a_schema_takes(
    server: DemoServer, browser: Any
) -> None:
    """A tour's workflow without an inputSchema showed an empty line under "Start a run" (a
    gap, and nothing about what input it takes): it says that any JSON input is taken."""
    document = {
        "name": "forms-no-schema",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{server.downstream}/orders"}}},
    }
    assert server.call("/workflows", document)["version"] == 1
    with opened(browser, f"{server.ui}#/workflows/forms-no-schema") as (page, _):
        page.locator("#run-input").wait_for()
        said = page.locator(".start-form p.muted").inner_text()
        assert page.locator("#run-input").input_value() == "{}"
    assert said == "The workflow has no inputSchema: any JSON input is taken, as its steps read it."


def test_an_unpaired_surrogate_is_refused_where_it_is_typed(
    server: DemoServer, browser: Any
) -> None:
    """A tour resolved a step with {"note": "\\ud800"}: the dialog said "✓ valid JSON", sent
    it, and closed on the API's refusal (422 not_utf8), the text typed lost. The dialog
    says it at its line and column, as the API would refuse it, and keeps Resolve disabled;
    the start form says it before sending too."""
    run_id = failed_long_vertex_run(server, "forms-surrogate", "acme")
    typed = '{"status": 200, "body": {"note": "\\ud800"}}'
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name=f"Resolve {LONG_VERTEX}…").click()
        dialog = page.locator("dialog[open]")
        dialog.locator("textarea").fill(typed)
        said = dialog.locator(".json-state").inner_text()
        assert said.startswith("✕ line 1, column 34: this string holds an unpaired UTF-16"), said
        assert dialog.get_by_role("button", name="Resolve").is_disabled()
        dialog.get_by_role("button", name="Cancel").click()
        page.goto(f"{server.ui}#/workflows/forms-surrogate")
        page.locator("#run-input").fill('{"note": "\\udc00 alone"}')
        page.get_by_role("button", name="Start a run of v1").click()
        state = page.locator(".start-form [role=status]")
        state.get_by_text("unpaired UTF-16 surrogate").wait_for()
        assert state.inner_text().startswith("✕ the input: line 1, column 10: this string"), (
            state.inner_text()
        )
        assert "#/workflows/forms-surrogate" in page.url


def test_a_problem_with_the_whole_input_is_said_as_the_clis_are(
    server: DemoServer, browser: Any
) -> None:
    """The API's pointer "" is the whole document, written "(document)" as the CLI writes it:
    "/" would be the member named "" (RFC 6901)."""
    document = {
        "name": "forms-input",
        "inputSchema": {
            "type": "object",
            "required": ["customerId"],
            "properties": {"customerId": {"type": "string"}},
        },
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{server.downstream}/orders"}}},
    }
    assert server.call("/workflows", document)["version"] == 1
    with opened(browser, f"{server.ui}#/workflows/forms-input") as (page, seen):
        seen.allowed_errors.append("422")  # the refusal the test provokes
        page.fill("#run-input", "{}")
        page.get_by_role("button", name="Start a run of v1").click()
        state = page.locator(".error-box")
        state.wait_for()
        said = state.inner_text()
        assert "/:" not in said
        # One problem a line, each ending its own sentence (joined, ".; " ran them together).
        assert state.locator("li").all_inner_texts() == [
            '(document): The input is missing the required field "customerId".'
        ]
        shoot(page, "start-run-whole-input")
        # The Deploy form's refusals name a pointer that is no field of its as written too.
        assert page.evaluate("async () => (await import('./js/deploy_limits.js')).labelOf('')") == (
            "(document)"
        )
