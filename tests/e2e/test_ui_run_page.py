"""The run page's header and steps in a real browser, against one `schemabridge serve --demo`
(embedded store) for the module: the operator's actions match what the API accepts for the
run's status (as it changes, too), a run with a long vertex id reads on a phone, the
attempts table of a step that waits to retry shows every column at a desktop width and,
attempt by attempt, on a phone, and the run's tables fit a tablet without scrolling."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.cli.run_display import holder_line
from api.cli.wire import HolderView
from tests.e2e.browser_harness import (
    FIT_JS,
    LONG_VERTEX,
    NARROW,
    WIDE,
    DemoServer,
    actions,
    assert_fits_a_phone,
    demo_on_sqlite,
    eventually,
    failed_long_vertex_run,
    open_on_own_clock,
    opened,
    pause_clock,
    shoot,
    ticket,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_downstream")]


QUICK_SERVE = {"SCHEMABRIDGE_LEASE_S": "12", "SCHEMABRIDGE_SHUTDOWN_GRACE_S": "1"}
"""A worker records a step's admission wait at its lease renewals, every third of the lease
(10 s by default): a 12 s lease shows it within 4 s. The module's last test leaves calls of a
cancelled run in flight for 20 s, which no test waits for: the stop gives them 1 s."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-run-page", QUICK_SERVE) as running:
        yield running


RED = "rgb(180, 35, 24)"
"""--bad, the colour of a button that destroys something."""


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
            (succeeded, "succeeded", "only a running run can be cancelled"),
            (failed, "failed", "only a running run can be cancelled"),
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
    """Opened while the run is going, Cancel is offered (and red) and its running step says
    which worker holds it and that it is alive; when the run succeeds while the page is open
    (its events arrive over SSE) Cancel turns unavailable."""
    server.latency(2_500)
    run_id = ticket(server, "live-end")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator(".live", has_text="live").wait_for()
        cancel = actions(page)["Cancel"]
        assert not cancel["disabled"] and cancel["focusable"], cancel
        assert cancel["background"] == RED, cancel
        # Its RUNNING step names the worker holding it (the serve process's own, beating).
        held = page.locator(".waiting .holder-line").first
        held.wait_for()
        assert re.search(r"is held by worker serve-\S+ \(alive\b", held.inner_text()), (
            held.inner_text()
        )
        assert "lease ends at" in held.inner_text()
        shoot(page, "run-actions-live")
        server.latency(0)
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        page.locator(".actions button[disabled]", has_text="Cancel").wait_for()
        cancel = actions(page)["Cancel"]
        assert cancel["disabled"] and not cancel["focusable"], cancel
        assert cancel["background"] != RED, cancel
        shoot(page, "run-actions-live-ended")


def test_a_dead_holders_line_says_when_its_lease_has_ended(
    server: DemoServer, browser: Any
) -> None:
    """The holder line of a step whose worker is presumed dead said "taken back when its
    lease ends at T" after T too, when only the next worker's claim takes the step back. It
    now says what `runs show` says (`holder_line`), before the lease ends and, without a
    reload, once it has (the API's answer is edited: a holder presumed dead whose lease ends
    5 s after the page first reads the run: counted from then, not from before the page
    opened, which on a busy machine took longer than the lease had left)."""
    server.latency(20_000)
    run_id = ticket(server, "dead-holder")
    lease: dict[str, float] = {}
    holder = {"worker": "w-gone", "state": "presumed_dead", "lastSeen": None, "silentS": 42}

    def dead(route: Any) -> None:
        answer = route.fetch().json()
        ends = lease.setdefault("ends", time.time() + 5)
        for step in answer["steps"]:
            if step["status"] == "RUNNING":
                step.update(holder=holder, leaseExpiresAt=ends)
        route.fulfill(json=answer)

    def cli_words(vertex: str, now: float) -> str:
        said = holder_line(HolderView.model_validate(holder), lease["ends"], now)
        return f"{vertex} is {said}".replace("`", "")

    try:
        with opened(browser, "about:blank") as (page, _):
            # The lease's 5 s are run on the page's clock, not waited for.
            open_on_own_clock(page, f"{server.ui}#/runs/{run_id}")
            page.route(f"**/runs/{run_id}", dead)
            page.reload()
            line = page.locator(".waiting .holder-line").first
            line.wait_for()
            vertex = line.get_attribute("data-vertex")
            before = line.inner_text().removeprefix("⚠ ")
            assert before == cli_words(vertex, lease["ends"] - 1), before
            assert "taken back when its lease ends at" in before
            page.clock.run_for(6_000)
            eventually(lambda: "lease ended" in line.inner_text(), timeout_s=15, what="ended")
            after = line.inner_text().removeprefix("⚠ ")
            assert after == cli_words(vertex, lease["ends"] + 1), after
            assert "taken back when" not in page.locator("main").inner_text()
            assert line.locator("code").inner_text() == "schemabridge services"
            shoot(page, "run-dead-holder-lease-ended", narrow=False)
    finally:
        server.latency(0)


def test_the_focused_action_keeps_the_focus_while_the_run_progresses(
    server: DemoServer, browser: Any
) -> None:
    """A keyboard user on Cancel stays on it while the run's steps change and its fan-out's
    progress streams in: the operator's buttons are drawn anew only when what they offer
    changes, so the focused button is the same element after `collect` ended and children
    ended (it carries a mark set before)."""
    items = [{"id": i, "name": f"item-{i}"} for i in range(12)]
    server.script("/items", {"sleep_ms": 6_000, "body": {"items": items}})
    for held in (9, 10, 11):
        server.script(f"/billing/subscriptions/{held}/charges", {"sleep_ms": 8_000})
    body = {"input": {"batchSize": 12, "renewalDate": "2025-07-01"}, "tenantId": "focus"}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    try:
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            page.locator(".live", has_text="live").wait_for()
            cancel = page.get_by_role("toolbar", name="Operator actions").get_by_role(
                "button", name="Cancel"
            )
            cancel.focus()
            cancel.evaluate("(button) => { button.dataset.mark = 'before'; }")
            steps = {s["vertexId"]: s["status"] for s in server.call(f"/runs/{run_id}")["steps"]}
            assert steps["collect"] == "RUNNING", f"the page opened too late to test: {steps}"
            ended = "() => Number(document.querySelector('.fanout')?.ariaValueNow) >= 9"
            page.wait_for_function(ended, timeout=30_000)
            focused = page.evaluate(
                "() => [document.activeElement.textContent, document.activeElement.dataset.mark]"
            )
            assert focused == ["Cancel", "before"], focused
            assert server.run_status(run_id) == "RUNNING"
    finally:
        server.call(f"/runs/{run_id}/cancel", {})


def test_a_cancelled_fan_out_says_how_many_children_were_cancelled(
    server: DemoServer, browser: Any
) -> None:
    """Nine children succeed, three are held in their calls, the run is cancelled: the
    spawner's node says "⊘ 3 cancelled" beside "12/12" (its bar is nearly all green)."""
    items = [{"id": i, "name": f"item-{i}"} for i in range(12)]
    server.script("/items", {"body": {"items": items}})
    for held in (9, 10, 11):
        server.script(f"/billing/subscriptions/{held}/charges", {"sleep_ms": 8_000})
    body = {"input": {"batchSize": 12, "renewalDate": "2025-07-01"}, "tenantId": "cancelled"}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])

    def fanout() -> dict[str, int]:
        return dict(server.call(f"/runs/{run_id}")["fanout"] or {})

    eventually(lambda: fanout().get("succeeded", 0) >= 9, what="nine children succeeded")
    server.call(f"/runs/{run_id}/cancel", {})
    eventually(lambda: fanout().get("cancelled") == 3, what="three children cancelled")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        renew = page.locator(".dag .node", has_text="renew")
        renew.locator(".node-fanout-cancelled", has_text="⊘ 3 cancelled").wait_for()
        assert renew.locator(".node-fanout").text_content() == "12/12"
        shoot(page, "run-fanout-cancelled", narrow=False)


def test_the_steps_table_fits_a_phone(server: DemoServer, browser: Any) -> None:
    """At 420 px a 64-character vertex id wraps inside its cell (its link names it whole,
    in its title too), the table scrolls neither the page nor itself sideways, and every
    other column shows, named and unclipped, on the screen, the error too. The timeline's
    shortened label names the step whole in its tooltip."""
    run_id = failed_long_vertex_run(server, "ui-run-page-long", tenant="phone")

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.set_viewport_size(NARROW)
        link = page.locator("table.steps").get_by_role("button", name=LONG_VERTEX)
        link.wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        fit = page.evaluate(FIT_JS, ["table.steps", "td"])
        shoot(page, "run-steps-long-id")
        assert_fits_a_phone(fit)
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


CLOSED_PORT = "http://127.0.0.1:9"
"""Where nothing listens (discard): each call fails with an I/O error, which has words."""


def retrying_run(server: DemoServer, tenant: str, base: str | None = None) -> str:
    """A run whose GATEWAY was answered 503 twice (the second call 300 ms after the first), or
    could not connect to `base`, and waits to be dispatched again: its attempts table has
    every column filled, "Retry after" too. Its id, once the step waits (after a 503) or has
    failed (an I/O error is not dispatched again)."""
    path = f"/run-page/retry-{tenant}"
    server.call(
        "/workflows",
        {
            "name": f"ui-run-page-retry-{tenant}",
            "vertices": {
                "charge-card": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base or server.downstream}{path}",
                        "retry": {"maxAttempts": 2, "baseDelayMs": 300},
                    },
                },
            },
        },
    )
    server.script(path, *[{"status": 503, "body": {"error": "unavailable"}}] * 10)
    answer = server.call(
        f"/workflows/ui-run-page-retry-{tenant}/runs", {"input": {}, "tenantId": tenant}
    )
    run_id = str(answer["id"])

    def waiting() -> bool:
        (step,) = server.call(f"/runs/{run_id}")["steps"]
        return step["status"] in {"READY", "FAILED"} and len(step["history"]) == 2

    eventually(waiting, what=f"run {run_id} waiting to retry")
    return run_id


def open_attempts(page: Any) -> None:
    page.locator("table.attempts tbody tr").nth(1).wait_for()
    page.locator(".live", has_text=re.compile("live|up to date")).wait_for()


@pytest.mark.parametrize("base", [None, CLOSED_PORT], ids=["http-503", "io-error"])
def test_every_attempts_column_shows_on_a_desktop(
    server: DemoServer, browser: Any, base: str | None
) -> None:
    """At 1280 x 800 the step panel's attempts table shows all its columns, "Retry after" of a
    step waiting to retry too, without scrolling inside its box: no cell is cut or past it,
    whether its attempts were answered (503) or failed with an error message."""
    tenant = "attempts-wide" if base is None else "attempts-wide-io"
    run_id = retrying_run(server, tenant, base)
    try:
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            open_attempts(page)
            fit = page.evaluate(FIT_JS, ["table.attempts", "th, td"])
            shoot(page, f"run-attempts-{tenant}")
            assert fit["page"] <= fit["window"], fit
            assert fit["table"] <= fit["box"], {k: v for k, v in fit.items() if k != "cells"}
            texts = [cell["text"] for cell in fit["cells"]]
            assert "Retry after" in texts, texts
            # The backoff is the least the next attempt waited (admission may hold it longer).
            assert any(text.startswith("≥ 300 ms") for text in texts), texts
            errors = [text for text in texts if "cannot connect to" in text]
            assert len(errors) == (0 if base is None else 2), texts
            for cell in fit["cells"]:
                assert fit["left"] <= cell["left"] and cell["right"] <= fit["right"], cell
                assert not cell["clipped"], cell
    finally:
        server.call(f"/runs/{run_id}/cancel", {})


@pytest.mark.parametrize("base", [None, CLOSED_PORT], ids=["http-503", "io-error"])
def test_the_attempts_table_fits_a_phone(
    server: DemoServer, browser: Any, base: str | None
) -> None:
    """At 420 px the attempts table scrolls neither the page nor itself sideways: each
    attempt is a block, its cells each named beside their value, none cut or off screen,
    its error (if any) on its own lines under it."""
    tenant = "attempts-narrow" if base is None else "attempts-narrow-io"
    run_id = retrying_run(server, tenant, base)
    try:
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            page.set_viewport_size(NARROW)
            open_attempts(page)
            fit = page.evaluate(FIT_JS, ["table.attempts", "th, td"])
            shoot(page, f"run-attempts-{tenant}")
            assert_fits_a_phone(fit)
            named = {cell["named"] for cell in fit["cells"]}
            assert '"Retry after"' in named and '"HTTP"' in named, named
    finally:
        server.call(f"/runs/{run_id}/cancel", {})


POOL_EXHAUSTED = "database connection pool exhausted"
LONG_ANSWER = "<i>upstream</i> " + "timeout waiting for a connection; " * 8
"""Over the 120 characters an attempt's answer shows on its line, with markup in it."""


def test_each_failed_attempt_shows_what_it_sent(server: DemoServer, browser: Any) -> None:
    """A step whose two attempts were answered 500: each attempt's row is followed by what
    the destination answered (a short answer on its line, a long one cut there and whole once
    expanded) and by what it sent, the method and URL in sight, the header names and the
    body's start once expanded, all as text (markup in the bodies stays text); and each
    names the worker that made it."""
    name, path = "ui-run-page-sent", "/run-page/sent"
    call = {
        "url": f"{server.downstream}{path}",
        "method": "POST",
        "headers": {"X-Order": "o-1"},
        "body": {"order": "o-1", "note": "<b>bold</b>"},
        "retry": {"maxAttempts": 2, "baseDelayMs": 10},
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": name, "vertices": {"post-order": vertex}})
    server.script(path, {"status": 500, "raw": POOL_EXHAUSTED}, {"status": 500, "raw": LONG_ANSWER})
    answer = server.call(f"/workflows/{name}/runs", {"input": {}, "tenantId": "sent"})
    run_id = str(answer["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        sent = page.locator("table.attempts .attempt-sent")
        sent.nth(1).wait_for()
        assert sent.count() == 2
        line = f"Sent: POST {server.downstream}{path}"
        assert [s.strip() for s in sent.locator("summary").all_inner_texts()] == [line, line]
        body = sent.nth(1).locator(".attempt-request-body")
        assert not body.is_visible()  # until expanded
        sent.nth(1).locator("summary").click()
        body.wait_for()
        assert '"note":"<b>bold</b>"' in body.inner_text().replace(" ", "")
        headers = sent.nth(1).locator(".attempt-sent-headers").inner_text()
        assert "x-order" in headers.lower(), headers
        assert page.locator("main b").count() == 0
        assert not sent.nth(0).locator(".attempt-request-body").is_visible()
        answered = page.locator("table.attempts .attempt-answer")
        assert answered.count() == 2
        first = answered.nth(0).inner_text().strip()
        assert first == f"Answered: {POOL_EXHAUSTED}", first
        cut = answered.nth(1).locator("summary").inner_text().strip()
        assert cut.startswith("Answered: <i>upstream</i> timeout") and cut.endswith("…"), cut
        assert answered.nth(1).locator(".attempt-answer-text").get_attribute("title") == LONG_ANSWER
        whole = answered.nth(1).locator(".attempt-answer-body")
        assert not whole.is_visible()  # until expanded
        answered.nth(1).locator("summary").click()
        whole.wait_for()
        assert whole.inner_text().strip() == LONG_ANSWER.strip()
        assert page.locator("main i").count() == 0
        # Which worker made each attempt (`serve`'s, by its service id), under its execution.
        workers = page.locator("table.attempts .attempt-worker").all_inner_texts()
        assert len(workers) == 2 and all(w.startswith("serve-") for w in workers), workers
        fit = page.evaluate(FIT_JS, ["table.attempts", "th, td"])
        assert fit["table"] <= fit["box"], {k: v for k, v in fit.items() if k != "cells"}
        shoot(page, "run-attempts-sent")
        page.set_viewport_size(NARROW)
        assert_fits_a_phone(page.evaluate(FIT_JS, ["table.attempts", "th, td"]))


def fan_out_run(server: DemoServer, tenant: str, size: int = 12, declined: int = 3) -> str:
    """A run of `nightly-subscription-renewals` over `size` subscriptions, the charge of
    subscription `declined` declined (402), so one child FAILED with an error; its id, once
    it has ended."""
    server.script(
        f"/billing/subscriptions/{declined}/charges",
        {"status": 402, "body": {"error": "card_declined", "message": "The card was declined."}},
    )
    body = {"input": {"batchSize": size, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"})
    return run_id


TIMELINE_JS = """() => {
  const wrap = document.querySelector('.timeline-wrap');
  const svg = [...wrap.querySelectorAll('svg.timeline')].find((s) => s.getClientRects().length);
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const texts = [...svg.querySelectorAll('text')].map((t) => {
    const box = t.getBoundingClientRect();
    return { text: t.firstChild.nodeValue, left: box.left, right: box.right,
             px: parseFloat(getComputedStyle(t).fontSize) * scale };
  });
  const bars = [...svg.querySelectorAll('.tl-bar')].map((b) => {
    const box = b.getBoundingClientRect();
    return { left: box.left, right: box.right };
  });
  return { wrap: wrap.scrollWidth, box: wrap.clientWidth, texts, bars };
}"""
"""How wide the shown timeline is against its box, and where its texts and bars are drawn
(their font size in CSS pixels as shown)."""


def test_the_children_table_fits_a_phone(server: DemoServer, browser: Any) -> None:
    """At 420 px the Children table of a fan-out scrolls neither the page nor itself
    sideways: each child is a block, every column (Duration too) named beside its value, none
    cut or off screen, a failed child's error on its own lines."""
    run_id = fan_out_run(server, "children-narrow")

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.set_viewport_size(NARROW)
        page.locator(".children-table tbody tr").nth(11).wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        fit = page.evaluate(FIT_JS, ["table.children-table", "td"])
        shoot(page, "run-children-narrow")
        assert_fits_a_phone(fit)
        named = [cell["named"] for cell in fit["cells"][:5]]
        assert named == ['"Item"', '"Status"', '"Run"', '"Started"', '"Duration"'], named
        errors = [cell for cell in fit["cells"] if "HTTP 402" in cell["text"]]
        assert len(errors) == 1, [cell["text"] for cell in fit["cells"]]
        assert errors[0]["width"] > NARROW["width"] / 2, errors[0]
        duration = page.locator("table.children-table td[data-label=Duration]").first
        box = duration.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= NARROW["width"]


def test_the_timeline_fits_a_phone(server: DemoServer, browser: Any) -> None:
    """At 420 px the timeline of a run does not scroll sideways: every label and bar is on
    the screen, its text at least 10 px tall, each step named in full up to 48 characters."""
    run_id = failed_long_vertex_run(server, "ui-run-page-timeline", tenant="timeline-narrow")

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.set_viewport_size(NARROW)
        page.locator("svg.timeline .tl-bar").first.wait_for(state="attached")
        page.locator(".live", has_text="up to date").wait_for()
        timeline = page.evaluate(TIMELINE_JS)
        shoot(page, "run-timeline-narrow")
        assert timeline["wrap"] <= timeline["box"], timeline
        for text in timeline["texts"]:
            assert text["left"] >= 0 and text["right"] <= NARROW["width"], text
            assert text["px"] >= 10, text
        assert len(timeline["bars"]) == 1, timeline
        for bar in timeline["bars"]:
            assert bar["left"] >= 0 and bar["right"] <= NARROW["width"], bar
        labels = [text["text"] for text in timeline["texts"]]
        assert any(LONG_VERTEX[:40] in label for label in labels), labels


def test_the_children_table_and_the_timeline_on_a_desktop(server: DemoServer, browser: Any) -> None:
    """At 1280 x 800 the Children table keeps its six columns under their headers, and the
    timeline its labels beside the bars, neither scrolling sideways."""
    run_id = fan_out_run(server, "children-wide", declined=4)

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator(".children-table tbody tr").nth(11).wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        fit = page.evaluate(FIT_JS, ["table.children-table", "th"])
        timeline = page.evaluate(TIMELINE_JS)
        assert fit["table"] <= fit["box"], fit
        headers = [cell["text"] for cell in fit["cells"]]
        assert headers == ["Item", "Status", "Run", "Started", "Duration", "Error"], headers
        first = page.locator("table.children-table tbody tr").first.bounding_box()
        assert first is not None and first["height"] < 60, first
        assert timeline["wrap"] <= timeline["box"], timeline
        # The labels are beside the bars, left of them all.
        label = timeline["texts"][0]
        assert label["right"] < min(bar["left"] for bar in timeline["bars"]), timeline


LIVE_JS = """() => {
  const live = document.querySelector('.page-head .live');
  const buttons = [...live.querySelectorAll('button')].map((b) => b.textContent);
  return { text: live.textContent, buttons };
}"""
"""The words of the run page's live-update indicator, and of the buttons in it."""


def test_an_ended_run_has_no_live_toggle(server: DemoServer, browser: Any) -> None:
    """A run that ended (succeeded, failed) has nothing live to follow: the header says the
    run ended, and offers no button there that could be read as resuming the run."""
    succeeded = ticket(server, "ended-header", wait=True)
    server.script("/helpdesk/tickets", {"status": 422, "body": {"error": "validation_failed"}})
    failed = ticket(server, "ended-header", wait=True)
    with opened(browser, f"{server.ui}#/runs/{succeeded}") as (page, _):
        for run_id, word in [(succeeded, "succeeded"), (failed, "failed")]:
            page.goto(f"{server.ui}#/runs/{run_id}")
            page.locator("h1 .badge", has_text=word).wait_for()
            page.locator(".live", has_text="up to date").wait_for()
            shown = page.evaluate(LIVE_JS)
            assert "run ended" in shown["text"], (word, shown)
            assert shown["buttons"] == [], (word, shown)
            assert "Resume" not in shown["text"], (word, shown)


ENDED_CHECK_MS = 10_000
"""How often the page reads an ended run again (`ENDED_CHECK_MS`, ui/static/js/pages/run.js)."""


def reject_next_ticket(server: DemoServer) -> None:
    server.script("/helpdesk/tickets", {"status": 422, "body": {"error": "validation_failed"}})


def test_an_ended_run_shows_what_an_operator_did_elsewhere(
    server: DemoServer, browser: Any
) -> None:
    """A FAILED run open in the monitor, retried by an operator elsewhere (the CLI, another
    tab; here the API): the page shows the run succeeded at its next look, without being
    reloaded, and withdraws its Retry."""
    reject_next_ticket(server)
    run_id = ticket(server, "ended-watch", wait=True)
    with opened(browser, "about:blank") as (page, _):
        # Its clock is run forward to its next look (10 s after the last), not waited for.
        open_on_own_clock(page, f"{server.ui}#/runs/{run_id}")
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.evaluate("() => { window.notReloaded = true; }")
        assert actions(page)["Retry"]["disabled"] is False
        assert server.call(f"/runs/{run_id}/retry", {})["stepsRetried"] == 1
        page.clock.run_for(ENDED_CHECK_MS)
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        assert page.evaluate("() => window.notReloaded") is True
        assert actions(page)["Retry"]["disabled"] is True
        page.locator(".live", has_text="run ended").wait_for()


def test_a_run_started_over_offers_no_retry(server: DemoServer, browser: Any) -> None:
    """The tour: a FAILED run started over was retried from its page too, and its calls went
    out twice. Its Retry is disabled, its title naming the new run (the API refuses it, 409
    `started_over`); Start over stays, answering the run it created: its dialog says that
    another start over starts nothing and links that run, with Close and no Start over
    button (a later tour read "Start over" there as a second new run)."""
    reject_next_ticket(server)
    run_id = ticket(server, "started-over", wait=True)
    new_id = server.call(f"/runs/{run_id}/start-over", {})["newRunId"]
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        retry = actions(page)["Retry"]
        assert retry["disabled"] and not retry["focusable"], retry
        assert retry["title"].startswith(f"started over as run {new_id[:8]}: look at"), retry
        assert actions(page)["Start over"]["disabled"] is False
        page.get_by_role("button", name="Start over").click()
        dialog = page.locator("dialog.modal")
        dialog.locator("p", has_text="Another start over would start nothing.").wait_for()
        assert f"Already started over as run {new_id}" in dialog.inner_text()
        assert [b.inner_text() for b in dialog.locator("button").all()] == ["Close"]
        link = dialog.get_by_role("link", name=f"Open run {new_id[:8]}")
        assert link.get_attribute("href") == f"#/runs/{new_id}"
        shoot(page, "run-start-over-again", narrow=False)
        dialog.get_by_role("button", name="Close").click()
        dialog.wait_for(state="detached")
        page.get_by_role("button", name="open-ticket", exact=True).first.click()
        page.locator(".step-panel h3", has_text="Step open-ticket").wait_for()
        assert page.locator(".step-panel button", has_text="Resolve").count() == 0
        shoot(page, "run-actions-started-over", narrow=False)


FOCUSED_JS = "() => [document.activeElement.tagName, document.activeElement.className]"
"""Where the keyboard's focus is: the element's tag and classes."""


def answer_focused(page: Any) -> None:
    """The action's answer (its ✓ line) gets the focus once the page is drawn anew."""

    def focused() -> bool:
        return bool(page.evaluate(FOCUSED_JS) == ["P", "ok-box"])

    eventually(focused, 5, "the answer to take the focus (not <body>)")


def test_the_answer_to_a_keyboard_action_takes_the_focus(server: DemoServer, browser: Any) -> None:
    """The tour: Retry pressed with Enter and confirmed left the focus on <body> (Retry was
    disabled and drawn anew once the run ran again), and Resolve's did too (the step's panel
    is drawn anew without it): the next Tab started at the top of the page. The answer
    takes the focus now, so the keyboard user stays where they acted."""
    reject_next_ticket(server)
    retried = ticket(server, "focus-retry", wait=True)
    reject_next_ticket(server)
    resolved = ticket(server, "focus-resolve", wait=True)
    with opened(browser, f"{server.ui}#/runs/{retried}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.get_by_role("button", name="Retry", exact=True).focus()
        page.keyboard.press("Enter")
        page.locator("dialog.modal").wait_for()
        page.keyboard.press("Enter")  # the dialog's Retry has the focus
        page.locator(".action-result .ok-box", has_text="run again").wait_for()
        answer_focused(page)
    with opened(browser, f"{server.ui}#/runs/{resolved}") as (page, _):
        page.get_by_role("button", name="Resolve open-ticket…").focus()
        page.keyboard.press("Enter")
        page.locator("#json-value").fill('{"status": 201, "body": {}}')
        page.locator("dialog.modal").get_by_role("button", name="Resolve", exact=True).focus()
        page.keyboard.press("Enter")
        page.locator(".action-result .ok-box", has_text="resolved").wait_for()
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        answer_focused(page)


SHOWN_ON_LEAVING_JS = """(next) => new Promise((resolve) => {
  // Run after the router's own listener (registered first): what the page shows the moment
  // the next page is asked for, before that page has read anything from the API.
  addEventListener("hashchange", () => resolve(document.getElementById("main").innerText),
    { once: true });
  location.hash = next;
})"""


def test_the_run_left_goes_at_once(server: DemoServer, browser: Any) -> None:
    """The tour: a run opened from another run's page (a child, the run a start over made)
    showed, on a slow link, the run left, its Retry live, under the new run's URL until the
    new run was read: a Retry pressed then retried the run left. That page goes at once now,
    "Loading…" in its place until the run opened is drawn."""
    reject_next_ticket(server)
    left = ticket(server, "page-left", wait=True)
    asked = ticket(server, "page-asked", wait=True)
    with opened(browser, f"{server.ui}#/runs/{left}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        shown = page.evaluate(SHOWN_ON_LEAVING_JS, f"#/runs/{asked}")
        assert shown.strip() == "Loading…", shown
        page.get_by_text(asked, exact=True).first.wait_for()
        page.locator("h1 .badge", has_text="succeeded").wait_for()


def test_a_refused_action_shows_the_run_as_it_is(server: DemoServer, browser: Any) -> None:
    """Someone retried the run first: the page's Retry is refused (409 with the run's
    state) and the page redraws the run as the API has it at once, not at its next look
    (the page's clock is stopped, so that look never comes)."""
    reject_next_ticket(server)
    run_id = ticket(server, "refused-action", wait=True)
    with opened(browser, "about:blank") as (page, found):
        found.allowed_errors.append("409")
        page.clock.install(time=time.time())
        page.goto(f"{server.ui}#/runs/{run_id}")
        page.locator("h1 .badge", has_text="failed").wait_for()
        # The operator opens Retry's dialog; before they confirm, someone else retries.
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        pause_clock(page)
        server.call(f"/runs/{run_id}/retry", {})
        eventually(lambda: server.run_status(run_id) == "SUCCEEDED", what="the retry to finish")
        dialog.get_by_role("button", name="Retry", exact=True).click()
        refused = page.locator(".error-box", has_text="refused")
        refused.wait_for()
        assert refused.inner_text().startswith("✕ Retry refused: run "), refused.inner_text()
        assert refused.inner_text().endswith("only a FAILED run can be retried (run_not_failed)")
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        assert actions(page)["Retry"]["disabled"] is True
        assert refused.is_visible(), "the refusal stays on the page after the redraw"


def test_retry_says_to_raise_the_quota_a_fan_out_failed_for(
    server: DemoServer, browser: Any
) -> None:
    """A fan-out failed because its tenant's run quota is used up. The quota counts runs
    created, so a retry alone fails the same way: Retry's dialog says so and what to do
    first, the command that raises the quota as the step's error names it. A run failed
    for another reason is not told that."""
    tenant = "retry-quota"
    server.call(f"/tenants/{tenant}/limits", {"maxRuns": 2}, method="PUT")  # the parent is one
    body = {"input": {"batchSize": 3, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    assert server.call(f"/runs/{run_id}")["error"]["kind"] == "quota_exceeded"
    reject_next_ticket(server)
    other_id = ticket(server, "retry-no-quota", wait=True)

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        note = dialog.locator(".warning-box")
        note.wait_for()
        assert " ".join(note.inner_text().split()) == (
            f"⚠ The fan-out of step renew needs more runs than tenant {tenant} has left in its "
            "quota, so a retry alone fails the same way: an admin raises the quota first, with "
            f"schemabridge tenants set-quota {tenant} 4."
        )
        assert note.locator("code").inner_text() == f"schemabridge tenants set-quota {tenant} 4"
        shoot(page, "retry-quota")
        dialog.get_by_role("button", name="Cancel", exact=True).click()
        assert server.run_status(run_id) == "FAILED"

    with opened(browser, f"{server.ui}#/runs/{other_id}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        assert dialog.locator(".warning-box").count() == 0


def test_the_error_box_shows_the_command_it_names_as_code(server: DemoServer, browser: Any) -> None:
    """The tour: a step's error naming the command that fixes it (a breaker's reset, here a
    tenant quota's raise) showed it between literal backticks in the error boxes, where the
    warnings and waiting lines show such commands as code. The boxes show it as code too."""
    tenant = "error-code"
    server.call(f"/tenants/{tenant}/limits", {"maxRuns": 2}, method="PUT")  # the parent is one
    body = {"input": {"batchSize": 3, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    message = server.call(f"/runs/{run_id}")["error"]["message"]
    command = f"schemabridge tenants set-quota {tenant} 4"
    assert f"`{command}`" in message, message
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        said = page.locator(".error-box .error-message").first
        said.wait_for()
        assert "`" not in said.inner_text(), said.inner_text()
        assert said.locator("code").all_inner_texts() == [command]
        shoot(page, "run-error-command-as-code", narrow=False)


def test_the_live_toggle_says_it_is_about_updates(server: DemoServer, browser: Any) -> None:
    """On a running run whose updates stopped (its event stream and then its reload failed),
    the header's button says it resumes the page's updates, not the run; it takes the focus,
    and Enter on it makes the page live again."""
    server.latency(5_000)
    run_id = ticket(server, "live-toggle")
    try:
        with opened(browser, "about:blank") as (page, found):
            found.allowed_errors.append("Failed to load resource")
            page.route(f"**/runs/{run_id}/events", lambda route: route.abort())
            page.goto(f"{server.ui}#/runs/{run_id}")
            page.locator(".live", has_text="live").wait_for()
            page.route(f"**/runs/{run_id}", lambda route: route.abort())
            page.locator(".live", has_text="paused").wait_for(timeout=15_000)
            shown = page.evaluate(LIVE_JS)
            assert shown["buttons"] == ["Resume updates"], shown
            page.unroute(f"**/runs/{run_id}")
            button = page.locator(".live button")
            button.focus()
            assert button.evaluate("(b) => document.activeElement === b")
            page.keyboard.press("Enter")
            page.locator(".live", has_text="● live").wait_for()
            assert page.evaluate(LIVE_JS)["buttons"] == []
    finally:
        server.latency(0)
        server.call(f"/runs/{run_id}/cancel", {})


SPAWNER_JS = """() => {
  const text = document.querySelector('g.node[data-vertex="renew"] .node-type');
  const title = text.querySelector('title');
  const box = text.closest('g').querySelector('.node-box').getBoundingClientRect();
  return { shown: text.firstChild.nodeValue, title: title && title.textContent,
           node: text.closest('g').getAttribute('aria-label'),
           right: text.getBoundingClientRect().right, box: box.right };
}"""
"""The spawner's second line as drawn, its tooltip (if any), the node's accessible name, and
where the line and the node's box end on the right."""


def test_the_spawner_names_its_child_workflow_whole(server: DemoServer, browser: Any) -> None:
    """At 1280 px the graph has room: the SPAWNER node is drawn wide enough to show its child
    workflow's name whole. Where it is cut with "…" (on a phone, if the room runs out, and on
    the workflow's page, drawn as laid out) the cut line's tooltip and the node's accessible
    name give the name whole."""
    run_id = fan_out_run(server, "spawner-name")
    full = "SPAWNER → renew-subscription"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator(".live", has_text="up to date").wait_for()
        wide = page.evaluate(SPAWNER_JS)
        assert wide["shown"] == full and wide["title"] is None, wide
        assert wide["right"] <= wide["box"], wide  # inside its node
        page.set_viewport_size(NARROW)
        page.reload()
        page.locator(".live", has_text="up to date").wait_for()
        narrow = page.evaluate(SPAWNER_JS)
        if narrow["shown"] != full:
            assert narrow["shown"].endswith("…"), narrow
        assert narrow["title"] == (None if narrow["shown"] == full else full), narrow
        assert narrow["right"] <= narrow["box"], narrow
        assert "renew-subscription" in narrow["node"], narrow
        page.set_viewport_size(WIDE)
        page.goto(f"{server.ui}#/workflows/nightly-subscription-renewals")
        page.locator('.crumbs a[href="#/workflows"]').wait_for()
        page.locator('g.node[data-vertex="renew"]').wait_for()
        laid_out = page.evaluate(SPAWNER_JS)
        assert laid_out["shown"].endswith("…") and full.startswith(laid_out["shown"][:-1])
        assert laid_out["title"] == full, laid_out
        assert "renew-subscription" in laid_out["node"], laid_out


@pytest.mark.parametrize("width", [600, 700, 800])
def test_the_timeline_fits_a_tablet(server: DemoServer, browser: Any, width: int) -> None:
    """At 600 to 800 px (a tablet) the timeline does not scroll sideways in its box: every
    label and bar is inside it, its text at least 10 px tall."""
    run_id = failed_long_vertex_run(server, f"ui-run-page-tablet-{width}", tenant="tablet")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.set_viewport_size({"width": width, "height": 900})
        page.locator("svg.timeline .tl-bar").first.wait_for(state="attached")
        page.locator(".live", has_text="up to date").wait_for()
        timeline = page.evaluate(TIMELINE_JS)
        assert timeline["wrap"] <= timeline["box"], timeline
        for text in timeline["texts"]:
            assert text["left"] >= 0 and text["right"] <= width, text
            assert text["px"] >= 10, text
        assert len(timeline["bars"]) == 1, timeline
        for bar in timeline["bars"]:
            assert bar["left"] >= 0 and bar["right"] <= width, bar


@pytest.fixture(scope="module")
def tablet_runs(server: DemoServer) -> dict[str, str]:
    """The runs whose tables a tablet shows: a step with a 64-character id failed (steps),
    a step whose calls failed with a long error (attempts), a fan-out of 12 (children)."""
    return {
        "table.steps": failed_long_vertex_run(server, "ui-run-page-tables", tenant="tables"),
        "table.attempts": retrying_run(server, "attempts-tablet", CLOSED_PORT),
        "table.children-table": fan_out_run(server, "children-tablet"),
    }


ROWS_JS = """(tableSelector) => [...document.querySelectorAll(`${tableSelector} tbody tr`)]
  .map((row) => ({ text: row.textContent, height: row.getBoundingClientRect().height }))"""
"""The text and height of each row of a table (`tableSelector`)."""


@pytest.mark.parametrize("width", [600, 700, 800])
@pytest.mark.parametrize("table", ["table.steps", "table.attempts", "table.children-table"])
def test_the_run_tables_fit_a_tablet(
    server: DemoServer, browser: Any, tablet_runs: dict[str, str], table: str, width: int
) -> None:
    """At 600 to 800 px (a tablet) the steps, attempts and children tables scroll neither the
    page nor themselves sideways: every cell drawn is whole and on the screen, and no row is
    a tall strip of empty space around a 64-character step id or a long error."""
    with opened(browser, f"{server.ui}#/runs/{tablet_runs[table]}") as (page, _):
        page.set_viewport_size({"width": width, "height": 900})
        page.locator(f"{table} tbody tr").nth(1).wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        assert_fits_a_phone(page.evaluate(FIT_JS, [table, "td"]), width)
        rows = page.evaluate(ROWS_JS, table)
        if table == "table.steps":
            assert any(LONG_VERTEX in row["text"] for row in rows), rows
        for row in rows:
            assert row["height"] < 200, row


def test_durations_pick_their_unit_after_rounding(server: DemoServer, browser: Any) -> None:
    """The long tail's p95 of 9.98 s and p99 of 10.02 s read alike ("10 s"), not "10.0 s"
    beside "10 s"; 59.7 s reads "1 min", not "60 s"."""
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        read = page.evaluate(
            """async (values) => {
                const { duration } = await import("./js/format.js");
                return values.map(duration);
            }""",
            [0.42, 0.9996, 9.94, 9.98, 10.02, 59.4, 59.7, 75, 3599.6, 5400],
        )
    assert read == [
        "420 ms",
        "1.0 s",
        "9.9 s",
        "10 s",
        "10 s",
        "59 s",
        "1 min",
        "1 min 15 s",
        "1 h",
        "1 h 30 min",
    ]


def test_a_failure_from_the_workflow_says_to_fix_it_not_to_run_it_again(
    server: DemoServer, browser: Any
) -> None:
    """Every child of a fan-out failed `invalid_input` (the SPAWNER writes text into a number
    the child's inputSchema types): Retry's and Reprocess's dialogs say that running the
    same version with the same input fails the same way, and what to do instead."""
    child = {
        "name": "ui-typed-item",
        "inputSchema": {"type": "object", "properties": {"qty": {"type": "integer"}}},
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": f"{server.downstream}/x"}}},
    }
    parent = {
        "name": "ui-typed",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {
                    "items": "{{ input.items }}",
                    "workflow": "ui-typed-item",
                    "input": {"qty": "qty={{ item }}"},
                },
            },
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    server.call("/workflows", child)
    server.call("/workflows", parent)
    run_id = str(server.call("/workflows/ui-typed/runs", {"input": {"items": [1, 2]}})["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    expected = (
        "⚠ 2 children of step join failed with invalid_input, which comes from the workflow or "
        "the run's input: retrying, reprocessing or starting over runs v1 with the same input "
        "and fails the same way. Fix the workflow (or the input) first, publish it, then submit "
        "a new run (schemabridge runs submit ui-typed@VERSION --input JSON)"
    )
    # The API's sentence, which `runs show` and `runs retry --dry-run` lead with too.
    fix_first = server.call(f"/runs/{run_id}")["fixFirst"]
    assert server.call(f"/runs/{run_id}/retry/preview")["fixFirst"] == fix_first
    assert expected.replace("(schemabridge", "(`schemabridge").replace("JSON)", "JSON`)") == (
        f"⚠ {fix_first}"
    )
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        for button in ("Retry", "Reprocess dead letters"):
            page.get_by_role("button", name=button, exact=True).click()
            dialog = page.locator("dialog.modal")
            note = dialog.locator(".warning-box")
            note.wait_for()
            assert " ".join(note.inner_text().split()) == expected, button
            shoot(page, f"run-fix-first-{button.split()[0].lower()}", narrow=False)
            dialog.get_by_role("button", name="Cancel", exact=True).click()
            dialog.wait_for(state="detached")
        assert server.run_status(run_id) == "FAILED"
    # A run of another tenant: the command names it (an admin key submits under "default").
    body = {"input": {"items": [1, 2]}, "tenantId": "acme"}
    acme = str(server.call("/workflows/ui-typed/runs", body)["id"])
    assert server.wait_status(acme, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    with opened(browser, f"{server.ui}#/runs/{acme}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.get_by_role("button", name="Retry", exact=True).click()
        note = page.locator("dialog.modal .warning-box")
        note.wait_for()
        assert " ".join(note.inner_text().split()) == expected.replace(
            "ui-typed@VERSION --input", "ui-typed@VERSION --tenant acme --input"
        )


def test_the_header_says_who_created_the_run(server: DemoServer, browser: Any) -> None:
    """`createdBy` beside the creation time: with `serve --demo` (authentication off) every
    run is `demo`'s."""
    run_id = ticket(server, "who created it", wait=True)
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        fact = page.locator(".run-facts > div").filter(has=page.locator("dt", has_text="Created"))
        fact.locator(".run-created-by").wait_for()
        assert fact.locator("dd").inner_text().endswith("· by demo"), fact.inner_text()


def test_the_log_says_in_which_zone_its_times_are(server: DemoServer, browser: Any) -> None:
    """A log line shows its clock time alone; the heading names the zone (the page's: Paris,
    in December GMT+1) and each line's title is its full time with that zone, as every time
    the monitor shows as text. Before, a bare "07:18:10.867" read as UTC or as local."""
    run_id = ticket(server, "zoned", wait=True)
    first = server.call(f"/runs/{run_id}/logs")["items"][0]["at"]
    paris = {"timezone_id": "Europe/Paris", "locale": "en-US"}
    with opened(browser, f"{server.ui}#/runs/{run_id}", **paris) as (page, _):
        page.locator(".log li").first.wait_for()
        zone = page.evaluate(
            "(at) => new Intl.DateTimeFormat(undefined, {timeZoneName: 'short'})"
            ".formatToParts(new Date(at * 1000)).find((p) => p.type === "
            "'timeZoneName').value",
            first,
        )
        assert zone.startswith("GMT+")
        assert page.locator("#log-title").inner_text() == f"Log · times in {zone}"
        line = page.locator(".log li time").first
        assert line.get_attribute("title").endswith(f" {zone}")
        assert line.get_attribute("title").endswith(f"{line.inner_text()} {zone}")


def test_the_timeline_says_in_which_zone_it_starts(server: DemoServer, browser: Any) -> None:
    """The timeline under a run's steps began at a bare "21:52:13.504" (and its bars' titles
    gave bare times too) beside a log whose heading names its zone: it names the zone."""
    run_id = ticket(server, "zoned-timeline", wait=True)
    created = server.call(f"/runs/{run_id}")["createdAt"]
    paris = {"timezone_id": "Europe/Paris", "locale": "en-US"}
    with opened(browser, f"{server.ui}#/runs/{run_id}", **paris) as (page, _):
        # One drawing per width, the others hidden: the first is read whichever shows.
        start = page.locator("svg.timeline .tl-axis").first
        start.wait_for(state="attached")
        zone = page.evaluate(
            "(at) => new Intl.DateTimeFormat(undefined, {timeZoneName: 'short'})"
            ".formatToParts(new Date(at * 1000)).find((p) => p.type === "
            "'timeZoneName').value",
            created,
        )
        assert zone.startswith("GMT+")
        text = start.text_content() or ""
        assert re.fullmatch(rf"\d\d:\d\d:\d\d\.\d{{3}} {re.escape(zone)}", text), text
        titles = page.locator("svg.timeline title").all_text_contents()
        assert titles and all(f" {zone}" in title for title in titles if " → " in title), titles


def test_a_healthy_fan_out_waits_for_its_children_and_a_cancelled_one_counts_its_tail(
    server: DemoServer, browser: Any
) -> None:
    """A spawner whose children run read "‖ parked" in yellow, as if stuck: it reads
    "waiting for its children (N of M ended)". Once cancelled, the long tail says it counts
    the children that succeeded or failed, not another "ended" against "12 of 12 ended"."""
    items = [{"id": i, "name": f"item-{i}"} for i in range(12)]
    server.script("/items", {"body": {"items": items}})
    for held in range(12):
        server.script(f"/billing/subscriptions/{held}/charges", {"sleep_ms": 8_000})
    body = {"input": {"batchSize": 12, "renewalDate": "2025-07-01"}, "tenantId": "waits"}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])

    def fanout() -> dict[str, int]:
        return dict(server.call(f"/runs/{run_id}")["fanout"] or {})

    try:
        eventually(lambda: fanout().get("total") == 12, what="twelve children")
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            renew = page.locator(".dag .node", has_text="renew")
            renew.locator(".node-status", has_text="waiting for its children").wait_for()
            assert "parked" not in (renew.text_content() or "")
            row = page.locator("table.steps tr", has_text="renew")
            assert "waiting for its children (0 of 12 ended)" in (row.text_content() or "")
            shoot(page, "fanout-running", widths=(390,))
    finally:
        server.call(f"/runs/{run_id}/cancel", {})
    eventually(lambda: fanout().get("cancelled") == 12, what="twelve children cancelled")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        tail = page.locator(".long-tail h3")
        tail.wait_for()
        assert tail.text_content() == (
            "Long tail — durations of the 0 children that succeeded or failed"
        )
        shoot(page, "fanout-cancelled", widths=(390,))


def test_children_waiting_for_an_admission_slot_are_counted_as_running(
    server: DemoServer, browser: Any
) -> None:
    """A cap of 1 and slow calls: the other children's steps run and wait for the slot. The
    banner said "5 children waiting (admission_wait)" above a legend "running 6 · waiting 0";
    both now say they are running children waiting for an admission slot."""
    destination = "ui-admission-dest"
    server.script("/ui-admission", *[{"sleep_ms": 20_000}] * 6)
    call = {"url": f"{server.downstream}/ui-admission", "destination": destination}
    child = {"type": "GATEWAY", "maxAutoRetries": 3, "config": call}
    server.call("/workflows", {"name": "ui-admission-child", "vertices": {"call": child}})
    spawn = {"items": "{{ input }}", "workflow": "ui-admission-child"}
    parent = {
        "each": {"type": "SPAWNER", "config": spawn},
        "join": {"type": "MERGE", "dependsOn": ["each"]},
    }
    server.call("/workflows", {"name": "ui-admission", "vertices": parent})
    server.call(f"/destinations/{destination}/caps", {"maxConcurrency": 1}, method="PUT")
    body = {"input": [1, 2, 3, 4, 5, 6], "tenantId": "admission"}
    run_id = str(server.call("/workflows/ui-admission/runs", body)["id"])

    def admission_waits() -> int:
        groups = server.call(f"/runs/{run_id}")["fanout"]["waiting"]
        return sum(g["children"] for g in groups if g["reason"] == "admission_wait")

    try:
        eventually(lambda: admission_waits() > 0, what="children waiting for a slot", timeout_s=25)
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            line = page.locator('.waiting .waiting-line[data-children="admission_wait"]')
            line.wait_for()
            text = line.inner_text()
            legend = page.locator(".fanout-section .legend").inner_text()
            shoot(page, "fanout-admission", widths=(390,))
    finally:
        server.call(f"/runs/{run_id}/cancel", {})
        server.call(f"/destinations/{destination}/caps", None, method="DELETE")
    assert re.match(r"◷ \d running child(ren)? waiting for an admission slot of ", text), text
    assert "admission_wait" not in text, text
    assert re.search(r"running \d \(\d of them waiting for an admission slot\)", legend), legend
