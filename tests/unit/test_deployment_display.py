"""What `schemabridge deployments show` prints of a deployment's end and timeline: times
labelled with their zone, a stop by hand said once (who, why, "when it was stopped"), an
engine's verdict with "when it decided", and the warnings of a running deployment."""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from api.cli.deployment_display import deployment_view, rollback_lines, timeline_table
from api.cli.wire import DeploymentView

AT = 1_777_860_884.159
"""2026-05-04 02:14:44.159 UTC: 04:14:44 in Paris (CEST)."""
FIGURES = {"runs": 3, "succeeded": 3, "failed": 0, "cancelled": 0, "finished": 3}


def rendered(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=240, color_system=None)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def deployment(**changes: Any) -> DeploymentView:
    figures = {**FIGURES, "running": 0, "failureRatio": 0.0, "runsUrl": "/runs?workflow=t"}
    body: dict[str, Any] = {
        "id": "5b0c7e2d-0000-4000-8000-000000000000",
        "workflow": "tickets",
        "status": "RUNNING",
        "candidateVersion": 4,
        "servingVersion": 3,
        "stage": 1,
        "weight": 10,
        "stages": [{"stage": 1, "weight": 10, "minRuns": 20, "minDurationSeconds": 60}],
        "rollback": {"maxFailureRatio": 0.05, "minFinishedRuns": 20},
        "threshold": 0.05,
        "checkIntervalSeconds": 5,
        "candidate": {"version": 4, **figures},
        "serving": {"version": 3, **figures},
        "exposure": 3,
        "runId": "9092de5d-0000-4000-8000-000000000000",
        "createdAt": AT,
        "createdBy": "key:410577f5e3b5 (release-bot)",
        "timeline": [{"at": AT, "event": "started", "stage": 1, "weight": 10}],
        **changes,
    }
    return DeploymentView.model_validate(body)


@pytest.fixture
def paris() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Paris"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_timeline_times_say_their_zone(paris: None) -> None:
    shown = rendered(timeline_table(deployment().timeline))
    assert "2026-05-04 04:14:44.159 CEST" in shown, shown


def test_a_stop_by_hand_is_said_once_with_the_figures_of_the_moment() -> None:
    actor = "key:410577f5e3b5 (release-bot)"
    stopped = deployment(
        status="ABORTED",
        outcome={
            "reason": f"stopped by {actor}: p99 doubled",
            "actor": actor,
            "stage": 1,
            "figures": {"candidate": {**FIGURES, "failureRatio": 0.0}},
        },
    )
    lines = rollback_lines(stopped)
    assert lines[0] == f"aborted at stage 1: stopped by {actor}: p99 doubled"
    assert lines[1].endswith("(ratio 0.000; 3 runs in all when it was stopped)")


def test_an_engine_verdict_keeps_who_decided_and_when() -> None:
    rolled = deployment(
        status="ROLLED_BACK",
        outcome={
            "reason": "the candidate failed 3 of its 3 finished runs",
            "actor": "engine",
            "stage": 1,
            "figures": {"candidate": {**FIGURES, "failureRatio": 1.0}, "threshold": 0.05},
        },
    )
    lines = rollback_lines(rolled)
    assert (
        lines[0] == "rolled back at stage 1 (engine): the candidate failed 3 of its 3 finished runs"
    )
    assert lines[1].endswith("(ratio 1.000; 3 runs in all when it decided)")


def test_a_running_deployment_shows_what_it_waits_for_and_its_warnings() -> None:
    waiting = "waiting at stage 1: 0/20 runs; no finished run yet, threshold 0.050"
    shown = rendered(
        deployment_view(
            deployment(holding=waiting, warnings=["tickets is a SPAWNER's child …"]),
            AT + 60,
        )
    )
    assert waiting in shown
    assert "warning: tickets is a SPAWNER's child …" in shown


def test_each_stage_says_what_it_waits_for_in_the_apis_words() -> None:
    """The check's terms, finished runs included ("10 runs" alone disagreed with "19/20
    finished runs"); from a server without `waitsFor`, the runs and time as before."""
    said = {"stage": 1, "weight": 25, "minRuns": 10, "minDurationSeconds": 10}
    words = {**said, "waitsFor": "10 runs, 10 s, 20 finished runs"}
    shown = rendered(deployment_view(deployment(stages=[words]), AT))
    assert "stages: 25 % (10 runs, 10 s, 20 finished runs)" in shown, shown
    assert "judged from 20 finished runs since the deployment began; checked every 5.0 s" in (
        shown
    ), shown
    older = rendered(deployment_view(deployment(stages=[said]), AT))
    assert "stages: 25 % (10 runs, 10 s)" in older, older


def test_a_candidate_that_received_only_refusals_has_no_runs_to_list() -> None:
    # Every submission routed to v4 was refused (422, no run): a `runs list` of v4 would be
    # empty, so `show` says why instead of giving the command.
    refused = {**FIGURES, "runs": 5, "succeeded": 0, "failed": 5, "finished": 5, "refused": 5}
    figures = {"running": 0, "failureRatio": 1.0, "runsUrl": "/runs?workflow=t"}
    shown = rendered(
        deployment_view(deployment(candidate={"version": 4, **refused, **figures}), AT)
    )
    assert "list them:" not in shown, shown
    assert "  no run to list: a refused submission does not become a run\n" in shown, shown
    some = {**refused, "runs": 6, "succeeded": 1, "finished": 6}
    shown = rendered(deployment_view(deployment(candidate={"version": 4, **some, **figures}), AT))
    assert "list them: schemabridge runs list --workflow tickets --version 4" in shown, shown


def exposure(runs: int, refused: int) -> list[str]:
    """The exposure line and the one under it of a deployment whose candidate v4 was routed
    `runs` submissions, `refused` of them refused by its inputSchema."""
    counts = {"runs": runs, "succeeded": runs - refused, "failed": refused, "refused": refused}
    figures = {**counts, "cancelled": 0, "finished": runs, "running": 0, "failureRatio": 0.5}
    candidate = {"version": 4, **figures, "runsUrl": "/runs?workflow=t"}
    shown = rendered(deployment_view(deployment(candidate=candidate, exposure=runs), AT))
    lines = shown.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("exposure: "))
    return lines[at : at + 2]


def test_the_exposure_says_runs_or_the_submissions_refused_and_agrees_with_one() -> None:
    # `exposure` counts the submissions the candidate refused, which never became runs:
    # "13 runs went to the candidate (13 of them refused)" said runs that do not exist.
    assert exposure(3, 0)[0] == "exposure: 3 runs went to the candidate v4"
    assert exposure(1, 0)[0] == "exposure: 1 run went to the candidate v4"
    assert exposure(13, 3)[0] == (
        "exposure: 13 submissions were routed to the candidate v4: 10 became runs, "
        "3 were refused by its inputSchema"
    )
    assert exposure(2, 1)[0] == (
        "exposure: 2 submissions were routed to the candidate v4: 1 became a run, "
        "1 was refused by its inputSchema"
    )
    assert exposure(13, 13) == [
        "exposure: 13 submissions were routed to the candidate v4, all refused by its inputSchema",
        "  no run to list: a refused submission does not become a run",
    ]
    assert exposure(1, 1) == [
        "exposure: 1 submission was routed to the candidate v4 and refused by its inputSchema",
        "  no run to list: a refused submission does not become a run",
    ]


def test_a_deployment_whose_run_was_purged_names_it_without_a_command() -> None:
    """Run retention deletes an ended deployment's `gradual_deploy` run: `runs show` of it
    would answer 404, so the last line names the run as gone instead."""
    run_id = "9092de5d-0000-4000-8000-000000000000"
    kept = rendered(deployment_view(deployment(status="ABORTED"), AT)).splitlines()[-1]
    assert kept.strip() == f"driven by run {run_id}: schemabridge runs show {run_id}"
    gone = deployment(status="ABORTED", runPurged=True)
    last = rendered(deployment_view(gone, AT)).splitlines()[-1]
    assert last.strip() == f"driven by run {run_id} (deleted by run retention)"


def test_the_timeline_and_the_outcome_say_the_monitors_words() -> None:
    """`deployments show` printed the API's enum ("succeeded", "stage", "rolled_back") where
    the monitor's page of the same deployment says "promoted", "next stage", "rolled back"."""
    events = [
        {"at": AT, "event": "started", "stage": 1, "weight": 10},
        {"at": AT + 10, "event": "stage", "stage": 2, "weight": 100, "note": "stage 1 passed"},
        {"at": AT + 20, "event": "succeeded", "stage": 2, "weight": None, "note": "passed"},
    ]
    promoted = deployment(
        status="SUCCEEDED",
        timeline=events,
        outcome={"reason": "stage 2 passed: …", "actor": "engine", "stage": 2},
    )
    table = rendered(timeline_table(promoted.timeline))
    rows = table.splitlines()[1:]
    words = [re.split(r"\s{2,}", row)[1] for row in rows]
    assert words == ["started", "next stage", "promoted"], table
    assert rollback_lines(promoted)[0] == "promoted at stage 2 (engine): stage 2 passed: …"
    rolled = deployment(
        status="ROLLED_BACK",
        timeline=[{"at": AT, "event": "rolled_back", "stage": 1, "weight": None}],
        outcome={"reason": "the candidate failed", "actor": "engine", "stage": 1},
    )
    assert "rolled back" in rendered(timeline_table(rolled.timeline))
    assert "rolled_back" not in rendered(timeline_table(rolled.timeline))
