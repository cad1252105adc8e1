"""Statements of serving versions and deployments: part of `engine.store` (called only from
there), shared by the deployments role and by the cancel of a run (cancelling a deployment's
`gradual_deploy` run aborts the deployment in the same transaction).

Every change to a RUNNING deployment is a compare-and-set on its row (`status = 'RUNNING'`,
and the stage it expects), so two executions of one stage step, or a stage step racing an
operator's abort, never both apply: the loser sees that nothing changed and reads again.
The routing row (`workflow_serving`) changes in the same transaction as the deployment.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, and_, bindparam, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import audit
from engine.store.audit import audit_events
from engine.store.deployment_log import log_event, routing_after
from engine.store.dialect import dialect_of
from engine.store.models import (
    AuditAction,
    AuditSubject,
    Deployment,
    DeploymentStatus,
    Run,
    RunRoute,
    RunStatus,
    WorkflowServing,
)
from engine.store.operator_actions import RerunFacts
from engine.store.records import DeploymentRecord, ServingRecord, StatusCounts
from engine.store.restarts import submitted_routes
from schemas.errors import WrongState
from vertices.deploy import VersionCounts

runs = Run.__table__  # type: ignore[attr-defined]
serving = WorkflowServing.__table__  # type: ignore[attr-defined]
deployments = Deployment.__table__  # type: ignore[attr-defined]

logger = logging.getLogger(__name__)

RUNNING = DeploymentStatus.RUNNING.value


def serving_record(row: Any) -> ServingRecord:
    return ServingRecord(
        row.name,
        row.serving_version,
        row.candidate_version,
        row.candidate_weight,
        row.deployment_id,
        row.updated_at,
        row.updated_by,
    )


def deployment_record(mapping: Mapping[Any, Any]) -> DeploymentRecord:
    """A row of `deployment` (or the dict a start inserts, which leaves the counters to their
    defaults)."""
    fields = DeploymentRecord.__dataclass_fields__
    return DeploymentRecord(**{name: mapping[name] for name in fields if name in mapping})


SERVING_ROW = select(serving).where(serving.c.name == bindparam("name"))
"""The routing row of workflow `name`: read by every submission, so built once."""


async def serving_row(conn: AsyncConnection, name: str) -> ServingRecord | None:
    row = (await conn.execute(SERVING_ROW, {"name": name})).first()
    return None if row is None else serving_record(row)


async def serving_versions(
    conn: AsyncConnection, names: Collection[str] | None = None
) -> dict[str, int]:
    """The serving version of each of `names` that has one (None: of every workflow), in one
    read of the routing table."""
    query = select(serving.c.name, serving.c.serving_version)
    if names is not None:
        query = query.where(serving.c.name.in_(sorted(names)))
    return {name: int(version) for name, version in (await conn.execute(query)).all()}


async def serve_unless_deploying(
    conn: AsyncConnection, name: str, version: int, now: float, actor: str
) -> bool:
    """Make `version` the serving version of `name`, recorded as `actor`'s doing, unless a
    deployment of `name` is running (its candidate and weight stay as they are). True when
    `version` serves afterwards. Logs what it did either way: a command that moves traffic
    as a side effect must say so."""
    current = await serving_row(conn, name)
    if current is not None and current.deployment_id is not None:
        logger.warning(
            "%s v%d published; v%d still serves: deployment %s is running (%s did not switch)",
            name,
            version,
            current.serving_version,
            current.deployment_id,
            actor,
        )
        return False
    if current is not None and current.serving_version == version:
        return True
    values = {"serving_version": version, "updated_at": now, "updated_by": actor}
    if current is None:
        await conn.execute(
            dialect_of(conn)
            .insert(serving)
            .values(name=name, **values)
            .on_conflict_do_nothing(index_elements=["name"])
        )
    else:
        switched = await conn.execute(
            update(serving)
            .where(serving.c.name == name, serving.c.deployment_id.is_(None))
            .values(**values)
        )
        if switched.rowcount != 1:  # a deployment started meanwhile: it decides
            logger.warning("%s v%d published; a deployment started meanwhile", name, version)
            return False
    logger.info(
        "serving version of %s set to v%d by %s (was %s)",
        name,
        version,
        actor,
        "none" if current is None else f"v{current.serving_version}",
    )
    return True


async def deployment_row(
    conn: AsyncConnection, deployment_id: str, *, for_update: bool = False
) -> DeploymentRecord | None:
    query = select(deployments).where(deployments.c.id == deployment_id)
    if for_update:
        query = query.with_for_update()
    row = (await conn.execute(query)).first()
    return None if row is None else deployment_record(row._mapping)


async def driven_by(conn: AsyncConnection, run_id: str) -> DeploymentRecord | None:
    """The deployment (in any status) whose `gradual_deploy` run is `run_id`, if any."""
    row = (await conn.execute(select(deployments).where(deployments.c.run_id == run_id))).first()
    return None if row is None else deployment_record(row._mapping)


def deployment_run_refusal(
    run_id: str, state: str, record: DeploymentRecord | None, action: str
) -> WrongState:
    """The refusal of an operator action (`action`: "retry", "resolve", "start over",
    "reprocess") on the `gradual_deploy` run that drives (or drove) deployment `record`: its
    steps are the deployment's stage checks, so retrying or resolving one would rewrite the
    record of the deployment's verdict (its end, its stage outcome) without changing the
    deployment. 409 `deployment_run`, `details.deploymentId`; the message names what to do on
    the deployment instead. A batch retry skips such a run in the same words."""
    if record is None:
        what, instead = "a deployment", "start a new deployment"
    else:
        what = (
            f"deployment {record.id} ({record.workflow_name} v{record.candidate_version} over "
            f"v{record.serving_version})"
        )
        new = f"`schemabridge deployments start {record.workflow_name} --version VERSION`"
        if record.status == RUNNING:
            instead = (
                f"act on the deployment: `schemabridge deployments abort {record.id}` or "
                f"`schemabridge deployments rollback {record.id}` "
                f"(POST /deployments/{record.id}/abort or /rollback)"
            )
        else:
            instead = (
                f"the deployment has ended ({record.status}); to deploy again, start a new "
                f"deployment ({new}), which begins at stage 1"
            )
    refusal = WrongState(
        f"run {run_id} is the engine's own run driving {what}: a {action} would rewrite the "
        f"record of the deployment's stages without changing the deployment; {instead}",
        state=state,
        code="deployment_run",
        run_id=run_id,
    )
    refusal.details["deploymentId"] = None if record is None else record.id
    return refusal


async def running_driven_by(conn: AsyncConnection, run_id: str) -> DeploymentRecord | None:
    """The RUNNING deployment whose `gradual_deploy` run is `run_id`, if any."""
    query = select(deployments).where(
        deployments.c.run_id == run_id, deployments.c.status == RUNNING
    )
    row = (await conn.execute(query)).first()
    return None if row is None else deployment_record(row._mapping)


async def end_driven_by(
    conn: AsyncConnection, run_id: str, now: float, *, reason: str, actor: str
) -> DeploymentRecord | None:
    """A deployment's `gradual_deploy` run `run_id` stopped (it failed) while the deployment
    was RUNNING: end it (`abort_stopped`). Returns the deployment it ended (None: the run
    drove none that was still RUNNING)."""
    record = await running_driven_by(conn, run_id)
    if record is None:
        return None
    # The figures at the end, as every other end records them: retries change the runs later.
    figures = await window_figures(conn, record)
    ended = await abort_stopped(conn, record, now, reason=reason, actor=actor, figures=figures)
    return record if ended else None


async def abort_stopped(
    conn: AsyncConnection,
    record: DeploymentRecord,
    now: float,
    *,
    reason: str,
    actor: str,
    figures: dict[str, Any] | None = None,
) -> bool:
    """End the RUNNING deployment `record`, whose `gradual_deploy` run stopped (failed or
    cancelled), ABORTED with `reason`: the candidate's weight 0, nothing promoted. False
    when it had ended meanwhile."""
    stage = record.stage_index + 1
    outcome: dict[str, Any] = {"reason": reason, "actor": actor, "stage": stage}
    if figures is not None:
        outcome["figures"] = figures
    if not await end(conn, record, DeploymentStatus.ABORTED, now, outcome, same_stage=False):
        return False
    # Logged here, the one place both ways of ending it pass (a cancel's transaction, a failed
    # run's flush), just before they commit.
    log_event(
        logger,
        logging.WARNING,
        "aborted",
        f"deployment {record.id} of {record.workflow_name} v{record.candidate_version} aborted "
        f"at stage {stage}: {reason}; {routing_after(record, figures)}",
        record,
        stage=stage,
        actor=actor,
        figures=figures,
        reason=reason,
    )
    return True


async def set_stage(
    conn: AsyncConnection,
    record: DeploymentRecord,
    to_index: int,
    now: float,
    event: dict[str, Any],
) -> bool:
    """Move a RUNNING deployment from the stage it is in (as `record` read it) to `to_index`:
    its clock starts now, the candidate's weight becomes the stage's. False when the row
    changed meanwhile (nothing is written)."""
    moved = await conn.execute(
        update(deployments)
        .where(
            deployments.c.id == record.id,
            deployments.c.status == RUNNING,
            deployments.c.stage_index == record.stage_index,
        )
        .values(
            stage_index=to_index,
            stage_started_at=now,
            # The counter as it is at this commit, not as `record` read it: a refusal counted
            # meanwhile belongs to the stage that ends.
            refused_before_stage=deployments.c.candidate_refused,
            timeline=[*record.timeline, event],
        )
    )
    if moved.rowcount != 1:
        return False
    await conn.execute(
        update(serving)
        .where(serving.c.name == record.workflow_name, serving.c.deployment_id == record.id)
        .values(candidate_weight=float(record.stages[to_index]["weight"]))
    )
    return True


async def end(
    conn: AsyncConnection,
    record: DeploymentRecord,
    status: DeploymentStatus,
    now: float,
    outcome: dict[str, Any],
    *,
    same_stage: bool,
) -> bool:
    """End a RUNNING deployment with `status`: the candidate's weight drops to 0 (and, for
    SUCCEEDED, the candidate becomes the serving version). `same_stage`: only if it is still
    in the stage `record` read (a stage's own verdict). False when it had already changed."""
    conditions = [deployments.c.id == record.id, deployments.c.status == RUNNING]
    if same_stage:
        conditions.append(deployments.c.stage_index == record.stage_index)
    event = {
        "at": now,
        "event": status.value.lower(),
        "stage": record.stage_index + 1,
        "note": outcome.get("reason"),
    }
    ended = await conn.execute(
        update(deployments)
        .where(*conditions)
        .values(
            status=status.value,
            ended_at=now,
            outcome=outcome,
            timeline=[*record.timeline, event],
        )
    )
    if ended.rowcount != 1:
        return False
    values: dict[str, Any] = {
        "candidate_version": None,
        "candidate_weight": 0.0,
        "deployment_id": None,
    }
    if status is DeploymentStatus.SUCCEEDED:
        values |= {
            "serving_version": record.candidate_version,
            "updated_at": now,
            "updated_by": f"deployment:{record.id}",
        }
    routed = await conn.execute(
        update(serving)
        .where(serving.c.name == record.workflow_name, serving.c.deployment_id == record.id)
        .values(**values)
    )
    if status is DeploymentStatus.SUCCEEDED and routed.rowcount == 1:
        # A promotion switches the serving version as `workflows serving` does: the same
        # audit event, by the deployment (the routing row's `updated_by`). An abort or a
        # rollback leaves the serving version as it was, so it writes none.
        await audit.append(
            conn,
            at=now,
            actor=f"deployment:{record.id}",
            action=AuditAction.SERVING_SET,
            subject=AuditSubject.WORKFLOW,
            subject_id=record.workflow_name,
            detail={
                "version": record.candidate_version,
                "was": record.serving_version,
                "deploymentId": record.id,
                "startedBy": record.created_by,
            },
        )
    return True


@dataclass(frozen=True)
class DeploymentCounts:
    """The runs a deployment routed: the candidate's since it began (up to the next
    deployment of the workflow, once it has ended: no run is routed to a candidate between
    the two), the serving version's over the same time (until it ended), and how many of the
    candidate's began in the stage in force. Bounded counts (`recent`) cover each version's
    most recent runs only."""

    candidate: VersionCounts
    serving: VersionCounts
    stage_runs: int
    candidate_until: float | None = None
    """The end of the candidate's window (None: open)."""


async def window_counts(
    conn: AsyncConnection, record: DeploymentRecord, recent: int | None = None
) -> DeploymentCounts:
    running = record.status == DeploymentStatus.RUNNING.value
    until = None if running else await candidate_window_end(conn, record)
    candidate_latest = None
    if recent is not None:
        # Enough to see the stage's minimum runs however many that is, and the policy's
        # minimum finished runs with `recent` to spare: the latest runs include those still
        # running, which would otherwise hide the finished ones the check waits for (a
        # policy wanting as many finished runs as the read holds could never pass).
        stage_runs = int(record.stages[record.stage_index]["minRuns"])
        needed = int(record.rollback.get("minFinishedRuns", 0))
        candidate_latest = max(recent, stage_runs) + needed
    candidate = await version_counts(
        conn,
        record.workflow_name,
        record.candidate_version,
        route=RunRoute.CANDIDATE.value,
        since=record.created_at,
        until=until,
        stage_since=record.stage_started_at,
        latest=candidate_latest,
    )
    serving = await version_counts(
        conn,
        record.workflow_name,
        record.serving_version,
        route=RunRoute.SERVING.value,
        since=record.created_at,
        until=None if running else record.ended_at,
        latest=recent,
    )
    refused = record.candidate_refused
    return DeploymentCounts(
        counts_of(candidate, refused=refused),
        counts_of(serving),
        candidate.since_stage + max(0, refused - record.refused_before_stage),
        until,
    )


def counts_of(counts: StatusCounts, *, refused: int = 0) -> VersionCounts:
    """A version's runs by outcome, with `refused` submissions (its inputSchema refused them:
    no run exists) counted as failed runs (`VersionCounts.refused` says how many)."""
    by_status = counts.by_status
    return VersionCounts(
        runs=sum(by_status.values()) + refused,
        succeeded=by_status.get(RunStatus.SUCCEEDED.value, 0),
        failed=by_status.get(RunStatus.FAILED.value, 0) + refused,
        cancelled=by_status.get(RunStatus.CANCELLED.value, 0),
        refused=refused,
    )


async def window_figures(conn: AsyncConnection, record: DeploymentRecord) -> dict[str, Any]:
    """Every run of `record`'s window by version and outcome, as an outcome records them: what
    the deployment's figures were when it ended, kept while retries change the runs later."""
    counts = await window_counts(conn, record)
    return {"candidate": counts.candidate.as_dict(), "serving": counts.serving.as_dict()}


async def count_refusal(conn: AsyncConnection, deployment_id: str) -> bool:
    """A submission routed to the candidate of RUNNING deployment `deployment_id` was refused
    by the candidate's inputSchema: count it on the deployment's row (one UPDATE by primary
    key; nothing when the deployment has ended meanwhile, which the result says)."""
    counted = await conn.execute(
        update(deployments)
        .where(deployments.c.id == deployment_id, deployments.c.status == RUNNING)
        .values(candidate_refused=deployments.c.candidate_refused + 1)
    )
    return counted.rowcount == 1


async def version_counts(
    conn: AsyncConnection,
    name: str,
    version: int,
    *,
    route: str,
    since: float,
    until: float | None,
    stage_since: float | None = None,
    latest: int | None = None,
) -> StatusCounts:
    """Root runs of `name` v`version` that routing gave `route`, created in [since, until)
    (no end when `until` is None), by status, and how many of them were created from
    `stage_since` on; with `latest`, only the `latest` most recent of them (a bounded read,
    whatever the window holds). One range of the partial index
    `ix_run_roots_workflow_version_created` (its predicate spelled as in the index), read
    newest first when bounded; the route and status come from the rows."""
    conditions = [
        runs.c.workflow_name == name,
        runs.c.workflow_version == version,
        runs.c.parent_run_id.is_(None),
        runs.c.created_at >= since,
        runs.c.route == route,
    ]
    if until is not None:
        conditions.append(runs.c.created_at < until)
    window = select(runs.c.status, runs.c.created_at).where(*conditions)
    if latest is not None:
        window = window.order_by(runs.c.created_at.desc()).limit(latest)
    rows_in = window.subquery()
    recent = case((rows_in.c.created_at >= (stage_since or since), 1), else_=0)
    query = select(rows_in.c.status, func.count(), func.sum(recent, type_=Integer)).group_by(
        rows_in.c.status
    )
    rows = (await conn.execute(query)).all()
    return StatusCounts(
        by_status={status: int(n) for status, n, _ in rows},
        since_stage=sum(int(s or 0) for _, _, s in rows),
    )


async def latest_rolled_back(
    conn: AsyncConnection, name: str, version: int
) -> DeploymentRecord | None:
    """The latest deployment of `name` whose candidate `version` was rolled back (by the
    engine's verdict or an operator), unless that version served after it: a later deployment
    promoted it, began while it served, or a serving switch (audited) made it serve — then
    the rollback is history, not what became of the version. A few rows of
    `ix_deployment_workflow_created` and of the workflow's audit events (both small)."""
    query = (
        select(deployments)
        .where(
            deployments.c.workflow_name == name,
            deployments.c.candidate_version == version,
            deployments.c.status == DeploymentStatus.ROLLED_BACK.value,
        )
        .order_by(deployments.c.created_at.desc())
        .limit(1)
    )
    row = (await conn.execute(query)).first()
    if row is None:
        return None
    rolled = deployment_record(row._mapping)
    if await _served_after(conn, name, version, rolled):
        return None
    return rolled


async def _served_after(
    conn: AsyncConnection, name: str, version: int, rolled: DeploymentRecord
) -> bool:
    """Whether `name` v`version` served after deployment `rolled` rolled it back."""
    later = (
        select(deployments.c.id)
        .where(
            deployments.c.workflow_name == name,
            deployments.c.created_at > rolled.created_at,
            or_(
                deployments.c.serving_version == version,
                and_(
                    deployments.c.candidate_version == version,
                    deployments.c.status == DeploymentStatus.SUCCEEDED.value,
                ),
            ),
        )
        .limit(1)
    )
    if (await conn.execute(later)).first() is not None:
        return True
    current = await serving_row(conn, name)
    if current is not None and current.serving_version == version:
        return True
    switches = select(audit_events.c.detail).where(
        audit_events.c.subject_kind == AuditSubject.WORKFLOW.value,
        audit_events.c.subject_id == name,
        audit_events.c.action == AuditAction.SERVING_SET.value,
        audit_events.c.at >= (rolled.ended_at or rolled.created_at),
    )
    return any(
        isinstance(detail, dict) and detail.get("version") == version
        for detail in (await conn.execute(switches)).scalars()
    )


async def recent_root_inputs(
    conn: AsyncConnection, name: str, version: int, *, limit: int
) -> list[Any]:
    """The inputs of the latest `limit` root runs of `name` v`version`, newest first: inputs
    that version accepted (a submission's input is checked before its run exists). One range
    of `ix_run_roots_workflow_version_created`, read newest first with a LIMIT."""
    query = (
        select(runs.c.input)
        .where(
            runs.c.workflow_name == name,
            runs.c.workflow_version == version,
            runs.c.parent_run_id.is_(None),
        )
        .order_by(runs.c.created_at.desc())
        .limit(limit)
    )
    return list((await conn.execute(query)).scalars())


WINDOW_GRACE_S = 10.0
"""How long after a deployment ended a run its candidate was routed may still be stamped: a
submission that chose the candidate just before the end committed stamps its run with its own
clock, read before it chose (a request's time, and the clock skew between processes)."""


async def candidate_window_end(conn: AsyncConnection, record: DeploymentRecord) -> float | None:
    """The end of ended deployment `record`'s candidate window: `WINDOW_GRACE_S` after it
    ended, or where the next deployment of the workflow began if that is sooner. Fixed once
    the grace has passed, so the `runs list` a deployment prints lists the same runs later,
    when the same version is deployed again (open-ended, it took in that deployment's runs)."""
    following = await next_deployment_start(conn, record)
    if record.ended_at is None:  # not ended: no end but the next deployment's start
        return following
    closes = record.ended_at + WINDOW_GRACE_S
    return closes if following is None else min(following, closes)


async def next_deployment_start(conn: AsyncConnection, record: DeploymentRecord) -> float | None:
    """When the next deployment of the same workflow began (None: none has): the end of the
    window in which `record`'s candidate runs were routed by it."""
    query = select(func.min(deployments.c.created_at)).where(
        deployments.c.workflow_name == record.workflow_name,
        deployments.c.created_at > record.created_at,
    )
    found = (await conn.execute(query)).scalar()
    return None if found is None else float(found)


async def rerun_facts_of(conn: AsyncConnection, run: Any) -> RerunFacts:
    """What running `run` (a row with its workflow, version, route, `restarted_from`, parent
    and tenant) again would run: its version, the route of the submission it repeats (for a
    start over, its original's: `restarts.original_routes`), the workflow's routing row and
    the latest deployment that rolled that version back."""
    name, version = run.workflow_name, run.workflow_version
    (route,) = await submitted_routes(conn, [run])
    return RerunFacts(
        workflow=name,
        version=version,
        route=route,
        parent_run_id=run.parent_run_id,
        serving=await serving_row(conn, name),
        rolled_back=await latest_rolled_back(conn, name, version),
        tenant_id=run.tenant_id,
    )
