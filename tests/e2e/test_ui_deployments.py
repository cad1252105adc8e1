"""Deployments in the web monitor, in a real browser against `schemabridge serve --demo`: v1
and v2 of a workflow published through the REST API, a deployment started from the Deploy
button on v2's page (by keyboard), seen on the Deployments page with its stage and aborted
there after a confirmation; a candidate failing every run (the demo downstream answers it
404) rolled back by itself, its page showing the exposure, the figures and the link to the
very runs it received; the serving badge; an ended deployment's page saying so and reading it
no more; the lists on a phone. Every page fails its test on a JavaScript or console error, or
on a request off loopback."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.browser_harness import (
    FIT_JS,
    LINES_JS,
    NARROW,
    DemoServer,
    assert_fits_a_phone,
    assert_wraps_between_words,
    demo_on_sqlite,
    eventually,
    open_on_own_clock,
    opened,
    shoot,
)
from tests.integration.operations_harness import single, spawner_of

pytestmark = pytest.mark.slow

DEPLOYMENTS_PAGE = 50
"""Deployments one page of the list shows (ui/static/js/pages/deployments.js, LIST_SIZE)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-deployments") as running:
        yield running


def submit(
    server: DemoServer, name: str, count: int, tenant: str | None = None
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"input": {}} if tenant is None else {"input": {}, "tenantId": tenant}
    runs = [server.call(f"/workflows/{name}/runs", body) for _ in range(count)]
    assert all("run" in r for r in runs), runs
    return [r["run"] for r in runs]


def confirm(page: Any, label: str) -> None:
    page.locator("dialog.modal").get_by_role("button", name=label, exact=True).click()


def test_a_deployment_started_from_the_deploy_button_is_seen_and_aborted(
    server: DemoServer, browser: Any
) -> None:
    server.publish_versions("ui-orders", failing=False)
    with opened(browser, f"{server.ui}#/workflows/ui-orders?v=1") as (page, watch):
        watch.allowed_errors.append("status of 422")  # the stages refused on purpose
        deployment_id = deploy_from_the_form(server, page)
        on_candidate = sum(r["version"] == 2 for r in submit(server, "ui-orders", 12))
        page.goto(f"{server.ui}#/deployments")
        row = page.locator(f'tr[data-deployment="{deployment_id}"]')
        row.wait_for()
        cells = [" ".join(text.split()) for text in row.locator("td").all_inner_texts()]
        assert cells[1:6] == ["ui-orders", "v2 over v1", "▶ running", "stage 1 of 2 (50 %)", "50 %"]
        assert cells[6].startswith(f"{on_candidate} run")
        shoot(page, "deployments")

        page.goto(f"{server.ui}#/workflows/ui-orders?v=2")
        page.locator(".deploy-state-line", has_text="v2 is being deployed").wait_for()
        assert page.get_by_role("button", name="Deploy v2…").is_disabled()

        page.goto(f"{server.ui}#/deployments/{deployment_id}")
        abort_on_its_page(server, page, deployment_id)
    assert server.call(f"/deployments/{deployment_id}")["status"] == "ABORTED"
    assert {r["version"] for r in submit(server, "ui-orders", 5)} == {1}

    promoted = promote(server, "ui-promoted")
    with opened(browser, f"{server.ui}#/deployments") as (page, _):
        row = page.locator(f'tr[data-deployment="{promoted}"]')
        row.wait_for()
        assert row.locator("td.weight-cell").inner_text() == "100 % (serving)"
        page.goto(f"{server.ui}#/deployments/{promoted}")
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        assert page.locator(".weight-now").inner_text() == "100 % (serving)"
        note = page.locator(".weight-note").inner_text().strip()
        assert note == "— v2 now serves: it gets every new run"


def test_an_old_promotion_reads_in_the_past_once_another_version_serves(
    server: DemoServer, browser: Any
) -> None:
    promoted = promote(server, "ui-history")
    document = single("ui-history", f"{server.downstream}/orders", description="v3")
    assert server.call("/workflows", document)["version"] == 3
    server.call("/workflows/ui-history/serving", {"version": 3})
    with opened(browser, f"{server.ui}#/deployments") as (page, _):
        row = page.locator(f'tr[data-deployment="{promoted}"]')
        row.wait_for()
        assert row.locator("td.weight-cell").inner_text() == "superseded (v3 serves)"
        shoot(page, "deployments-superseded")
        page.goto(f"{server.ui}#/deployments/{promoted}")
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        assert page.locator(".weight-now").inner_text() == "superseded (v3 serves)"
        note = page.locator(".weight-note").inner_text().strip()
        assert re.fullmatch(
            r"— v2 served from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC until another version "
            r"replaced it",
            note,
        ), note
        assert "now serves" not in page.locator("main").inner_text()
        shoot(page, "deployment-superseded", narrow=False)
        assert_says_until_when_each_version_served(server, page, promoted)


def assert_says_until_when_each_version_served(
    server: DemoServer, page: Any, promoted: str
) -> None:
    """A version that served before is "not serving now", never "does not serve yet" (the
    tour), with until when: v1 until v2's promotion, v2 until the switch to v3."""
    ended = server.call(f"/deployments/{promoted}")["endedAt"]
    switched = server.call("/workflows/ui-history/serving")["updatedAt"]
    for version, until in ((1, ended), (2, switched)):
        page.goto(f"{server.ui}#/workflows/ui-history?v={version}")
        line = page.locator(".deploy-state-line", has_text=f"v{version} served until ")
        line.wait_for()
        assert line.inner_text().endswith(
            "; not serving now: new runs get v3 until a deployment moves them."
        ), line.inner_text()
        stamp = line.locator("time.served-until").get_attribute("datetime") or ""
        assert abs(datetime.fromisoformat(stamp).timestamp() - until) < 0.001, (stamp, until)
        assert "yet" not in line.inner_text()
    shoot(page, "workflow-served-until", narrow=False)


def test_the_deploy_form_warns_when_parents_pin_the_workflow(
    server: DemoServer, browser: Any
) -> None:
    server.publish_versions("ui-child", failing=False)
    parent = spawner_of("ui-parent", "ui-child")
    assert server.call("/workflows", parent)["version"] == 1
    with opened(browser, f"{server.ui}#/workflows/ui-child?v=2") as (page, _):
        page.get_by_role("button", name="Deploy v2…").click()
        dialog = page.locator("dialog.deploy-dialog")
        page.fill("#deploy-min-runs", "1000")
        dialog.get_by_role("button", name="Deploy v2", exact=True).click()
        # Said before anything starts (the start's preview); the second press starts it.
        warning = dialog.locator(".deploy-warning")
        warning.wait_for()
        text = " ".join(warning.inner_text().split())
        assert text.startswith("⚠ Before you deploy: ui-child is a SPAWNER's child"), text
        assert "ui-parent v1" in text and "ui-child@2" in text
        assert warning.locator("code", has_text="ui-child@2").count() >= 1
        shoot(page, "deploy-form-warning", narrow=False)
        # Two warnings are two sentences in a list, not one paragraph run together, the
        # options named by the form's labels (the tour read "…on evidence v6 was rolled
        # back…" and "give --min-finished" in a web page).
        page.fill("#deploy-min-finished", "0")
        dialog.get_by_role("button", name="Deploy v2", exact=True).click()
        items = dialog.locator(".deploy-warning li")
        items.last.wait_for()
        texts = [" ".join(item.split()) for item in items.all_inner_texts()]
        assert len(texts) == 2 and all(text.endswith(".") for text in texts), texts
        assert texts[1].endswith(
            "give “Finished runs before judging” at least 1 for a verdict on evidence."
        ), texts
        shoot(page, "deploy-form-warnings", narrow=False)
        page.fill("#deploy-min-finished", "20")
        assert server.call("/workflows/ui-child/deployments")["items"] == [], "none started"
        # A changed field asks again: the warning goes, the button is Deploy again.
        page.fill("#deploy-min-runs", "999")
        assert warning.count() == 0
        page.fill("#deploy-min-runs", "1000")
        dialog.get_by_role("button", name="Deploy v2", exact=True).click()
        dialog.get_by_role("button", name="Deploy v2 anyway").click()
        page.wait_for_url("**#/deployments/*")
        deployment_id = page.url.rsplit("/", 1)[1]
        # The deployment's page keeps saying it while the stage waits: without it, "0/1000
        # runs" for ever read as stuck.
        kept = page.locator(".deploy-warnings")
        kept.wait_for()
        assert " ".join(kept.inner_text().split()).startswith(
            "⚠ Warning: ui-child is a SPAWNER's child in the serving version of ui-parent v1"
        )
        holding = page.locator(".deploy-holding", has_text="waiting at stage 1: 0/1,000 runs")
        holding.wait_for()
        # The check's figures come with when it was taken; the table is of now.
        assert holding.inner_text().startswith("Stage check "), holding.inner_text()
        assert holding.locator(".holding-checked time").count() == 1
        assert (
            page.locator("table.figures caption")
            .inner_text()
            .endswith(" — now (the stage check above is of its own time)")
        )
        shoot(page, "deployment-child-warning")
    assert server.call(f"/deployments/{deployment_id}")["status"] == "RUNNING"
    server.call(f"/deployments/{deployment_id}/abort", {})


def test_the_deploy_form_warns_when_stage_1_waits_for_more_finished_runs_than_runs(
    server: DemoServer, browser: Any
) -> None:
    """The tour: 10 runs a stage with the default 20 finished runs before judging, told
    nothing; the stage read "10 runs, 10 s" while its check said "19/20 finished runs"."""
    server.publish_versions("ui-finished", failing=False)
    with opened(browser, f"{server.ui}#/workflows/ui-finished?v=2") as (page, _):
        page.get_by_role("button", name="Deploy v2…").click()
        dialog = page.locator("dialog.deploy-dialog")
        page.fill("#deploy-stages", "25, 50, 100")
        page.fill("#deploy-min-runs", "10")
        page.fill("#deploy-min-duration", "10s")
        dialog.get_by_role("button", name="Deploy v2", exact=True).click()
        warning = dialog.locator(".deploy-warning")
        warning.wait_for()
        text = " ".join(warning.inner_text().split())
        # In the form's words (its labels, not the CLI's options), and a sentence that ends.
        assert text == (
            "⚠ Before you deploy: stage 1 waits for 20 finished runs of v2 (“Finished runs "
            "before judging”) before it can pass, more than its 10 runs (“Runs per stage”): "
            "at 25 % of new runs, about 80 submissions."
        ), text

        shoot(page, "deploy-form-finished-runs", narrow=False)
        dialog.get_by_role("button", name="Deploy v2 anyway").click()
        page.wait_for_url("**#/deployments/*")
        deployment_id = page.url.rsplit("/", 1)[1]
        stages = page.locator(".stages .stage-hold")
        stages.first.wait_for()
        # Stage 1 names the finished runs; the later stages begin with them (no stage passes
        # before): "20 finished runs" on each read as 20 more in each.
        assert stages.all_inner_texts() == [
            "waits for 10 runs, 10 s, 20 finished runs",
            "waits for 10 runs, 10 s",
            "waits for 10 runs, 10 s",
        ]
        # The check's words, beside the stage's: the same finished runs.
        page.locator(".deploy-holding", has_text="/20 finished runs").wait_for()
        shoot(page, "deployment-finished-runs", narrow=False)
    server.call(f"/deployments/{deployment_id}/abort", {})


def promote(server: DemoServer, name: str) -> str:
    """A deployment of `name` v2 in one stage that holds for nothing: promoted at once. Its id."""
    server.publish_versions(name, failing=False)
    started = server.call(
        f"/workflows/{name}/deployments",
        {
            "version": 2,
            "stages": [{"weight": 100, "minRuns": 0, "minDurationSeconds": 0}],
            "rollback": {"minFinishedRuns": 0},
            "checkIntervalSeconds": 0.2,
        },
    )
    eventually(
        lambda: server.call(f"/deployments/{started['id']}")["status"] == "SUCCEEDED",
        60,
        "the candidate is promoted",
    )
    return str(started["id"])


def deploy_from_the_form(server: DemoServer, page: Any) -> str:
    """On ui-orders v1's page (serving), then v2's: the Deploy form, by keyboard, with a
    refusal of its own and one of the API's before it starts. The deployment's id."""
    page.locator(".serving-badge").first.wait_for()
    assert "v1 serves" in page.locator(".deploy-state-line").inner_text()
    assert page.get_by_role("button", name="Deploy v1…").is_disabled()
    page.goto(f"{server.ui}#/workflows/ui-orders?v=2")
    page.locator(".deploy-state-line", has_text="v2 does not serve yet").wait_for()
    assert page.locator("h1 .serving-badge").count() == 0
    listed = page.locator(".versions li", has_text="serving")
    assert listed.count() == 1 and listed.inner_text().startswith("v1 serving")
    shoot(page, "workflow-version-deploy")

    deploy = page.get_by_role("button", name="Deploy v2…")
    deploy.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("dialog.deploy-dialog")
    dialog.wait_for()
    assert page.evaluate("document.activeElement.id") == "deploy-stages"
    page.keyboard.press("End")
    page.keyboard.type("x")  # the default stages with an x: refused in the dialog
    page.keyboard.press("Enter")
    dialog.locator(".deploy-state", has_text='Stages: "100x" is not a number').wait_for()
    page.fill("#deploy-stages", "50, 10, 100")
    dialog.get_by_role("button", name="Deploy v2").click()
    dialog.locator(".deploy-state", has_text="stage 2's weight (10) must be above").wait_for()
    page.fill("#deploy-stages", "50, 100")
    page.fill("#deploy-min-runs", "1000")
    page.fill("#deploy-min-duration", "3600")
    page.fill("#deploy-max-failure-ratio", "0.2")
    page.fill("#deploy-min-finished", "5")
    shoot(page, "deploy-form", narrow=False)
    dialog.get_by_role("button", name="Deploy v2").click()

    page.wait_for_url("**#/deployments/*")
    deployment_id = page.url.rsplit("/", 1)[1]
    page.locator("h1", has_text="Deployment of ui-orders v2").wait_for()
    assert "running" in page.locator("h1 .badge").inner_text()
    assert page.locator(".stage-now").inner_text() == "stage 1 of 2 (50 %)"
    assert page.locator(".weight-now").inner_text() == "50 %"
    assert page.locator(".stage-current").inner_text().startswith("50 %")
    assert (
        "waits for 1,000 runs, 1 h, 5 finished runs" in page.locator(".stage-current").inner_text()
    )
    assert "0.2" in page.locator("main").inner_text()
    shown = server.call(f"/deployments/{deployment_id}")
    assert [s["weight"] for s in shown["stages"]] == [50, 100]
    assert shown["rollback"]["minFinishedRuns"] == 5
    return deployment_id


def abort_on_its_page(server: DemoServer, page: Any, deployment_id: str) -> None:
    """Abort: by keyboard, the confirmation dismissed with Escape; cancelled once with its
    button; then confirmed."""
    page.get_by_role("button", name="Abort").focus()
    page.keyboard.press("Enter")
    page.locator("dialog.modal").wait_for()
    page.keyboard.press("Escape")
    page.locator("dialog.modal").wait_for(state="detached")
    page.get_by_role("button", name="Abort").click()
    dialog = page.locator("dialog.modal")
    assert "v1 keeps serving" in dialog.inner_text()
    confirm(page, "Cancel")
    assert server.call(f"/deployments/{deployment_id}")["status"] == "RUNNING"
    page.get_by_role("button", name="Abort").click()
    page.get_by_label("Reason (optional)").fill("p99 doubled on EU")
    shoot(page, "deployment-abort-reason", narrow=False)
    page.keyboard.press("Enter")  # in the field: confirms, as the button would
    page.locator(".ok-box", has_text=f"deployment {deployment_id} aborted").wait_for()
    page.locator("h1 .badge", has_text="aborted").wait_for()
    # Abort is disabled on the page drawn anew: its answer has the focus, not <body>.
    focused = "() => document.activeElement.matches('.action-result .ok-box')"
    eventually(lambda: page.evaluate(focused), 5, "the answer to take the focus")
    assert page.get_by_role("button", name="Abort").is_disabled()
    assert page.locator(".live button").count() == 0  # no Resume updates: it has ended
    assert page.locator(".weight-now").inner_text() == "0 %"
    assert page.locator(".weight-note").inner_text().strip() == "— new runs go back to v1"
    assert page.locator(".deploy-timeline li strong").all_inner_texts() == ["started", "aborted"]
    aborted = page.locator(".deploy-timeline li").last.inner_text()
    assert re.search(r" — stopped by \S+: p99 doubled on EU$", aborted), aborted
    outcome = page.locator("section.outcome").inner_text()
    assert "p99 doubled on EU" in outcome and "when it was stopped" in outcome, outcome
    assert "when it decided" not in outcome
    shoot(page, "deployment-aborted")


def stage_steps_say_what_they_decided(page: Any) -> None:
    """On the page of a deployment's own run, rolled back at stage 1 of 2: its stage steps
    all SUCCEEDED (the run did its job), and each says what it decided, or stage 2 read as a
    stage passed in a deployment rolled back at stage 1."""
    steps = page.locator("table.steps tbody tr")
    eventually(lambda: steps.count() == 2, 20, "the deployment run's steps")
    said = steps.all_inner_texts()
    assert "(rolled the deployment back)" in said[0], said
    assert "(not run: the deployment had ended)" in said[1], said
    nodes = page.locator(".node-status").all_text_contents()
    assert [n.split(" · ")[-1] for n in nodes] == ["rolled back", "not run"], nodes


def drive_run(page: Any, drives_text: str, *, rolled_back: bool = False) -> Any:
    """On the page of a deployment's own run: its link to the deployment (returned), its
    route, and none of Retry, Start over, Reprocess or Resolve — the API refuses them on the
    engine's own run (deployment_run: they would rewrite the deployment's record) — but a
    note saying to act on the deployment, linking to it; `rolled_back` (at stage 1 of 2):
    what its stage steps decided (`stage_steps_say_what_they_decided`)."""
    if rolled_back:
        stage_steps_say_what_they_decided(page)
    drives = page.locator("a.drives-deployment")
    drives.wait_for()
    assert drives.inner_text() == drives_text
    assert page.locator(".run-route").inner_text() == " · the engine's own run"
    bar = page.get_by_role("toolbar", name="Operator actions")
    note = bar.locator(".deployment-run-note")
    assert "Act on its deployment instead" in note.inner_text()
    assert note.get_by_role("link").get_attribute("href") == drives.get_attribute("href")
    for label in ("Retry", "Start over", "Reprocess dead letters"):
        assert bar.get_by_role("button", name=label, exact=True).count() == 0
    assert page.get_by_role("button", name=re.compile("^Resolve ")).count() == 0
    return drives


def assert_labelled_in_paris(page: Any, at: float) -> None:
    """The timeline's first time is local (the page's zone: Paris) and says its zone, where
    it showed a bare "03:54:44.159" that read as UTC."""
    local = datetime.fromtimestamp(at, ZoneInfo("Europe/Paris"))
    offset = local.utcoffset()
    assert offset is not None
    # As the browser writes it: milliseconds cut, not rounded; the zone in en-US words.
    expected = (
        f"{local:%Y-%m-%d %H:%M:%S}.{int(at * 1000) % 1000:03d} "
        f"GMT+{int(offset.total_seconds() // 3600)}"
    )
    shown = page.locator(".deploy-timeline li time").first.inner_text()
    assert shown == expected, (shown, expected)


def assert_names_its_deployment(page: Any, deployment_id: str) -> None:
    """A candidate's run page links the deployment that routed it to its candidate."""
    link = page.locator("a.candidate-deployment")
    assert link.inner_text() == f"deployment {deployment_id[:8]}"
    assert link.get_attribute("href") == f"#/deployments/{deployment_id}"
    shoot(page, "candidate-run", narrow=False)


def assert_says_the_figures_at_the_rollback(
    server: DemoServer, page: Any, ended: dict[str, Any]
) -> None:
    """The page's table is the runs now (retries since change them), with what the rollback
    saw said beside it, as it was; the list gives the ratio the rollback decided on."""
    figures = ended["outcome"]["figures"]["candidate"]
    page.goto(f"{server.ui}#/deployments/{ended['id']}")
    assert page.locator("table.figures caption").inner_text() == (
        "Runs the deployment routed to each version — as they are now, after any retries since "
        f"the rollback (at the rollback: {figures['failed']} of {figures['finished']} "
        "finished failed)"
    )
    page.goto(f"{server.ui}#/deployments")
    ratio = page.locator(f'tr[data-deployment="{ended["id"]}"] .list-ratio')
    assert ratio.inner_text() == " · ratio 1.000 at the rollback"


def start_over_says_the_rollback_first(page: Any, deployment_id: str) -> None:
    """A candidate's FAILED run's page names its deployment, and its Start over dialog
    says, before the click, that v2 was rolled back and that the new run runs it again (the
    start over's preview); backing out starts nothing."""
    page.locator(".run-route", has_text="a deployment's candidate").wait_for()
    assert_names_its_deployment(page, deployment_id)
    button = page.get_by_role("button", name="Start over")
    eventually(button.is_enabled, 20, "the run to end")
    button.click()
    dialog = page.locator("dialog.modal")
    warning = dialog.locator("li", has_text="was rolled back by deployment")
    warning.wait_for()
    assert "this start over runs v2 again" in warning.inner_text()
    assert "Would start a new run of v2 with the same input" in dialog.inner_text()
    shoot(page, "start-over-dialog-rolled-back")
    dialog.get_by_role("button", name="Cancel").click()


def stage_states(page: Any) -> list[str]:
    """What each stage card of a deployment's page says of its stage ("in force", …)."""
    states = page.locator(".stages .stage > .small:not(.muted)").all_inner_texts()
    return [state.strip() for state in states]


def test_a_failing_candidate_is_rolled_back_and_shows_its_exposure(
    server: DemoServer, browser: Any
) -> None:
    server.publish_versions("ui-broken", failing=True)
    started = server.call(
        "/workflows/ui-broken/deployments",
        {
            "version": 2,
            "stages": [
                {"weight": 50, "minRuns": 1000, "minDurationSeconds": 3600},
                {"weight": 100},
            ],
            "rollback": {"maxFailureRatio": 0.1, "marginOverServing": 0.05, "minFinishedRuns": 3},
            "checkIntervalSeconds": 0.2,
        },
    )
    deployment_id = started["id"]
    runs = submit(server, "ui-broken", 20)
    on_candidate = {r["id"] for r in runs if r["version"] == 2}
    assert len(on_candidate) >= 3
    eventually(
        lambda: server.call(f"/deployments/{deployment_id}")["status"] == "ROLLED_BACK",
        60,
        "the candidate is rolled back",
    )
    ended = server.call(f"/deployments/{deployment_id}")
    paris = {"timezone_id": "Europe/Paris", "locale": "en-US"}
    with opened(browser, f"{server.ui}#/deployments/{deployment_id}", **paris) as (page, _):
        page.locator("h1 .badge", has_text="rolled back").wait_for()
        assert_labelled_in_paris(page, ended["timeline"][0]["at"])
        exposure = page.locator(".exposure-figure").inner_text()
        assert (exposure, ended["exposure"]) == (
            f"{len(on_candidate)} runs went to the candidate v2.",
            len(on_candidate),
        )
        outcome = page.locator("section.outcome")
        assert outcome.locator("h2").inner_text() == "Rolled back at stage 1"
        assert "the candidate failed" in outcome.locator(".outcome-reason").inner_text()
        assert "by engine" in outcome.inner_text()
        figures = ended["outcome"]["figures"]["candidate"]
        assert (
            f"candidate v2: {figures['failed']} failed of {figures['finished']} finished runs "
            f"(ratio 1.000; {figures['runs']} runs in all when it decided)"
        ) in outcome.inner_text()
        assert "threshold 0.100" in outcome.inner_text()
        assert (
            "Rolls back when the candidate's failure ratio exceeds 0.1 or the serving version's "
            "ratio + 0.05, whichever is higher (threshold now 0.100), judged once 3 runs of the "
            "candidate have finished since the deployment began; checked every "
        ) in page.locator(".policy-line").inner_text()
        candidate = page.locator('table.figures tr[data-role="candidate"] td').all_inner_texts()
        assert candidate[-2:] == ["1.000", "runs of v2"]
        assert page.locator("table.figures td.over").count() == 1
        # The stage it stopped at, then the one it never reached: "to come" read as a
        # deployment that goes on.
        assert stage_states(page) == ["stopped (rolled back)", "not reached"]
        events = page.locator(".deploy-timeline li").all_inner_texts()
        assert "rolled back · stage 1" in events[-1]
        assert page.get_by_role("button", name="Roll back").is_disabled()
        shoot(page, "deployment-rolled-back")

        page.get_by_role("link", name=f"run {ended['runId'][:8]}").click()
        drive_run(page, "the deployment of ui-broken v2", rolled_back=True).click()
        page.locator(".exposure-link").wait_for()

        page.locator(".exposure-link").click()
        page.wait_for_url("**#/runs?*")
        page.locator("p.window-note").wait_for()
        rows = page.locator("tr[data-run]")
        eventually(lambda: rows.count() == len(on_candidate), 20, "the candidate's runs listed")
        assert {rows.nth(i).get_attribute("data-run") for i in range(rows.count())} == on_candidate
        assert page.locator('select[name="route"]').input_value() == "candidate"
        assert page.locator('input[name="version"]').input_value() == "2"
        # Each of them says it is the candidate's, as `runs list` does ("v2 (candidate)").
        assert re.search(r"\bv2\b", rows.first.inner_text()) and (
            rows.locator(".run-candidate").count() == rows.count()
        ), rows.all_inner_texts()
        shoot(page, "deployment-exposed-runs")
        rows.first.get_by_role("link").click()
        start_over_says_the_rollback_first(page, deployment_id)
        page.go_back()
        page.locator("p.window-note").get_by_role("button", name="Show any time").click()
        page.locator("p.window-note").wait_for(state="detached")
        assert "after=" not in page.url and "route=candidate" in page.url
        assert_says_the_figures_at_the_rollback(server, page, ended)


def test_a_candidate_refusing_the_input_shows_its_refusals(
    server: DemoServer, browser: Any
) -> None:
    server.publish_versions("ui-strict", failing=False)
    strict = {
        **single("ui-strict", f"{server.downstream}/o"),
        "inputSchema": {"required": ["priority"]},
    }
    assert server.call("/workflows", strict)["version"] == 3
    started = server.call(
        "/workflows/ui-strict/deployments",
        {
            "version": 3,
            "stages": [{"weight": 50, "minRuns": 1000}, {"weight": 100}],
            "rollback": {"minFinishedRuns": 3},
            "checkIntervalSeconds": 0.2,
        },
    )
    answers = [server.call("/workflows/ui-strict/runs", {"input": {}}) for _ in range(20)]
    refused = [a for a in answers if a.get("code") == "invalid_input"]
    assert len(refused) >= 3 and "ui-strict v3" in refused[0]["message"]
    deployment_id = started["id"]
    eventually(
        lambda: server.call(f"/deployments/{deployment_id}")["status"] == "ROLLED_BACK",
        60,
        "the refusing candidate is rolled back",
    )
    count = server.call(f"/deployments/{deployment_id}")["candidate"]["refused"]
    assert count == len(refused)
    with opened(browser, f"{server.ui}#/deployments/{deployment_id}") as (page, _):
        note = page.locator(".refused-note")
        note.wait_for()
        assert note.inner_text().startswith(f"{count} refused by the candidate's inputSchema: ")
        # The exposure counts the refusals, which never became runs: it says submissions.
        figure = page.locator(".exposure-figure").inner_text()
        assert figure == (
            f"{count} submissions were routed to the candidate v3, all refused by its inputSchema."
        ), figure
        # Every submission v3 received was refused: no run to list, said instead of a link
        # to an empty list (why, not the figures above again).
        assert page.locator(".exposure-link").count() == 0
        none = page.locator(".exposure-none").inner_text()
        assert none == "v3 received no run: a refused submission does not become a run.", none
        candidate = page.locator('table.figures tr[data-role="candidate"]')
        assert candidate.get_by_role("link").count() == 0
        assert "no run: all refused" in candidate.inner_text()
        reason = page.locator(".outcome-reason").inner_text()
        assert "refused by the candidate's inputSchema" in reason
        shoot(page, "deployment-all-refused")
        # Its "no run: all refused" in the runs column stays inside the table on a phone.
        for width in sorted({*WIDTHS, 390}):
            page.set_viewport_size({"width": width, "height": 844})
            fit = page.evaluate(FIT_JS, ["table.figures", "caption, th, td"])
            assert_fits_a_phone(fit, width)
        page.set_viewport_size({"width": 1280, "height": 800})

        # Some refused, one refused: the same page with the candidate's figures changed.
        with_candidate(page, deployment_id, runs=13, refused=3)
        assert figure_and_link(page) == (
            "13 submissions were routed to the candidate v3: 10 became runs, 3 were refused "
            "by its inputSchema.",
            "Show the runs v3 received",
        )
        with_candidate(page, deployment_id, runs=2, refused=1)
        assert figure_and_link(page) == (
            "2 submissions were routed to the candidate v3: 1 became a run, 1 was refused by "
            "its inputSchema.",
            "Show the runs v3 received",
        )
        with_candidate(page, deployment_id, runs=1, refused=1)
        assert figure_and_link(page) == (
            "1 submission was routed to the candidate v3 and refused by its inputSchema.",
            "v3 received no run: a refused submission does not become a run.",
        )
        # The policy's verb agrees with a single finished run too.
        with_changed(
            page,
            deployment_id,
            lambda answer: {**answer, "rollback": {**answer["rollback"], "minFinishedRuns": 1}},
        )
        policy = page.locator(".policy-line", has_text="judged once 1 run")
        said = "judged once 1 run of the candidate has finished since the deployment began;"
        assert said in policy.inner_text()
    with opened(browser, f"{server.ui}#/deployments") as (page, _):
        row = page.locator(f'tr[data-deployment="{deployment_id}"]')
        row.wait_for()
        assert f"({count} refused)" in row.inner_text()


Answer = dict[str, Any]


def with_changed(page: Any, deployment_id: str, change: Callable[[Answer], Answer]) -> None:
    """Reload the deployment's page with the API's answer for it as `change` makes it."""
    pattern = f"**/deployments/{deployment_id}"

    def changed(route: Any) -> None:
        route.fulfill(json=change(route.fetch().json()))

    page.unroute(pattern)
    page.route(pattern, changed)
    page.reload()


def with_candidate(page: Any, deployment_id: str, *, runs: int, refused: int) -> None:
    """Reload the deployment's page with its candidate routed `runs` submissions (its
    exposure), `refused` of them refused by its inputSchema."""

    def change(answer: Answer) -> Answer:
        candidate = {**answer["candidate"], "runs": runs, "refused": refused}
        return {**answer, "candidate": candidate, "exposure": runs}

    with_changed(page, deployment_id, change)
    page.locator(".exposure-figure", has_text=f"{runs:,} submission").wait_for()


def figure_and_link(page: Any) -> tuple[str, str]:
    """The exposure figure, and the link to the candidate's runs or why there is none."""
    said = page.locator(".exposure-figure").inner_text()
    return said, page.locator(".exposure-link, .exposure-none").inner_text()


def test_an_unknown_deployment_says_so(server: DemoServer, browser: Any) -> None:
    with opened(browser, f"{server.ui}#/deployments/no-such-deployment") as (page, watch):
        watch.allowed_errors.append("404")
        page.locator(".error-box", has_text="no deployment 'no-such-deployment'").wait_for()
        page.goto(f"{server.ui}#/deployments/{'0' * 8}")
        page.locator(".error-box", has_text="deployment_not_found").wait_for()


def test_a_deployment_opens_from_the_short_id_the_monitor_shows(
    server: DemoServer, browser: Any
) -> None:
    promoted = promote(server, "ui-short-id")
    with opened(browser, f"{server.ui}#/deployments/{promoted[:8]}") as (page, _):
        page.locator("h1 .badge", has_text="succeeded").wait_for()
        assert page.evaluate("location.hash") == f"#/deployments/{promoted}"


def test_the_workflows_page_leaves_the_system_workflow_out(
    server: DemoServer, browser: Any
) -> None:
    promoted = promote(server, "ui-listed")
    with opened(browser, f"{server.ui}#/workflows") as (page, _):
        page.get_by_role("link", name="ui-listed", exact=True).wait_for()
        names = [text.strip() for text in page.locator("tbody tr td:first-child").all_inner_texts()]
        assert "ui-listed" in names and "gradual_deploy" not in names, names
        # The run that drove the deployment is still a click away, with its graph.
        page.goto(f"{server.ui}#/deployments/{promoted}")
        page.get_by_role("link", name=re.compile(r"^run ")).click()
        page.get_by_text("gradual_deploy").first.wait_for()
        page.locator("svg").first.wait_for()


def version_page(page: Any) -> dict[str, Any]:
    """What the workflow page shows: its version (in the heading), that version's role, the
    notes of other versions, and each version's role in the list and in the picker."""
    page.locator(".versions li").first.wait_for()
    return {
        "heading": " ".join(page.locator("h1").inner_text().split()),
        "others": page.locator(".other-version").all_inner_texts(),
        "listed": [
            " ".join(text.split()[:2]) for text in page.locator(".versions li").all_inner_texts()
        ],
        "picker": page.locator(".page-head select option").all_inner_texts(),
    }


def test_the_workflow_page_opens_on_the_version_that_serves(
    server: DemoServer, browser: Any
) -> None:
    """The tour: the page opened on the latest version, a deployment's candidate getting 10 %
    of new runs (later rolled back), as if it were the one new runs get. It opens on the
    serving version, names the candidate with a link to it, and labels each version's role:
    serving, candidate 10 %, then rolled back once its deployment was."""
    name = "ui-opens-serving"
    server.publish_versions(name, failing=False)
    stages = [{"weight": 10, "minRuns": 1000}, {"weight": 100}]
    started = server.call(f"/workflows/{name}/deployments", {"version": 2, "stages": stages})
    with opened(browser, f"{server.ui}#/workflows/{name}") as (page, _):
        shown = version_page(page)
        assert shown == {
            "heading": f"{name} v1 serving",
            "others": ["v2 is a deployment's candidate: it gets 10 % of new runs. Open v2"],
            "listed": ["v2 candidate", "v1 serving"],
            "picker": ["v2 (candidate 10 %)", "v1 (serving)"],
        }, shown
        assert "10 %" in page.locator(".versions li[data-version='2']").inner_text()
        shoot(page, "workflow-opens-serving")
        page.get_by_role("link", name="Open v2").click()
        page.locator("h1", has_text="v2").wait_for()
        assert " ".join(page.locator("h1").inner_text().split()) == f"{name} v2 candidate 10 %"
        server.call(f"/deployments/{started['id']}/rollback", {"reason": "tour"}, method="POST")
        page.goto(f"{server.ui}#/workflows/{name}")
        page.locator("h1", has_text="v1").wait_for()
        shown = version_page(page)
        assert shown == {
            "heading": f"{name} v1 serving",
            "others": ["v2, the latest (rolled back), does not serve. Open v2"],
            "listed": ["v2 rolled", "v1 serving"],
            "picker": ["v2 (rolled back)", "v1 (serving)"],
        }, shown
        shoot(page, "workflow-opens-serving-rolled-back")


ENDED_WORDS = "○ deployment ended · it no longer changes"


def test_an_ended_deployment_says_so_and_stops_reading_it(server: DemoServer, browser: Any) -> None:
    """A deployment aborted elsewhere while its page is open has ended for good: the page says
    so, offers no Resume updates (there is nothing to resume) and reads it no more; opened
    afresh, an ended deployment says the same."""
    server.publish_versions("ui-ending", failing=False)
    started = server.call(
        "/workflows/ui-ending/deployments",
        {"version": 2, "stages": [{"weight": 50, "minRuns": 1000}, {"weight": 100}]},
    )
    deployment_id = started["id"]
    with opened(browser, "about:blank") as (page, _):
        # Its 2 s turns are run forward below, not waited for.
        open_on_own_clock(page, f"{server.ui}#/deployments/{deployment_id}")
        live = page.locator(".live")
        live.filter(has_text="live").wait_for()
        server.call(f"/deployments/{deployment_id}/abort", {})
        page.locator("h1 .badge", has_text="aborted").wait_for()
        live.filter(has_text="ended").wait_for()
        assert " ".join(live.inner_text().split()) == ENDED_WORDS
        assert live.locator("button").count() == 0
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if deployment_id in r.url else None)
        page.clock.run_for(5_000)  # more than two of the page's 2 s turns
        page.wait_for_timeout(500)  # for a read those turns would have sent to be seen
        assert reads == []
        shoot(page, "deployment-ended")

        page.reload()
        page.locator("h1 .badge", has_text="aborted").wait_for()
        live.filter(has_text="ended").wait_for()
        assert " ".join(live.inner_text().split()) == ENDED_WORDS
        assert live.locator("button").count() == 0


WIDTHS = (360, 420, 520, 600, 700, 800, 900, 901, 902, 1024, 1280)
"""Phones to a laptop, each side of the 520, 700 and 900 px breakpoints, and 900 px itself
with the two widths just past it, where every column of the lists comes back in a narrower
box: one page load measured at each."""


Rows = list[dict[str, Any]]


def with_more_rows(page: Any, pattern: str, more: Callable[[Rows], Rows], shown: str) -> None:
    """Reload the page with rows added to the items of the API's answers at `pattern` (those
    `more` makes of them), once the row with `shown` is drawn."""

    def extended(route: Any) -> None:
        answer = route.fetch().json()
        route.fulfill(json={**answer, "items": [*answer["items"], *more(answer["items"])]})

    page.route(pattern, extended)
    page.reload()
    page.locator("main tbody tr", has_text=shown).wait_for()


def container_services(_: Rows) -> Rows:
    """Two services named as in containers (`worker-<host>-<pid>`, `api-<host>-<port>`, the
    host a 12-hex id): the demo's `serve-<host>` is the only one that beats here. A worker
    down for 3 days, with the pid and host it last beat from and no role (its release beat
    none: the widest, "unknown"); an API up for almost a day, with as large a pid as Linux
    gives, on a host with a long dotted name."""
    now = time.time()
    return [
        {
            "name": "worker-3f9a1c2b7d4e-123456",
            "up": False,
            "pid": 123456,
            "host": "3f9a1c2b7d4e",
            "lastSeen": now - 3 * 86400,
        },
        {
            "name": "api-3f9a1c2b7d4e-8000",
            "up": True,
            "role": "api",
            "pid": 4194304,
            "host": "ip-10-0-3-17.eu-west-1.compute.internal",
            "uptimeS": 86399,
            "lastSeen": now - 9,
        },
    ]


def widest_deployments(items: Rows) -> Rows:
    """The newest deployment twice more with its cells as wide as they get: rolled back (the
    widest state) after 1,250 runs, and promoted then superseded by v13; v12 over v11,
    started 59 min ago."""
    base = {
        **items[0],
        "candidateVersion": 12,
        "servingVersion": 11,
        "createdAt": time.time() - 59 * 60 - 30,
    }
    return [
        {
            **base,
            "id": "fffffff1-0000-4000-8000-000000000001",
            "status": "ROLLED_BACK",
            "superseded": False,
            "candidate": {**base["candidate"], "runs": 1250, "failureRatio": 0.25},
        },
        {
            **base,
            "id": "fffffff2-0000-4000-8000-000000000002",
            "status": "SUCCEEDED",
            "superseded": True,
            "servingVersionNow": 13,
        },
    ]


MORE_ROWS = {
    "services": ("**/services", container_services, "worker-3f9a1c2b7d4e"),
    "deployments": ("**/deployments?*", widest_deployments, "fffffff1"),
}
"""What a list is measured with besides the rows the tests made: what is seldom made here."""


@pytest.mark.parametrize("route", ["deployments", "workflows", "runs", "services"])
def test_a_list_fits_a_phone(server: DemoServer, browser: Any, route: str) -> None:
    """From a small phone's 360 px to 1280 a list scrolls neither the page nor its table
    sideways: every column it shows (a deployment's state, a run's progress, a service's
    last heartbeat above all) is whole on the screen, a long workflow or service name
    wrapping rather than pushing the others off it."""
    name = f"ui-phone-{route}-customer-onboarding"
    promote(server, name)
    if route == "runs":
        submit(server, name, 1)
    with opened(browser, f"{server.ui}#/{route}") as (page, _):
        if route in MORE_ROWS:
            with_more_rows(page, *MORE_ROWS[route])
        page.set_viewport_size(NARROW)
        page.locator("main tbody tr").first.wait_for()
        shoot(page, f"list-{route}")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": NARROW["height"]})
            fit = page.evaluate(FIT_JS, ["main .table-wrap > table", "th, td"])
            assert_fits_a_phone(fit, width)
            if route == "deployments":
                state = page.locator("table.deployments tbody tr").first.locator(".badge")
                box = state.bounding_box()
                assert box is not None and box["x"] + box["width"] <= width, (width, box)


def test_a_deployments_runs_by_version_fit_a_phone(server: DemoServer, browser: Any) -> None:
    """On a deployment's page the table of each version's runs, caption and all, stays on the
    screen from 360 px to 1280: a narrow window leaves out the counts its failure ratio
    does not turn on, and a version's role goes under its number."""
    promoted = promote(server, "ui-phone-figures-customer-onboarding")
    with opened(browser, f"{server.ui}#/deployments/{promoted}") as (page, _):
        page.locator("table.figures tbody tr").first.wait_for()
        shoot(page, "deployment-figures")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": NARROW["height"]})
            fit = page.evaluate(FIT_JS, ["table.figures", "caption, th, td"])
            assert_fits_a_phone(fit, width)
            for role in ("candidate", "serving"):
                link = page.locator(f"table.figures tr[data-role={role}] a")
                box = link.bounding_box()
                assert box is not None and box["x"] + box["width"] <= width, (width, role, box)


SMALLEST_PHONE = 400
"""At this width and below a part of a list's name wider than its column ends in an ellipsis
(style.css)."""

CUT_PARTS_JS = """(selector) => [...document.querySelectorAll(selector)]
  .filter((e) => e.offsetParent)
  .flatMap((cell) => [...cell.querySelectorAll('.name-part')])
  .filter((part) => part.scrollWidth > part.clientWidth + 1)
  .map((part) => ({
    part: part.textContent,
    ellipsis: getComputedStyle(part).textOverflow,
    title: part.closest('.name').title,
    name: part.closest('.name').textContent,
  }))"""
"""Each part of a name `selector` finds that is drawn cut short: its text, how it ends, and the
title and text of its whole name."""

LONG_NAMES = ("invoice-reconciliation-nightly-export", "invoice_reconciliation_nightly_export")
"""A long workflow name as people write them, with hyphens and with underscores."""

LONG_TENANT = "billing_ops.invoice-reconciliation-team"
"""A run's tenant named as freely as a workflow: the runs list wraps it the same way."""

NAMES = {
    "deployments": "table.deployments tbody td:nth-child(2)",
    "runs": "table.runs tbody td:nth-child(4), table.runs tbody td:nth-child(5)",
    "workflows": "table.workflows tbody td:nth-child(1)",
    "services": "table.services tbody td:nth-child(1) > .name",
}
"""The cell of each list that holds a long name."""


@pytest.fixture(scope="module")
def long_names(server: DemoServer) -> None:
    """`LONG_NAMES` deployed (promoted), each with a run (of `LONG_TENANT`)."""
    for name in LONG_NAMES:
        promote(server, name)
        submit(server, name, 1, tenant=LONG_TENANT)


@pytest.mark.parametrize("route", ["deployments", "workflows", "runs", "services"])
def test_a_long_name_wraps_between_words(
    server: DemoServer, browser: Any, long_names: None, route: str
) -> None:
    """From 360 px to 1280, where a list has no room for a long workflow (or service, or
    run's tenant) name on one line, the name wraps after a hyphen, an underscore or a dot,
    never inside a word ("reconcili" / "ation"), and the list still scrolls neither the page
    nor its table sideways: at 901 px too, where every column of the deployments list comes
    back. On the smallest phones (360 to 400 px), where "reconciliation" beside a run's
    status, id and progress is wider than the screen leaves it, that part ends in an
    ellipsis, with the whole name as the title, rather than break inside a word (the tour:
    "fan-ou" / "t" at 390 px)."""
    with opened(browser, f"{server.ui}#/{route}") as (page, _):
        if route in MORE_ROWS:
            with_more_rows(page, *MORE_ROWS[route])
        if route != "services":
            page.locator("main tbody tr", has_text=LONG_NAMES[1]).first.wait_for()
        page.locator("main tbody tr").first.wait_for()
        shoot(page, f"long-names-{route}", widths=(901, 390, 360))
        cut_at: set[int] = set()
        for width in sorted({*WIDTHS, 390}):
            page.set_viewport_size({"width": width, "height": NARROW["height"]})
            fit = page.evaluate(FIT_JS, ["main .table-wrap > table", "th, td"])
            assert_fits_a_phone(fit, width)
            names = page.evaluate(LINES_JS, NAMES[route])
            assert names, (route, width)
            assert_wraps_between_words(names, (route, width))
            for cut in page.evaluate(CUT_PARTS_JS, NAMES[route]):
                assert width <= SMALLEST_PHONE, (route, width, cut)
                assert cut["ellipsis"] == "ellipsis" and cut["title"] == cut["name"], cut
                cut_at.add(width)
        if route in ("runs", "deployments"):  # "reconciliation" is wider than 390 px leave it
            assert 390 in cut_at, cut_at


def test_more_deployments_than_a_page_are_paged(
    tmp_path_factory: pytest.TempPathFactory, browser: Any
) -> None:
    """The list showed the 50 newest and nothing of the older ones: "Next →" reads the next
    page with the API's cursor, "← Previous" comes back, as the runs list pages."""
    with demo_on_sqlite(tmp_path_factory, "ui-deployment-pages") as server:
        server.publish_versions("ui-paged", failing=False)
        started = []
        for _ in range(DEPLOYMENTS_PAGE + 1):
            deployment = server.call("/workflows/ui-paged/deployments", {"version": 2})
            server.call(f"/deployments/{deployment['id']}/abort", {})
            started.append(deployment["id"])
        with opened(browser, f"{server.ui}#/deployments") as (page, _):
            rows = page.locator("table.deployments tbody tr[data-deployment]")
            eventually(lambda: rows.count() == DEPLOYMENTS_PAGE, 30, "the newest page")
            assert rows.first.get_attribute("data-deployment") == started[-1]
            assert page.locator(".pager").inner_text().count("50 deployments on this page") == 1
            page.get_by_role("button", name="Next →").click()
            eventually(lambda: rows.count() == 1, 30, "the older page")
            assert rows.first.get_attribute("data-deployment") == started[0]
            assert page.get_by_role("button", name="Next →").is_disabled()
            shoot(page, "deployments-older-page")
            page.get_by_role("button", name="← Previous").click()
            eventually(lambda: rows.count() == DEPLOYMENTS_PAGE, 30, "back to the newest")
            assert rows.first.get_attribute("data-deployment") == started[-1]


def test_an_abort_done_is_said_done_though_the_page_cannot_be_read_again(
    server: DemoServer, browser: Any
) -> None:
    """From a monitor tour: an abort the API answered, followed by a redraw the API did not
    answer (it stopped in between), said "✕ Abort refused", though the deployment was
    aborted. The abort's answer is said; the redraw's silence leaves the page as it was."""
    server.publish_versions("ui-abort-gone", failing=False)
    started = server.call(
        "/workflows/ui-abort-gone/deployments",
        {"version": 2, "stages": [{"weight": 50, "minRuns": 1000}, {"weight": 100}]},
    )
    deployment_id = started["id"]
    with opened(browser, f"{server.ui}#/deployments/{deployment_id}") as (page, watch):
        watch.allowed_errors.append("net::ERR_FAILED")  # the reads refused below, on purpose
        page.get_by_role("button", name="Abort").wait_for()
        answered: list[str] = []

        def after_the_abort(route: Any) -> None:
            # Every read of the deployment once the abort was answered gets no answer.
            if answered and route.request.method == "GET":
                route.abort()
            else:
                route.continue_()

        page.on("response", lambda r: answered.append(r.url) if r.url.endswith("/abort") else None)
        page.route(re.compile(r".*/deployments/.*"), after_the_abort)
        page.get_by_role("button", name="Abort").click()
        confirm(page, "Abort the deployment")
        page.locator(".ok-box", has_text=f"deployment {deployment_id} aborted").wait_for()
        assert page.locator(".error-box", has_text="refused").count() == 0
    assert server.call(f"/deployments/{deployment_id}")["status"] == "ABORTED"
