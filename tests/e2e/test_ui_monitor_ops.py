"""The monitor's operator tools in a real browser, against one `schemabridge serve --demo`
(embedded store) for the module: a fan-out's bar, rows and filter say "waiting" as REST does;
a breaker is reset from Destinations; Retry's dialog says, before the click, that a join
would fail again at once and offers Reprocess instead; Reprocess's dialog says, before the
click, that a run which had SUCCEEDED runs again and which steps call their destinations a
second time; "Retry all matching" retries every page of a filter; the cancel dialog's
buttons, the cap banner and the chart's scale."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.browser_harness import (
    DemoServer,
    actions,
    demo_on_sqlite,
    eventually,
    http_json,
    opened,
    pause_clock,
    shoot,
)
from tests.e2e.test_ui_monitor import breaker_opening_run, confirm
from tests.integration.operations_harness import fanout, gateway, items
from vertices.gateway import destination_key

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_downstream")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-ops") as running:
        yield running


def caps(server: DemoServer) -> str:
    return f"/destinations/{quote(server.downstream, safe='')}/caps"


def failed_fan_out(server: DemoServer, tenant: str, n: int, failing: set[int]) -> str:
    """A parent whose join FAILED because its children in `failing` were answered 400 (once:
    run again, they succeed)."""
    for workflow in reversed(fanout(server.downstream)):  # the child before its spawner
        server.call("/workflows", workflow)
    for index in failing:
        server.script(f"/charge/{index}", {"status": 400, "body": {"error": "declined"}})
    body = {"input": {"items": items(n)}, "tenantId": tenant}
    run_id = str(server.call("/workflows/parent/runs", body)["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    assert server.call(f"/runs/{run_id}")["error"]["kind"] == "child_failures"
    return run_id


TENANT = "waiting"


def test_the_fan_out_says_waiting_in_its_bar_rows_filter_and_rest(
    server: DemoServer, browser: Any
) -> None:
    """Children that wait (for their tenant's rate) are RUNNING runs: the bar
    counts them as "waiting" (REST's `waitingChildren`), their rows say "waiting" where a
    child a worker holds says "running", the filter offers the statuses REST takes, and
    REST's `status=PENDING` is refused with where to look instead."""
    # The tenant's rate lets 3 GATEWAY steps a minute through: the other children wait.
    server.call(f"/tenants/{TENANT}/limits", {"ratePerMinute": 3}, method="PUT")
    server.latency(3_000)
    body = {"input": {"batchSize": 8, "renewalDate": "2025-07-01"}, "tenantId": TENANT}
    run_id = server.call("/workflows/nightly-subscription-renewals/runs", body)["id"]
    try:

        def waiting() -> bool:
            fan = server.call(f"/runs/{run_id}")["fanout"]
            return bool(fan["total"] == 8 and fan["waitingChildren"] >= 4)

        eventually(waiting, what="children waiting behind the cap")
        fan = server.call(f"/runs/{run_id}")["fanout"]
        assert fan["pending"] == fan["waitingChildren"], "the deprecated name says the same"
        rows = server.call(f"/runs/{run_id}/children?status=RUNNING")["items"]
        assert any(r["waiting"] for r in rows), rows
        assert all(isinstance(r["waiting"], bool) for r in rows), rows
        refused = server.call(f"/runs/{run_id}/children?status=PENDING")
        assert refused["code"] == "invalid_filter"
        assert "a waiting child is RUNNING, marked `waiting`" in refused["message"]
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            legend = page.locator(".fanout-block .legend")
            legend.wait_for()
            said = legend.inner_text()
            assert re.search(r"waiting \d+", said) and "pending" not in said, said
            page.locator(".children-table .badge.st-waiting").first.wait_for()
            options = page.locator('select[name="child-status"] option').all_inner_texts()
            assert options == [
                "any status",
                "running or waiting",
                "failed",
                "succeeded",
                "cancelled",
            ]
            values = page.locator('select[name="child-status"] option').evaluate_all(
                "(options) => options.map((o) => o.value)"
            )
            assert values == ["", "RUNNING", "FAILED", "SUCCEEDED", "CANCELLED"]
            page.select_option('select[name="child-status"]', "RUNNING")
            page.locator(".children-table .badge.st-waiting").first.wait_for()
            words = page.locator(".children-table tbody .badge").all_inner_texts()
            assert words and {w.split()[-1] for w in words} <= {"running", "waiting"}, words
            # The long tail's oldest RUNNING children say the same words as their rows (the
            # children past the tenant's 3 calls a minute wait for the next minute).
            tail = server.call(f"/runs/{run_id}/steps/renew/long-tail?limit=5")
            assert any(child["run"]["waiting"] for child in tail["runningLongest"]), tail
            page.locator(".running-longest li", has_text="waiting").first.wait_for()
            said_tail = page.locator(".running-longest li").all_inner_texts()
            assert all(re.search(r" (running|waiting) · ", line) for line in said_tail), said_tail
            shoot(page, "ops-fanout-waiting", narrow=False)
    finally:
        server.call(f"/runs/{run_id}/cancel", {})
        server.call(f"/tenants/{TENANT}/limits", {"ratePerMinute": None}, method="PUT")


def test_a_tenant_breaker_is_reset_from_destinations(server: DemoServer, browser: Any) -> None:
    """An open tenant breaker has a Reset button: dismissed, nothing changes; confirmed, the
    API closes that tenant's layer and the page says so, and the breaker reads closed."""
    tenant, destination = "reset", "ui-ops-breaker"
    breaker_opening_run(server, "ui-ops-breaker", tenant, destination)
    with opened(browser, f"{server.ui}#/destinations") as (page, _):
        card = page.locator(f'article.destination[data-destination="{destination}"]')
        card.wait_for()
        layer = card.locator("li.breaker", has_text=f"tenant {tenant}")
        assert "open" in layer.inner_text()
        reset = f"Reset the breaker of tenant {tenant} on {destination}"
        card.get_by_role("button", name=reset).wait_for()
        shoot(page, "ops-breaker-open", narrow=False)
        card.get_by_role("button", name=reset).click()
        dialog = page.locator("dialog.modal")
        assert f"Reset tenant {tenant}'s breaker of {destination}?" in dialog.inner_text()
        confirm(page, "Cancel")
        listed = {d["destination"]: d for d in server.call("/destinations")["items"]}
        assert listed[destination]["tenantBreakers"][tenant]["state"] == "open"
        card.get_by_role("button", name=reset).click()
        confirm(page, "Reset the breaker")
        page.locator(
            ".ok-box", has_text=f"{destination}: the breaker of tenant {tenant} closed."
        ).wait_for()
        # The closed layer's Reset is gone: the focus is on the answer, not on <body>.
        focused = "() => document.activeElement.classList.contains('ok-box')"
        eventually(lambda: page.evaluate(focused), 10, "the answer to take the focus")
        shoot(page, "ops-breaker-reset", narrow=False)
    listed = {d["destination"]: d for d in server.call("/destinations")["items"]}
    assert listed[destination]["tenantBreakers"].get(tenant, {"state": "closed"})["state"] == (
        "closed"
    )


def test_a_closed_breaker_says_when_it_last_opened_not_opened(
    server: DemoServer, browser: Any
) -> None:
    """The on-call tour: after a reset, one more failure listed the tenant layer as "●
    tenant T: closed, 1 failure · opened 53 s ago", which read as open again. A closed
    layer says when it *last* opened; an open one still says "opened"."""
    tenant, destination = "last-opened", "ui-ops-last-opened"
    breaker_opening_run(server, "ui-ops-last-opened", tenant, destination)
    reset = f"/destinations/{quote(destination, safe='')}/breakers/reset?tenantId={tenant}"
    server.call(reset, {}, method="POST")
    # One more failure after the reset: the tenant layer is closed, with 1 failure counted.
    call = {"url": f"{server.downstream}/ui-ops-last-opened-again?status=500"}
    call |= {"destination": destination, "retry": {"maxAttempts": 1}}
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "ui-ops-last-opened-again", "vertices": {"call": vertex}})
    body = {"input": {}, "tenantId": tenant}
    run_id = str(server.call("/workflows/ui-ops-last-opened-again/runs", body)["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    layer = server.call("/destinations")["items"]
    listed = {d["destination"]: d for d in layer}[destination]["tenantBreakers"][tenant]
    assert listed["state"] == "closed" and listed["failures"] == 1 and listed["openedAt"], listed
    with opened(browser, f"{server.ui}#/destinations") as (page, _):
        card = page.locator(f'article.destination[data-destination="{destination}"]')
        card.wait_for()
        said = card.locator("li.breaker", has_text=f"tenant {tenant}").inner_text()
        assert re.search(rf"tenant {tenant}: closed, 1 failure · last opened \S", said), said
        shoot(page, "ops-breaker-last-opened", narrow=False)


def test_retry_warns_of_a_stuck_join_before_the_click_and_offers_reprocess(
    server: DemoServer, browser: Any
) -> None:
    """The join of the run failed because a child FAILED: Retry's dialog says, before
    anything is sent, that the join would fail again at once, and offers the monitor's
    Reprocess instead (no CLI command); choosing it reprocesses, and the run succeeds."""
    run_id = failed_fan_out(server, "stuck", 3, failing={1})
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        # Reprocess's own dialog says what runs again, its verb agreeing with one child.
        page.get_by_role("button", name="Reprocess dead letters").click()
        dialog = page.locator("dialog.modal")
        said = dialog.locator("form > p").first.inner_text()
        assert said == "The 1 FAILED child runs again; the join reopens.", said
        confirm(page, "Cancel")
        dialog.wait_for(state="detached")
        page.get_by_role("button", name="Retry", exact=True).click()
        warning = dialog.locator(".warning-box")
        warning.wait_for()
        said = warning.inner_text()
        assert "its join 'join' fails again at once: 1 child is still FAILED" in said, said
        assert "schemabridge" not in said, said
        shoot(page, "ops-retry-stuck-dialog", narrow=False)
        # Nothing was done: the dialog only read the preview.
        assert server.run_status(run_id) == "FAILED"
        dialog.get_by_role("button", name="Reprocess dead letters").click()
        page.locator(
            ".action-result .ok-box", has_text="1 dead-lettered child runs again"
        ).wait_for()
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        shoot(page, "ops-retry-stuck-reprocessed", narrow=False)
    log = server.call(f"/runs/{run_id}/logs?limit=500")["items"]
    assert not [line for line in log if (line.get("data") or {}).get("action") == "retry"]


def test_retry_of_a_join_failed_on_a_cancelled_child_offers_no_reprocess(
    server: DemoServer, browser: Any
) -> None:
    """The tour: a child cancelled by an operator failed its parent's join, and Retry (tried
    three times) failed again at once, with nothing said. Retry's dialog says, before the
    click, that nothing runs a cancelled child again and to resolve the join or start the run
    over, and offers no Reprocess, which runs FAILED children only."""
    for workflow in reversed(fanout(server.downstream)):  # the child before its spawner
        server.call("/workflows", workflow)
    server.script("/charge/1", {"status": 200, "sleep_ms": 60_000})
    body = {"input": {"items": items(3)}, "tenantId": "cancelled-child"}
    run_id = str(server.call("/workflows/parent/runs", body)["id"])
    held: list[str] = []

    def straggling() -> bool:
        page = server.call(f"/runs/{run_id}/children?status=RUNNING")["items"]
        held[:] = [child["id"] for child in page]
        return len(held) == 1

    eventually(straggling, 30, "the slow child to run")
    server.call(f"/runs/{held[0]}/cancel", {})
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "FAILED"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        warning = dialog.locator(".warning-box")
        warning.wait_for()
        said = warning.inner_text()
        assert (
            "its join 'join' fails again at once: 1 child it does not tolerate was CANCELLED, "
            'which neither a retry nor a reprocess runs again; "Resolve" the join'
        ) in said, said
        assert dialog.get_by_role("button", name="Reprocess dead letters").count() == 0
        shoot(page, "ops-retry-cancelled-child-dialog", narrow=False)
        confirm(page, "Cancel")
    # "Retry all matching" says it too, and sends to the run's page for Resolve, not Reprocess.
    with opened(browser, f"{server.ui}#/runs?tenant=cancelled-child&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").first.wait_for()
        page.get_by_role("button", name="Retry all matching…").click()
        dialog = page.locator("dialog.modal")
        said = " ".join(dialog.locator(".warning-box .stuck-joins").inner_text().split())
        assert said.startswith(
            "⚠ Resolve or start over instead: The run has a join that fails again at once: it "
            "failed on CANCELLED children"
        ), said
        whole = " ".join(dialog.inner_text().split())
        assert "Resolve the join or Start over from each run's page: " in whole, whole
        assert "Reprocess dead letters" not in whole, whole
        shoot(page, "ops-retry-all-cancelled-child", narrow=False)
        confirm(page, "Cancel")
    assert server.run_status(run_id) == "FAILED"


def test_retry_all_matching_says_which_joins_fail_again_at_once(
    server: DemoServer, browser: Any
) -> None:
    """The tour: "Retry all matching" said nothing of a run whose join would fail again at
    once (its child still FAILED), and the batch then retried it for nothing. Its dialog
    says it before the confirm button, in the API's sentence, with a link to the run, whose
    page has Reprocess dead letters; cancelled, nothing is retried."""
    tenant = "stuck-batch"
    run_id = failed_fan_out(server, tenant, 3, failing={1})
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").first.wait_for()
        page.get_by_role("button", name="Retry all matching…").click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        said = " ".join(dialog.locator(".warning-box .stuck-joins").inner_text().split())
        # Without the CLI's command and the run's whole id (a new user's tour: the link
        # below names the run, and the button is on its page).
        assert said == (
            "⚠ Reprocess instead: The run has a join that fails again at once: the children "
            'it failed on are still FAILED, and a retry does not run them. "Reprocess dead '
            'letters" on it runs those children again and reopens the join instead.'
        ), said
        # A sentence of its own before the links (a tour read "…reopens the join instead
        # Reprocess dead letters from each run's page: …").
        whole = " ".join(dialog.inner_text().split())
        assert "reopens the join instead. Reprocess dead letters from each run's page: " in whole
        # Said once: not again among the other warnings.
        assert dialog.inner_text().count("fails again at once") == 1
        link = dialog.locator(".stuck-runs a")
        assert link.get_attribute("href") == f"#/runs/{run_id}"
        shoot(page, "ops-retry-all-stuck")
        confirm(page, "Cancel")
        dialog.wait_for(state="detached")
    assert server.run_status(run_id) == "FAILED"


def test_retry_all_matching_answer_links_each_run_whose_join_fails_again(
    server: DemoServer, browser: Any
) -> None:
    """The on-call tour: "Retry all matching" confirmed, its answer listed the runs whose
    joins failed again at once as the API's sentences (each run's whole id and the CLI's
    `schemabridge runs reprocess` command), with no way to the run's Reprocess button. The
    answer names each such run by a link to its page, and says what to do there."""
    tenant = "stuck-batch-answer"
    run_id = failed_fan_out(server, tenant, 3, failing={1})
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").first.wait_for()
        page.get_by_role("button", name="Retry all matching…").click()
        confirm(page, "Retry 1")
        page.locator(".batch-result .ok-box", has_text="Retried 1, skipped 0.").wait_for()
        box = page.locator(".batch-result .stuck-result")
        box.wait_for()
        listed = f"{box.locator('p').first.inner_text()} {box.locator('ul').inner_text()}"
        said = " ".join(listed.split())
        assert said == (
            f"⚠ 1 retried run fails again at once: {run_id[:8]}: its join 'join' fails again "
            'at once: 1 child is still FAILED; "Reprocess dead letters" on its page runs them '
            "again"
        ), said
        assert "schemabridge" not in said and run_id not in said, said
        link = box.locator("a")
        assert link.get_attribute("href") == f"#/runs/{run_id}"
        # Said once: not again as the API's sentence in another warning box.
        whole = page.locator(".batch-result").inner_text()
        assert whole.count("fails again at once") == 2, whole
        shoot(page, "ops-retry-all-stuck-answer")
        link.click()
        page.get_by_role("button", name="Reprocess dead letters").wait_for()
    assert server.run_status(run_id) == "FAILED"


def test_the_runs_whose_joins_fail_again_are_reprocessed_in_one_click(
    server: DemoServer, browser: Any
) -> None:
    """The stuck box's way out: its runs' dead letters, reprocessed one run page at a time
    before, run again from one button (`POST /runs/reprocess`), confirmed first, its answer
    said under it; the runs then succeed."""
    tenant = "stuck-reprocess"
    runs = [
        failed_fan_out(server, tenant, 3, failing={1}),
        failed_fan_out(server, tenant, 3, failing={2}),
    ]
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").nth(1).wait_for()
        page.get_by_role("button", name="Retry all matching…").click()
        confirm(page, "Retry 2")
        box = page.locator(".batch-result .stuck-result")
        box.wait_for()
        box.get_by_role("button", name="Reprocess dead letters of 2 runs").click()
        dialog = page.locator("dialog.modal")
        dialog.get_by_role("heading", name="Reprocess dead letters of 2 runs?").wait_for()
        assert "is left alone (reprocess it from its page)" in dialog.inner_text()
        confirm(page, "Reprocess")
        answer = box.locator(".reprocess-result .ok-box")
        answer.wait_for()
        assert answer.inner_text() == "Reprocessed 2 runs (2 children run again), skipped 0."
        assert box.get_by_role("button", name="Reprocess dead letters of 2 runs").is_disabled()
        shoot(page, "ops-reprocess-stuck-answer")
    for run_id in runs:
        assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "SUCCEEDED"


def reports(server: DemoServer, ops: str = "reprocess") -> int:
    """The POSTs to the report of `succeeded_with_a_report(ops=ops)`'s runs the demo
    downstream has answered."""
    stats = http_json(f"{server.downstream}/_stats")
    return sum(1 for request in stats["recent"] if request["path"] == f"/ops/{ops}/report")


def succeeded_with_a_report(
    server: DemoServer, n: int, failing: set[int], ops: str = "reprocess"
) -> str:
    """A fan-out whose MERGE tolerated the children in `failing` (answered 400 once: dead
    letters) and SUCCEEDED, then sent its report once: a GATEWAY after the join. `ops` names
    its workflows (`ui-<ops>-parent`, `ui-<ops>-child`) and paths (`/ops/<ops>/…`), one per
    test, so each counts its own reports."""
    parent = {
        "name": f"ui-{ops}-parent",
        "vertices": {
            "each": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.items }}", "workflow": f"ui-{ops}-child"},
            },
            "join": {
                "type": "MERGE",
                "dependsOn": ["each"],
                "config": {
                    "tolerateChildFailures": ["FAILED"],
                    "failureTolerance": {"maxFailures": len(failing)},
                },
            },
            "report": gateway(
                f"{server.downstream}/ops/{ops}/report",
                "join",
                method="POST",
                retry={"maxAttempts": 1},
            ),
        },
    }
    child = {
        "name": f"ui-{ops}-child",
        "vertices": {
            "call": gateway(
                f"{server.downstream}/ops/{ops}/{{{{ index }}}}",
                method="POST",
                retry={"maxAttempts": 1},
            )
        },
    }
    for workflow in (child, parent):
        server.call("/workflows", workflow)
    for index in failing:
        server.script(f"/ops/{ops}/{index}", {"status": 400, "body": {"error": "declined"}})
    run_id = str(
        server.call(f"/workflows/ui-{ops}-parent/runs", {"input": {"items": items(n)}})["id"]
    )
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "SUCCEEDED"
    assert reports(server, ops) == 1
    return run_id


def test_reprocess_says_before_the_click_that_a_finished_run_calls_again(
    server: DemoServer, browser: Any
) -> None:
    """The run SUCCEEDED with 2 dead letters tolerated: Reprocess's dialog says, before
    anything is sent, that the run runs again from its join and that `report` calls its
    destination a second time; backing out changes nothing; confirmed, the answer says it
    again, and the report is sent a second time."""
    run_id = succeeded_with_a_report(server, 6, failing={1, 4})
    destination = destination_key(server.downstream, None)
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        reprocess = page.get_by_role("button", name="Reprocess dead letters")
        reprocess.click()
        dialog = page.locator("dialog.modal")
        warning = dialog.locator(".warning-box")
        warning.wait_for()
        said = warning.inner_text()
        assert "Before you reprocess 2 dead-lettered children" in said, said
        text = dialog.locator("form > p").first.inner_text()
        assert text == "The 2 FAILED children run again; the join reopens.", text
        assert (
            f"run {run_id} had SUCCEEDED and runs again from its join 'join': the steps after "
            f"that join run a second time: report (calls {destination})"
        ) in said, said
        # Each step that runs again is named once in the dialog (the warning names them all,
        # with what they call: a list of them under it said each a second time).
        steps_again = server.call(f"/runs/{run_id}/reprocess/preview")["reopenedJoins"]
        named = [step["vertexId"] for join in steps_again for step in join["stepsAgain"]]
        shown = dialog.inner_text()
        assert named == ["report"] and {step: shown.count(step) for step in named} == {
            "report": 1
        }, shown
        shoot(page, "ops-reprocess-reopen-dialog", narrow=False)
        confirm(page, "Cancel")
        assert server.run_status(run_id) == "SUCCEEDED" and reports(server) == 1

        reprocess.click()
        warning.wait_for()
        confirm(page, "Reprocess")
        page.locator(
            ".action-result .ok-box", has_text="2 dead-lettered children run again"
        ).wait_for()
        page.locator(
            ".action-result .warning-box", has_text=f"run {run_id} had SUCCEEDED and runs again"
        ).wait_for()
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        shoot(page, "ops-reprocess-reopened", narrow=False)
    eventually(lambda: reports(server) == 2, what="the report sent a second time")
    log = server.call(f"/runs/{run_id}/logs?limit=500")["items"]
    (line,) = [line for line in log if (line.get("data") or {}).get("action") == "reprocess"]
    assert "the run, which had SUCCEEDED, runs again from its join 'join'" in line["message"]


def test_resolve_says_before_the_click_that_a_finished_run_above_runs_again(
    server: DemoServer, browser: Any
) -> None:
    """The tour: the tolerated FAILED child of a run that had SUCCEEDED, resolved from its
    page, reopened the parent's join and sent its report again, said nowhere. Resolve's
    dialog says it before the click (the child's retry preview: resolving its last FAILED
    step brings it back into the join as a retry would); backing out changes nothing;
    confirmed, the answer's warning says it again, and the parent's log names the resolve."""
    parent = succeeded_with_a_report(server, 3, failing={1}, ops="resolve")
    (child,) = server.call(f"/runs/{parent}/children?status=FAILED")["items"]
    reopens = (
        f"run {parent} above it had SUCCEEDED and runs again from its join 'join': the steps "
        "after that join run a second time"
    )
    with opened(browser, f"{server.ui}#/runs/{child['id']}") as (page, _):
        resolve = page.get_by_role("button", name="Resolve call…")
        resolve.click()
        dialog = page.locator("dialog.modal")
        warning = dialog.locator(".warning-box")
        warning.wait_for()
        said = warning.inner_text()
        assert said.startswith("⚠ Before you resolve: ") and reopens in said, said
        shoot(page, "ops-resolve-reopen-dialog", narrow=False)
        confirm(page, "Cancel")
        dialog.wait_for(state="detached")
        assert server.run_status(parent) == "SUCCEEDED" and reports(server, "resolve") == 1

        resolve.click()
        warning.wait_for()
        confirm(page, "Resolve")
        page.locator(".ok-box", has_text="step call resolved").wait_for()
        page.locator(".warning-box", has_text=reopens).wait_for()
    eventually(lambda: reports(server, "resolve") == 2, what="the report sent a second time")
    log = server.call(f"/runs/{parent}/logs?limit=500")["items"]
    (line,) = [line for line in log if (line.get("data") or {}).get("action") == "resolve"]
    assert "of 1 FAILED child of 'each': the join 'join' reopens" in line["message"], line


def test_retry_all_matching_retries_every_page(server: DemoServer, browser: Any) -> None:
    """A filter matching more FAILED runs than a page shows: "Retry all matching" says how
    many in its dialog, as the API counts them (`POST /runs/retry/preview`, not the list
    paged through), retries them all by the filter, and shows the answer's counts."""
    tenant = "retry-all"
    server.call(caps(server), method="DELETE")
    path = "/ops/retry-all"
    server.call(
        "/workflows",
        {
            "name": "ui-ops-retry-all",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "maxAutoRetries": 0,
                    "config": {"url": f"{server.downstream}{path}", "retry": {"maxAttempts": 1}},
                }
            },
        },
    )
    n = 55  # more than the page of 50
    server.script(path, *[{"status": 400, "body": {"error": "bad"}}] * n)
    ids = [
        server.call("/workflows/ui-ops-retry-all/runs", {"input": {}, "tenantId": tenant})["id"]
        for _ in range(n)
    ]
    for run_id in ids:
        assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").nth(49).wait_for()
        asked: list[str] = []
        page.on("request", lambda request: asked.append(f"{request.method} {request.url}"))
        page.get_by_role("button", name="Retry all matching…").click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        said = " ".join(dialog.inner_text().split())
        assert f"Retry all {n} matching FAILED runs?" in said, said
        assert f"The failed steps of all {n} FAILED runs these filters match" in said, said
        assert [a for a in asked if "/runs" in a] == [f"POST {server.url}/runs/retry/preview"]
        shoot(page, "ops-retry-all-dialog", narrow=False)
        confirm(page, f"Retry {n}")
        page.locator(".batch-result .ok-box", has_text=f"Retried {n}, skipped 0.").wait_for()
        shoot(page, "ops-retry-all-done", narrow=False)
    for run_id in ids:
        assert server.wait_status(run_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"


def opened_by_keyboard_twice(page: Any, label: str) -> Any:
    """Open the dialog of the button `label` with Enter, back out with Escape: the focus is
    on the button again (the tour: it was on <body>, the button disabled while it counted
    the runs), so Enter opens the dialog again. The dialog."""
    page.get_by_role("button", name=label).focus()
    page.keyboard.press("Enter")
    dialog = page.locator("dialog.modal")
    dialog.wait_for()
    page.keyboard.press("Escape")
    dialog.wait_for(state="detached")
    assert page.evaluate("() => document.activeElement.textContent") == label
    page.keyboard.press("Enter")
    dialog.wait_for()
    return dialog


def test_retry_all_matching_leads_with_the_runs_that_fail_the_same_way(
    server: DemoServer, browser: Any
) -> None:
    """The tour: "Retry all matching" took a run whose SPAWNER failed with invalid_config and
    said nothing, and the run failed again at once. Its dialog now leads, before the confirm
    button, with that run (a link to it) and the fix, as a run's own Retry dialog does; the
    run that failed on its destination (http_error) is not named. Confirmed, both retry."""
    tenant, path = "retry-all-fix", "/ops/retry-all-fix"
    call = {"url": f"{server.downstream}{path}", "retry": {"maxAttempts": 1}}
    gateway_step = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "ui-ops-fix-child", "vertices": {"call": gateway_step}})
    server.call("/workflows", {"name": "ui-ops-fix-http", "vertices": {"call": gateway_step}})
    each = {
        "type": "SPAWNER",
        "config": {"items": "{{ input.line }}", "workflow": "ui-ops-fix-child"},
    }
    spawn = {"each": each, "join": {"type": "MERGE", "dependsOn": ["each"]}}
    server.call("/workflows", {"name": "ui-ops-fix-spawn", "vertices": spawn})
    server.script(path, {"status": 400, "body": {"error": "bad"}})
    body = {"input": {"lines": [1]}, "tenantId": tenant}
    config = server.call("/workflows/ui-ops-fix-spawn/runs", body)["id"]
    http = server.call("/workflows/ui-ops-fix-http/runs", {"input": {}, "tenantId": tenant})["id"]
    for run_id in (config, http):
        assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        page.locator("table.runs tbody tr").nth(1).wait_for()
        dialog = opened_by_keyboard_twice(page, "Retry all matching…")
        lead = dialog.locator(".warning-box .fix-first")
        said = " ".join(lead.inner_text().split())
        assert said == (
            "⚠ Fix the workflow first: 1 of the 2 runs failed with invalid_config, from the "
            "workflow or the runs' input: retrying runs the same workflow version with the "
            "same input, so it fails the same way at once. Fix the workflow (or the input), "
            "publish it, then submit new runs."
        ), said
        assert config not in said and http not in dialog.inner_text()
        link = dialog.locator(".fix-first-runs a")
        assert link.get_attribute("href") == f"#/runs/{config}"
        # Said before the confirm button: the warning box comes first in the dialog's order.
        order = dialog.evaluate(
            "d => d.querySelector('.fix-first').compareDocumentPosition("
            "[...d.querySelectorAll('button')].find(b => b.textContent === 'Retry 2'))"
        )
        assert order & 4, order  # Node.DOCUMENT_POSITION_FOLLOWING
        shoot(page, "ops-retry-all-fix-first", narrow=False)
        confirm(page, "Retry 2")
        page.locator(".batch-result .ok-box", has_text="Retried 2, skipped 0.").wait_for()


def test_a_retry_says_it_runs_the_steps_stopped_when_the_run_failed(
    server: DemoServer, browser: Any
) -> None:
    """Two sibling calls: `slow` answered 500 first, waiting 3 s before its next attempt, and
    `bad` answered 400 meanwhile, which fails the run. `slow` stops in its wait and its claim
    is given back, held: Retry's dialog says, before the click, that it runs the failed step
    and the one stopped when the run failed, and its answer says both; the run succeeds."""
    base = f"{server.downstream}/ops/held"
    slow = {"url": f"{base}/slow", "retry": {"maxAttempts": 3, "baseDelayMs": 3000}}
    bad = {"url": f"{base}/bad", "retry": {"maxAttempts": 1}}
    vertices = {
        "slow": {"type": "GATEWAY", "maxAutoRetries": 0, "config": slow},
        "bad": {"type": "GATEWAY", "maxAutoRetries": 0, "config": bad},
    }
    server.call("/workflows", {"name": "ui-ops-held", "vertices": vertices})
    server.script("/ops/held/slow", {"status": 500})
    server.script("/ops/held/bad", {"status": 400, "sleep_ms": 300})
    body = {"input": {}, "tenantId": "held"}
    run_id = str(server.call("/workflows/ui-ops-held/runs", body)["id"])
    assert server.wait_status(run_id, {"FAILED", "SUCCEEDED"}) == "FAILED"

    def held() -> bool:
        steps = server.call(f"/runs/{run_id}")["steps"]
        return {s["vertexId"]: s["status"] for s in steps} == {"slow": "PENDING", "bad": "FAILED"}

    eventually(held, 30, "slow stopped and held back")
    both = "1 failed step run again, and 1 step stopped when the run failed"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        dialog.locator("p", has_text="stopped when the run failed").wait_for()
        said = dialog.inner_text()
        assert f"{both[0].upper()}{both[1:]}; completed steps keep their results." in said, said
        shoot(page, "ops-retry-held-dialog", narrow=False)
        confirm(page, "Retry")
        page.locator(".action-result .ok-box", has_text=f"✓ {both}").wait_for()
        page.locator("h1 .badge", has_text="succeeded").wait_for(timeout=30_000)
        shoot(page, "ops-retry-held-done", narrow=False)


def test_cancel_keeps_running_and_the_cap_says_its_rate(server: DemoServer, browser: Any) -> None:
    """The cancel dialog's way back reads "Keep running" (not a second "Cancel") and keeps
    the run going; a cap with a rate is said with both; the chart's scale follows the cap
    down from the default 100."""
    server.latency(4_000)
    body = {"input": {"batchSize": 2, "renewalDate": "2025-07-01"}, "tenantId": "keep"}
    run_id = server.call("/workflows/nightly-subscription-renewals/runs", body)["id"]
    try:
        with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
            page.get_by_role("button", name="Cancel", exact=True).click()
            buttons = page.locator("dialog.modal .modal-buttons button").all_inner_texts()
            assert buttons == ["Keep running", "Cancel the run"], buttons
            shoot(page, "ops-cancel-dialog", narrow=False)
            confirm(page, "Keep running")
            assert server.run_status(run_id) == "RUNNING"
    finally:
        server.call(f"/runs/{run_id}/cancel", {})
    with opened(browser, f"{server.ui}#/destinations") as (page, _):
        card = page.locator(f'article.destination[data-destination="{server.downstream}"]')
        card.wait_for()
        card.locator("input.cap-input").first.fill("10")
        card.locator("input.cap-input").nth(1).fill("20")
        card.get_by_role("button", name="Save").click()
        confirm(page, "Set the cap")
        page.locator(".ok-box", has_text="capped at 10 calls in flight, 20/s.").wait_for()
        # The scale's top, not the words "cap 10 above" drawn before it when the cap is
        # said in words (the first `.chart-axis` then: the test read those and never
        # matched whenever the samples' peak was under 5, as under CI's load).
        axis = card.locator("svg.chart text.chart-axis:not(.chart-cap-above)").first
        above = card.locator("svg.chart text.chart-cap-above")

        def scaled_to_the_data_and_cap() -> bool:
            # The axis's top is the highest line drawn: the samples' limit and in flight, and
            # the cap now (10) while it is at most twice their peak (else a fifth above the
            # peak, the cap said in words: tests/unit/test_ui_chart.py), never the default cap
            # of 100 the older samples had.
            history = server.call("/destinations/history")["series"]
            (series,) = [x for x in history if x["destination"] == server.downstream]
            drawn = max(1, *(max(p["limit"], p["inFlight"]) for p in series["points"]))
            if 2 * drawn >= 10:
                return bool(axis.text_content() == f"{max(10, drawn):.0f}" and not above.count())
            top = math.ceil(drawn * 1.2)
            return bool(
                axis.text_content() == f"{top:.0f}" and above.text_content() == "cap 10 above"
            )

        eventually(scaled_to_the_data_and_cap, what="the chart rescaled to the cap")
        assert axis.text_content() != "100"
        shoot(page, "ops-cap-rate", narrow=False)
    server.call(caps(server), method="DELETE")


def test_retry_all_matching_says_the_runs_the_batch_skips(server: DemoServer, browser: Any) -> None:
    """The tour: the preview counted a FAILED child of a SUCCEEDED fan-out that the batch
    then skipped. The dialog counts the runs the batch takes, says the skipped one and why
    (in the batch's words), and the batch, sent the runs considered as its `limit`, retries
    the one and skips the other, as said."""
    tenant, path = "retry-all-skips", "/ops/retry-all-skips"
    call = {"url": f"{server.downstream}{path}/{{{{ index }}}}", "retry": {"maxAttempts": 1}}
    step = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "ui-ops-skips-child", "vertices": {"call": step}})
    tolerant = {
        "type": "MERGE",
        "dependsOn": ["each"],
        "config": {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 1}},
    }
    each = {
        "type": "SPAWNER",
        "config": {"items": "{{ input.items }}", "workflow": "ui-ops-skips-child"},
    }
    server.call(
        "/workflows", {"name": "ui-ops-skips", "vertices": {"each": each, "join": tolerant}}
    )
    server.script(f"{path}/1", {"status": 400, "body": {"error": "declined"}})
    body = {"input": {"items": items(2)}, "tenantId": tenant}
    parent = str(server.call("/workflows/ui-ops-skips/runs", body)["id"])
    assert server.wait_status(parent, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "SUCCEEDED"
    lone = {**step, "config": {**call, "url": f"{server.downstream}{path}/root"}}
    server.call("/workflows", {"name": "ui-ops-skips-root", "vertices": {"call": lone}})
    server.script(f"{path}/root", {"status": 400, "body": {"error": "bad"}})
    alone = {"input": {}, "tenantId": tenant}
    root = str(server.call("/workflows/ui-ops-skips-root/runs", alone)["id"])
    assert server.wait_status(root, {"FAILED", "SUCCEEDED"}) == "FAILED"
    assert server.call(f"/runs/{root}")["error"]["kind"] == "http_error"
    url = f"{server.ui}#/runs?tenant={tenant}&status=FAILED&children=1"
    with opened(browser, url) as (page, _):
        page.locator("table.runs tbody tr").nth(1).wait_for()
        page.get_by_role("button", name="Retry all matching…").click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        said = " ".join(dialog.inner_text().split())
        # Of two matched, one is skipped: not "all" (a tour read "Retry all 7 matching FAILED
        # runs?" over "2 matched are skipped", of 9); one retried run is "the 1" below.
        assert "Retry 1 of the 2 matching FAILED runs?" in said, said
        shoot(page, "ops-retry-all-skips-dialog")
        assert "The failed steps of the 1 FAILED run these filters match" in said, said
        # Of one run in the singular (a new user's tour read "1 matched is skipped: … their
        # retry …"), named with a link to it (a tour could not tell which run it was).
        (child,) = server.call(f"/runs/{parent}/children?status=FAILED")["items"]
        assert (
            "1 matched is skipped: under a SUCCEEDED run (its retry would reopen a finished "
            f"run's join; name it alone to retry it): {child['id'][:8]}."
        ) in said, said
        named = dialog.locator(".warning-box a", has_text=child["id"][:8])
        assert named.get_attribute("href") == f"#/runs/{child['id']}"
        confirm(page, "Retry 1")
        done = page.locator(".batch-result .ok-box", has_text="Retried 1, skipped 1")
        done.wait_for()
        # The skipped child in words, not its code with its state ("parent_succeeded: FAILED").
        assert done.inner_text() == (
            f"Retried 1, skipped 1: {child['id'][:8]}: under a SUCCEEDED run, not retried "
            "(retry it alone to reopen that run's join)."
        )
    assert server.call(f"/runs/{parent}")["status"] == "SUCCEEDED"


def test_a_run_whose_join_tolerated_failed_children_says_so(
    server: DemoServer, browser: Any
) -> None:
    """The tour: a fan-out whose MERGE tolerated 3 failed children of 10 SUCCEEDED and read
    green everywhere. Its page says so beside the badge, in the warning colour, with a link
    that opens its children filtered to the failed ones; its row in the runs list has a bar
    in the warning colour and says the failures were tolerated."""
    tenant, path = "tolerated", "/ops/tolerated"
    call = {"url": f"{server.downstream}{path}/{{{{ index }}}}", "retry": {"maxAttempts": 1}}
    step = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    server.call("/workflows", {"name": "ui-tolerated-child", "vertices": {"call": step}})
    tolerant = {
        "type": "MERGE",
        "dependsOn": ["each"],
        "config": {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 3}},
    }
    each = {
        "type": "SPAWNER",
        "config": {"items": "{{ input.items }}", "workflow": "ui-tolerated-child"},
    }
    server.call(
        "/workflows", {"name": "ui-tolerated", "vertices": {"each": each, "join": tolerant}}
    )
    failing = (1, 4, 7)
    for index in failing:
        server.script(f"{path}/{index}", {"status": 400, "body": {"error": "declined"}})
    body = {"input": {"items": items(10)}, "tenantId": tenant}
    run_id = str(server.call("/workflows/ui-tolerated/runs", body)["id"])
    assert server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}) == "SUCCEEDED"
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        note = page.locator(".tolerated-note")
        note.wait_for()
        said = " ".join(note.inner_text().split())
        assert said == (
            "⚠ Succeeded — 3 of 10 children failed (tolerated). Show the failed children"
        ), said
        shoot(page, "ops-tolerated-run")
        note.get_by_role("link", name="Show the failed children").click()
        rows = page.locator("table.children-table tbody tr")
        eventually(lambda: rows.count() == len(failing), what="the failed children alone")
        assert page.locator("select[name=child-status]").input_value() == "FAILED"
        shown = [rows.nth(i).locator("td").first.inner_text() for i in range(len(failing))]
        assert sorted(int(item) for item in shown) == list(failing), shown
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}") as (page, _):
        cell = page.locator(f"table.runs tr[data-run='{run_id}'] .progress-cell")
        cell.wait_for()
        assert cell.locator(".mini-bar.tolerated").count() == 1
        assert "3 failed (tolerated)" in cell.inner_text()
        shoot(page, "ops-tolerated-list")


def test_a_childs_retry_under_a_root_started_over_says_the_refusal_first(
    server: DemoServer, browser: Any
) -> None:
    """The tour: a FAILED child's Retry dialog promised "Its FAILED steps run again" when its
    root had been started over, and the click was refused (409 `started_over`). A page read
    before the start over says the refusal in the dialog, before the click (the retry's
    preview); at its next look the page offers no Retry, Reprocess or Resolve the API would
    refuse, names the run the start over made, and the root's own Start over dialog says
    which run that was."""
    parent = failed_fan_out(server, "refused-child", 3, {1})
    child = server.call(f"/runs/{parent}/children?status=FAILED")["items"][0]["id"]
    with opened(browser, "about:blank") as (page, _):
        page.clock.install(time=time.time())
        page.goto(f"{server.ui}#/runs/{child}")
        page.locator("h1 .badge", has_text="failed").wait_for()
        assert actions(page)["Retry"]["disabled"] is False
        # The page's next look (every 10 s for an ended run) waits for the clock.
        pause_clock(page)
        new_id = server.call(f"/runs/{parent}/start-over", {})["newRunId"]
        page.get_by_role("button", name="Retry", exact=True).click()
        dialog = page.locator("dialog.modal")
        dialog.locator("p", has_text="This retry would be refused.").wait_for()
        refused = dialog.locator(".refused-note").inner_text()
        assert f"started over as run {new_id}" in refused, refused
        # It offers only what can work: no Retry the API would refuse, a link to the run
        # the start over made, and Close (focused).
        buttons = [b.inner_text() for b in dialog.locator("button").all()]
        assert buttons == ["Close"], buttons
        assert dialog.evaluate("d => document.activeElement.textContent") == "Close"
        link = dialog.get_by_role("link", name=f"Open run {new_id[:8]}")
        assert link.get_attribute("href") == f"#/runs/{new_id}"
        shoot(page, "ops-child-retry-refused-first", narrow=False)
        dialog.get_by_role("button", name="Close").click()
        dialog.wait_for(state="detached")
        # The next look: the child is under a root started over.
        page.clock.run_for(11_000)
        root_link = page.locator(".run-facts a", has_text=new_id[:8])
        root_link.wait_for()
        assert root_link.get_attribute("href") == f"#/runs/{new_id}"
        assert "Root started over as" in page.locator(".run-facts").inner_text()
        bar = actions(page)
        words = f"its root run was started over as run {new_id[:8]}: look at that run"
        assert bar["Retry"]["disabled"] and bar["Retry"]["title"].startswith(words), bar
        page.get_by_role("button", name="call", exact=True).first.click()
        page.locator(".step-panel h3", has_text="Step call").wait_for()
        assert page.locator(".step-panel button", has_text="Resolve").count() == 0
        shoot(page, "ops-child-under-root-started-over", narrow=False)
        page.goto(f"{server.ui}#/runs/{parent}")
        # The new run's page failed too: wait for the parent's own id, not for a badge the
        # page being left may still show (a full run failed here on the new run's dialog).
        page.get_by_text(parent, exact=True).first.wait_for()
        page.locator("h1 .badge", has_text="failed").wait_for()
        page.get_by_role("button", name="Start over").click()
        again = page.locator("dialog.modal")
        again.locator("p", has_text=f"Already started over as run {new_id}").wait_for()
        again.get_by_role("button", name="Close").click()
    assert server.call(f"/runs/{child}")["status"] == "FAILED"  # nothing was sent


def test_resolving_a_failed_join_starts_from_a_joins_output_and_says_who_closed_it(
    server: DemoServer, browser: Any
) -> None:
    """The tour: a FAILED join's error told a web user to run `schemabridge runs children`;
    it links the failed children. Resolve of a FAILED join offered a GATEWAY's answer
    (`status`, `body`), sent as offered; the steps after the join read nothing from it, and
    the run then read "children failed (tolerated)" although this join tolerates none. The
    editor starts from a join's output, the spawner's counts and `outputs`, and the
    SUCCEEDED run says its join was resolved by an operator."""
    parent = failed_fan_out(server, "resolved-join", 3, {1})
    with opened(browser, f"{server.ui}#/runs/{parent}") as (page, _):
        page.locator("h1 .badge", has_text="failed").wait_for()
        # The join's sentence links the failed children, not the CLI's command for them.
        message = page.locator(".error-box .error-message").first
        said = message.inner_text()
        assert said.endswith("(1 attempt)). Show the failed children"), said
        assert "schemabridge runs children" not in said, said
        link = message.get_by_role("link", name="Show the failed children")
        assert link.get_attribute("href") == f"#/runs/{parent}?children=FAILED"
        page.get_by_role("button", name="join", exact=True).first.click()
        page.get_by_role("button", name="Resolve join…").click()
        dialog = page.locator("dialog.modal")
        offered = json.loads(dialog.locator("#json-value").input_value())
        counts = {"total": 3, "succeeded": 2, "failed": 1, "cancelled": 0, "pending": 0}
        assert offered == {"counts": counts, "outputs": []}, offered
        assert "the join's output: counts, and outputs" in dialog.inner_text()
        shoot(page, "ops-resolve-join-dialog", narrow=False)
        confirm(page, "Resolve")
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        note = page.locator(".tolerated-note")
        said = " ".join(note.inner_text().split())
        assert said == (
            "⚠ Succeeded — 1 of 3 children failed (join resolved by an operator). "
            "Show the failed children"
        ), said
    detail = server.call(f"/runs/{parent}")
    join = next(s for s in detail["steps"] if s["vertexId"] == "join")
    assert (join["status"], join["output"]) == ("RESOLVED", {"counts": counts, "outputs": []})


def test_the_chart_draws_a_cap_just_set_before_the_next_sample(
    server: DemoServer, browser: Any
) -> None:
    """The tour: a cap set from the default 100 to 8 left the chart saying "cap 100 above",
    the latest history sample's, until the next sample came. The chart draws the cap the
    page read with the destination, at once. The history is held at samples taken before the
    change (the page's `/destinations/history` answered here), as it is between two samples."""
    destination = "ui-ops-cap-now"
    key = quote(destination, safe="")
    server.call(f"/destinations/{key}/caps", {"maxConcurrency": 100}, method="PUT")
    now = time.time()
    points = [{"at": now - 20 + i, "limit": 5.0, "inFlight": 1, "cap": 100} for i in range(20)]
    history = {"windowS": 600.0, "series": [{"destination": destination, "points": points}]}
    try:
        with opened(browser, f"{server.ui}#/destinations") as (page, _):
            page.route("**/destinations/history", lambda route: route.fulfill(json=history))
            page.reload()
            card = page.locator(f'article.destination[data-destination="{destination}"]')
            card.locator("svg.chart .chart-cap-above").wait_for()
            assert card.locator(".chart-cap-above").text_content() == "cap 100 above"
            card.locator("input.cap-input").first.fill("8")
            card.get_by_role("button", name="Save").click()
            confirm(page, "Set the cap")
            page.locator(".ok-box", has_text=f"{destination} capped at 8 calls").wait_for()
            # The page reads the destinations again after the change: its chart, redrawn,
            # draws the new cap (the held samples alone never would).
            chart = card.locator("svg.chart")
            chart.locator("line.chart-cap").wait_for(state="attached", timeout=10_000)
            assert chart.locator(".chart-cap-above").count() == 0, chart.inner_html()
            # Scaled to the cap now, which tops the lines (limit 5), not to the lines alone.
            assert chart.locator("text.chart-axis").first.text_content() == "8"
            shoot(page, "ops-cap-at-once", narrow=False)
    finally:
        server.call(f"/destinations/{key}/caps", method="DELETE")


def test_a_cap_saved_from_the_keyboard_shows_at_once(server: DemoServer, browser: Any) -> None:
    """The tour, keyboard only: the cap typed, Enter, Enter in the confirm. The focus came
    back to the field, and the page, which does not redraw a card whose field is being
    edited, kept saying "Cap 100 (default)" beside "✓ … capped at 6", with no "remove",
    for as long as the focus stayed there. The card shows the cap saved at once, the focus
    still in its field."""
    destination = "ui-ops-cap-keyboard"
    key = quote(destination, safe="")
    server.call(f"/destinations/{key}/caps", {"maxConcurrency": 100}, method="PUT")
    server.call(f"/destinations/{key}/caps", method="DELETE")
    try:
        with opened(browser, f"{server.ui}#/destinations") as (page, _):
            card = page.locator(f'article.destination[data-destination="{destination}"]')
            facts = card.locator("dl.facts")
            facts.wait_for()
            assert "100 (default)" in facts.inner_text()
            field = card.get_by_label(f"cap of {destination}")
            field.focus()
            page.keyboard.press("Control+a")
            page.keyboard.type("6")
            page.keyboard.press("Enter")
            page.locator("dialog[open]").wait_for()
            page.keyboard.press("Enter")  # "Set the cap" has the focus
            page.locator(".ok-box", has_text=f"{destination} capped at 6 calls").wait_for()
            eventually(lambda: "Cap\n6\n" in facts.inner_text(), 5, "the card says the cap saved")
            assert card.get_by_role("button", name="remove").count() == 1
            focused = page.evaluate("document.activeElement.getAttribute('aria-label')")
            assert focused == f"cap of {destination}", focused
            shoot(page, "ops-cap-keyboard", narrow=False)
            # Removing it is said to a screen reader as setting it was (the page's one live
            # line), not left saying "capped at 6".
            assert "capped at 6" in page.locator("#announce").inner_text()
            card.get_by_role("button", name="remove").click()
            confirm(page, "Remove the cap")
            page.locator(".ok-box", has_text="back to the default cap").wait_for()
            said = page.locator("#announce").inner_text()
            assert said == f"{destination} back to the default cap.", said
    finally:
        server.call(f"/destinations/{key}/caps", method="DELETE")
