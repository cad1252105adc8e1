"""What the remote commands print: counts with their noun, times, and a run's steps with why
they wait — never "None" for a missing value."""

from __future__ import annotations

import io
import time
from collections.abc import Mapping

import pytest
from rich.console import Console

from api.cli import admin, remote, run_display
from api.cli.text import clock, exact, parse_since, relative
from api.cli.wire import BreakerView, LogEntry, RunDetail, RunSummary, ServiceView
from schemas.counts import plural
from schemas.durations import duration

NOW = 1_800_000_000.0


def rendered(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_counts_times_and_spans() -> None:
    assert [plural(1, "attempt"), plural(2, "attempt"), plural(2_000, "child", "children")] == [
        "1 attempt",
        "2 attempts",
        "2,000 children",
    ]
    assert [duration(0.019), duration(4.24), duration(192), duration(7_500)] == [
        "19 ms",
        "4.2 s",
        "3 min 12 s",
        "2 h 5 min",
    ]
    # A value that rounds up to the next unit is said in that unit (a stage's "59.6 s more").
    assert [duration(0.9996), duration(9.96), duration(59.6), duration(3_599.7)] == [
        "1.0 s",
        "10 s",
        "1 min",
        "1 h",
    ]
    assert [relative(NOW - 400, NOW), relative(NOW + 12, NOW), relative(NOW, NOW)] == [
        "6 min ago",
        "in 12 s",
        "just now",
    ]
    assert parse_since("2h", NOW) == NOW - 7_200
    assert parse_since("2026-12-01T08:00:00+00:00", NOW) == 1_796_112_000.0
    with pytest.raises(ValueError, match="neither a span"):
        parse_since("yesterday", NOW)


def test_a_waiting_step_says_why_and_until_when() -> None:
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "renewals",
            "version": 2,
            "tenantId": "default",
            "status": "RUNNING",
            "createdAt": NOW - 90,
            "startedAt": NOW - 90,
            "steps": [
                {
                    "vertexId": "collect",
                    "type": "GATEWAY",
                    "status": "SUCCEEDED",
                    "attempts": 1,
                    "startedAt": NOW - 90,
                    "endedAt": NOW - 89,
                },
                {
                    "vertexId": "renew",
                    "type": "SPAWNER",
                    "status": "PARKED",
                    "attempts": 1,
                    "children": {"total": 2000, "succeeded": 997, "failed": 0, "cancelled": 0},
                    "waiting": {
                        "reason": "tenant_rate_limit",
                        "message": "tenant default at its rate limit (1000/1000)",
                        "until": NOW + 12,
                    },
                },
                {"vertexId": "join", "type": "MERGE", "status": "PENDING"},
            ],
            "fanout": {"total": 2000, "pending": 963, "running": 40, "succeeded": 997},
        }
    )
    text = rendered(run_display.run_view(run, NOW))
    assert (
        "children 997/2,000 ended; waiting (tenant_rate_limit): tenant default at its rate "
        "limit (1000/1000), until" in text
    )
    assert "(in 12 s)" in text
    assert (
        "997 of 2,000 children ended: 997 succeeded, 0 failed, 0 cancelled; 40 running, "
        "963 waiting" in text
    )
    assert "None" not in text
    assert "schemabridge runs watch r1" in text


def test_the_fanout_line_says_waiting_as_the_monitor_does() -> None:
    """The API's `waitingChildren` is read when sent (its deprecated `pending`, from an older
    API, when not): the CLI's word is the monitor's, "waiting", never "pending"."""
    fanout = {"total": 10, "pending": 7, "waitingChildren": 6, "running": 1, "succeeded": 3}
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "w",
            "version": 1,
            "tenantId": "default",
            "status": "RUNNING",
            "createdAt": NOW,
            "fanout": fanout,
        }
    )
    line = run_display.fanout_line(run.fanout)
    assert line.endswith("1 running, 6 waiting"), line
    assert "pending" not in line


def quota_failed(message: str, tenant: str = "acme") -> RunDetail:
    """A FAILED run whose spawner failed for want of `tenant`'s quota, saying `message`."""
    error = {"kind": "quota_exceeded", "message": message, "vertexId": "each"}
    return RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "renewals",
            "version": 1,
            "tenantId": tenant,
            "status": "FAILED",
            "createdAt": NOW - 90,
            "error": error,
            "steps": [
                {"vertexId": "each", "type": "SPAWNER", "status": "FAILED", "error": error},
                {"vertexId": "join", "type": "MERGE", "status": "PENDING"},
            ],
        }
    )


def test_a_fanout_over_its_quota_suggests_raising_it_before_the_retry() -> None:
    named = quota_failed(
        "the fan-out needs 5 runs but tenant acme has 2 left in its quota (4 of 6 used); raise "
        "the quota to 9 or more (`schemabridge tenants set-quota acme 9`) and retry the run, "
        "or split the input"
    )
    assert run_display.next_commands(named)[:2] == [
        "schemabridge tenants set-quota acme 9",
        "schemabridge runs retry r1",
    ]
    # An older API's error names no figure: the command to fill in, the tenant quoted.
    older = quota_failed(
        "the fan-out needs 5 runs but the tenant has 2 left in its quota; raise the quota or "
        "split the input",
        tenant="acme eu",
    )
    assert run_display.next_commands(older)[:2] == [
        "schemabridge tenants set-quota 'acme eu' N",
        "schemabridge runs retry r1",
    ]


def test_a_join_failed_on_a_cancelled_child_suggests_resolving_it_not_a_retry() -> None:
    """Neither a retry nor a reprocess runs a cancelled child again (the tour tried the
    retry `runs show` listed first, three times): resolve the join, or start the run over."""
    error = {
        "kind": "child_failures",
        "message": "1 of 3 children ended with a status not tolerated: 1 CANCELLED, …",
        "vertexId": "join",
        "childrenCancelled": 1,
    }
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "parent",
            "version": 1,
            "tenantId": "default",
            "status": "FAILED",
            "createdAt": NOW - 90,
            "error": error,
            "steps": [
                {"vertexId": "each", "type": "SPAWNER", "status": "SUCCEEDED"},
                {"vertexId": "join", "type": "MERGE", "status": "FAILED", "error": error},
            ],
            "fanout": {"total": 3, "succeeded": 2, "cancelled": 1},
        }
    )
    assert run_display.next_commands(run) == [
        "schemabridge runs resolve r1 join --output JSON",
        "schemabridge runs start-over r1",
        "schemabridge runs children r1 --status CANCELLED",
        "schemabridge runs logs r1",
    ]


def deployment_run(status: str, deployment_id: str | None) -> RunDetail:
    """A deployment's own `gradual_deploy` run (route `system`) of `tickets`, as the API
    answers it: the deployment it drives in `deploymentId`."""
    return RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "gradual_deploy",
            "version": 1,
            "tenantId": "default",
            "status": status,
            "route": "system",
            "createdAt": NOW - 90,
            "input": {"workflow": "tickets", "candidateVersion": 2},
            "deploymentId": deployment_id,
        }
    )


def test_a_candidates_deployment_is_named_with_its_command_to_admin_keys_only() -> None:
    """A tenant key reads the id of the deployment that routed its run, but `deployments
    show` would answer it 403: its header gives the id alone."""
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "tickets",
            "version": 2,
            "tenantId": "acme",
            "status": "RUNNING",
            "route": "candidate",
            "createdAt": NOW - 9,
            "deploymentId": "d1",
        }
    )
    admin = rendered(run_display.run_header(run, NOW)).splitlines()
    assert admin[-1].rstrip() == "deployment   d1: schemabridge deployments show d1"
    tenant = rendered(run_display.run_header(run, NOW, opens_deployments=False)).splitlines()
    assert tenant[-1].rstrip() == "deployment   d1"


def test_a_deployment_run_points_at_its_deployment_not_at_run_actions() -> None:
    """The API refuses run actions on a deployment's own run: the commands are the
    deployment's, named by the `deploymentId` the API gives."""
    assert run_display.next_commands(deployment_run("RUNNING", "d1")) == [
        "schemabridge deployments show d1",
        "schemabridge deployments abort d1",
        "schemabridge deployments rollback d1",
        "schemabridge runs logs r1",
    ]
    assert run_display.next_commands(deployment_run("FAILED", "d1")) == [
        "schemabridge deployments show d1",
        "schemabridge deployments start tickets --version VERSION",
        "schemabridge runs logs r1",
    ]
    assert run_display.next_commands(deployment_run("FAILED", None)) == [
        "schemabridge runs logs r1"
    ]


def fanout_progress(waiting: list[dict[str, object]]) -> dict[str, object]:
    """A RUNNING fan-out of 1,000 children, 992 ended, with `waiting` (the API's JSON)."""
    return {
        "id": "r1",
        "status": "RUNNING",
        "ended": False,
        "steps": [
            {"vertexId": "each", "status": "PARKED"},
            {"vertexId": "join", "status": "PENDING"},
        ],
        "fanout": {
            "total": 1000,
            "running": 8,
            "succeeded": 992,
            "waiting": waiting,
        },
    }


RATE = (
    "tenant acme is at its rate limit (1000/1000 GATEWAY steps a minute); an admin "
    "raises it with `schemabridge tenants set-rate acme N` or, for every tenant, "
    "SCHEMABRIDGE_TENANT_RATE_PER_MINUTE"
)


def test_a_watch_says_why_children_wait() -> None:
    from api.cli.watch import LiveView, Snapshot

    # A fan-out that sat at 992/1,000 for a minute used to say nothing of why.
    waiting = [
        {"reason": "tenant_rate_limit", "children": 6, "message": RATE, "until": NOW + 3},
        {"reason": "backpressure", "children": 2, "message": "the ready queue is deep"},
    ]
    snapshot = Snapshot.of(fanout_progress(waiting))
    line = snapshot.summary()
    assert line.startswith("RUNNING  steps 0/2  children 992/1,000 (0 failed, 8 running)  ")
    assert line.endswith(f"6 children waiting: {RATE} (others wait for: backpressure)")
    live = LiveView("run r1 (fan v1)", 0.0)
    live.snapshot = snapshot
    shown = rendered(live.render())
    assert "6 children waiting: tenant acme is at its rate limit" in shown
    one = Snapshot.of(fanout_progress([{"reason": "breaker_open", "children": 1}]))
    assert one.summary().endswith("  1 child waiting: breaker open")
    assert "waiting" not in Snapshot.of(fanout_progress([])).summary()


def test_a_batch_retry_with_nothing_to_retry_says_why() -> None:
    from api.cli.runs_actions import batch_lines, looked_for
    from api.cli.wire import BatchRetryResult

    # It used to print `retried 0 runs` and nothing else.
    looked = looked_for(None, [("workflow", "orders"), ("since", "2h")], all_runs=True)
    assert looked == "status FAILED, workflow orders, since 2h, child runs too"
    none = BatchRetryResult.model_validate({"retried": [], "skipped": []})
    exposure = [("workflow", "W"), ("version", 6), ("route", "candidate"), ("until", "1h")]
    assert batch_lines(none, looked_for("failed", exposure, all_runs=False)) == [
        "nothing to retry: no run matched (status FAILED, workflow W, version 6, route "
        "candidate, until 1h)"
    ]
    skipped = BatchRetryResult.model_validate(
        {
            "retried": [],
            "skipped": [
                {"runId": "r1", "reason": "run_not_failed", "state": "RUNNING"},
                {"runId": "r2", "reason": "run_not_found"},
                {"runId": "r3", "reason": "run_not_failed", "state": "SUCCEEDED"},
                {"runId": "r4", "reason": "run_not_failed", "state": "SUCCEEDED"},
            ],
        }
    )
    counts = "3 not FAILED (2 SUCCEEDED, 1 RUNNING), 1 not found"
    lines = batch_lines(skipped, "status FAILED, workflow W")
    assert lines[0] == (
        f"nothing to retry: 4 runs matched (status FAILED, workflow W), all skipped: {counts}"
    )
    assert lines[1:3] == ["  r1  not FAILED (it is RUNNING), not retried", "  r2  not found"]
    assert batch_lines(skipped)[0] == f"nothing to retry: the 4 runs given were skipped: {counts}"
    # Some retried: the skipped runs' line counts their reasons too.
    mixed = BatchRetryResult.model_validate(
        {"retried": ["r5"], "skipped": [{"runId": "r2", "reason": "run_not_found"}]}
    )
    assert batch_lines(mixed, looked) == [
        "retried 1 run",
        "  r5",
        "skipped 1 run: 1 not found",
        "  r2  not found",
    ]


def test_a_batch_retry_says_why_it_spared_a_finished_runs_child() -> None:
    from api.cli.runs_actions import batch_lines
    from api.cli.wire import BatchRetryResult

    why = "run p1 above it has SUCCEEDED: retrying this child would reopen its join 'join'"
    result = BatchRetryResult.model_validate(
        {
            "retried": ["r1"],
            "skipped": [
                {"runId": "c1", "reason": "parent_succeeded", "state": "FAILED", "message": why}
            ],
        }
    )
    assert batch_lines(result, "status FAILED, child runs too") == [
        "retried 1 run",
        "  r1",
        "skipped 1 run: 1 under a SUCCEEDED run (1 FAILED)",
        f"  c1  {why}",
    ]


def test_a_batch_retry_says_why_it_skipped_a_run_in_words() -> None:
    """The tour: "57328cef (deployment_run: FAILED)" read as if FAILED were the reason. Each
    skipped run's line says why in words; the code stays the API's (`--format json`)."""
    from api.cli.runs_actions import batch_lines
    from api.cli.wire import BatchRetryResult

    started_over = "run s1 was started over as run n1, SUCCEEDED: a retry would run its steps"
    result = BatchRetryResult.model_validate(
        {
            "retried": [],
            "skipped": [
                {"runId": "d1", "reason": "deployment_run", "state": "FAILED", "message": "m"},
                {
                    "runId": "s1",
                    "reason": "started_over",
                    "state": "FAILED",
                    "message": started_over,
                },
                {"runId": "x1", "reason": "a_new_reason", "state": "FAILED"},
            ],
        }
    )
    assert batch_lines(result) == [
        "nothing to retry: the 3 runs given were skipped: 1 a deployment's own run (1 FAILED), "
        "1 started over (1 FAILED), 1 a_new_reason (1 FAILED)",
        "  d1  a deployment's own run, not retried (act on its deployment)",
        f"  s1  {started_over}",
        "  x1  a_new_reason",
    ]


def test_a_batch_retry_says_it_skipped_runs_past_run_retention() -> None:
    """`run_past_retention`: the batch's line and its dry run say it in words, and each
    skipped run's line is the API's sentence (which names the root to start over)."""
    from api.cli.runs_actions import batch_lines, preview_skip_counts
    from api.cli.wire import BatchRetryResult, SkippedRuns

    why = "run p1 ended 31 d ago, past SCHEMABRIDGE_RUN_RETENTION_S (30 d), and is being deleted"
    result = BatchRetryResult.model_validate(
        {
            "retried": [],
            "skipped": [
                {"runId": "p1", "reason": "run_past_retention", "state": "FAILED", "message": why}
            ],
        }
    )
    assert batch_lines(result) == [
        "nothing to retry: the run given was skipped: 1 being deleted (1 FAILED)",
        f"  p1  {why}",
    ]
    counted = [SkippedRuns(reason="run_past_retention", state="FAILED", count=3, message="m")]
    assert preview_skip_counts(counted) == (
        "being deleted (run retention or a purge is deleting their trees; start their roots "
        "over to run their input again)"
    )


def running_fan_out(fanout: dict[str, object]) -> dict[str, object]:
    """A RUNNING fan-out run as `GET /runs/{id}` answers it, with `fanout`."""
    return {
        "id": "r1",
        "workflow": "fan",
        "version": 1,
        "tenantId": "acme",
        "status": "RUNNING",
        "createdAt": NOW - 60,
        "steps": [{"vertexId": "each", "type": "SPAWNER", "status": "PARKED"}],
        "fanout": fanout,
    }


def test_runs_show_says_why_a_running_fanouts_children_wait() -> None:
    # `runs watch` said it; `runs show` gave only the counts.
    waiting = [
        {"reason": "tenant_rate_limit", "children": 6, "message": RATE, "until": NOW + 3},
        {"reason": "backpressure", "children": 2, "message": "the ready queue is deep"},
    ]
    fields = running_fan_out({"total": 1000, "running": 8, "succeeded": 992, "waiting": waiting})
    text = rendered(run_display.run_view(RunDetail.model_validate(fields), NOW))
    said = f"6 children waiting: {RATE} (others wait for: backpressure)"
    assert said in " ".join(text.split()), text
    lines = text.splitlines()
    counts = next(i for i, line in enumerate(lines) if line.startswith("fan-out"))
    assert lines[counts + 1].strip().startswith("6 children waiting: tenant acme"), text
    ended = {**fields, "status": "CANCELLED", "endedAt": NOW}
    assert "waiting:" not in rendered(run_display.run_view(RunDetail.model_validate(ended), NOW))


ADMISSION = "waiting for an admission slot of http://127.0.0.1:48927 (its limit is reached)"


def test_children_waiting_for_an_admission_slot_are_said_to_be_running() -> None:
    # "15 running, 0 waiting" above "15 children waiting: waiting for an admission slot …":
    # a child whose step waits for an admission slot is running (a worker holds its step).
    waiting = [{"reason": "admission_wait", "children": 15, "message": ADMISSION}]
    fields = running_fan_out({"total": 24, "running": 23, "failed": 1, "waiting": waiting})
    text = " ".join(rendered(run_display.run_view(RunDetail.model_validate(fields), NOW)).split())
    assert "23 running (15 of them waiting for an admission slot), 0 waiting" in text, text
    assert f"15 running children {ADMISSION}" in text, text
    assert "15 children waiting" not in text, text
    assert "admission_wait" not in text, text
    from api.cli.watch import LiveView, Snapshot

    progress = fanout_progress(waiting)
    line = Snapshot.of(progress).summary()
    assert "(0 failed, 8 running (15 of them waiting for an admission slot))" in line, line
    live = LiveView("run r1 (fan v1)", 0.0)
    live.snapshot = Snapshot.of(progress)
    shown = " ".join(rendered(live.render()).split())
    assert "8 running (15 of them waiting for an admission slot), 0 waiting" in shown, shown
    both = [*waiting, {"reason": "retry_backoff", "children": 2, "message": ""}]
    fanout = RunDetail.model_validate(
        running_fan_out({"total": 24, "running": 23, "waiting": both})
    )
    assert run_display.running_words(fanout.fanout) == (
        "23 running (15 of them waiting for an admission slot, 2 waiting to retry a call)"
    )


def test_a_spawner_parked_for_its_children_says_it_waits_for_them() -> None:
    # A healthy fan-out's spawner read "PARKED", which users take for stuck.
    counts = {"total": 24, "succeeded": 0, "failed": 1, "cancelled": 0}
    fields = running_fan_out({"total": 24, "running": 23, "failed": 1})
    fields["steps"] = [
        {"vertexId": "fan", "type": "SPAWNER", "status": "PARKED", "children": counts},
        {"vertexId": "join", "type": "MERGE", "status": "PENDING"},
    ]
    table = rendered(run_display.steps_table(RunDetail.model_validate(fields).steps, NOW))
    row = next(line for line in table.splitlines() if line.startswith("fan"))
    assert "waiting for its children (1 of 24 ended)" in row, table
    assert "PARKED" not in row, table
    # A spawner parked by backpressure (its own `waiting`) is parked, and says why.
    park = {"reason": "backpressure", "message": "the ready queue is deep"}
    fields["steps"][0]["waiting"] = park  # type: ignore[index]
    table = rendered(run_display.steps_table(RunDetail.model_validate(fields).steps, NOW))
    row = next(line for line in table.splitlines() if line.startswith("fan"))
    assert "PARKED" in row and "waiting (backpressure)" in row, table


def test_a_resolved_step_says_it_was_resolved_not_how_long_it_took() -> None:
    # Its end is when the operator resolved it: "2 min 2 s" read as the call's duration.
    fields = running_fan_out({"total": 0})
    fields["steps"] = [
        {
            "vertexId": "lookup",
            "type": "GATEWAY",
            "status": "RESOLVED",
            "startedAt": NOW - 122,
            "endedAt": NOW,
        }
    ]
    table = rendered(run_display.steps_table(RunDetail.model_validate(fields).steps, NOW))
    row = next(line for line in table.splitlines() if line.startswith("lookup"))
    assert "resolved by operator" in row and "2 min" not in row, table


def test_runs_list_says_a_duration_counts_since_the_run_ran_again() -> None:
    """A tour's 3,000-child fan-out, recovered after an outage by a reprocess, read "486 ms"
    in `runs list`, as if the whole run had taken that: the list says what `runs show` and
    the monitor's list say, that the duration counts since it ran again."""
    base = {"workflow": "w", "version": 1, "tenantId": "acme", "createdAt": NOW - 180}
    runs = [
        RunSummary.model_validate(
            {**base, "id": "again", "status": "SUCCEEDED", "startedAt": NOW - 1, "endedAt": NOW}
        ),
        RunSummary.model_validate(
            {**base, "id": "first", "status": "SUCCEEDED", "startedAt": NOW - 180, "endedAt": NOW}
        ),
        RunSummary.model_validate(
            {**base, "id": "going", "status": "RUNNING", "startedAt": NOW - 2}
        ),
    ]
    rows = {
        line.split()[0]: " ".join(line.split())
        for line in rendered(run_display.runs_table(runs, NOW)).splitlines()[1:]
    }
    assert "1.0 s since it ran again" in rows["again"], rows
    assert "3 min -" in rows["first"] and "ran again" not in rows["first"], rows
    assert "2.0 s since it ran again" in rows["going"], rows


def test_a_run_made_to_run_again_says_when_its_duration_counts_from() -> None:
    # Created 3 min before it ended, retried 65 ms before: "after 65 ms" alone contradicts the
    # times beside it, so the header says when it ran again and that the duration counts
    # from then; a run never reopened keeps the plain line.
    base = {
        "id": "r1",
        "workflow": "ticket",
        "version": 2,
        "tenantId": "acme",
        "status": "SUCCEEDED",
        "createdAt": NOW - 180,
        "endedAt": NOW,
        "steps": [],
    }
    again = rendered(
        run_display.run_header(RunDetail.model_validate({**base, "startedAt": NOW - 0.065}), NOW)
    )
    first = rendered(
        run_display.run_header(RunDetail.model_validate({**base, "startedAt": NOW - 180}), NOW)
    )
    assert "ran again" in again and "after 65 ms since it ran again" in again, again
    assert "ran again" not in first and "after 3 min" in first, first
    running = rendered(
        run_display.run_header(
            RunDetail.model_validate(
                {**base, "status": "RUNNING", "endedAt": None, "startedAt": NOW - 2}
            ),
            NOW,
        )
    )
    assert "2.0 s since it ran again" in running and "so far" not in running, running


BREAKER = (
    "circuit open: the tenant breaker of 'billing' (tenant 'acme') is open: it refuses every "
    "call until it half-opens (once the destination is fixed, close it with `schemabridge "
    "destinations reset-breaker billing --tenant acme`)"
)


def test_runs_show_counts_children_behind_a_breaker_down_to_its_half_open() -> None:
    # It said the breaker "refuses every call until it half-opens", and not when that is.
    waiting = [{"reason": "breaker_open", "children": 40, "message": BREAKER, "until": NOW + 12}]
    fields = running_fan_out({"total": 40, "pending": 40, "waiting": waiting})
    text = " ".join(rendered(run_display.run_view(RunDetail.model_validate(fields), NOW)).split())
    assert f"40 children waiting: {BREAKER}; half-open in 12 s" in text, text


def test_a_table_shows_a_control_character_escaped_on_its_own_line() -> None:
    """A tenant id the store took with a newline or a zero-width space in it (keys, tenants):
    one line per row, the characters written as escapes, printable text as it is."""
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(
        remote.table(
            ["ID", "ROLE"], [["k1", "tenant a\nb"], ["k2", "tenant c\u200bd"], ["k3", "é x"]]
        )
    )
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines == [
        "ID  ROLE",
        "k1  tenant a\\nb",
        "k2  tenant c\\u200bd",
        "k3  é x",
    ], lines


def failed_with(request: dict[str, object] | None, **answered: object) -> str:
    """`runs show` of a run whose one GATEWAY failed with a 422, having sent `request`
    (`answered`: more of the error, its `bodyExcerpt` say)."""
    error = {
        "kind": "http_error",
        "message": "POST https://api.example.com/orders: 422",
        "httpStatus": 422,
        "attempts": 1,
        "request": request,
        **answered,
    }
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "w",
            "version": 1,
            "tenantId": "acme",
            "status": "FAILED",
            "createdAt": NOW,
            "endedAt": NOW,
            "error": {**error, "vertexId": "call"},
            "steps": [{"vertexId": "call", "type": "GATEWAY", "status": "FAILED", "error": error}],
        }
    )
    return rendered(run_display.run_view(run, NOW))


def test_runs_show_says_a_refusals_wait_as_of_the_failure() -> None:
    """A step a breaker refused kept its cool-down, 24 s: `runs show` said "Retry-After 24 s"
    minutes after the run failed, which reads as the destination's header counting down.
    It says what the monitor says: the wait asked for, when it failed."""
    flat = " ".join(failed_with(None, retryAfterS=24).split())
    assert "asked to wait 24 s, when it failed" in flat
    assert "Retry-After" not in flat


def test_runs_show_says_what_a_failed_call_sent() -> None:
    body = '{"token":"***","note":"[bold]x[/bold]\x1b[2J"}'
    shown = failed_with(
        {
            "method": "POST",
            "url": "https://api.example.com/orders?key=***",
            "headerNames": ["X-Api-Key", "Content-Type"],
            "bodyExcerpt": body,
            "bodyBytes": 12_345,
            "bodyTruncated": True,
        }
    )
    flat = " ".join(shown.split())
    assert "sent POST https://api.example.com/orders?key=***" in flat
    assert "headers X-Api-Key, Content-Type (names only: values are not kept)" in flat
    # Markup stays text, and a control character (from the run's input) is escaped.
    assert '{"token":"***","note":"[bold]x[/bold]\\x1b[2J"}' in flat
    assert "\x1b" not in shown
    assert f"[cut: the first {len(body)} characters of 12,345 bytes sent]" in flat


def test_runs_show_prints_what_a_destination_answered_as_text() -> None:
    """The failed step's body excerpt and message (whose reason phrase the destination
    chose) were read as markup: an answer of `bad [/oops] here` made `runs show` fail with a
    traceback, `[link=…]` drew a link and `[conceal]` hid text. They are text now, their
    control characters escaped, as what the call sent is."""
    shown = failed_with(
        None,
        message="POST https://api.example.com/orders: 422 [/reason]",
        bodyExcerpt="bad [/oops] here [link=https://evil.example]x[/link]\x1b]0;t\x07",
    )
    flat = " ".join(shown.split())
    assert "body bad [/oops] here [link=https://evil.example]x[/link]\\x1b]0;t\\x07" in flat
    assert "message POST https://api.example.com/orders: 422 [/reason]" in flat
    assert "\x1b" not in shown


def test_runs_show_without_a_request_or_body_says_only_what_there_is() -> None:
    assert "sent " not in failed_with(None)
    bodiless = " ".join(failed_with({"method": "GET", "url": "https://api.example.com/x"}).split())
    assert "sent GET https://api.example.com/x" in bodiless
    assert "request body" not in bodiless and "headers " not in bodiless


def test_runs_show_names_the_worker_of_each_attempt() -> None:
    """A failed step's attempt history says which worker made each attempt (one bad host is
    the first thing to rule out); an attempt the API names no worker for (a tenant key, a
    line from before the engine kept it) says nothing of one, never "None"."""
    error = {"kind": "http_error", "message": "GET https://api.example.com/x: 500", "attempts": 2}
    history = [
        attempt(1, 1) | {"message": "GET … → 500 (attempt 1/2)", "worker": "worker-eu-3-4242"},
        attempt(2, 1) | {"message": "GET … → 500 (attempt 1/1)", "worker": None},
    ]
    step = {"vertexId": "call", "type": "GATEWAY", "status": "FAILED", "attempts": 2}
    run = RunDetail.model_validate(
        {"id": "r1", "workflow": "w", "version": 1, "tenantId": "acme", "status": "FAILED"}
        | {"createdAt": NOW, "endedAt": NOW, "error": {**error, "vertexId": "call"}}
        | {"steps": [step | {"error": error, "history": history}]}
    )
    lines = rendered(run_display.run_view(run, NOW)).splitlines()
    at = clock(NOW)
    assert any(f"1.1  {at}  worker worker-eu-3-4242  GET … → 500 (attempt 1/2)" in x for x in lines)
    assert any(f"2.1  {at}  GET … → 500 (attempt 1/1)" in x for x in lines)
    assert not any("None" in line for line in lines)


def held_run(holder: Mapping[str, object]) -> RunDetail:
    """A RUNNING run whose one step is RUNNING, held as `holder` says, its lease ending at
    NOW + 20."""
    step = {
        "vertexId": "charge",
        "type": "GATEWAY",
        "status": "RUNNING",
        "attempts": 1,
        "startedAt": NOW - 30,
        "leaseExpiresAt": NOW + 20,
        "holder": holder,
    }
    fields = {"id": "r1", "workflow": "one", "version": 1, "tenantId": "default"}
    return RunDetail.model_validate(
        fields | {"status": "RUNNING", "createdAt": NOW - 30, "steps": [step]}
    )


def test_runs_show_says_who_holds_a_running_step_and_whether_it_is_alive() -> None:
    ends = clock(NOW + 20)[:8]
    dead = {"worker": "w-1", "state": "presumed_dead", "lastSeen": NOW - 42, "silentS": 42.0}
    text = rendered(run_display.run_view(held_run(dead), NOW))
    assert (
        f"held by worker w-1 (no heartbeat for 42 s: presumed dead); taken back when its "
        f"lease ends at {ends}" in text
    )
    alive = {"worker": "w-2", "state": "alive", "lastSeen": NOW - 3, "silentS": 3.0}
    text = rendered(run_display.run_view(held_run(alive), NOW))
    assert f"held by worker w-2 (alive, last heartbeat 3.0 s ago); its lease ends at {ends}" in (
        text
    )
    # A tenant key is not told which worker; Redis not answering.
    hidden = {"worker": None, "state": "presumed_dead", "silentS": 42.0}
    text = rendered(run_display.run_view(held_run(hidden), NOW))
    assert "held by a worker (no heartbeat for 42 s: presumed dead)" in text
    unknown = {"worker": "w-3", "state": "unknown"}
    text = rendered(run_display.run_view(held_run(unknown), NOW))
    assert f"held by worker w-3 (liveness unknown); taken back when its lease ends at {ends}" in (
        text
    )
    assert "None" not in text
    # Its lease over and nothing has taken it back: no worker may be running (the tour).
    later = rendered(run_display.run_view(held_run(dead), NOW + 60))
    assert (
        f"presumed dead); its lease ended at {ends}: the next worker to claim takes it back "
        "(`schemabridge services` lists the workers alive; start one if none is)"
    ) in " ".join(later.split()), later


def dead_holder(children: int, worker: str | None = "worker-2") -> dict[str, object]:
    """`children` running children held by `worker`, silent 42 s, leases ending by NOW + 20
    (the API's JSON of `FanoutProgress.presumedDead`)."""
    holder = {"worker": worker, "state": "presumed_dead", "lastSeen": NOW - 42, "silentS": 42.0}
    return {"holder": holder, "children": children, "leaseExpiresAt": NOW + 20}


def test_a_fanout_says_which_running_children_a_dead_worker_holds() -> None:
    # kill -9 of one of two workers: the parent read "37 running, 0 waiting" and said nothing
    # more until the leases ended; only each child's `runs show` named the dead holder.
    ends = clock(NOW + 20)[:8]
    dead = [dead_holder(37), dead_holder(1, "worker-5")]
    fields = running_fan_out({"total": 300, "running": 40, "presumedDead": dead})
    text = " ".join(rendered(run_display.run_view(RunDetail.model_validate(fields), NOW)).split())
    assert "40 running (38 of them held by a worker presumed dead), 0 waiting" in text, text
    said = (
        "37 running children held by worker worker-2 (no heartbeat for 42 s: presumed dead); "
        f"taken back when their leases end, by {ends}"
    )
    assert said in text, text
    assert (
        "1 running child held by worker worker-5 (no heartbeat for 42 s: presumed dead); "
        f"taken back when its lease ends at {ends}"
    ) in text, text
    # A tenant key is not told which worker; leases over, the next claim takes them back.
    hidden = RunDetail.model_validate(running_fan_out({"presumedDead": [dead_holder(37, None)]}))
    (line,) = run_display.held_lines(hidden.fanout, NOW + 60)
    assert line == (
        "37 running children held by a worker (no heartbeat for 42 s: presumed dead); their "
        f"leases ended by {ends}: the next worker to claim takes them back (`schemabridge "
        "services` lists the workers alive; start one if none is)"
    )
    ended = {**fields, "status": "CANCELLED", "endedAt": NOW}
    assert "taken back" not in rendered(run_display.run_view(RunDetail.model_validate(ended), NOW))
    from api.cli.watch import LiveView, Snapshot

    progress = fanout_progress([])
    progress["fanout"] = {**progress["fanout"], "presumedDead": dead[:1]}  # type: ignore[dict-item]
    summary = Snapshot.of(progress).summary()
    assert "8 running (37 of them held by a worker presumed dead))" in summary, summary
    assert said in summary, summary
    live = LiveView("run r1 (fan v1)", 0.0)
    live.snapshot = Snapshot.of(progress)
    assert said in " ".join(rendered(live.render()).split())


def attempts_of(step: Mapping[str, object]) -> str:
    """What `runs show`'s ATTEMPTS column says of a step shaped as `step` (a GATEWAY)."""
    fields = {"vertexId": "charge", "type": "GATEWAY", "status": "SUCCEEDED"} | dict(step)
    run = RunDetail.model_validate(
        {"id": "r1", "workflow": "one", "version": 1, "tenantId": "default", "status": "RUNNING"}
        | {"createdAt": NOW - 30, "steps": [fields]}
    )
    return run_display.step_attempts(run.steps[0])


def attempt(execution: int, number: int, refused: str | None = None) -> dict[str, object]:
    line = {"execution": execution, "attempt": number, "at": NOW, "level": "info"}
    return line | {"message": "POST … → 200", "refused": refused}


def test_the_attempts_column_says_executions_when_they_differ_from_calls() -> None:
    """The monitor counts executions, the log counts HTTP attempts: `runs show` says both
    when they differ, so that neither hides a call (a tour read "1 attempt" where REST said
    2: the worker of the first execution was killed mid-call and logged nothing)."""
    assert attempts_of({"attempts": 1, "history": [attempt(1, 1)]}) == "1 attempt"
    assert attempts_of({"attempts": 1, "history": [attempt(1, 1), attempt(1, 2)]}) == "2 attempts"
    killed = {"attempts": 2, "history": [attempt(1, 1)]}  # before the lost entries existed
    assert attempts_of(killed) == "1 attempt in 2 executions, 1 with no call logged"
    # Claims that parked it before any call (Redis out: only the first park is logged).
    waited = {"attempts": 12, "history": [attempt(12, 1)]}
    assert attempts_of(waited) == "1 attempt in 12 executions, 11 with no call logged"
    # The execution under way has not written its line yet: not counted.
    calling = {"attempts": 2, "status": "RUNNING", "history": [attempt(1, 1)]}
    assert attempts_of(calling) == "1 attempt in 2 executions"
    retried = {"attempts": 2, "history": [attempt(1, 1), attempt(2, 1)]}
    assert attempts_of(retried) == "2 attempts in 2 executions"
    # Refused by admission before any call (Redis out, say): executions, not attempts.
    assert attempts_of({"attempts": 13}) == "13 executions"
    refused = [attempt(n, 1, "coordination_unavailable") for n in range(1, 4)]
    assert attempts_of({"attempts": 3, "history": refused}) == (
        "3 executions, 3 refused before calling"
    )
    assert attempts_of({"attempts": 1, "type": "MERGE"}) == "1 attempt"
    assert attempts_of({"attempts": 0, "status": "READY"}) == run_display.MISSING


def lost_entry(execution: int, why: str = "lease_expired") -> dict[str, object]:
    line = {"execution": execution, "attempt": 1, "at": NOW, "level": "warning"}
    return line | {"message": "lease expired; step requeued", "lost": why, "worker": "w1"}


def test_a_failed_runs_summary_tells_a_lost_execution_from_a_redispatch() -> None:
    """`run` and `runs submit --wait` end a failed run with one http line: an execution lost
    with its worker is said as lost, not counted as a redispatch (a tour read "(1
    redispatch)" where the engine had redispatched nothing); the engine's redispatches are
    the step's own count, not the executions less one."""
    from api.cli.run_live_display import summary

    def http_line(step: Mapping[str, object]) -> str:
        fields = {"vertexId": "charge", "type": "GATEWAY", "status": "FAILED"} | dict(step)
        error = {"kind": "http_error", "message": "HTTP 500", "vertexId": "charge"}
        run = RunDetail.model_validate(
            {"id": "r1", "workflow": "one", "version": 1, "tenantId": "default"}
            | {"status": "FAILED", "createdAt": NOW - 30, "endedAt": NOW, "steps": [fields]}
            | {"error": error | {"httpStatus": 500}}
        )
        (line,) = [line for line in summary(run, []).splitlines() if "http:" in line]
        return line.strip()

    killed = {"attempts": 2, "history": [lost_entry(1), attempt(2, 1)]}
    assert http_line(killed) == "http:     status 500 after 1 request over 2 executions (1 lost)"
    redispatched = {"attempts": 3, "autoRetries": 2}
    redispatched["history"] = [attempt(1, 1), lost_entry(2), attempt(3, 1)]
    assert http_line(redispatched) == (
        "http:     status 500 after 2 requests over 3 executions (1 lost, 2 redispatches)"
    )
    once = {"attempts": 1, "history": [attempt(1, 1), attempt(1, 2)]}
    assert http_line(once) == "http:     status 500 after 2 requests"


def test_runs_show_says_which_execution_was_lost_and_that_its_call_may_have_been_sent() -> None:
    """The tour's step: the first execution's worker w1 was killed mid-call, the second read
    200. ATTEMPTS counts the lost execution apart from the call read; DETAIL says which was
    lost, by whose worker, and that its call may have been sent; the history of a failed step
    lists it with its number."""
    killed = {"attempts": 2, "history": [lost_entry(1), attempt(2, 1)]}
    assert attempts_of(killed) == "1 attempt in 2 executions, 1 lost"
    fields = {"vertexId": "charge", "type": "GATEWAY", "status": "SUCCEEDED"} | killed
    run = RunDetail.model_validate(
        {"id": "r1", "workflow": "one", "version": 1, "tenantId": "default", "status": "RUNNING"}
        | {"createdAt": NOW - 30, "steps": [fields]}
    )
    (step,) = run.steps
    assert run_display.step_detail(step, NOW) == (
        "execution 1 lost (lease expired): its worker w1 stopped without a result (killed, "
        "hung); its call may have been sent"
    )
    assert run_display.attempt_line(step.history[0]).endswith(
        f"1.1  {clock(NOW)}  {run_display.lost_line(step.history[0])}"
    )
    stopped = step.history[0].model_copy(update={"lost": "worker_stopped", "worker": None})
    assert run_display.lost_line(stopped) == (
        "execution 1 lost (given back): its worker stopped and gave the step back; its call "
        "may have been sent"
    )
    failed = step.history[0].model_copy(update={"lost": "run_failed"})
    assert run_display.lost_line(failed) == (
        "execution 1 lost (run failed): its run failed before its next attempt"
    )


def test_a_retry_budget_of_one_token_is_singular() -> None:
    from api.cli.admin import _budget
    from api.cli.wire import DestinationView

    one = DestinationView.model_construct(retry_tokens=1.0, retry_allowed=True)
    assert _budget(one) == "1 token"
    held = DestinationView.model_construct(retry_tokens=0.2, retry_allowed=False)
    assert _budget(held) == "0 tokens, retries held"


def test_a_breaker_wait_counts_down_once() -> None:
    from api.cli.text import clock
    from api.cli.wire import Waiting

    waiting = Waiting(reason="breaker_open", message=BREAKER, until=NOW + 12.4)
    line = run_display.waiting_line(waiting, NOW)
    assert line == (
        f"waiting (breaker_open): {BREAKER}; half-open in 13 s (at {clock(NOW + 12.4)[:8]})"
    )
    assert line.count(" in 1") == 1, line
    rate = Waiting(reason="tenant_rate_limit", message="at its rate limit", until=NOW + 12)
    assert run_display.waiting_line(rate, NOW).endswith(
        f"at its rate limit, until {clock(NOW + 12)[:8]} (in 12 s)"
    )


def test_the_fix_first_hint_submits_under_the_runs_tenant() -> None:
    """`runs show` of a run that failed for its input says to submit anew: with an admin key
    that runs under `default` unless the command names the run's tenant."""
    for tenant, option in (("default", ""), ("acme", " --tenant acme"), ("a b", " --tenant 'a b'")):
        run = RunDetail.model_validate(
            {
                "id": "r1",
                "workflow": "tickets",
                "version": 3,
                "tenantId": tenant,
                "status": "FAILED",
                "createdAt": NOW - 90,
            }
        )
        assert run_display.fix_commands(run, "step a")[-1] == (
            f"schemabridge runs submit tickets@VERSION{option} --input JSON"
        )


def test_the_fix_first_hints_offer_a_start_over_when_the_warning_does() -> None:
    """A step an operator resolved upstream of the failure may be the cause (its output
    lacked what the next step reads): the server's warning offers a start over, which runs it
    again, and `runs show` lists that command after it; a warning that does not offer it (a
    resolve elsewhere in the run, which the server reads from the graph) gets none."""
    error = {"kind": "invalid_config", "message": "url is null", "vertexId": "b"}
    offered = (
        "step b failed with invalid_config, which comes from the workflow, the run's input or "
        "the output step a was resolved with: … Start over (`schemabridge runs start-over r1`) "
        "to run a again; …"
    )
    not_offered = "step b failed with invalid_config, which comes from the workflow …"
    shown = []
    for fix in (offered, not_offered):
        run = RunDetail.model_validate(
            {
                "id": "r1",
                "workflow": "tickets",
                "version": 3,
                "tenantId": "default",
                "status": "FAILED",
                "createdAt": NOW - 90,
                "error": error,
                "fixFirst": fix,
                "steps": [
                    {"vertexId": "a", "type": "GATEWAY", "status": "RESOLVED"},
                    {"vertexId": "b", "type": "GATEWAY", "status": "FAILED", "error": error},
                ],
            }
        )
        shown.append(run_display.next_commands(run)[1:3])
    assert shown == [
        ["schemabridge runs start-over r1", "schemabridge workflows publish FILE"],
        [
            "schemabridge workflows publish FILE",
            "schemabridge runs submit tickets@VERSION --input JSON",
        ],
    ]


def test_a_run_started_over_points_at_the_new_run_not_at_a_retry() -> None:
    """The API refuses the retry, resolve and reprocess of a run that was started over
    (409 `started_over`): `runs show` offers the new run instead of commands it refuses."""
    run = RunDetail.model_validate(
        {
            "id": "r1",
            "workflow": "tickets",
            "version": 1,
            "tenantId": "default",
            "status": "FAILED",
            "createdAt": NOW - 90,
            "restarts": ["n1"],
        }
    )
    assert run_display.next_commands(run) == [
        "schemabridge runs show n1",
        "schemabridge runs logs r1",
    ]


@pytest.mark.parametrize(
    ("breaker", "said"),
    [
        (
            {"state": "open", "secondsUntilHalfOpen": 12, "openedBy": "an HTTP 500"},
            "open after an HTTP 500 (half-open in 12 s)",
        ),
        (
            {"state": "half_open", "probes": 1, "openedBy": "a timeout"},
            "half-open after a timeout (1 probe out)",
        ),
        ({"state": "open", "secondsUntilHalfOpen": 12}, "open (half-open in 12 s)"),
    ],
)
def test_destinations_list_says_what_opened_a_breaker(
    breaker: dict[str, object], said: str
) -> None:
    """`destinations list` names what opened an open layer when the API says (`openedBy`)."""
    assert admin._breaker(BreakerView.model_validate(breaker)) == said


OPENED_AT = 1796680369.77
"""21:52:49 UTC: when a tour's breaker opened."""


@pytest.mark.parametrize(
    ("breaker", "said"),
    [
        (
            {"state": "open", "secondsUntilHalfOpen": 12, "openedBy": "an HTTP 500"},
            "open after an HTTP 500 at {at} (half-open in 12 s)",
        ),
        (
            {"state": "half_open", "probes": 1, "openedBy": "a timeout"},
            "half-open after a timeout at {at} (1 probe out)",
        ),
        ({"state": "open", "secondsUntilHalfOpen": 12}, "open since {at} (half-open in 12 s)"),
        # A closed layer keeps when it last opened (the monitor's "last opened"): no news.
        ({"state": "closed", "failures": 2, "openedBy": "an HTTP 500"}, "closed (2 failures)"),
    ],
)
def test_destinations_list_says_since_when_a_breaker_is_open(
    breaker: dict[str, object], said: str
) -> None:
    """A tour's outage: `destinations list` said "acme open after an HTTP 500" with no time,
    while `runs show` said "opened by an HTTP 500 at 21:52:49 UTC" and the API answered
    `openedAt`: the operator could not tell from the destination since when it failed. The
    time is said as `runs show` says it, in the local zone with its name."""
    view = BreakerView.model_validate({**breaker, "openedAt": OPENED_AT})
    assert admin._breaker(view) == said.format(at=exact(OPENED_AT)[11:])


def test_a_list_names_the_run_a_start_over_made_for_a_run_and_for_a_child() -> None:
    """A FAILED run started over reads as handled in `runs list`; so does a child under a root
    run started over (its retry is refused the same way), said as its root's."""
    base = {"workflow": "w", "version": 1, "tenantId": "t", "status": "FAILED", "createdAt": 0}
    root = RunSummary.model_validate({**base, "id": "r" * 36, "startedOverAs": "abcdef0123"})
    child = RunSummary.model_validate(
        {**base, "id": "c" * 36, "parentRunId": "r" * 36, "startedOverAs": "abcdef0123"}
    )
    alone = RunSummary.model_validate({**base, "id": "a" * 36})
    said = [run_display.listed_status(run).plain for run in (root, child, alone)]
    assert said[0].endswith(" (started over as abcdef01)"), said
    assert said[1].endswith(" (root started over as abcdef01)"), said
    assert "started over" not in said[2], said


def test_runs_list_prints_an_error_a_destination_worded_as_text() -> None:
    """A run's error quotes the reason phrase its destination answered with, `400 Bad [/x]`:
    `runs list` then failed whole with a MarkupError (no run of the page listed), and a
    `[link=…]` in it drew a link. The cells of a table are text."""
    message = "GET http://api.example.com/r: 400 Bad [/x] [link=https://e.example]L[/link]"
    run = RunSummary.model_validate(
        {"id": "r" * 36, "workflow": "w", "version": 1, "tenantId": "t[/t]", "status": "FAILED"}
        | {"createdAt": 0, "error": {"kind": "http_error", "message": message}}
    )
    flat = " ".join(rendered(run_display.runs_table([run], NOW)).split())
    assert "t[/t]" in flat and "400 Bad [/x] [link=https://e.example]L[/link]" in flat, flat


def test_runs_show_prints_what_a_client_sent_as_text() -> None:
    """An Idempotency-Key is the client's text: `[/k]` made `runs show` fail with a
    MarkupError, and `[conceal]` hid what followed it."""
    run = RunDetail.model_validate(
        {"id": "r1", "workflow": "w", "version": 1, "tenantId": "[red]t", "status": "RUNNING"}
        | {"createdAt": NOW, "idempotencyKey": "[/k] [conceal]hidden"}
    )
    flat = " ".join(rendered(run_display.run_view(run, NOW)).split())
    assert "idempotency key [/k] [conceal]hidden" in flat and "tenant [red]t" in flat, flat


def test_a_join_an_operator_resolved_is_not_said_to_have_tolerated_its_children() -> None:
    # The tour: after `runs resolve RUN join`, `runs show` said "1 of 3 children failed
    # (tolerated)" of a join that tolerates none; the operator closed it.
    fields = running_fan_out({"total": 3, "succeeded": 2, "failed": 1})
    fields["status"] = "SUCCEEDED"
    fields["steps"] = [
        {"vertexId": "each", "type": "SPAWNER", "status": "SUCCEEDED"},
        {"vertexId": "join", "type": "MERGE", "status": "RESOLVED"},
    ]
    resolved = RunDetail.model_validate(fields)
    assert run_display.tolerated_words(resolved) == (
        "1 of 3 children failed (join resolved by an operator)"
    )
    fields["steps"][1]["status"] = "SUCCEEDED"  # type: ignore[index]
    tolerated = RunDetail.model_validate(fields)
    assert run_display.tolerated_words(tolerated) == "1 of 3 children failed (tolerated)"


def test_a_listed_error_keeps_the_command_it_ends_with_whole() -> None:
    # The tour: the ERROR column of `runs list` ended in "see `schemabridg…`", a command no
    # one can copy. The message is cut before its closing command instead.
    command = (
        "see `schemabridge runs children 3f2a9c1e-0000-4000-8000-000000000000 --status FAILED`"
    )
    message = "1 of 400 children ended with a status not tolerated (" + "x " * 120 + "); " + command
    error = RunDetail.model_validate(
        {**running_fan_out({"total": 1}), "error": {"kind": "child_failures", "message": message}}
    ).error
    line = run_display.error_line(error)
    # The parenthesis the cut fell in is closed, so the line still reads as a sentence.
    assert line.endswith(f"…); {command}"), line
    assert len(line) <= len("child_failures: ") + 200, line


def test_a_service_down_shows_the_host_and_pid_it_last_beat_from() -> None:
    """`schemabridge services`: a worker killed a minute ago still says what it was and where
    its process was (role, host, pid), which is what an operator looks for then; one whose
    last beat is not kept (it beat before the engine kept it) shows dashes, never "None", and
    a role its beat does not say is "unknown"."""
    views = [
        ServiceView.model_validate(item)
        for item in (
            {
                "name": "worker-2",
                "up": False,
                "role": "worker",
                "pid": 4242,
                "host": "3f9a1c2b7d4e",
                "uptimeS": 600,
                "lastSeen": NOW - 60,
            },
            {"name": "worker-old", "up": False, "lastSeen": NOW - 3600},
        )
    ]
    header, *rows = rendered(admin.services_table(views, NOW)).splitlines()
    assert header.split() == [
        "SERVICE", "STATE", "ROLE", "HOST", "PID", "UPTIME", "LAST", "HEARTBEAT",
    ]  # fmt: skip
    assert " ".join(rows[0].split()) == "worker-2 down worker 3f9a1c2b7d4e 4242 10 min 1 min ago"
    assert rows[1].split()[:5] == ["worker-old", "down", "unknown", "-", "-"]


def test_schemabridge_runs_live_display_says_which_children_a_dead_worker_holds() -> None:
    # `runs watch` said it; `schemabridge run`'s bar read "0 failed, 40 running" until the
    # dead worker's leases ended, and nothing under it said why nothing moved.
    from api.cli.run_live_display import LiveView
    from api.cli.watch import Snapshot
    from engine.operations.views import RunProgress

    ends = time.time() + 600  # the live display reads the time itself
    held = {**dead_holder(37), "leaseExpiresAt": ends}
    fields = fanout_progress([])
    fields["fanout"] = {
        **fields["fanout"],  # type: ignore[dict-item]
        "total": 1000, "pending": 0, "running": 40, "failed": 0, "cancelled": 0,
        "succeeded": 960, "presumedDead": [held, {**held, "children": 1}],
    }  # fmt: skip
    live = LiveView("fan", 2)
    live.show(RunProgress.model_validate(fields))
    shown = rendered(live.renderable())
    assert "0 failed, 40 running (38 of them held by a worker presumed dead)" in shown, shown
    said = (
        "37 running children held by worker worker-2 (no heartbeat for 42 s: presumed dead); "
        f"taken back when their leases end, by {clock(ends)[:8]}"
    )
    lines = [line.strip() for line in shown.splitlines()]
    assert said in lines, shown
    one = (
        "1 running child held by worker worker-2 (no heartbeat for 42 s: presumed dead); "
        f"taken back when its lease ends at {clock(ends)[:8]}"
    )
    assert one in lines, shown
    # In `runs watch`'s words, from the API's JSON of the same progress.
    watched = " ".join(rendered(Snapshot.of(fields).summary()).split())
    assert said in watched, watched
    fields["fanout"] = {**fields["fanout"], "presumedDead": []}  # type: ignore[dict-item]
    live.show(RunProgress.model_validate(fields))
    assert "presumed dead" not in rendered(live.renderable())


def test_a_start_over_of_a_purged_run_says_the_old_run_is_gone() -> None:
    """`runs show RUN` of a start over whose old run retention deleted: its id, said to be
    gone, so nobody is sent to `runs show` it for a 404."""
    fields = {
        "id": "r2",
        "workflow": "tickets",
        "version": 1,
        "tenantId": "acme",
        "status": "FAILED",
        "createdAt": NOW - 9,
        "restartedFrom": "r1",
    }
    kept = rendered(run_display.run_header(RunDetail.model_validate(fields), NOW))
    assert kept.splitlines()[-1].split() == ["started", "over", "from", "r1"]
    gone = RunDetail.model_validate({**fields, "restartedFromPurged": True})
    shown = rendered(run_display.run_header(gone, NOW)).splitlines()[-1]
    assert shown.split()[3:] == ["r1", "(deleted", "by", "run", "retention)"]


def test_a_candidates_runs_say_so_in_text_as_in_json() -> None:
    """A tour could not tell a deployment's candidate runs in `runs list` or in `runs
    submit`'s line: only JSON said `route: candidate`. The list's WORKFLOW column and the
    submission's line say it; other routes read as before."""
    from api.cli.run_display import submitted_as

    fields = {"workflow": "orders", "version": 7, "tenantId": "default", "status": "RUNNING"}
    candidate = RunSummary.model_validate(
        {"id": "r1", "createdAt": NOW, **fields} | {"route": "candidate"}
    )
    serving = RunSummary.model_validate(
        {"id": "r2", "createdAt": NOW, **fields} | {"route": "serving"}
    )
    table = rendered(run_display.runs_table([candidate, serving], NOW))
    assert "orders v7 (candidate)" in table, table
    assert table.count("(candidate)") == 1, table
    assert submitted_as(candidate) == "orders v7, a deployment's candidate"
    assert submitted_as(serving) == "orders v7"


def test_a_rolled_back_deployments_stage_steps_say_what_they_decided() -> None:
    """The tour's gradual_deploy run of a rolled-back deployment: every stage step SUCCEEDED
    (the run did its job), and `runs show` read "stage-2 … SUCCEEDED" for stages never run.
    DETAIL says the stage that rolled the deployment back and the ones not run; a stage that
    passed needs no word."""
    outputs = {
        "stage-1": {"stage": 1, "outcome": "rolled_back", "verdict": "deployment d1 rolled back"},
        "stage-2": {"stage": 2, "outcome": "not_run", "verdict": "not run: deployment d1 …"},
    }
    steps = [
        {"vertexId": vertex, "type": "DEPLOY_STAGE", "status": "SUCCEEDED", "output": output}
        for vertex, output in outputs.items()
    ]
    passed = {"stage": 1, "verdict": "stage 1 passed: failure ratio 0.000 …"}
    steps.append({"vertexId": "stage-0", "type": "DEPLOY_STAGE", "status": "SUCCEEDED"})
    steps[-1]["output"] = passed
    fields = running_fan_out({"total": 0}) | {"steps": steps}
    table = rendered(run_display.steps_table(RunDetail.model_validate(fields).steps, NOW))
    row = {line.split()[0]: line for line in table.splitlines() if line.startswith("stage-")}
    assert "rolled the deployment back" in row["stage-1"], table
    assert "not run: the deployment had ended" in row["stage-2"], table
    assert row["stage-0"].rstrip().endswith(run_display.MISSING), table


def test_a_log_line_names_the_worker_its_data_names() -> None:
    """A failed step's error leaves its worker out (its tenant reads it); the log line's
    `data.worker`, which the API sends admin keys only, is where `runs logs` shows it."""
    at = time.time()
    failed = LogEntry(
        id=2,
        at=at,
        level="error",
        message="step failed: the worker that ran the step cannot decrypt secrets",
        vertex_id="call",
        data={"kind": "secret_unreadable", "worker": "worker-b"},
    )
    assert run_display.log_line(failed).endswith("cannot decrypt secrets  (worker worker-b)")
    tenant = LogEntry(id=3, at=at, level="error", message="step failed", data={"kind": "x"})
    assert run_display.log_line(tenant).endswith("step failed")
