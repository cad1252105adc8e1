"""How `schemabridge deployments …` prints a deployment: the list's table, and `show`'s
blocks — where it stands (stage, weight), each version's runs and failure ratio, the
exposure with the command that lists the candidate's runs, the figures behind a rollback,
and the timeline of stage changes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from rich.console import Group
from rich.text import Text

from api.cli.remote import table
from api.cli.text import MISSING, clock, exact, relative, zone
from schemas.counts import plural
from schemas.durations import duration

if TYPE_CHECKING:
    from rich.table import Table

    from api.cli.wire import DeploymentView, TimelineEvent, VersionFigures

DEPLOYMENT_STYLES = {
    "RUNNING": "cyan",
    "SUCCEEDED": "green",
    "ROLLED_BACK": "red",
    "ABORTED": "yellow",
}


def percent(weight: float) -> str:
    return f"{weight:g} %"


def ratio(value: float | None) -> str:
    """A failure ratio with three decimals; "-" before any run finished."""
    return MISSING if value is None else f"{value:.3f}"


def status_text(status: str) -> Text:
    return Text(status, style=DEPLOYMENT_STYLES.get(status, ""))


def where(deployment: DeploymentView) -> str:
    """ "stage 2 of 3 (50 %)": the stage in force, or the last one reached."""
    stages = deployment.stages
    target = stages[deployment.stage - 1].weight if deployment.stage <= len(stages) else 0.0
    return f"stage {deployment.stage} of {len(stages)} ({percent(target)})"


def candidate_share(deployment: DeploymentView) -> float:
    """The percent of new runs the candidate gets now: its weight while the deployment runs;
    once it has ended (the API's weight is then null) all of them as the serving version if
    it was promoted, else none."""
    if deployment.weight is not None and deployment.status == "RUNNING":
        return deployment.weight
    return 100.0 if deployment.status == "SUCCEEDED" else 0.0


def weight_now(deployment: DeploymentView) -> str:
    """The WEIGHT column: what the candidate gets now (a promoted one, every run), or which
    version serves now once a later deployment or switch replaced what this one left."""
    if deployment.superseded:
        return f"superseded (v{deployment.serving_version_now} serves)"
    if deployment.status == "SUCCEEDED":
        return "100 % (serving)"
    return percent(candidate_share(deployment))


def share(deployment: DeploymentView) -> str:
    """What the candidate gets of new runs now: its stage's weight while running, every run
    once promoted, none once aborted or rolled back (they go back to the serving version).
    Superseded: what it did, in the past, and which version serves now."""
    d = deployment
    if d.superseded:
        return f"{_past(d)}; superseded: v{d.serving_version_now} serves now"
    if d.status == "SUCCEEDED":
        return f"the candidate v{d.candidate_version} now serves: it gets every new run"
    gets = f"the candidate gets {percent(candidate_share(d))} of new runs"
    if d.status == "RUNNING":
        return gets
    return f"{gets}: they go back to v{d.serving_version}"


def _past(deployment: DeploymentView) -> str:
    d = deployment
    if d.status == "SUCCEEDED" and d.ended_at is not None:
        return f"the candidate v{d.candidate_version} served from {exact(d.ended_at)}"
    return f"new runs went back to v{d.serving_version}"


def candidate_runs(figures: VersionFigures) -> str:
    """ "12", or "12 (4 refused)" when some were submissions its inputSchema refused."""
    refused = f" ({figures.refused:,} refused)" if figures.refused else ""
    return f"{figures.runs:,}{refused}"


END_EVENTS = {"ROLLED_BACK": "the rollback", "SUCCEEDED": "the promotion", "ABORTED": "the abort"}


def end_event(deployment: DeploymentView) -> str:
    """ "the rollback", "the promotion", "the abort": the moment an ended deployment's figures
    were recorded."""
    return END_EVENTS.get(deployment.status, "the end")


def figures_at_end(deployment: DeploymentView) -> dict[str, Any] | None:
    """The candidate's figures an ended deployment recorded when it ended (None: running, or
    none recorded): what decided it, which retries of its runs afterwards do not change, where
    the view's `candidate` is the runs as they are now."""
    if deployment.status == "RUNNING" or deployment.outcome is None:
        return None
    found = (deployment.outcome.figures or {}).get("candidate")
    return found if isinstance(found, dict) else None


def ratio_column(deployment: DeploymentView) -> str:
    """The list's FAILURE RATIO: an ended deployment's at its end ("0.333 at the rollback"),
    not the ratio now, which an operator's retries of the failed runs rewrite."""
    at_end = figures_at_end(deployment)
    if at_end is None:
        return ratio(deployment.candidate.failure_ratio)
    return f"{ratio(at_end.get('failureRatio'))} at {end_event(deployment)}"


def deployments_table(items: Sequence[DeploymentView], now: float) -> Table:
    rows: list[list[str | Text]] = [
        [
            d.id,
            d.workflow,
            f"v{d.candidate_version}",
            f"v{d.serving_version}",
            status_text(d.status),
            where(d),
            weight_now(d),
            candidate_runs(d.candidate),
            ratio_column(d),
            relative(d.created_at, now),
        ]
        for d in items
    ]
    headers = [
        "DEPLOYMENT",
        "WORKFLOW",
        "CANDIDATE",
        # The version serving when it started: "SERVING" beside "100 % (serving)" of a
        # promoted candidate read as two versions serving at once.
        "FROM",
        "STATUS",
        "STAGE",
        "WEIGHT",
        "CANDIDATE RUNS",
        "FAILURE RATIO",
        "STARTED",
    ]
    return table(headers, rows)


def figures_table(deployment: DeploymentView) -> Table:
    def row(role: str, figures: VersionFigures) -> list[str | Text]:
        return [
            f"v{figures.version}",
            role,
            f"{figures.runs:,}",
            f"{figures.succeeded:,}",
            f"{figures.failed:,}",
            f"{figures.cancelled:,}",
            f"{figures.running:,}",
            ratio(figures.failure_ratio),
        ]

    headers = ["VERSION", "ROLE", "RUNS", "SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "RATIO"]
    return table(
        headers,
        [row("candidate", deployment.candidate), row("serving", deployment.serving)],
    )


def holding_line(deployment: DeploymentView, now: float) -> str:
    """ "stage check at 15:29:21 CET (12 s ago): waiting at stage 1: 2/3 runs, …": the stage
    check's own figures, with when it was taken (the table's are of now); the message alone
    when the time is not known."""
    d = deployment
    at = d.holding_checked_at
    if at is None or d.holding is None:
        return d.holding or ""
    return f"stage check at {clock(at)} {zone(at)} ({relative(at, now)}): {d.holding}"


def figures_now_line(deployment: DeploymentView) -> str | None:
    """Over the table: its figures are the runs as they are now — while it runs, not the
    stage check's (said above with its time); once ended, after any retries since its end,
    unlike those it ended on (said with them)."""
    d = deployment
    if d.status == "RUNNING":
        return "runs routed to each version, now:" if d.holding_checked_at is not None else None
    event = end_event(d)
    line = f"runs routed to each version, as they are now, after any retries since {event}"
    at_end = figures_at_end(d)
    if at_end is None:
        return line + ":"
    failed, finished = int(at_end.get("failed", 0)), int(at_end.get("finished", 0))
    return f"{line} (at {event}: {failed:,} of {finished:,} finished failed):"


def refused_line(deployment: DeploymentView) -> str | None:
    """What the candidate's figures hold that no run list shows: the submissions its
    inputSchema refused (answered 422, no run), each counted as a failed run."""
    refused = deployment.candidate.refused
    if not refused:
        return None
    return (
        f"{refused:,} refused by the candidate's inputSchema: submissions routed to "
        f"v{deployment.candidate_version} that v{deployment.serving_version} accepts were "
        "answered 422 invalid_input (no run); each counts as a failed run of the candidate"
    )


def runs_line(deployment: DeploymentView) -> str:
    """How to list the runs the candidate received, or, when every submission routed to it
    was refused (no run exists for a refusal), that there is none: the command's list would
    be empty with no reason given."""
    candidate = deployment.candidate
    if only_refused(candidate):
        # The exposure line above says how many were refused: this says what follows.
        return "no run to list: a refused submission does not become a run"
    return f"list them: {runs_command(candidate, deployment.workflow)}"


def only_refused(figures: VersionFigures) -> bool:
    """Whether every submission routed to the version was refused by its inputSchema (no run
    exists for a refusal)."""
    return bool(figures.refused) and figures.runs == figures.refused


def exposure_line(deployment: DeploymentView) -> str:
    """How many runs went to the candidate or, once its inputSchema refused some of them, how
    many submissions were routed to it, of which how many became runs: `exposure` counts the
    refusals too, and "13 runs went to it" read wrong when none of the 13 became a run. As
    the monitor's deployment page says it."""
    d = deployment
    refused = d.candidate.refused
    if not refused:
        return f"exposure: {plural(d.exposure, 'run')} went to the candidate v{d.candidate_version}"
    routed = (
        f"exposure: {plural(d.exposure, 'submission')} {'was' if d.exposure == 1 else 'were'} "
        f"routed to the candidate v{d.candidate_version}"
    )
    if only_refused(d.candidate):
        return routed + (
            " and refused by its inputSchema"
            if refused == 1
            else ", all refused by its inputSchema"
        )
    became = d.exposure - refused
    runs = "1 became a run" if became == 1 else f"{became:,} became runs"
    were = "was" if refused == 1 else "were"
    return f"{routed}: {runs}, {refused:,} {were} refused by its inputSchema"


def runs_command(figures: VersionFigures, workflow: str) -> str:
    """The `runs list` command that lists exactly the runs behind `figures` (its `runsUrl`:
    the version, how it was routed, and the window: from the deployment's start until the
    next deployment of the workflow began, once there is one). Without the end, a later
    deployment of the same version added its runs to the list."""
    query = parse_qs(urlsplit(figures.runs_url).query)
    parts = ["schemabridge runs list", f"--workflow {workflow}", f"--version {figures.version}"]
    if query.get("route"):
        parts.append(f"--route {query['route'][0]}")
    for parameter, option in (("createdAfter", "--since"), ("createdBefore", "--until")):
        found = query.get(parameter)
        if found:
            parts.append(f"{option} {moment(float(found[0]))}")
    return " ".join(parts)


def moment(at: float) -> str:
    """An epoch time as ISO UTC to the microsecond (whole seconds would take in the runs of
    another deployment begun or ended within the same second)."""
    return datetime.fromtimestamp(at, UTC).isoformat()


def _counts(label: str, figures: dict[str, Any], when: str) -> str:
    failed = figures.get("failed", 0)
    finished = figures.get("finished", 0)
    runs = figures.get("runs", 0)
    return (
        f"{label}: {failed:,} failed of {finished:,} finished "
        # The figures the deciding check (or the stop) saw: the exposure counts runs routed
        # after it too.
        f"(ratio {ratio(figures.get('failureRatio'))}; {plural(int(runs), 'run')} in all "
        f"{when})"
    )


def decided_by_engine(deployment: DeploymentView) -> bool:
    """Whether a check's verdict ended the deployment (its figures are what "it decided"
    on), rather than a person's abort or rollback (the figures of the moment it stopped)."""
    outcome = deployment.outcome
    return outcome is not None and outcome.actor == "engine"


def rollback_lines(deployment: DeploymentView) -> list[str]:
    """Why a deployment ended the way it did, with the figures its deciding check saw."""
    outcome = deployment.outcome
    if outcome is None:
        return []
    at = f" at stage {outcome.stage}" if outcome.stage is not None else ""
    # The actor once: a stop by hand's reason names who did it already ("stopped by key:…").
    by = f" ({outcome.actor})" if outcome.actor and outcome.actor not in outcome.reason else ""
    verb = OUTCOME_WORDS.get(deployment.status, deployment.status.lower())
    lines = [f"{verb}{at}{by}: {outcome.reason}"]
    figures = outcome.figures or {}
    candidate, serving = figures.get("candidate"), figures.get("serving")
    when = "when it decided" if decided_by_engine(deployment) else "when it was stopped"
    if isinstance(candidate, dict):
        label = f"candidate v{deployment.candidate_version}"
        lines.append(f"  {_counts(label, candidate, when)}")
    if isinstance(serving, dict):
        lines.append(f"  {_counts(f'serving v{deployment.serving_version}', serving, when)}")
    if isinstance(figures.get("threshold"), int | float):
        lines.append(f"  threshold {figures['threshold']:.3f}")
    if isinstance(figures.get("stageRuns"), int):
        lines.append(f"  runs in the stage {figures['stageRuns']:,}")
    return lines


EVENT_WORDS = {
    "started": "started",
    "stage": "next stage",
    "succeeded": "promoted",
    "rolled_back": "rolled back",
    "aborted": "aborted",
}
"""A timeline event (the API's `event`) as people read it, in the monitor's words (its
`EVENT_WORDS`, ui/static/js/pages/deployments.js): the enum's `succeeded`, `stage` and
`rolled_back` beside the monitor's "promoted", "next stage" and "rolled back" read as two
stories of one deployment."""

OUTCOME_WORDS = {"SUCCEEDED": "promoted", "ROLLED_BACK": "rolled back", "ABORTED": "aborted"}
"""How a deployment ended, as its outcome's line starts ("promoted at stage 3 (engine): …"),
the monitor's "Promoted at stage 3" and the run's log ("promoted: … now serves")."""


def timeline_table(events: Sequence[TimelineEvent]) -> Table:
    rows: list[list[str | Text]] = [
        [
            # Labelled as every other time the CLI prints (`exact`): local, with its zone.
            f"{exact(e.at)[:10]} {clock(e.at)} {zone(e.at)}",
            EVENT_WORDS.get(e.event, e.event),
            str(e.stage),
            MISSING if e.weight is None else percent(e.weight),
            e.note or MISSING,
        ]
        for e in events
    ]
    return table(["TIME", "EVENT", "STAGE", "WEIGHT", "NOTE"], rows)


def policy_line(deployment: DeploymentView) -> str:
    """The rollback policy, with the threshold it gives now when it depends on the serving
    version's ratio (the higher of the two; the fixed ratio alone until serving has one)."""
    policy = deployment.rollback
    limit = f"rollback when the candidate's failure ratio exceeds {policy.max_failure_ratio:g}"
    if policy.margin_over_serving is not None:
        limit += (
            f" or serving's ratio + {policy.margin_over_serving:g}, whichever is higher "
            f"(threshold now {deployment.threshold:.3f})"
        )
    return (
        # Since it began: each stage's line says the same finished runs, not new ones.
        f"{limit}, judged from {plural(policy.min_finished_runs, 'finished run')} since the "
        "deployment began; "
        f"checked every {duration(deployment.check_interval_seconds)}"
    )


def stages_line(deployment: DeploymentView) -> str:
    """ "stages: 25 % (10 runs, 10 s, 20 finished runs) → …": what each stage waits for, in
    the API's words, which are its check's (the finished runs too: "10 runs" alone read as
    all of it while the check said "19/20 finished runs")."""
    parts = [
        f"{percent(s.weight)} ("
        + (s.waits_for or f"{plural(s.min_runs, 'run')}, {duration(s.min_duration_seconds)}")
        + ")"
        for s in deployment.stages
    ]
    return "stages: " + " → ".join(parts)


def deployment_view(deployment: DeploymentView, now: float) -> Group:
    """Everything `deployments show` prints."""
    d = deployment
    lines: list[Any] = [
        Text.assemble(
            f"deployment {d.id}  {d.workflow} v{d.candidate_version} (candidate) over "
            f"v{d.serving_version} (serving)  ",
            status_text(d.status),
        ),
        Text(f"{where(d)}; {share(d)}"),
    ]
    if d.holding:
        # What keeps the stage from passing, as of its latest check (runs, time, finished
        # runs): said with when that check was taken, since the table below is of now.
        lines.append(Text(holding_line(d, now)))
    # Said while it runs, not only by `start`: a child workflow's deployment waits for ever.
    lines += [Text(f"warning: {warning}", style="yellow") for warning in d.warnings]
    lines += [
        Text(f"started {exact(d.created_at)} ({relative(d.created_at, now)}) by {d.created_by}"),
    ]
    if d.ended_at is not None:
        lines.append(Text(f"ended {exact(d.ended_at)} ({relative(d.ended_at, now)})"))
    lines += [Text(stages_line(d)), Text(policy_line(d)), Text("")]
    now_line = figures_now_line(d)
    lines += [Text(now_line)] if now_line else []
    lines.append(figures_table(d))
    refused = refused_line(d)
    lines += [Text(refused)] if refused else []
    lines.append(Text(""))
    lines.append(Text(exposure_line(d)))
    lines.append(Text(f"  {runs_line(d)}"))
    ended = rollback_lines(d)
    if ended:
        lines += [Text(""), *(Text(line) for line in ended)]
    lines += [Text(""), Text("timeline:"), timeline_table(d.timeline)]
    if d.run_purged:
        lines.append(Text(f"driven by run {d.run_id} (deleted by run retention)"))
    else:
        lines.append(Text(f"driven by run {d.run_id}: schemabridge runs show {d.run_id}"))
    return Group(*lines)
