"""How runs, steps, children and log lines read on a terminal: pure functions from the API's
views to rich renderables and lines of text (no I/O), so `runs show`, `runs list`,
`runs children`, `runs logs` and `runs watch` say things the same way."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from api.cli.fanout_words import held_lines, holder_line, running_words
from api.cli.id_prefixes import MIN_PREFIX_DIGITS
from api.cli.remote import shown, status_text, table
from api.cli.text import MISSING, clock, excerpt, moment, relative, show
from schemas.counts import plural
from schemas.durations import duration
from schemas.errors import SET_QUOTA_COMMAND, FailureKind
from schemas.message_excerpt import message_excerpt
from schemas.waiting import HELD_WAITS, reason_words, wait_text

if TYPE_CHECKING:
    from api.cli.wire import (
        AttemptView,
        ErrorView,
        FanoutProgress,
        LogEntry,
        RunDetail,
        RunSummary,
        SentRequestView,
        SpawnerCounts,
        StepView,
        Waiting,
    )

BODY_EXCERPT_CHARS = 300
OUTPUT_EXCERPT_CHARS = 500


def error_line(error: ErrorView | None) -> str:
    """The error in one line (`http_error at lookup: GET …: 404 Not Found`); "-" for none."""
    if error is None:
        return MISSING
    where = f" at {error.vertex_id}" if error.vertex_id else ""
    # As a log line quotes it (200 characters): room for a closing command with a whole id.
    message = f": {message_excerpt(error.message)}" if error.message else ""
    return f"{error.kind}{where}{message}"


def ran_again(run: RunSummary) -> bool:
    """Whether an operator (or a child's retry) made the run run again: its `started_at` moved
    past its creation, and its duration counts from then, not from `created`."""
    return run.started_at is not None and run.started_at > run.created_at + 0.001


def run_duration(run: RunSummary, now: float) -> str:
    """How long the run took, or has taken so far: after a retry, a resolve or a reprocess,
    since it ran again, and said so, as the monitor's list says it (a tour's 3,000-child
    fan-out, recovered after an outage, read "486 ms" in `runs list`)."""
    start = run.started_at or run.created_at
    since = " since it ran again" if ran_again(run) else ""
    if run.ended_at is not None:
        return f"{duration(run.ended_at - start)}{since}"
    return f"{duration(now - start)}{since or ' so far'}"


def fanout_line(fanout: FanoutProgress) -> str:
    """The fan-out in one line: how many children ended, how (succeeded, failed,
    cancelled), and how many are running or waiting; of the running ones, how many wait
    inside their call (`HELD_WAITS`), so that "0 waiting" never contradicts the line below
    saying that children wait for an admission slot."""
    ended = fanout.succeeded + fanout.failed + fanout.cancelled
    return (
        f"{ended:,} of {plural(fanout.total, 'child', 'children')} ended: "
        f"{fanout.succeeded:,} succeeded, {fanout.failed:,} failed, "
        f"{fanout.cancelled:,} cancelled; {running_words(fanout)}, "
        f"{fanout.waiting_count:,} waiting"
    )


def children_waiting_line(fanout: FanoutProgress, now: float) -> str | None:
    """Why a fan-out's children wait, in one line: the most common reason, with what is true
    of all its children (the limit and how to raise it, the breaker and when it half-opens),
    and the other reasons in words; None when none waits.
    `8 children waiting: tenant acme is at its rate limit (1000/1000 GATEWAY steps a
    minute); an admin raises it with `schemabridge tenants set-rate acme N` …`. Children waiting
    inside their call are running ones, and said so: `15 running children waiting for an
    admission slot of https://… (its limit is reached)`."""
    if not fanout.waiting:
        return None
    first, *others = fanout.waiting  # the API sends them most first
    text = wait_text(first.reason, first.message, first.until, now)
    if first.reason in HELD_WAITS:
        words = HELD_WAITS[first.reason]
        who = plural(first.children, "running child", "running children")
        line = f"{who} {text}" if text.startswith(words) else f"{who} {words}: {text}"
        line = line.removesuffix(": ")
    elif text.startswith("waiting "):
        # A wait that says its own "waiting …" (a redispatch after an answer) reads on.
        line = f"{plural(first.children, 'child', 'children')} {text}"
    else:
        line = f"{plural(first.children, 'child', 'children')} waiting: "
        line += text or reason_words(first.reason)
    if others:
        line += f" (others wait for: {', '.join(reason_words(g.reason) for g in others)})"
    return line


def counts_line(counts: SpawnerCounts) -> str:
    ended = counts.succeeded + counts.failed + counts.cancelled
    line = f"children {ended:,}/{counts.total:,} ended"
    extra = [f"{n:,} {what}" for n, what in ((counts.failed, "failed"),) if n]
    extra += [f"{counts.cancelled:,} cancelled"] if counts.cancelled else []
    return f"{line} ({', '.join(extra)})" if extra else line


def waiting_line(waiting: Waiting, now: float) -> str:
    """Why a step waits (`waiting`, when the API sends it) as one line."""
    message = waiting.message or ""
    text = wait_text(waiting.reason or "", message, waiting.until, now)
    line = f"waiting ({show(waiting.reason)})" + (f": {text}" if text else "")
    if waiting.until is None:
        return line
    at = clock(waiting.until)[:8]
    if text != message:
        # The wording has its countdown already (a breaker's "half-open in 13 s"): a second
        # one, rounded the other way, would read as another wait.
        return f"{line} (at {at})"
    return f"{line}, until {at} ({relative(waiting.until, now)})"


def step_attempts(step: StepView) -> str:
    """HTTP attempts for a GATEWAY that made some, with its executions when there were more
    than one (the monitor's "Executions"); executions otherwise; attempts that admission
    refused before calling noted; executions lost with their worker noted; redispatches noted.

    Both counts matter when they differ: an execution whose worker was killed mid-call left no
    attempt in the log though the downstream may have had the call ("1 attempt in 2
    executions, 1 lost": the history's lost entry, which DETAIL says, `lost_line`), and a
    GATEWAY refused by admission (Redis out, say) made no call at all ("13 executions, 13
    refused before calling"). A deployment's stage step runs once a check, parking in
    between: its executions are checks, not attempts that failed."""
    executions = max([step.attempts, *(a.execution for a in step.history)])
    lost = sum(1 for attempt in step.history if attempt.lost is not None)
    refused = sum(1 for attempt in step.history if attempt.refused is not None)
    calls = len(step.history) - lost - refused
    parked = _parked(step, executions)
    if calls:
        text = plural(calls, "attempt")
        if executions > 1:
            text += f" in {plural(executions, 'execution')}"
    elif executions == 0:
        return MISSING
    elif step.type == "DEPLOY_STAGE":
        text = plural(executions, "check")
    elif step.type == "GATEWAY":
        text = plural(executions, "execution")
    else:
        text = plural(executions, "attempt")
    if refused:
        text += f", {refused:,} refused before calling"
    if lost:
        text += f", {lost:,} lost"
    if parked:
        text += f", {parked:,} with no call logged"
    if step.auto_retries:
        text += f", {plural(step.auto_retries, 'redispatch', 'redispatches')}"
    return text


def _parked(step: StepView, executions: int) -> int:
    """A GATEWAY's executions that left no line in its history: mostly claims that parked the
    step again before any call (admission unavailable while Redis was out, a breaker or a rate
    limit to wait for: only the first park of a wait is logged), so a tour read "1 attempt in
    12 executions" of a step that had waited 11 times and called once. The execution under
    way, which has not written its line yet, is not one of them."""
    if step.type != "GATEWAY" or not step.history:
        return 0
    seen = {attempt.execution for attempt in step.history}
    under_way = step.status == "RUNNING" and executions not in seen
    return max(0, executions - len(seen) - (1 if under_way else 0))


LOST_WORDS = {
    "lease_expired": ("lease expired", "its worker{} stopped without a result (killed, hung)"),
    "worker_stopped": ("given back", "its worker{} stopped and gave the step back"),
    "run_failed": ("run failed", "its run failed before its next attempt"),
}
"""Why an execution ended without a result (`AttemptView.lost`), as `runs show` says it."""
MAY_BE_SENT = frozenset({"lease_expired", "worker_stopped"})
"""Lost executions whose call may have reached the destination (the next one sends it again,
with the same Idempotency-Key: at-least-once)."""


def lost_line(attempt: AttemptView) -> str:
    """A lost execution (no HTTP status: none was read): "execution 1 lost (lease expired):
    its worker w1 stopped without a result (killed, hung); its call may have been sent"."""
    lost = attempt.lost or ""
    short, why = LOST_WORDS.get(lost, (shown(lost), "no result was recorded"))
    worker = f" {shown(attempt.worker)}" if attempt.worker else ""
    line = f"execution {attempt.execution} lost ({short}): {why.format(worker)}"
    if lost in MAY_BE_SENT:
        line += "; its call may have been sent"
    return line


STAGE_OUTCOME_WORDS = {
    "rolled_back": "rolled the deployment back",
    "not_run": "not run: the deployment had ended",
}
"""What a deployment's stage step decided, by its output's `outcome`, when its SUCCEEDED
does not say it: the `gradual_deploy` run of a deployment rolled back by its verdict
succeeds (it did its job: docs/architecture.md, "`gradual_deploy`, a system workflow"), the
stage that judged it and the later ones too, which read as stages passed."""


def stage_outcome(step: StepView) -> str | None:
    """`STAGE_OUTCOME_WORDS` of a DEPLOY_STAGE step (None for a stage that passed, or any
    other step)."""
    if step.type != "DEPLOY_STAGE" or not isinstance(step.output, dict):
        return None
    return STAGE_OUTCOME_WORDS.get(str(step.output.get("outcome")))


def step_detail(step: StepView, now: float) -> str:
    parts = [lost_line(a) for a in step.history if a.lost is not None]
    outcome = stage_outcome(step)
    if outcome is not None:
        parts.append(outcome)
    if step.error is not None:
        http = f" (HTTP {step.error.http_status})" if step.error.http_status is not None else ""
        parts.append(f"{step.error.kind}{http}")
    if step.children is not None:
        parts.append(counts_line(step.children))
    if step.waiting is not None:
        parts.append(waiting_line(step.waiting, now))
    if step.holder is not None:
        parts.append(holder_line(step.holder, step.lease_expires_at, now))
    return "; ".join(parts) or MISSING


RESOLVED_WORDS = "resolved by operator"
"""A RESOLVED step's TOOK: its `ended_at` is when an operator resolved it, so its span is
mostly the wait for the operator, not a call (ui/static/js/waits.js says the same)."""


def step_status(step: StepView) -> Text:
    """A step's status as the STATUS column shows it. A SPAWNER PARKED while its children go
    on, with no wait of its own (`waiting`: backpressure, the payload store), is healthy: it
    reads "waiting for its children (1 of 24 ended)", styled as RUNNING, never as a park at a
    cap or a breaker (the API keeps PARKED; the web monitor says it the same way)."""
    counts = step.children
    if (
        step.type == "SPAWNER"
        and step.status == "PARKED"
        and step.waiting is None
        and counts is not None
        and counts.succeeded + counts.failed + counts.cancelled < counts.total
    ):
        ended = counts.succeeded + counts.failed + counts.cancelled
        words = f"waiting for its children ({ended:,} of {counts.total:,} ended)"
        return Text(words, style=status_text("RUNNING").style)
    return status_text(step.status)


def steps_table(steps: Sequence[StepView], now: float) -> Table:
    rows: list[list[str | Text]] = []
    for step in steps:
        took = MISSING
        if step.status == "RESOLVED":
            took = RESOLVED_WORDS  # its end is the operator's act, not a call's
        elif step.started_at is not None:
            took = duration((step.ended_at or now) - step.started_at)
        rows.append(
            [
                step.vertex_id,
                show(step.type),
                step_status(step),
                step_attempts(step),
                took,
                step_detail(step, now),
            ]
        )
    return table(["VERTEX", "TYPE", "STATUS", "ATTEMPTS", "TOOK", "DETAIL"], rows)


def _fields(pairs: Sequence[tuple[str, str | Text]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in pairs:
        # Text, never markup: values quote what clients sent (an Idempotency-Key of `[/x]`
        # made `runs show` fail with a MarkupError) and what destinations answered.
        grid.add_row(name, Text(value) if isinstance(value, str) else value)
    return grid


ATTEMPT_BODY_CHARS = 160
"""Most characters of a failed attempt's answer `runs show` prints under it (one line)."""


def attempt_line(attempt: AttemptView) -> str:
    """An attempt: execution.attempt, its time, the worker that made it (when the API names
    it: not to a tenant key) and its log message; under a failed one, the start of what the
    destination answered (control characters escaped: it is its text)."""
    line = f"{attempt.execution}.{attempt.attempt}  {clock(attempt.at)}  "
    if attempt.lost is not None:
        return line + lost_line(attempt)
    if attempt.worker:
        line += f"worker {shown(attempt.worker)}  "
    line += attempt.message
    if attempt.body_excerpt:
        line += f"\n    answered: {shown(excerpt(attempt.body_excerpt, ATTEMPT_BODY_CHARS))}"
    return line


def sent_lines(sent: SentRequestView) -> list[tuple[str, str | Text]]:
    """What a failed call sent: `POST https://…`, the names of the headers the step set, and
    the start of the request body, its cut said. Each is a Text (never read as markup) with
    its control characters escaped: the body comes from the run's input."""
    pairs: list[tuple[str, str | Text]] = [("sent", Text(shown(f"{sent.method} {sent.url}")))]
    if sent.header_names:
        names = ", ".join(sent.header_names)
        pairs.append(("headers", Text(shown(names) + " (names only: values are not kept)")))
    if sent.body_excerpt or sent.body_bytes:
        body = Text(shown(sent.body_excerpt))
        if sent.body_truncated:
            body.append(
                f"… [cut: the first {len(sent.body_excerpt):,} characters of "
                f"{sent.body_bytes:,} bytes sent]",
                style="dim",
            )
        pairs.append(("request body", body))
    return pairs


def failed_step(step: StepView) -> RenderableType:
    """The failed step: its kind, HTTP status, body excerpt, what it sent and its attempt
    history."""
    error = step.error
    if error is None:  # a FAILED step always has an error; say so rather than guess
        return Text(f"failed step {step.vertex_id}: no error recorded")
    # Text, never markup, with control characters escaped: a message carries the reason
    # phrase the destination chose, and the body excerpt is its answer.
    message = Text(shown(error.message)) if error.message else MISSING
    pairs: list[tuple[str, str | Text]] = [("message", message)]
    if error.http_status is not None or error.attempts is not None:
        after = f" after {plural(error.attempts, 'attempt')}" if error.attempts else ""
        pairs.append(("HTTP", f"status {show(error.http_status)}{after}"))
    if error.body_excerpt:
        pairs.append(("body", Text(shown(excerpt(error.body_excerpt, BODY_EXCERPT_CHARS)))))
    if error.retry_after_s is not None:
        # The wait the refusal asked for (a downstream's Retry-After, a breaker's cool-down)
        # as of the failure, as the monitor says it: a tour's breaker-refused step read
        # "Retry-After 24 s" minutes after it failed, as if a header counted down.
        pairs.append(("asked to wait", f"{duration(error.retry_after_s)}, when it failed"))
    if error.request is not None:
        pairs += sent_lines(error.request)
    if step.history:
        # A Text: an answer's "[…]" is its text, never read as markup.
        pairs.append(("attempts", Text("\n".join(attempt_line(a) for a in step.history))))
    title = Text(f"failed step {step.vertex_id}: {error.kind}", style="bold red")
    return Group(title, _fields(pairs))


def _lineage(run: RunDetail, now: float) -> list[tuple[str, str | Text]]:
    pairs: list[tuple[str, str | Text]] = []
    if run.parent_run_id is not None:
        item = f", item {run.item_index}" if run.item_index is not None else ""
        pairs.append(("parent", f"{run.parent_run_id} (spawner {run.parent_vertex_id}{item})"))
    if run.root_run_id not in (None, run.id, run.parent_run_id):
        pairs.append(("root", str(run.root_run_id)))
    if run.dlq_at is not None:
        pairs.append(("dead letter", f"since {moment(run.dlq_at, now)}"))
    if run.restarted_from is not None:
        purged = " (deleted by run retention)" if run.restarted_from_purged else ""
        pairs.append(("started over from", f"{run.restarted_from}{purged}"))
    if run.restarts:
        pairs.append(("started over as", ", ".join(run.restarts)))
    if run.idempotency_key is not None:
        pairs.append(("idempotency key", run.idempotency_key))
    return pairs


ROUTE_WORDS = {
    "serving": "the serving version",
    "candidate": "a deployment's candidate",
    "pinned": "named by the submission",
    "system": "the engine's own run",
    "start_over": "as the run it starts over",
}
"""How a run got its version (`route`), as `runs show` says it."""


def _created(run: RunDetail, now: float) -> str:
    """When the run was created, and by whom when the API says (`createdBy`: a child's is
    its root's submitter, so none is shown)."""
    by = f" by {run.created_by}" if run.created_by else ""
    return f"{moment(run.created_at, now)}{by}"


def tolerated_words(run: RunDetail) -> str | None:
    """ "3 of 100 children failed (tolerated)": a run that SUCCEEDED although children of it
    failed or were cancelled (its MERGE tolerated them, or an operator resolved its MERGE:
    "(join resolved by an operator)"), which its status alone hides; the monitor's run page
    says the same. None for any other run."""
    fanout = run.fanout
    if run.status != "SUCCEEDED" or not fanout.failed + fanout.cancelled:
        return None
    of = plural(fanout.total, "child", "children")
    how = "join resolved by an operator" if join_resolved(run) else "tolerated"
    if not fanout.failed:
        return f"{fanout.cancelled:,} of {of} cancelled ({how})"
    cancelled = f", {fanout.cancelled:,} cancelled" if fanout.cancelled else ""
    return f"{fanout.failed:,} of {of} failed{cancelled} ({how})"


def join_resolved(run: RunDetail) -> bool:
    """Whether an operator resolved a MERGE of the run: its join did not tolerate the
    children that failed, somebody gave it an output instead."""
    return any(step.type == "MERGE" and step.status == "RESOLVED" for step in run.steps)


def _status(run: RunDetail) -> Text:
    """The run's status, and after it, in yellow, the children its join tolerated failing."""
    text = status_text(run.status)
    tolerated = tolerated_words(run)
    if tolerated is not None:
        text.append(f" — {tolerated}", style="yellow")
    return text


def run_header(run: RunDetail, now: float, *, opens_deployments: bool = True) -> Table:
    """The run's fields; `opens_deployments`: whether the key may show a deployment (an
    admin key), else a run a deployment routed names it by its id alone."""
    route = f" ({ROUTE_WORDS.get(run.route, run.route)})" if run.route else ""
    pairs: list[tuple[str, str | Text]] = [
        ("workflow", f"{run.workflow} v{run.version}{route}"),
        ("status", _status(run)),
        ("tenant", run.tenant_id),
        ("created", _created(run, now)),
    ]
    if ran_again(run):
        pairs.append(("ran again", moment(run.started_at or run.created_at, now)))
    # `run_duration` says "since it ran again" itself, else "so far" of a run still going.
    if run.ended_at is not None:
        pairs.append(("ended", f"{moment(run.ended_at, now)}, after {run_duration(run, now)}"))
    else:
        pairs.append(("running for", run_duration(run, now)))
    pairs += _lineage(run, now)
    if run.deployment_id is not None:
        shown = run.deployment_id
        if opens_deployments:
            shown += f": schemabridge deployments show {run.deployment_id}"
        pairs.append(("deployment", shown))
    if run.fanout.total:
        pairs.append(("fan-out", _fanout_field(run, now)))
    if run.error is not None:
        pairs.append(("error", Text(error_line(run.error), style="red")))
    return _fields(pairs)


def _fanout_field(run: RunDetail, now: float) -> Text:
    """The fan-out's counts, and while the run goes on why its children wait and which of
    them a dead worker holds (as `runs watch` says it), each on a line of its own."""
    field = Text(fanout_line(run.fanout))
    if run.ended_at is not None:
        return field
    waiting = children_waiting_line(run.fanout, now)
    for line in ([waiting] if waiting is not None else []) + held_lines(run.fanout, now):
        field.append("\n")
        field.append(line, style="yellow")
    return field


def output_excerpt(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return excerpt(text, OUTPUT_EXCERPT_CHARS)


def run_view(run: RunDetail, now: float, *, opens_deployments: bool = True) -> Group:
    """`runs show`: the run, its steps, the failed step in detail, the next commands
    (`opens_deployments`: as `run_header` says)."""
    parts: list[RenderableType] = [
        Text(f"run {run.id}", style="bold"),
        run_header(run, now, opens_deployments=opens_deployments),
        Text(""),
        steps_table(run.steps, now),
    ]
    for step in run.steps:
        if step.status == "FAILED":
            parts += [Text(""), failed_step(step)]
    if run.status == "SUCCEEDED":
        parts += [Text(""), _fields([("output", output_excerpt(run.output))])]
    hints = next_commands(run)
    if hints:
        parts += [Text(""), _fields([("next", "\n".join(hints))])]
    return Group(*parts)


def joins_on_failed_children(step: StepView) -> bool:
    """A join that failed because children FAILED: a retry runs it again against the same
    children, still FAILED, so it fails again at once; reprocessing them reopens it."""
    return step.error is not None and step.error.kind == FailureKind.CHILD_FAILURES.value


def stuck_joins(run: RunDetail) -> list[StepView]:
    """The run's FAILED joins a retry cannot help while its children stay FAILED."""
    if not run.fanout.failed:
        return []
    return [s for s in run.steps if s.status == "FAILED" and joins_on_failed_children(s)]


def cancelled_joins(run: RunDetail) -> list[StepView]:
    """The run's FAILED joins that failed on CANCELLED children they do not tolerate: nothing
    runs a cancelled child again, so neither a retry nor a reprocess helps."""
    return [
        s
        for s in run.steps
        if s.status == "FAILED" and s.error is not None and s.error.children_cancelled
    ]


def quota_fix(run: RunDetail) -> str | None:
    """The command that raises the run's tenant quota enough for the fan-out a FAILED
    spawner of it needs (as its error names it; `N` when an older API's error does not),
    when one failed for want of quota: a retry alone would fail the same way."""
    for step in run.steps:
        error = step.error
        if step.status == "FAILED" and error and error.kind == FailureKind.QUOTA_EXCEEDED.value:
            named = SET_QUOTA_COMMAND.search(error.message or "")
            tenant = shlex.quote(run.tenant_id)
            return named.group(1) if named else f"schemabridge tenants set-quota {tenant} N"
    return None


def fix_commands(run: RunDetail, fix: str) -> list[str]:
    """Fix, publish, submit anew, led by the API's fix-first warning (`fix`): a retry, a
    reprocess and a start over all run the run's own version (its pinned versions) with the
    same input, and fail the same way; but a start over first when the warning offers it (a
    step resolved upstream of the failure: its output, which the retry keeps, may be the
    cause; the server decides, from the workflow's graph)."""
    if run.parent_run_id is not None:
        return [fix, f"schemabridge runs show {run.root_run_id or run.parent_run_id}"]
    start_over = f"schemabridge runs start-over {run.id}"
    return [
        fix,
        *([start_over] if f"`{start_over}`" in fix else []),
        "schemabridge workflows publish FILE",
        f"schemabridge runs submit {shlex.quote(run.workflow)}@VERSION"
        f"{tenant_option(run.tenant_id)} --input JSON",
    ]


def tenant_option(tenant_id: str) -> str:
    """` --tenant acme` for a run of a tenant other than the default: an admin key's `runs
    submit` without it runs under `default`, not the run's tenant."""
    return "" if tenant_id == "default" else f" --tenant {shlex.quote(tenant_id)}"


def deployment_run_commands(run: RunDetail) -> list[str]:
    """The engine's own run of a deployment refuses retry, resolve, start over and reprocess
    (409 `deployment_run`): what an operator does is act on its deployment."""
    deployment = run.deployment_id
    if deployment is None:
        return [f"schemabridge runs logs {run.id}"]
    hints = [f"schemabridge deployments show {deployment}"]
    if run.status == "RUNNING":
        hints += [
            f"schemabridge deployments abort {deployment}",
            f"schemabridge deployments rollback {deployment}",
        ]
    else:
        workflow = run.input.get("workflow") if isinstance(run.input, dict) else None
        if isinstance(workflow, str):  # a new deployment (of a fixed version) starts at stage 1
            hints.append(
                f"schemabridge deployments start {shlex.quote(workflow)} --version VERSION"
            )
    return [*hints, f"schemabridge runs logs {run.id}"]


def next_commands(run: RunDetail) -> list[str]:
    """What an operator may do about the run, as commands to copy: fixing the workflow first
    when it (or the input) caused the failure, reprocessing first when children FAILED, a
    retry only when a failed step could succeed by running again, after raising the tenant's
    quota when a fan-out failed for want of it."""
    run_id = run.id
    if run.route == "system":
        return deployment_run_commands(run)
    if run.restarts:
        # Started over: the API refuses its retry, resolve and reprocess (409 started_over,
        # the new run sends the calls again); the new run is where to look.
        return [f"schemabridge runs show {run.restarts[-1]}", f"schemabridge runs logs {run_id}"]
    if run.status == "FAILED":
        failed = [s for s in run.steps if s.status == "FAILED"]
        if run.fix_first is not None:
            hints = fix_commands(run, run.fix_first)
            if run.fanout.failed:
                hints.append(f"schemabridge runs children {run_id} --status FAILED")
            hints += [
                f"schemabridge runs resolve {run_id} {s.vertex_id} --output JSON"
                for s in failed[:1]
            ]
            return [*hints, f"schemabridge runs logs {run_id}"]
        cancelled = cancelled_joins(run)
        if cancelled:
            hints = [
                f"schemabridge runs resolve {run_id} {cancelled[0].vertex_id} --output JSON",
                f"schemabridge runs children {run_id} --status CANCELLED",
                f"schemabridge runs logs {run_id}",
            ]
            if run.parent_run_id is None:
                hints.insert(1, f"schemabridge runs start-over {run_id}")
            return hints
        stuck = stuck_joins(run)
        hints = [f"schemabridge runs reprocess {run_id}"] if run.fanout.failed else []
        if len(stuck) < len(failed) or not failed:
            raise_quota = quota_fix(run)
            hints += [raise_quota] if raise_quota else []
            hints.append(f"schemabridge runs retry {run_id}")
        hints += [
            f"schemabridge runs resolve {run_id} {s.vertex_id} --output JSON" for s in failed[:1]
        ]
        hints += [f"schemabridge runs logs {run_id}"]
        if run.parent_run_id is None:
            hints.append(f"schemabridge runs start-over {run_id}")
        return hints
    if run.status == "RUNNING":
        return [f"schemabridge runs watch {run_id}", f"schemabridge runs cancel {run_id}"]
    if run.fanout.failed:  # tolerated by its join: which ones, then run them again
        return [
            f"schemabridge runs children {run_id} --status FAILED",
            f"schemabridge runs reprocess {run_id}",
        ]
    return []


def listed_status(run: RunSummary) -> Text:
    """A run's status in a list; a run started over (or a child under a root started over)
    names the run that start over made (a short id the commands take), so a FAILED one reads
    as handled: its retry is refused."""
    shown_status = status_text(run.status)
    if run.started_over_as is not None:
        what = "root started over" if run.parent_run_id else "started over"
        shown_status.append(f" ({what} as {run.started_over_as[:MIN_PREFIX_DIGITS]})")
    return shown_status


def workflow_version(run: RunSummary) -> str:
    """`orders v7`, and `orders v7 (candidate)` for a run a deployment routed to its
    candidate: in text as in JSON (`route`), so a candidate's runs can be told apart (a
    list's column)."""
    routed = " (candidate)" if run.route == "candidate" else ""
    return f"{run.workflow} v{run.version}{routed}"


def submitted_as(run: RunSummary) -> str:
    """`workflow_version` in a sentence (`runs submit`'s line): `orders v7, a deployment's
    candidate`, the route in `runs show`'s words."""
    routed = f", {ROUTE_WORDS['candidate']}" if run.route == "candidate" else ""
    return f"{run.workflow} v{run.version}{routed}"


def runs_table(runs: Sequence[RunSummary], now: float) -> Table:
    rows: list[list[str | Text]] = [
        [
            run.id,
            workflow_version(run),
            listed_status(run),
            run.tenant_id,
            relative(run.created_at, now),
            run_duration(run, now),
            error_line(run.error),
        ]
        for run in runs
    ]
    return table(["RUN", "WORKFLOW", "STATUS", "TENANT", "CREATED", "DURATION", "ERROR"], rows)


def children_table(children: Sequence[RunSummary], now: float) -> Table:
    rows: list[list[str | Text]] = [
        [
            f"{show(child.parent_vertex_id)}[{show(child.item_index)}]",
            child.id,
            status_text(child.status),
            run_duration(child, now),
            "yes" if child.dlq_at is not None else MISSING,
            error_line(child.error),
        ]
        for child in children
    ]
    return table(["ITEM", "RUN", "STATUS", "DURATION", "DEAD LETTER", "ERROR"], rows)


def log_line(entry: LogEntry) -> str:
    """A log line: its time, level, vertex and message, and the worker that wrote it when the
    line names one (an attempt's, a failed step's; the API leaves it out for tenant keys)."""
    vertex = entry.vertex_id or "-"
    worker = entry.data.get("worker") if entry.data is not None else None
    by = f"  (worker {worker})" if isinstance(worker, str) else ""
    return f"{clock(entry.at)}  {entry.level:<7} {vertex:<14} {entry.message}{by}"
