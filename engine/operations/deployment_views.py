"""What deployment operations take and answer: the specification of a deployment's stages and
rollback policy, and the views of a deployment, its figures and its history (camelCase on
the wire, times in epoch seconds)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from pydantic import Field

from engine.operations.views import View
from engine.store.deployments import DeploymentCounts
from engine.store.models import DeploymentStatus, RunRoute
from engine.store.records import DeploymentRecord, ServingRecord
from vertices import deploy

MAX_STAGE_RUNS = 1_000_000_000
MAX_STAGE_SECONDS = 30 * 24 * 3600.0


class StageSpec(View):
    """One stage of a deployment."""

    weight: float = Field(gt=0, le=100, description="Percent of new runs the candidate gets.")
    min_runs: int = Field(
        default=20,
        ge=0,
        le=MAX_STAGE_RUNS,
        description="Runs the candidate must receive during the stage before it can end.",
    )
    min_duration_seconds: float = Field(
        default=60.0, ge=0, le=MAX_STAGE_SECONDS, description="How long the stage holds at least."
    )


class RollbackSpec(View):
    """When a deployment rolls back by itself (see `vertices.deploy`)."""

    max_failure_ratio: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="The candidate rolls back when its failure ratio (FAILED among finished "
        "runs) exceeds this, or the serving version's ratio plus the margin if that is higher.",
    )
    margin_over_serving: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Optional: failures of both versions alike (an outage) up to the serving "
        "version's ratio plus this are not blamed on the candidate.",
    )
    min_finished_runs: int = Field(
        default=20,
        ge=0,
        le=MAX_STAGE_RUNS,
        description="Finished runs of the candidate before it is judged.",
    )


DEFAULT_STAGES = (
    StageSpec(weight=10),
    StageSpec(weight=25),
    StageSpec(weight=50),
    StageSpec(weight=100),
)
DEFAULT_CHECK_INTERVAL_S = 5.0
MIN_CHECK_INTERVAL_S = 0.1
MAX_CHECK_INTERVAL_S = 300.0


class VersionFigures(View):
    """The runs a deployment routed to one version, by outcome."""

    version: int
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    running: int
    finished: int
    """SUCCEEDED + FAILED: the failure ratio's denominator (a cancelled run says nothing)."""
    failure_ratio: float | None
    runs_url: str
    """Those runs in the run list (`GET /runs` with the filter)."""
    refused: int = Field(
        default=0,
        description="Of `runs` and `failed`: submissions routed to the candidate that its "
        "inputSchema refused (a 422 `invalid_input` while the serving version accepts the "
        "input), each counted as a failed run of the candidate. No run exists for them, so "
        "`runsUrl` does not list them. Always 0 for the serving version.",
    )


class StageView(View):
    stage: int
    """1-based."""
    weight: float
    min_runs: int
    min_duration_seconds: float
    waits_for: str = Field(
        description="What the stage waits for before it can pass, in the terms of its check "
        "(`holding`): its runs, its duration and, from the rollback policy, the candidate's "
        'finished runs since the deployment began that a verdict needs, e.g. "10 runs, 10 s, '
        '20 finished runs" (the first stage only: every later stage begins with them, as no '
        'stage passes before); "nothing but its check" when no minimum is set.'
    )
    started_at: float | None = None
    """When it began (None: not yet)."""
    ended_at: float | None = None


class TimelineEvent(View):
    """A change of the deployment: `started`, `stage` (a stage began), `succeeded`,
    `rolled_back` or `aborted`."""

    at: float
    event: str
    stage: int
    weight: float | None = None
    note: str | None = None
    """The verdict that ended the stage before, or why the event happened."""


class OutcomeView(View):
    """How a deployment ended."""

    reason: str
    actor: str | None = None
    """`engine` for a verdict of its own, else who stopped it (`key:<id> (<key name>)`, or
    `key:<id>` for a key without a name; `demo` with authentication off)."""
    stage: int | None = None
    figures: dict[str, Any] | None = None
    """What the deciding check (or the stop) saw, recorded when the deployment ended and never
    changed after: `candidate` and `serving` (runs, succeeded, failed, cancelled, finished,
    failureRatio), and for a check's verdict `threshold`, `stageRuns`."""


class DeploymentView(View):
    id: str
    workflow: str
    status: DeploymentStatus
    candidate_version: int
    serving_version: int
    """The version serving when the deployment began (its baseline)."""
    stage: int
    """The stage in force (1-based), or the last one it reached."""
    weight: float | None = Field(
        description="Percent of new runs the candidate gets as a candidate now, while the "
        "deployment runs; null once the deployment has ended: it routes no run any more (a "
        "SUCCEEDED deployment's candidate serves every new run as the serving version; a "
        "ROLLED_BACK or ABORTED one's gets none). The weight of the last stage it reached is "
        "`stages[stage - 1].weight`."
    )
    # Not 0 once ended, as it was: 0 read as "the candidate gets nothing", which is false of
    # a promoted candidate, and a number suggests a share still in force. Nothing routes by
    # an ended deployment, so it has no weight; its history is in `stages` and `timeline`.
    stages: list[StageView]
    rollback: RollbackSpec
    threshold: float
    """The failure ratio the candidate may not exceed, as of now."""
    check_interval_seconds: float
    candidate: VersionFigures
    """The runs as they are now: once the deployment has ended, an operator's retries change
    them; `outcome.figures` keeps those it ended on, which these are once run retention has
    deleted its runs (`runPurged`)."""
    serving: VersionFigures
    exposure: int
    """Runs the candidate received from this deployment (the blast radius of a rollback),
    the submissions its inputSchema refused included (`candidate.refused`)."""
    run_id: str
    """The `gradual_deploy` run that drives it (visible in the run list)."""
    run_purged: bool = False
    """That run was deleted by run retention (`SCHEMABRIDGE_RUN_RETENTION_S`, or an
    operator's purge): only its id is left; the deployment keeps its timeline and the figures
    it ended on."""
    created_at: float
    created_by: str
    ended_at: float | None = None
    outcome: OutcomeView | None = None
    timeline: list[TimelineEvent]
    serving_version_now: int | None = Field(
        default=None,
        description="The workflow's serving version now (its routing row), whatever this "
        "deployment did; null if the workflow has no routing row.",
    )
    superseded: bool = Field(
        default=False,
        description="True when the deployment has ended and the version it left serving (the "
        "candidate if SUCCEEDED, else its baseline `servingVersion`) no longer serves: a "
        "later deployment or switch replaced it, so what it says of new runs is history.",
    )
    holding: str | None = Field(
        default=None,
        description="Only on a single deployment's answer (`GET /deployments/{id}`), while it "
        "runs: what its stage waits for, as of the stage's latest check, with the candidate's "
        'failure ratio so far (e.g. "waiting at stage 1: 3/20 runs, 41 s more; failure '
        'ratio 0.000 (0 failed of 3 finished), threshold 0.050"), led by "no worker is alive: '
        "nothing runs …\" while no worker's heartbeat is fresh (`GET /services`' rule); null "
        "when it does not wait or has ended.",
    )
    holding_checked_at: float | None = Field(
        default=None,
        description="When the stage's latest check, which `holding` reports, was taken (null "
        "when `holding` is, or the time is not known): its figures are those of that moment, "
        "and `candidate` and `serving` those of now.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="On the answer to a start, and on a single deployment's answer while it "
        "runs: what may keep the deployment from progressing or from a verdict on evidence "
        "although it started: the workflow runs mostly as a SPAWNER's child (whose version its "
        "parent pins); on the start only: the candidate's inputSchema refuses recent inputs of "
        "the serving version, the policy needs no finished run, stage 1 waits for more finished "
        "runs (`minFinishedRuns`) than its `minRuns`, the version was rolled back before, no "
        "worker is alive.",
    )
    # Decided here, not in the clients: from the status alone they read an old promotion as
    # "the candidate now serves" long after another version replaced it.


class DeploymentPreview(View):
    """What a start with the same body would do and warn about, started nothing
    (`POST /workflows/{name}/deployments/preview`)."""

    workflow: str
    candidate_version: int
    serving_version: int
    """The version the candidate's share would be taken from."""
    first_weight: float
    """Percent of new runs the candidate would get from the start."""
    summary: str
    """The start in words: "v3 would get 10 % of new runs (v2 the rest), stages 10 % → …"."""
    warnings: list[str] = Field(
        default_factory=list,
        description="The warnings the start would answer with (see `DeploymentView.warnings`),"
        " said before anything starts.",
    )


class DeploymentChange(View):
    """An operator's abort or rollback: `changed` False when the deployment had already ended
    that way (nothing to do)."""

    changed: bool
    message: str
    deployment: DeploymentView


class ServingView(View):
    workflow: str
    serving_version: int
    candidate_version: int | None = None
    candidate_weight: float = 0.0
    deployment_id: str | None = None
    updated_at: float = Field(description="When the serving version was last set: it serves since.")
    updated_by: str | None = Field(
        default=None,
        description="Who last set the serving version: `publish`, `deployment:<id>` (a "
        "promotion), an operator's key; a running deployment's candidate does not change it. "
        "Null for a tenant key: it names an admin.",
    )


class ServingChange(ServingView):
    """An operator's switch of the serving version: `changed` False when the version asked
    for served already (nothing was done: `updatedAt` and `updatedBy` are still those of
    whoever made it serve, and no audit event was written)."""

    changed: bool
    message: str = Field(description="What happened, in words.")


def rest_words(weight: float, serving_version: int, rest: str = "the rest") -> str:
    """What the serving version gets beside a candidate's `weight`: " (v1 the rest)" (`rest`),
    or at 100 % (where there is no rest) " (all of them: v1 gets none while it runs)"."""
    if weight >= 100:
        return f" (all of them: v{serving_version} gets none while it runs)"
    return f" (v{serving_version} {rest})"


def serving_view(record: ServingRecord) -> ServingView:
    return ServingView(
        workflow=record.name,
        serving_version=record.serving_version,
        candidate_version=record.candidate_version,
        candidate_weight=record.candidate_weight,
        deployment_id=record.deployment_id,
        updated_at=record.updated_at,
        updated_by=record.updated_by,
    )


def runs_url(
    workflow: str, version: int, route: RunRoute, since: float, until: float | None
) -> str:
    query: dict[str, Any] = {
        "workflow": workflow,
        "version": version,
        "route": route.value,
        "createdAfter": repr(since),
    }
    if until is not None:
        query["createdBefore"] = repr(until)
    return f"/runs?{urlencode(query)}"


def _figures(counts: deploy.VersionCounts, version: int, url: str) -> VersionFigures:
    ended = counts.succeeded + counts.failed + counts.cancelled
    return VersionFigures(
        version=version,
        runs=counts.runs,
        succeeded=counts.succeeded,
        failed=counts.failed,
        cancelled=counts.cancelled,
        running=max(0, counts.runs - ended),
        finished=counts.finished,
        failure_ratio=counts.failure_ratio,
        runs_url=url,
        refused=counts.refused,
    )


def _stages(record: DeploymentRecord) -> list[StageView]:
    policy = deploy.RollbackPolicy.from_dict(record.rollback)
    started: dict[int, float] = {}
    for event in record.timeline:
        if event.get("event") in ("started", "stage"):
            started[int(event["stage"])] = float(event["at"])
    views = []
    for number, data in enumerate(record.stages, start=1):
        stage = deploy.Stage.from_dict(data)
        begun = started.get(number)
        ended = started.get(number + 1)
        if ended is None and number == record.stage_index + 1 and begun is not None:
            ended = record.ended_at
        views.append(
            StageView(
                stage=number,
                weight=stage.weight,
                min_runs=stage.min_runs,
                min_duration_seconds=stage.min_duration_s,
                waits_for=deploy.waits_for(stage, policy, number),
                started_at=begun,
                ended_at=ended,
            )
        )
    return views


def _event(data: dict[str, Any]) -> TimelineEvent:
    weight = data.get("weight")
    note = data.get("note")
    return TimelineEvent(
        at=float(data["at"]),
        event=str(data["event"]),
        stage=int(data["stage"]),
        weight=None if weight is None else float(weight),
        note=None if note is None else str(note),
    )


def left_serving(record: DeploymentRecord) -> int | None:
    """The version an ended deployment left serving: its candidate if it was promoted, else
    its baseline (None while it runs)."""
    if record.status == DeploymentStatus.RUNNING.value:
        return None
    if record.status == DeploymentStatus.SUCCEEDED.value:
        return record.candidate_version
    return record.serving_version


def deployment_view(
    record: DeploymentRecord,
    counts: DeploymentCounts,
    serving_now: int | None,
    *,
    run_purged: bool = False,
) -> DeploymentView:
    """The whole view of a deployment, with its figures from `counts` and the workflow's
    serving version now (`serving_now`); `run_purged`: its run was deleted by retention."""
    policy = deploy.RollbackPolicy.from_dict(record.rollback)
    running = record.status == DeploymentStatus.RUNNING.value
    stage = deploy.Stage.from_dict(record.stages[record.stage_index])
    name = record.workflow_name
    candidate_url = runs_url(
        name,
        record.candidate_version,
        RunRoute.CANDIDATE,
        record.created_at,
        counts.candidate_until,
    )
    serving_url = runs_url(
        name, record.serving_version, RunRoute.SERVING, record.created_at, record.ended_at
    )
    left = left_serving(record)
    outcome = None
    if record.outcome is not None:
        data = record.outcome
        outcome = OutcomeView(
            reason=str(data.get("reason", "")),
            actor=data.get("actor"),
            stage=data.get("stage"),
            figures=data.get("figures"),
        )
    return DeploymentView(
        id=record.id,
        workflow=name,
        status=record.status,
        candidate_version=record.candidate_version,
        serving_version=record.serving_version,
        stage=record.stage_index + 1,
        weight=stage.weight if running else None,
        stages=_stages(record),
        rollback=RollbackSpec(
            max_failure_ratio=policy.max_failure_ratio,
            margin_over_serving=policy.margin_over_serving,
            min_finished_runs=policy.min_finished_runs,
        ),
        threshold=deploy.threshold(policy, counts.serving),
        check_interval_seconds=record.check_interval_s,
        candidate=_figures(counts.candidate, record.candidate_version, candidate_url),
        serving=_figures(counts.serving, record.serving_version, serving_url),
        exposure=counts.candidate.runs,
        run_id=record.run_id,
        run_purged=run_purged,
        created_at=record.created_at,
        created_by=record.created_by,
        ended_at=record.ended_at,
        outcome=outcome,
        timeline=[_event(event) for event in record.timeline],
        serving_version_now=serving_now,
        superseded=None not in (left, serving_now) and left != serving_now,
    )


def started_view(record: DeploymentRecord) -> DeploymentView:
    """The view of a deployment its start has just written (`record`): no run routed yet, and
    the serving version the start read in its own transaction. No read: once a start has
    committed, its answer must not depend on the database still answering."""
    none = deploy.VersionCounts()
    return deployment_view(record, DeploymentCounts(none, none, 0), record.serving_version)
