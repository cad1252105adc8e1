"""The web run monitor in a real browser, against one `schemabridge serve --demo` (embedded
store) for the whole module: follow a fan-out, find a failure, understand it and recover it,
cancel, batch-retry, read a workflow's graph, and locate a problem in the editor. Every page
fails its test on a JavaScript or console error, or on a request off loopback."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psutil
import pytest

from tests.e2e.browser_harness import (
    LONG_VERTEX,
    NARROW,
    WIDE,
    DemoServer,
    demo_on_sqlite,
    eventually,
    failed_long_vertex_run,
    http_json,
    open_on_own_clock,
    opened,
    shoot,
    ticket,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_downstream")]

SAID_AT = r" · (just now|\d+ s ago)"
"""After a run action's answer, when it was said (its status words are true of that moment)."""
HOSTILE_BODY = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui") as running:
        yield running


def reject_tickets(server: DemoServer, times: int = 1, raw: str | None = None) -> None:
    answer: dict[str, Any] = {"status": 422, "body": {"error": "validation_failed"}}
    if raw is not None:
        answer = {"status": 422, "raw": raw, "content_type": "text/html"}
    server.script("/helpdesk/tickets", *([answer] * times))


def confirm(page: Any, label: str) -> None:
    page.locator("dialog.modal").get_by_role("button", name=label, exact=True).click()


# ── serving ─────────────────────────────────────────────────────────────────────────────────


def test_the_monitor_is_served_with_a_strict_policy(server: DemoServer) -> None:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(server.ui, timeout=10) as answer:
        policy = answer.headers["Content-Security-Policy"]
        page = answer.read().decode()
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert '<script type="module" src="js/app.js">' in page
    assert "<script>" not in page  # no inline script the policy would have to allow
    with opener.open(f"{server.url}/", timeout=10) as root:
        assert root.geturl().endswith("/ui/")
    missing = http_json(f"{server.url}/ui/js/nothing.js")
    assert missing["code"] == "not_found"


# ── a fan-out, followed live ───────────────────────────────────────────────────────────────


def test_a_fan_out_started_from_the_page_reaches_100_percent(
    server: DemoServer, browser: Any
) -> None:
    server.latency(300)  # slow enough that the bar is seen moving
    with opened(browser, f"{server.ui}#/workflows/nightly-subscription-renewals") as (page, _):
        page.locator("svg.dag .node").first.wait_for()
        shoot(page, "workflow-graph")
        page.fill("#run-input", '{"batchSize": 120, "renewalDate": "2025-07-01"}')
        page.fill("#run-tenant", "fanout")
        page.get_by_role("button", name="Start a run of v1").click()
        page.wait_for_url("**#/runs/*")
        page.locator(".fanout-percent").wait_for()
        # Every figure the page shows, as it shows it (the block is redrawn on each event).
        page.evaluate(
            """() => {
              window.__seen = [];
              const note = () => document.querySelectorAll('.fanout-percent')
                .forEach((e) => window.__seen.push(e.textContent));
              note();
              new MutationObserver(note).observe(document.querySelector('main'),
                {childList: true, subtree: true});
            }"""
        )
        page.locator(".fanout-percent", has_text="100 %").wait_for(timeout=90_000)
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        seen = [int(text.split()[0]) for text in page.evaluate("window.__seen")]
        assert any(0 < value < 100 for value in seen), seen
        assert seen == sorted(seen), "the bar never goes back"
        renew = page.locator('svg.dag .node[data-vertex="renew"]')
        assert "st-succeeded" in (renew.get_attribute("class") or "")
        assert "succeeded" in (renew.text_content() or "")
        page.locator(".long-tail dd").first.wait_for()
        assert page.locator(".slowest li").count() == 5
        assert page.locator(".children-table tbody tr").count() == 50
        shoot(page, "run-fanout")


# ── a failure: find it, read it, recover it ────────────────────────────────────────────────


def test_a_failed_run_is_marked_explained_and_retried(server: DemoServer, browser: Any) -> None:
    reject_tickets(server, raw=HOSTILE_BODY)
    run_id = ticket(server, tenant="failing", wait=True)
    assert server.run_status(run_id) == "FAILED"
    with opened(browser, f"{server.ui}#/runs?tenant=failing") as (page, _):
        row = page.locator(f'tr[data-run="{run_id}"]')
        row.wait_for()
        assert "row-failed" in (row.get_attribute("class") or "")
        assert "failed" in row.inner_text()
        error_line = page.locator("tr.row-error .error-line").first
        assert "HTTP 422" in error_line.inner_text()
        shoot(page, "runs")
        row.get_by_role("link", name=run_id[:8]).click()
        page.locator(".http-status").first.wait_for()
        assert page.locator(".http-status").first.inner_text() == "422"
        excerpt = page.locator(".body-excerpt").first
        # The downstream's markup is shown as text and never runs.
        assert excerpt.inner_text() == HOSTILE_BODY
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main script, main img").count() == 0
        failed = page.locator('svg.dag .node[data-vertex="open-ticket"]')
        assert "failed" in (failed.text_content() or "")
        shoot(page, "run-failed")
        page.get_by_role("button", name="Retry", exact=True).click()
        confirm(page, "Retry")
        done = page.locator(".ok-box", has_text="step")
        done.wait_for()
        assert re.fullmatch(f"✓ 1 failed step run again{SAID_AT}", done.inner_text())
        page.locator("h1 .badge", has_text="succeeded").wait_for()
    assert server.run_status(run_id) == "SUCCEEDED"


def test_resolve_a_failed_step_with_an_output_checked_first(
    server: DemoServer, browser: Any
) -> None:
    reject_tickets(server)
    run_id = ticket(server, tenant="resolving", wait=True)
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name="Resolve open-ticket…").click()
        editor = page.locator("#json-value")
        send = page.locator("dialog.modal").get_by_role("button", name="Resolve", exact=True)
        editor.fill('{"status": 201,\n "body": {"ticket": 7}')
        page.locator(".json-state.bad", has_text="line 2").wait_for()
        assert send.is_disabled()
        # A key written twice: JSON.parse would send the last one without a word.
        editor.fill('{"status": 201,\n "status": 500, "body": {"ticket": 7}}')
        twice = page.locator(".json-state.bad", has_text='the key "status" appears more than once')
        twice.wait_for()
        assert "line 2" in twice.inner_text() and "not JSON" not in twice.inner_text()
        assert send.is_disabled()
        editor.fill('{"status": 201, "body": {"ticket": 7}}')
        page.locator(".json-state.ok").wait_for()
        shoot(page, "resolve-dialog", narrow=False)
        send.click()
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        step = page.locator('svg.dag .node[data-vertex="open-ticket"]')
        assert "resolved" in (step.text_content() or "")
        # Its end is the operator's act: no duration as if its call had taken that long.
        row = page.locator("table.steps tr", has_text="open-ticket")
        row.locator('td[data-label="Duration"]', has_text="resolved by operator").wait_for()
    detail = server.call(f"/runs/{run_id}")
    resolved = next(s for s in detail["steps"] if s["vertexId"] == "open-ticket")
    assert resolved["status"] == "RESOLVED" and resolved["output"] == {
        "status": 201,
        "body": {"ticket": 7},
    }


def test_batch_retry_reports_retried_and_skipped(server: DemoServer, browser: Any) -> None:
    reject_tickets(server, times=3)
    failed = [ticket(server, tenant="batch", wait=True) for _ in range(3)]
    succeeded = ticket(server, tenant="batch", wait=True)
    assert [server.run_status(r) for r in [*failed, succeeded]] == [
        "FAILED",
        "FAILED",
        "FAILED",
        "SUCCEEDED",
    ]
    with opened(browser, f"{server.ui}#/runs?tenant=batch") as (page, _):
        page.locator(f'tr[data-run="{succeeded}"]').wait_for()
        for run_id in [*failed, succeeded]:
            page.locator(f'tr[data-run="{run_id}"] input[type="checkbox"]').check()
        page.get_by_role("button", name="Retry selected (4)").click()
        # The dialog says what the batch skips before the click (its preview of these ids),
        # and its button the runs it retries.
        dialog = page.locator("dialog.modal")
        dialog.locator("p", has_text="1 selected is skipped: not FAILED").wait_for()
        confirm(page, "Retry 3")
        result = page.locator(".batch-result .ok-box")
        result.wait_for()
        assert result.inner_text() == (
            f"Retried 3, skipped 1: {succeeded[:8]}: not FAILED (it is SUCCEEDED), not retried."
        )
        # "Retry selected" is disabled once nothing is selected: the focus it had goes to the
        # answer, not to <body> (the tour: the next Tab started at the top of the page).
        focused = "() => document.activeElement.matches('.batch-result .ok-box')"
        eventually(lambda: page.evaluate(focused), 5, "the answer to take the focus")
        for run_id in failed:
            page.locator(f'tr[data-run="{run_id}"] .badge', has_text="succeeded").wait_for()
            # Its duration is the rerun's, and says so (the tour read 24 ms as the whole run).
            again = page.locator(f'tr[data-run="{run_id}"] .ran-again')
            assert again.inner_text().strip() == "since it ran again"
        assert page.locator(f'tr[data-run="{succeeded}"] .ran-again').count() == 0
        shoot(page, "runs-batch-retry")


def test_a_batch_retry_with_nothing_to_retry_is_not_said_in_green(
    server: DemoServer, browser: Any
) -> None:
    """The tour: "Retry selected" of a SUCCEEDED run, and "Retry all matching" of a filter no
    FAILED run matches, answered "Nothing to retry…" in the green box of a done action.
    Nothing was done: both say it in the warning colour."""
    succeeded = ticket(server, tenant="nothing-batch", wait=True)
    with opened(browser, f"{server.ui}#/runs?tenant=nothing-batch") as (page, _):
        page.locator(f'tr[data-run="{succeeded}"] input[type="checkbox"]').check()
        page.get_by_role("button", name="Retry selected (1)").click()
        said = page.locator(".batch-result .nothing-to-retry")
        said.wait_for()
        assert said.evaluate("e => e.matches('.warning-box') && !e.matches('.ok-box')")
        assert said.inner_text().startswith("Nothing to retry among the selected runs.")
        assert page.locator(".batch-result .ok-box").count() == 0
        page.get_by_role("button", name="Retry all matching…").click()
        none = page.locator(".nothing-to-retry", has_text="No FAILED run matches these filters.")
        none.wait_for()
        assert none.evaluate("e => e.matches('.warning-box') && !e.matches('.ok-box')")
        shoot(page, "runs-nothing-to-retry", narrow=False)


def breaker_opening_run(server: DemoServer, workflow: str, tenant: str, destination: str) -> str:
    """A run of `tenant` whose one call to `destination` is answered 500 five times (its
    in-process retries, 10 ms apart): it FAILED, and the tenant breaker of `destination`
    opened (5 failures; it half-opens 30 s later). Its id."""
    call = {
        "url": f"{server.downstream}/{workflow}?status=500",
        "destination": destination,
        "retry": {"maxAttempts": 5, "baseDelayMs": 10},
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": workflow, "vertices": {"call": vertex}})
    answer = server.call(f"/workflows/{workflow}/runs", {"input": {}, "tenantId": tenant})
    run_id = str(answer["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    return run_id


def follow_reset_link(page: Any, link: Any, destination: str, tenant: str) -> None:
    """Click a breaker's Reset link: the Destinations page opens at `destination`, marked,
    with the Reset of `tenant`'s breaker in focus, and its open breaker says what opened it
    (the 500s of `breaker_opening_run`)."""
    href = f"#/destinations?destination={destination}&tenant={tenant}"
    assert link.get_attribute("href") == href
    link.click()
    page.wait_for_url(f"**{href}")
    article = page.locator(f'article.destination.wanted[data-destination="{destination}"]')
    article.wait_for()
    cause = article.locator(".breaker-cause").first
    cause.wait_for()
    assert cause.inner_text().strip() == "after an HTTP 500", cause.inner_text()
    reset = f"Reset the breaker of tenant {tenant} on {destination}"
    eventually(
        lambda: page.evaluate("document.activeElement.getAttribute('aria-label')") == reset,
        10,
        "the tenant's Reset in focus",
    )


def assert_said_ran_again(page: Any) -> None:
    """A run made to run again: its duration is the latest run's, so the page says when it
    ran again and that the duration counts from then (created → ended is longer)."""
    facts = page.locator(".run-facts")
    facts.locator("dt", has_text="Ran again").wait_for()
    said = facts.locator("dt", has_text="Duration").locator("xpath=following-sibling::dd[1]")
    assert said.inner_text().endswith("since it ran again"), said.inner_text()


def retry_selected_once_warned(page: Any, opening: str) -> None:
    """Press "Retry selected (1)": its dialog says the open breaker before the click (the
    API's preview of the selected ids), as the answer says it after; then confirm."""
    page.get_by_role("button", name="Retry selected (1)").click()
    before = page.locator("dialog.modal li", has_text="is open (opened by ")
    before.wait_for()
    assert before.inner_text().startswith(opening.removeprefix("⚠ Warning: ")), before
    shoot(page, "runs-batch-retry-dialog-breaker")
    confirm(page, "Retry")


def test_a_retry_into_an_open_breaker_shows_the_apis_warning(
    server: DemoServer, browser: Any
) -> None:
    """The run's Retry and the runs list's batch Retry are done, and say so; the warning the
    API answered with (the breaker the retried step calls is open, and the command that closes
    it) follows, as a warning, its command as code, and a link to that breaker's Reset on the
    Destinations page, from the answer's `breakers` (no text parsed). The link opens the page
    at the destination, its tenant's Reset in focus: Enter and a confirm close it."""
    tenant, destination = "breaker", "ui-breaker-dest"
    run_id = breaker_opening_run(server, "ui-breaker", tenant, destination)
    command = f"schemabridge destinations reset-breaker {destination} --tenant {tenant}"
    href = f"#/destinations?destination={destination}&tenant={tenant}"
    opening = (
        f"⚠ Warning: the tenant breaker of '{destination}' (tenant '{tenant}') is open (opened "
        "by an HTTP 500): "
    )
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name="Retry", exact=True).click()
        confirm(page, "Retry")
        done = page.locator(".action-result .ok-box")
        done.wait_for()
        assert re.fullmatch(f"✓ 1 failed step run again{SAID_AT}", done.inner_text())
        warning = page.locator(".action-result .action-warnings.warning-box")
        said = warning.inner_text()
        assert said.startswith(opening), said
        assert "steps that call it fail again at once, sending nothing" in said, said
        assert warning.locator("code").all_inner_texts() == [command]
        assert warning.locator("a.reset-link").get_attribute("href") == href
        # The retried step met the breaker and FAILED again: the page shows it, the warning
        # stays.
        page.locator("h1 .badge", has_text="failed").wait_for()
        assert warning.is_visible()
        assert_said_ran_again(page)
        # The refusal's wait is said as a duration, not as the float the API carries, and
        # as of the failure, not as a countdown.
        retry_after = page.locator(".error-box dt", has_text="Asked to wait").first
        said_after = retry_after.locator("xpath=following-sibling::dd[1]").inner_text()
        assert re.fullmatch(r"\d+(\.\d)? s, when it failed", said_after), said_after
        shoot(page, "run-retry-breaker-warning")
    assert server.run_status(run_id) == "FAILED"
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}") as (page, _):
        page.locator(f'tr[data-run="{run_id}"] input[type="checkbox"]').check()
        retry_selected_once_warned(page, opening)
        result = page.locator(".batch-result .ok-box")
        result.wait_for()
        assert result.inner_text() == "Retried 1, skipped 0."
        warning = page.locator(".batch-result .action-warnings.warning-box")
        said = warning.inner_text()
        assert said.startswith(opening), said
        assert warning.locator("code").all_inner_texts() == [command]
        link = warning.locator("a.reset-link")
        page.locator(f'tr[data-run="{run_id}"] .badge', has_text="failed").wait_for()
        shoot(page, "runs-batch-retry-breaker-warning")
        follow_reset_link(page, link, destination, tenant)
        note = page.locator(".wanted-note").inner_text()
        assert f"the Reset of tenant {tenant}'s breaker is marked below" in note, note
        shoot(page, "destinations-from-breaker-warning")
        page.keyboard.press("Enter")
        confirm(page, "Reset the breaker")
        page.locator(
            ".ok-box", has_text=f"{destination}: the breaker of tenant {tenant} closed."
        ).wait_for()
    listed = {d["destination"]: d for d in server.call("/destinations")["items"]}
    layers = listed[destination]["tenantBreakers"]
    assert layers.get(tenant, {"state": "closed"})["state"] == "closed"


def test_the_retry_dialog_links_the_reset_of_the_breaker_it_warns_of(
    server: DemoServer, browser: Any
) -> None:
    """Retry's dialog says the open breaker before the click (the API's preview) with the
    same Reset link as the answer's warning, from the preview's `breakers`; followed, the
    link takes the dialog away with it (as Cancel: nothing is retried) and opens the
    Destinations page at that breaker's Reset."""
    tenant, destination = "breaker-dialog", "ui-breaker-dialog-dest"
    run_id = breaker_opening_run(server, "ui-breaker-dialog", tenant, destination)
    command = f"schemabridge destinations reset-breaker {destination} --tenant {tenant}"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name="Retry", exact=True).click()
        previewed = page.locator("dialog.modal .warning-box")
        link = previewed.locator("a.reset-link")
        link.wait_for()
        assert previewed.locator("code").all_inner_texts() == [command]
        shoot(page, "run-retry-dialog-breaker-link")
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the link wraps inside
        box, at = previewed.bounding_box(), link.bounding_box()
        assert box and at and at["x"] + at["width"] <= box["x"] + box["width"], (box, at)
        page.set_viewport_size(WIDE)
        follow_reset_link(page, link, destination, tenant)
        assert page.locator("dialog").count() == 0
    assert server.run_status(run_id) == "FAILED"


def quota_failed_fan_out(server: DemoServer, tenant: str) -> str:
    """A fan-out of 3 children submitted for `tenant`, FAILED because its run quota is used
    up (set it first); its id."""
    body = {"input": {"batchSize": 3, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    run_id = str(server.call("/workflows/nightly-subscription-renewals/runs", body)["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    assert server.call(f"/runs/{run_id}")["error"]["kind"] == "quota_exceeded"
    return run_id


def test_batch_retry_says_which_tenants_are_over_their_quota(
    server: DemoServer, browser: Any
) -> None:
    """Selected runs whose fan-outs failed because their tenant's run quota is used up fail
    the same way when retried: before confirming, the batch Retry's dialog names each such
    tenant still over its quota, with the command that raises it to what all its selected
    runs need (the tenant's used runs plus their fan-outs; an id with a space quoted for the
    shell). A tenant whose quota was raised since, and a run failed for another reason, are
    not named; the retry itself is still offered and, confirmed, sent."""
    crowded, night, raised = "batch-quota", "night shift", "batch-quota-raised"
    server.call(f"/tenants/{crowded}/limits", {"maxRuns": 3}, method="PUT")
    server.call(f"/tenants/{quote(night)}/limits", {"maxRuns": 2}, method="PUT")
    server.call(f"/tenants/{raised}/limits", {"maxRuns": 2}, method="PUT")
    # 1 of 3 used: needs 3, then 2 of 3 used: needs 3 more: 2 + 6 = 8 for both.
    over = [quota_failed_fan_out(server, crowded), quota_failed_fan_out(server, crowded)]
    over.append(quota_failed_fan_out(server, night))  # 1 of 2 used, needs 3: 4
    fixed = quota_failed_fan_out(server, raised)
    server.call(f"/tenants/{raised}/limits", {"maxRuns": 10}, method="PUT")
    reject_tickets(server)
    other = ticket(server, tenant="batch-quota-other", wait=True)
    chosen = [*over, fixed, other]

    with opened(browser, f"{server.ui}#/runs?status=FAILED") as (page, _):
        for run_id in chosen:
            page.locator(f'tr[data-run="{run_id}"] input[type="checkbox"]').check()
        page.get_by_role("button", name=f"Retry selected ({len(chosen)})").click()
        dialog = page.locator("dialog.modal")
        note = dialog.locator(".warning-box")
        note.wait_for()
        assert " ".join(note.locator("p").inner_text().split()) == (
            "⚠ 3 of the selected runs failed because their tenant's run quota is used up: "
            "the quota counts the runs a tenant created, so retrying them alone fails the "
            "same way. An admin raises the quota first, with"
        )
        tenants = note.locator("li")
        assert [" ".join(t.split()) for t in tenants.all_inner_texts()] == [
            f"tenant {crowded}, 2 runs (their fan-outs need 6 runs, 1 is left): "
            f"schemabridge tenants set-quota {crowded} 8",
            f"tenant {night}, 1 run (its fan-out needs 3 runs, 1 is left): "
            "schemabridge tenants set-quota 'night shift' 4",
        ]
        assert note.locator("code").all_inner_texts() == [
            f"schemabridge tenants set-quota {crowded} 8",
            "schemabridge tenants set-quota 'night shift' 4",
        ]
        assert raised not in note.inner_text() and "batch-quota-other" not in note.inner_text()
        assert dialog.get_by_role("button", name="Retry", exact=True).is_enabled()
        shoot(page, "runs-batch-retry-quota", widths=(901, 360))
        confirm(page, "Cancel")
        assert [server.run_status(r) for r in chosen] == ["FAILED"] * len(chosen)

        # Once the quota is raised as told, the tenant is not named any more.
        server.call(f"/tenants/{quote(night)}/limits", {"maxRuns": 4}, method="PUT")
        page.get_by_role("button", name=f"Retry selected ({len(chosen)})").click()
        note.wait_for()
        assert night not in note.inner_text()
        assert note.locator("li").count() == 1
        confirm(page, "Retry")
        result = page.locator(".batch-result .ok-box")
        result.wait_for()
        assert result.inner_text().startswith(f"Retried {len(chosen)}, skipped 0")
    server.wait_status(over[2], {"SUCCEEDED"})
    server.wait_status(other, {"SUCCEEDED"})


def test_batch_retry_of_runs_failed_otherwise_has_no_quota_note(
    server: DemoServer, browser: Any
) -> None:
    reject_tickets(server)
    failed = ticket(server, tenant="batch-no-quota", wait=True)
    with opened(browser, f"{server.ui}#/runs?tenant=batch-no-quota") as (page, _):
        page.locator(f'tr[data-run="{failed}"] input[type="checkbox"]').check()
        page.get_by_role("button", name="Retry selected (1)").click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        dialog.get_by_role("button", name="Retry", exact=True).wait_for()
        assert dialog.locator(".warning-box").count() == 0
        confirm(page, "Cancel")


def test_a_workflow_filter_typo_is_said_in_the_list_with_the_filters_kept(
    server: DemoServer, browser: Any
) -> None:
    """`GET /runs` refuses a workflow nothing was published as (404 `workflow_not_found`,
    with the close names): the list says it where its rows go, and the filters stay to fix
    it, rather than the whole page giving way to the error."""
    with opened(browser, f"{server.ui}#/runs?workflow=support-tickt") as (page, watch):
        watch.allowed_errors.append("status of 404")  # the list's refusal, on purpose
        said = page.locator("td.empty", has_text="no published workflow 'support-tickt'")
        said.wait_for()
        assert "did you mean 'support-ticket'?" in said.inner_text()
        assert page.locator("form input[name=workflow]").input_value() == "support-tickt"


IDLE_LOOK_MS = 5_000
"""How often the runs list looks for new runs while nothing runs (`idleIntervalMs`, runs.js)."""


def test_the_runs_list_shows_a_run_submitted_after_it_opened(
    server: DemoServer, browser: Any
) -> None:
    """Nothing runs, so the list is up to date; it still looks for new runs now and then (it
    used to stop polling), so a run started elsewhere appears without a reload."""
    with opened(browser, "about:blank") as (page, _):
        open_on_own_clock(page, f"{server.ui}#/runs?tenant=latecomer")
        page.get_by_text("No runs match these filters.").wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        assert page.locator(".live button", has_text="Resume").count() == 0
        run_id = ticket(server, tenant="latecomer", wait=True)
        page.clock.run_for(IDLE_LOOK_MS)  # its next look, not waited for
        page.locator(f'tr[data-run="{run_id}"] .badge', has_text="succeeded").wait_for(
            timeout=15_000
        )
        page.locator(".live", has_text="up to date").wait_for()


WIDTHS_JS = """() => {
  const wrap = document.querySelector('.table-wrap');
  return {
    page: document.documentElement.scrollWidth, window: window.innerWidth,
    table: wrap.scrollWidth, box: wrap.clientWidth,
  };
}"""
"""How wide the page and the runs table are, against what shows of them."""


def test_the_runs_list_fits_a_phone(server: DemoServer, browser: Any) -> None:
    """At 420 px (a phone) the runs list scrolls neither the page nor its table sideways: the
    status, the run, its workflow and progress show, with a failed run's error under it."""
    tenant = "phone-tenant-with-a-long-name"
    reject_tickets(server)
    failed = ticket(server, tenant=tenant, wait=True)
    assert server.wait_status(failed, {"FAILED"}) == "FAILED"
    body = {"input": {"batchSize": 12, "renewalDate": "2025-07-01"}, "tenantId": tenant}
    renewals = server.call("/workflows/nightly-subscription-renewals/runs", body)["id"]
    ticket(server, tenant=tenant, wait=True)
    server.wait_status(renewals, {"SUCCEEDED", "FAILED"})
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}") as (page, _):
        page.set_viewport_size(NARROW)
        page.locator(f'tr[data-run="{failed}"] .badge', has_text="failed").wait_for()
        page.locator(f'tr[data-run="{renewals}"] .progress-cell').wait_for()
        page.locator(".live", has_text="up to date").wait_for()
        widths = page.evaluate(WIDTHS_JS)
        shoot(page, "runs-phone")
        assert widths["page"] <= widths["window"], widths
        assert widths["table"] <= widths["box"], widths
        # What a row is for stays in view: the status, the run (its link) and its workflow.
        row = page.locator(f'tr[data-run="{renewals}"]')
        for cell in (row.locator(".badge"), row.locator("a.mono"), row.get_by_text("nightly")):
            box = cell.bounding_box()
            assert box is not None and box["x"] + box["width"] <= NARROW["width"], box
        assert page.locator("tr.row-error .error-line").first.is_visible()


def test_cancel_a_running_fan_out(server: DemoServer, browser: Any) -> None:
    # Each child makes two calls: 6 s each keep all 40 running (12 s from the spawn) while a
    # loaded host's browser shows the fan-out and the cancel is clicked and confirmed.
    server.latency(6_000)
    server.items_at_once(40)
    body = {"input": {"batchSize": 40, "renewalDate": "2025-07-01"}, "tenantId": "cancel"}
    run_id = server.call("/workflows/nightly-subscription-renewals/runs", body)["id"]
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.locator(".fanout-percent").wait_for(timeout=60_000)
        assert server.run_status(run_id) == "RUNNING"
        page.get_by_role("button", name="Cancel", exact=True).click()
        confirm(page, "Cancel the run")
        done = page.locator(".ok-box", has_text="cancelled")
        done.wait_for()
        said = done.inner_text()
        assert re.fullmatch(rf"✓ cancelled with 40 runs under it \(\d+ steps\){SAID_AT}", said)
        page.locator("h1 .badge", has_text="cancelled").wait_for()
        shoot(page, "run-cancelled")
        # The list says its children were cancelled (the tour read "40/40 children" as done).
        page.goto(f"{server.ui}#/runs?tenant=cancel")
        cell = page.locator(f'tr[data-run="{run_id}"] .progress-cell')
        cell.wait_for()
        assert "· 40 cancelled" in cell.inner_text(), cell.inner_text()
    assert server.run_status(run_id) == "CANCELLED"


# ── the graph's labels ─────────────────────────────────────────────────────────────────────

TWICE = "\u00d72"
"""How a node's status line counts two attempts."""

NODE_OVERLAPS = """(svg) => {
  const found = [];
  const meets = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5
    && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const name = (t) => t.getAttribute("class");
  for (const node of svg.querySelectorAll(".node")) {
    const box = node.querySelector(".node-box").getBoundingClientRect();
    const texts = [...node.querySelectorAll("text")].filter((t) => t.textContent);
    const rects = texts.map((t) => t.getBoundingClientRect());
    texts.forEach((t, i) => {
      const r = rects[i];
      if (r.left < box.left || r.right > box.right || r.top < box.top || r.bottom > box.bottom) {
        found.push(`${node.dataset.vertex}: ${name(t)} leaves its box`);
      }
      for (let j = i + 1; j < texts.length; j++) {
        if (meets(r, rects[j])) {
          found.push(`${node.dataset.vertex}: ${name(t)} meets ${name(texts[j])}`);
        }
      }
    });
  }
  return found;
}"""


def _labels_apart(page: Any, name: str) -> None:
    """At 1280 and at 420 px wide, no text of any node meets another or leaves its box."""
    for width in (WIDE, NARROW):
        page.set_viewport_size(width)
        page.locator("svg.dag .node").first.wait_for()
        assert page.locator("svg.dag").evaluate(NODE_OVERLAPS) == [], width
    shoot(page, name)


def test_a_nodes_name_and_status_never_overlap(server: DemoServer, browser: Any) -> None:
    """A step that ran twice says so after its status ("succeeded · \u00d72"), and an id may
    be 64 characters: the name, the type and the status of a node stay apart and inside it,
    at both widths."""
    reject_tickets(server)
    retried = ticket(server, tenant="labels", wait=True)
    server.call(f"/runs/{retried}/retry", {})
    assert server.wait_status(retried, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    long_run = failed_long_vertex_run(server, "ui-long-labels", tenant="labels")
    server.call(f"/runs/{long_run}/retry", {})
    assert server.wait_status(long_run, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"

    with opened(browser, f"{server.ui}#/runs/{retried}") as (page, _):
        node = page.locator('svg.dag .node[data-vertex="open-ticket"]')
        node.locator(".node-status", has_text=TWICE).wait_for()
        _labels_apart(page, "run-graph-retried")
        page.goto(f"{server.ui}#/runs/{long_run}")
        node = page.locator(f'svg.dag .node[data-vertex="{LONG_VERTEX}"]')
        node.locator(".node-status", has_text=TWICE).wait_for()
        shown = node.locator(".node-id")
        name = shown.evaluate("(text) => text.firstChild.nodeValue")
        assert name.endswith("…") and LONG_VERTEX.startswith(name[:-1]), name
        assert LONG_VERTEX in (node.locator("title").first.text_content() or "")
        assert shown.locator("title").text_content() == LONG_VERTEX  # the cut id's tooltip
        _labels_apart(page, "run-graph-long-id")


# ── workflows and the editor ───────────────────────────────────────────────────────────────


def test_a_workflows_graph(server: DemoServer, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/workflows") as (page, _):
        page.get_by_role("link", name="nightly-subscription-renewals").click()
        page.locator("svg.dag").wait_for()
        vertices = page.locator("svg.dag .node").evaluate_all(
            "(nodes) => nodes.map((n) => n.dataset.vertex)"
        )
        assert sorted(vertices) == ["collect", "join", "renew", "report"]
        assert page.locator("svg.dag path.edge").count() == 3
        assert "SPAWNER" in (
            page.locator('svg.dag .node[data-vertex="renew"]').text_content() or ""
        )
        shoot(page, "workflows")


BROKEN = """{
  "name": "ui-editor-check",
  "vertices": {
    "a": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/a"}},
    "b": {
      "type": "GATEWAY",
      "dependsOn": [
        "ghost"
      ],
      "config": {"url": "http://127.0.0.1:9/b"}
    }
  }
}"""


def test_a_validation_error_is_located_in_the_editor(server: DemoServer, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        page.fill("#document", BROKEN)
        problem = page.locator('.problem[data-pointer="/vertices/b/dependsOn/0"]')
        problem.wait_for()
        assert problem.get_attribute("data-line") == "8"  # where "ghost" is written
        assert "line 8" in problem.inner_text()
        node = page.locator('svg.dag .node[data-vertex="b"]')
        assert "has-problem" in (node.get_attribute("class") or "")
        assert page.get_by_role("button", name="Publish").is_disabled()
        problem.get_by_role("button").click()  # selects the line in the text
        selected = page.evaluate(
            "() => { const t = document.querySelector('#document');"
            " return t.value.slice(t.selectionStart, t.selectionEnd); }"
        )
        assert '"ghost"' in selected
        shoot(page, "editor-problem")

        page.fill("#document", BROKEN.replace('"a": {', '"a" {'))
        syntax = page.locator('.problem[data-line="4"]', has_text="not JSON")
        syntax.wait_for()
        # Where is said once, on the button (line and column); the text says what.
        said = syntax.inner_text()
        assert said.startswith("line 4, column 9 — not JSON: ") and said.count("line") == 1, said
        page.fill("#document", BROKEN.replace('"vertices"', '"name": "again",\n  "vertices"'))
        twice = page.locator('.problem[data-line="3"]', has_text="(duplicate_key)")
        twice.wait_for()
        said = twice.inner_text()
        assert said.startswith('line 3, column 3 — the key "name" appears more than once'), said
        assert said.count("line") == 1, said
        page.fill("#document", BROKEN.replace('"ghost"', '"a"'))
        page.locator(".editor-state.ok").wait_for()
        page.get_by_role("button", name="Publish").click()
        confirm(page, "Publish")
        page.locator(".ok-box", has_text="ui-editor-check v1").wait_for()
    assert server.call("/workflows/ui-editor-check")["version"] == 1


def test_a_new_document_calls_the_demo_downstream_and_runs(
    server: DemoServer, browser: Any
) -> None:
    """The editor's starter document is one a new user can publish and run as it is."""
    assert server.call("/ui/config") == {"demoDownstream": server.downstream}
    with opened(browser, f"{server.ui}#/editor") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        document = json.loads(page.input_value("#document"))
        url = document["vertices"]["fetch"]["config"]["url"]
        assert url == f"{server.downstream}/items?count=3"
        page.fill("#document", json.dumps({**document, "name": "ui-starter"}))
        page.locator("figcaption", has_text="ui-starter").wait_for()  # the new text checked
        page.locator(".editor-state.ok").wait_for()
        page.get_by_role("button", name="Publish").click()
        confirm(page, "Publish")
        done = page.locator(".ok-box", has_text="ui-starter v1")
        done.wait_for()
        # A workflow's first version serves at once: said so, with nothing to do.
        assert done.inner_text() == "✓ Published: ui-starter v1 — serves new runs"
        assert page.locator(".serving-hint").count() == 0
    run = server.call("/workflows/ui-starter/runs?wait=true", {"input": {}})
    assert run["status"] == "SUCCEEDED", run
    assert len(run["output"]["fetch"]["body"]["items"]) == 3


def test_publishing_a_second_version_says_how_to_make_it_serve(
    server: DemoServer, browser: Any
) -> None:
    """A later version does not serve until a deployment promotes it or an admin switches to
    it: Publish says it is published and not serving, then the API's hint, its commands as
    code, with a link to the version (where its Deploy button is)."""
    name = "ui-serving-hint"
    fetch = {"type": "GATEWAY", "config": {"url": f"{server.downstream}/items?count=1"}}
    server.call("/workflows", {"name": name, "vertices": {"fetch": fetch}})
    with opened(browser, f"{server.ui}#/editor?from={name}") as (page, _):
        page.locator(".editor-state.ok").wait_for()
        document = json.loads(page.input_value("#document"))
        document["vertices"]["fetch"]["config"]["url"] = f"{server.downstream}/items?count=2"
        # Through a text that is not JSON, so the wait below is for the new text's check.
        page.fill("#document", "{")
        page.locator(".editor-state.bad").wait_for()
        page.fill("#document", json.dumps(document, indent=2))
        page.locator(".editor-state.ok").wait_for()
        page.get_by_role("button", name="Publish").click()
        confirm(page, "Publish")
        done = page.locator(".ok-box", has_text=f"{name} v2")
        done.wait_for()
        assert done.inner_text() == f"✓ Published: {name} v2 — not serving yet"
        hint = page.locator(f'.serving-hint.warning-box[data-workflow="{name}"]')
        said = hint.inner_text()
        assert said.startswith(
            f"⚠ Warning: {name} v2 is NOT serving yet: new runs get v1. Deploy it: "
            f"schemabridge deployments start {name} --version 2 "
        ), said
        assert said.endswith(f". Open {name} v2"), said
        codes = hint.locator("code").all_inner_texts()
        assert f"schemabridge deployments start {name} --version 2" in codes, codes
        assert f"schemabridge workflows serving {name} 2" in codes, codes
        link = hint.get_by_role("link", name=f"Open {name} v2")
        assert link.get_attribute("href") == f"#/workflows/{name}?v=2"
        shoot(page, "editor-published-not-serving")
        link.click()
        page.get_by_role("button", name="Deploy v2…").wait_for()
    assert server.call(f"/workflows/{name}")["servingVersion"] == 1


# ── destinations and services ──────────────────────────────────────────────────────────────


def test_destinations_show_admission_and_take_a_cap(server: DemoServer, browser: Any) -> None:
    ticket(server, tenant="dest", wait=True)  # so admission has seen the downstream
    with opened(browser, f"{server.ui}#/destinations") as (page, _):
        card = page.locator(f'article.destination[data-destination="{server.downstream}"]')
        card.wait_for()
        assert "AIMD limit" in card.inner_text()
        # A limit that has not moved is a flat line, which has no height: Playwright calls a
        # zero-height path hidden, so wait for a drawn line (two samples) rather than for sight.
        page.wait_for_function(
            """destination => [...document.querySelectorAll("article.destination")]
                .filter(card => card.dataset.destination === destination)
                .some(card => (card.querySelector("svg.chart path.chart-limit")
                    ?.getAttribute("d") || "").includes("L"))""",
            arg=server.downstream,
            timeout=30_000,
        )
        # The tour: a rate of 0 was refused in words that read as a statement, and the
        # page's next look emptied the field. The rule is said, and what was typed stays.
        rate = card.get_by_label(f"calls per second of {server.downstream}")
        rate.fill("0")
        card.get_by_role("button", name="Save").click()
        page.locator(".error-box", has_text="Calls per second must be more than 0").wait_for()
        # The page's next look draws the list anew: wait for a new element in its place.
        card.evaluate("e => { e.seenBefore = true; }")
        page.wait_for_function(
            """destination => [...document.querySelectorAll("article.destination")]
                .some(e => e.dataset.destination === destination && !e.seenBefore)""",
            arg=server.downstream,
        )
        assert rate.input_value() == "0"
        rate.fill("")
        card.locator("input.cap-input").first.fill("7")
        card.get_by_role("button", name="Save").click()
        confirm(page, "Set the cap")
        page.locator(".ok-box", has_text="capped at 7").wait_for()
        shoot(page, "destinations")
    listed = server.call("/destinations")["items"]
    assert next(d for d in listed if d["destination"] == server.downstream)["cap"] == 7
    server.call(f"/destinations/{_quoted(server.downstream)}/caps", method="DELETE")


def _quoted(key: str) -> str:
    from urllib.parse import quote

    return quote(key, safe="")


def test_services_are_up_from_their_heartbeats(server: DemoServer, browser: Any) -> None:
    """The serve process is up, says its role, and its uptime counts from when its process
    started (not from its first heartbeat, after its start-up), which its Uptime cell says
    on hover."""
    with opened(browser, f"{server.ui}#/services") as (page, _):
        row = page.locator("tbody tr").first
        row.wait_for()
        eventually(lambda: "up" in row.inner_text(), what="the serve process shows up")
        assert row.inner_text().startswith("serve-")
        (serve,) = [s for s in server.call("/services")["items"] if s["name"].startswith("serve-")]
        assert serve["pid"] == server.service.process.pid
        # The kernel's start of the process (psutil's reading may be up to a second early),
        # not the test's moment before asking for it: the fork server, started by that ask,
        # forks it seconds later on a loaded machine (CI read 1.8 s).
        started = psutil.Process(serve["pid"]).create_time()
        assert abs(serve["startedAt"] - started) < 1.5, (serve, started)
        assert serve["startedAt"] > server.service.started_at - 1.0, serve
        assert row.locator("td").nth(2).inner_text() == serve["role"] == "serve"
        assert row.locator("td").nth(3).inner_text() == serve["host"] == socket.gethostname()
        assert row.locator("td").nth(4).inner_text() == str(serve["pid"])
        heads = page.locator("table.services thead th").all_inner_texts()
        assert heads[:4] == ["Service", "State", "Role", "Host"], heads
        uptime = row.locator("td").nth(5)
        title = uptime.get_attribute("title") or ""
        assert re.fullmatch(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", title), title
        shoot(page, "services", widths=(901, 360))
        # On a phone the role goes under the state, as the host goes under the name.
        page.set_viewport_size({"width": 360, "height": 800})
        under = row.locator(".role-under")
        assert under.is_visible() and under.inner_text() == "serve"
        assert not row.locator("td").nth(2).is_visible()


def test_the_pages_work_by_keyboard(server: DemoServer, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/runs") as (page, _):
        page.locator("table.runs tbody tr").first.wait_for()
        page.keyboard.press("Tab")  # the skip link comes first
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        names = []
        for _ in range(8):
            page.keyboard.press("Tab")
            names.append(page.evaluate("document.activeElement.textContent.trim()"))
        assert {"Runs", "Workflows", "Editor", "Destinations", "Services"} <= set(names)
        run_id = ticket(server, tenant="keys", wait=True)
        page.goto(f"{server.ui}#/runs/{run_id}")
        page.locator('svg.dag .node[data-vertex="lookup"]').wait_for()
        for _ in range(80):  # bounded: the page has fewer focusable elements than this
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.dataset.vertex") == "open-ticket":
                break
        else:
            raise AssertionError("no graph vertex took the focus")
        page.keyboard.press("Enter")
        page.get_by_role("heading", name="Step open-ticket").wait_for()


def test_a_focused_vertex_keeps_the_focus_while_the_run_progresses(
    server: DemoServer, browser: Any
) -> None:
    """A full run failed the keyboard test above: the page drew the graph anew (the run's
    end arrived) between the vertex taking the focus and Enter, and the focus was on <body>.
    A keyboard user lost their place at every progress of a live run."""
    server.latency(2_500)  # two calls: the run ends at least 5 s after it is submitted
    run_id = ticket(server, tenant="graph-focus")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        node = page.locator('svg.dag .node[data-vertex="open-ticket"]')
        node.wait_for()
        node.focus()
        node.evaluate("e => { e.seenBefore = true; }")
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        # The graph was drawn anew since the focus (a new element in the vertex's place).
        page.wait_for_function(
            """vertex => [...document.querySelectorAll("svg.dag .node")]
                .some(e => e.dataset.vertex === vertex && !e.seenBefore)""",
            arg="open-ticket",
        )
        assert page.evaluate("() => document.activeElement.dataset.vertex") == "open-ticket"
        page.keyboard.press("Enter")
        page.get_by_role("heading", name="Step open-ticket").wait_for()


def test_unknown_pages_and_runs_say_so(server: DemoServer, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/nowhere") as (page, watch):
        page.get_by_role("heading", name="Not found").wait_for()
        watch.allowed_errors.append("status of 404")
        page.goto(f"{server.ui}#/runs/no-such-run")
        page.locator(".error-box", has_text="run_not_found").wait_for()


def test_a_run_opens_from_the_short_id_the_monitor_shows(server: DemoServer, browser: Any) -> None:
    run_id = ticket(server, tenant="short-ids", wait=True)
    with opened(browser, f"{server.ui}#/runs/{run_id[:8]}") as (page, watch):
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        assert page.evaluate("location.hash") == f"#/runs/{run_id}"  # shared by its whole id
        watch.allowed_errors.append("status of 404")
        page.goto(f"{server.ui}#/runs/{'0' * 8}")
        page.locator(".error-box", has_text="run_not_found").wait_for()
        # Two runs that share 8 characters cannot be made on purpose: the API's answer for
        # such a prefix is given, and the page must list them rather than pick one.
        ids = ["abcdef12-0000-4000-8000-000000000001", "abcdef12-0000-4000-8000-000000000002"]
        page.route(
            "**/run-ids?*",
            lambda route: route.fulfill(
                json={"prefix": "abcdef12", "ids": ids, "more": False}, status=200
            ),
        )
        page.goto(f"{server.ui}#/runs/abcdef12")
        page.get_by_role("heading", name="Which run?").wait_for()
        links = page.locator("ul.id-matches a")
        assert links.all_inner_texts() == ids
        assert links.first.get_attribute("href") == f"#/runs/{ids[0]}"


def test_a_short_id_left_before_its_lookup_answers_keeps_the_page_moved_to(
    server: DemoServer, browser: Any
) -> None:
    """A short id's lookup answered after the user had moved to another page: the page left
    rewrote the URL to its run (and drew its list of matches over the next page). The URL
    and the page moved to stay."""
    run_id = ticket(server, tenant="short-left", wait=True)
    held: list[Any] = []
    with opened(browser, f"{server.ui}#/workflows") as (page, _):
        page.get_by_role("heading", name="Workflows", exact=True).wait_for()

        # A function of its own: Playwright cannot wrap a builtin such as `held.append`.
        def hold(route: Any) -> None:
            held.append(route)

        page.route("**/run-ids?*", hold)
        page.evaluate(f"location.hash = '#/runs/{run_id[:8]}'")
        page.wait_for_function("() => document.querySelector('#main .page-loading') !== null")
        for _ in range(200):  # the lookup reaches the route (bounded: 10 s)
            if held:
                break
            page.wait_for_timeout(50)
        assert held, "the short id's lookup was never sent"
        page.evaluate("location.hash = '#/workflows'")
        page.get_by_role("heading", name="Workflows", exact=True).wait_for()
        with page.expect_response("**/run-ids?*"):
            held[0].continue_()
        page.wait_for_timeout(300)  # the page left's code runs on after its answer
        assert page.evaluate("location.hash") == "#/workflows"
        assert page.get_by_role("heading", name="Workflows", exact=True).is_visible()


REDRAWN_JS = """() => new Promise((resolve) => {
  // A redraw of the page shown (as a filter or Back on it makes): what it shows at once, and
  // whether that is the move-to-another-page placeholder (the first load's "Loading…" in the
  // page's own HTML is no such flash).
  addEventListener("hashchange", () => {
    const main = document.getElementById("main");
    resolve({ text: main.innerText, flashed: main.querySelector(".page-loading") !== null });
  }, { once: true });
  dispatchEvent(new HashChangeEvent("hashchange"));
})"""


def test_a_run_opened_by_its_short_id_redraws_in_place(server: DemoServer, browser: Any) -> None:
    """The page rewrites a short id's URL to the whole id; a later redraw of that same page
    is no move to another page: the run stays in sight (no "Loading…" flash, no dialog
    closed, no focus moved)."""
    run_id = ticket(server, tenant="short-redraw", wait=True)
    with opened(browser, f"{server.ui}#/runs/{run_id[:8]}") as (page, _):
        # At once after the rewrite, while the page may still be reading the run: the URL
        # names the page shown from then on, not once the page has finished loading.
        # A function, not an expression: Playwright evaluates a bare expression with eval,
        # which the monitor's Content-Security-Policy (script-src 'self') refuses.
        page.wait_for_function("want => location.hash === want", arg=f"#/runs/{run_id}")
        early = page.evaluate(REDRAWN_JS)
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        shown = page.evaluate(REDRAWN_JS)
    assert not early["flashed"], early
    assert not shown["flashed"] and run_id in shown["text"], shown


def test_a_waiting_step_says_why(server: DemoServer, browser: Any) -> None:
    """A tenant allowed one GATEWAY call a minute: the ticket's lookup takes it, so open-ticket
    parks on the tenant's rate limit, and the run page says so with the engine's own words."""
    server.call("/tenants/waiting/limits", {"ratePerMinute": 1}, method="PUT")
    run_id = ticket(server, tenant="waiting")
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        line = page.locator('.waiting .waiting-line[data-vertex="open-ticket"]')
        line.wait_for(timeout=30_000)
        text = line.inner_text()
        shoot(page, "run-waiting")
    assert "open-ticket is waiting (tenant_rate_limit)" in text
    assert "tenant waiting" in text and "set-rate" in text, text
    assert "s more" in text, "the page counts down to the next try"
    assert server.run_status(run_id) == "RUNNING"
    server.call("/runs/" + run_id + "/cancel", {}, method="POST")


def test_a_retry_wait_counts_down_once(server: DemoServer, browser: Any) -> None:
    """A call answered 503 with `Retry-After: 30` waits to retry (retry_backoff); the API's
    text counts down to the next try ("; next in N s"), and the page added its own countdown
    after it: an upgrade's tour read "next in 507 s — about 507 s more"."""
    call = {
        "url": f"{server.downstream}/ui-next-try?status=503&retry_after=30",
        "destination": "ui-next-try-dest",
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "ui-next-try", "vertices": {"call": vertex}})
    body = {"input": {}, "tenantId": "next-try"}
    run_id = str(server.call("/workflows/ui-next-try/runs", body)["id"])

    def waits() -> bool:
        (step,) = server.call(f"/runs/{run_id}")["steps"]
        return bool(step["waiting"]) and step["waiting"]["reason"] == "retry_backoff"

    try:
        eventually(waits, 30, "the call to wait to retry")
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            line = page.locator('.waiting .waiting-line[data-vertex="call"]')
            line.wait_for()
            text = line.inner_text()
            shoot(page, "run-retry-wait")
    finally:
        server.call("/runs/" + run_id + "/cancel", {}, method="POST")
    assert "call is waiting (retry_backoff)" in text, text
    assert re.search(r"; next in \d+ s", text), text
    assert "s more" not in text, text


def test_a_run_opens_on_the_step_that_waits_not_its_pending_fan_out(
    server: DemoServer, browser: Any
) -> None:
    """The on-call tour: a fan-out whose first call waited behind an open breaker opened on
    its SPAWNER, still pending ("Step renew · pending", nothing to read), while the step that
    held the run up, with its error and attempts, had to be found and clicked. The page opens
    on the waiting step."""
    tenant, destination = "first-waits", "ui-first-waits-dest"
    breaker_opening_run(server, "ui-first-waits-open", tenant, destination)
    call = {"url": f"{server.downstream}/ui-first-waits/items", "destination": destination}
    child = {"type": "GATEWAY", "config": {"url": f"{server.downstream}/ui-first-waits/child"}}
    server.call("/workflows", {"name": "ui-first-waits-child", "vertices": {"call": child}})
    spawn = {"items": "{{ vertices.list.output.body.items }}", "workflow": "ui-first-waits-child"}
    parent = {
        "list": {"type": "GATEWAY", "maxAutoRetries": 3, "config": call},
        "each": {"type": "SPAWNER", "dependsOn": ["list"], "config": spawn},
    }
    server.call("/workflows", {"name": "ui-first-waits", "vertices": parent})
    run_id = str(
        server.call("/workflows/ui-first-waits/runs", {"input": {}, "tenantId": tenant})["id"]
    )

    def waits() -> bool:
        steps = server.call(f"/runs/{run_id}")["steps"]
        return any(s["vertexId"] == "list" and s["waiting"] for s in steps)

    eventually(waits, 30, "the list step to wait behind the open breaker")
    try:
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            heading = page.locator(".step-panel > h3")
            heading.wait_for()
            assert heading.inner_text() == "Step list", heading.inner_text()
            page.locator('.step-panel .waiting-line[data-vertex="list"]').wait_for()
            # Its last execution's error, said as the last one in the waiting colour: a red
            # "✕ Error of list" beside the waiting line read as a step that had failed.
            box = page.locator(".step-panel section.error-box")
            box.wait_for()
            assert box.get_attribute("class") == "error-box past-error"
            title = box.locator(".error-title").inner_text()
            assert title == "↻ Last error of list (it runs again)"
            # The breaker that refused it, named by the API's error: its Reset a click away.
            steps = server.call(f"/runs/{run_id}")["steps"]
            (error,) = [s["error"] for s in steps if s["vertexId"] == "list"]
            assert error["breaker"] == {"destination": destination, "tenantId": tenant}, error
            reset = box.locator("a.reset-link")
            href = f"#/destinations?destination={destination}&tenant={tenant}"
            assert reset.get_attribute("href") == href
            shoot(page, "run-opens-on-waiting-step")
            # The runs list says why it makes no progress ("0/2 steps" said nothing).
            (listed,) = server.call("/runs?workflow=ui-first-waits")["items"]
            assert listed["progress"]["waiting"] == "breaker_open", listed["progress"]
            page.goto(f"{server.ui}#/runs?workflow=ui-first-waits")
            note = page.locator(f'tr[data-run="{run_id}"] .list-wait')
            note.wait_for()
            assert note.inner_text() == "waiting: breaker open"
            shoot(page, "runs-list-says-why-a-run-waits", narrow=False)
    finally:
        server.call("/runs/" + run_id + "/cancel", {}, method="POST")


def test_children_behind_an_open_breaker_say_why_they_wait(
    server: DemoServer, browser: Any
) -> None:
    """A fan-out whose children call a destination whose tenant breaker is open: they wait
    (reason breaker_open), and the run page says so in the API's words, as `runs show` does:
    which breaker, when it half-opens, and the command that closes it; and links to that
    breaker's Reset on the Destinations page (the API's `breaker`), which the link opens."""
    tenant, destination = "fan-breaker", "ui-fan-breaker-dest"
    breaker_opening_run(server, "ui-fan-breaker-open", tenant, destination)
    call = {"url": f"{server.downstream}/ui-fan-breaker", "destination": destination}
    child = {"type": "GATEWAY", "maxAutoRetries": 3, "config": call}
    server.call("/workflows", {"name": "ui-fan-breaker-child", "vertices": {"call": child}})
    spawn = {"items": "{{ input }}", "workflow": "ui-fan-breaker-child"}
    parent = {
        "each": {"type": "SPAWNER", "config": spawn},
        "join": {"type": "MERGE", "dependsOn": ["each"]},
    }
    server.call("/workflows", {"name": "ui-fan-breaker", "vertices": parent})
    body = {"input": [1, 2, 3, 4, 5], "tenantId": tenant}
    run_id = str(server.call("/workflows/ui-fan-breaker/runs", body)["id"])
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        line = page.locator('.waiting .waiting-line[data-children="breaker_open"]')
        line.wait_for(timeout=30_000)
        text = line.inner_text()
        codes = line.locator("code").all_inner_texts()
        shoot(page, "run-children-breaker")
        link = line.locator("a.reset-link")
        link.wait_for()
        follow_reset_link(page, link, destination, tenant)
        shoot(page, "destinations-from-children-breaker")
    server.call("/runs/" + run_id + "/cancel", {}, method="POST")
    # In words, as `schemabridge runs show` says it, never the reason's code.
    assert re.match(r"◷ [1-5] child(ren)? waiting: ", text), text
    assert "breaker_open" not in text, text
    assert f"the tenant breaker of '{destination}' (tenant '{tenant}') is open" in text, text
    # Their own next try (spread out after the half-open), not the breaker's half-open.
    assert re.search(r"; next in \d+ s", text) and "half-open in" not in text, text
    assert f"reset-breaker {destination} --tenant {tenant}" in text, text
    # The command as code, as in the warnings, not between raw backticks.
    assert codes == [f"schemabridge destinations reset-breaker {destination} --tenant {tenant}"]
    assert "`" not in text, text
