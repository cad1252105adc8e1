"""The engine side of DEPLOY_STAGE, the system vertex of `gradual_deploy` runs, and the
system workflow itself (docs/architecture.md, 'Versions and deployments').

A deployment is driven by one `gradual_deploy` run whose vertices are its stages,
`stage-1 → stage-2 → …`, each a DEPLOY_STAGE step. A stage step reads its deployment,
counts the runs it routed and lets `vertices.deploy.decide` judge them:

* hold → the step parks until the next check (a durable timer: `not_before`);
* roll back → the deployment ends ROLLED_BACK with the figures (the candidate's weight drops
  to 0 in the same transaction) and the step succeeds with the verdict (`outcome`
  `rolled_back`), the later stages at once as not run, so the run is SUCCEEDED: it did its
  job. A FAILED run waits for an operator, and nothing here does (every operator action
  refuses it): FAILED would put a deployment that worked as designed among the failures an
  operator's dashboards and "Retry all matching" count, beside the candidate's own FAILED
  runs, which are the failures to look at. The deployment's status, ROLLED_BACK, says how
  it went; a run drive that broke (a stage step's error) still fails it;
* pass → the deployment moves to the next stage (its weight and clock) in one transaction and
  the step succeeds; after the last stage the candidate becomes the serving version and the
  deployment SUCCEEDED.

Everything a stage needs survives a restart: the stage in force and when it began are on the
deployment's row, the next check is the step's `not_before`. A step executed again (its
worker died after the change was committed, or an operator retried the run) reads the
deployment as it is: a stage already passed succeeds at once, an ended deployment fails it
again. Every change is a compare-and-set on the deployment row, so two executions of a step,
or a step racing an operator's abort, never both apply.
"""

from __future__ import annotations

import logging
from typing import Any

from engine.store import Store
from engine.store.deployment_log import figures_text, log_event
from engine.store.deployments import DeploymentCounts, stage_event
from engine.store.models import DeploymentStatus
from engine.store.records import ClaimedStep, DeploymentRecord
from schemas.clock import Clock
from schemas.definitions import GRADUAL_DEPLOY, DeployStageVertex, Workflow
from schemas.errors import FailureKind, StepFailure
from schemas.waiting import WaitReason
from vertices import deploy
from vertices.contract import LogFn, Parked, Succeeded, VertexOutcome

logger = logging.getLogger(__name__)

CHANGE_ATTEMPTS = 5
"""Reads of a deployment a check makes when it keeps changing under it (each lost
compare-and-set means someone else changed it: read it again)."""
CONTENDED_RETRY_S = 1.0


def gradual_deploy_workflow(stage_count: int) -> Workflow:
    """The system workflow of a deployment with `stage_count` stages: one DEPLOY_STAGE vertex
    per stage, each depending on the one before (never redispatched: its failures are
    verdicts)."""
    vertices: dict[str, Any] = {}
    for stage in range(1, stage_count + 1):
        vertex: dict[str, Any] = {
            "type": "DEPLOY_STAGE",
            "config": {"stage": stage},
            "maxAutoRetries": 0,
        }
        if stage > 1:
            vertex["dependsOn"] = [stage_vertex(stage - 1)]
        vertices[stage_vertex(stage)] = vertex
    return Workflow.model_validate(
        {
            "name": GRADUAL_DEPLOY,
            "description": "A gradual deployment of a workflow version, stage by stage, "
            "rolled back automatically when it fails too often.",
            "vertices": vertices,
        }
    )


def stage_vertex(stage: int) -> str:
    """The vertex id of a 1-based stage."""
    return f"stage-{stage}"


async def run_stage(
    store: Store,
    step: ClaimedStep,
    vertex: DeployStageVertex,
    clock: Clock,
    log: LogFn,
) -> VertexOutcome:
    """Execute one check of a stage (see the module). A change it makes (a stage passed, the
    promotion, a rollback) is written to the run's log with `log` and to the process log."""
    run_input = step.run_input if isinstance(step.run_input, dict) else {}
    deployment_id = run_input.get("deploymentId")
    index = vertex.config.stage - 1
    for _ in range(CHANGE_ATTEMPTS):
        record = None
        if isinstance(deployment_id, str):
            record = await store.deployment(deployment_id)
        if record is None:
            raise StepFailure(
                FailureKind.INTERNAL_ERROR, f"no deployment {deployment_id!r} for this run"
            )
        if record.run_id != step.run_id:
            raise StepFailure(
                FailureKind.INTERNAL_ERROR,
                f"deployment {record.id} is driven by run {record.run_id}, not this one",
            )
        if index >= len(record.stages):
            raise StepFailure(
                FailureKind.INTERNAL_ERROR,
                f"deployment {record.id} has {len(record.stages)} stages, not {index + 1}",
            )
        outcome = await _check(store, record, index, clock, log)
        if outcome is not None:
            return outcome
    return Parked(
        CONTENDED_RETRY_S,
        f"deployment {deployment_id} kept changing; checking again",
        WaitReason.DEPLOYMENT_STAGE,
    )


async def _check(
    store: Store, record: DeploymentRecord, index: int, clock: Clock, log: LogFn
) -> VertexOutcome | None:
    """One decision on `record` as read; None when a change was lost (read again)."""
    if record.status == DeploymentStatus.SUCCEEDED.value:
        return Succeeded(_passed_output(record, index))
    if record.status == DeploymentStatus.ROLLED_BACK.value and record.outcome is not None:
        # The engine's verdict (its stage step executed again) or a later stage after it. (A
        # rollback by hand cancels the run: no stage step runs after it.)
        return Succeeded(rolled_back_output(record, index))
    if record.status != DeploymentStatus.RUNNING.value:
        raise StepFailure(FailureKind.DEPLOYMENT_ENDED, ended_message(record))
    if record.stage_index > index:
        return Succeeded(_passed_output(record, index))
    now = clock.now()
    if record.stage_index < index:
        # A stage's step only succeeds once its deployment moved on, and a stage's step that
        # failed ended the deployment (`engine.store.results.fail_run`), so resolving it by
        # hand leads to the ended branch above. Should an earlier stage still be in force
        # here, this stage begins now rather than judge the runs of another stage's weight.
        note = "an earlier stage was resolved by an operator"
        event = stage_event(index, _weight(record, index), now, note=note)
        await store.enter_stage(record, index, event)
        return None
    stage = deploy.Stage.from_dict(record.stages[index])
    policy = deploy.RollbackPolicy.from_dict(record.rollback)
    counts = await store.deployment_counts(record, recent=deploy.JUDGED_RUNS)
    figures = _figures(counts, record, now)
    decision = deploy.decide(stage, policy, figures, record.check_interval_s, number=index + 1)
    if isinstance(decision, deploy.Hold):
        return Parked(decision.delay_s, decision.reason, WaitReason.DEPLOYMENT_STAGE)
    summary = figures.as_dict(policy)
    if isinstance(decision, deploy.RollBack):
        exposure = (await store.deployment_counts(record)).candidate.runs  # every one, once
        outcome = {
            "reason": decision.reason,
            "actor": "engine",
            "stage": index + 1,
            "weight": stage.weight,
            "figures": summary,
            "exposure": exposure,
        }
        if not await store.end_deployment(record, DeploymentStatus.ROLLED_BACK, outcome):
            return None
        await _rolled_back(record, index, decision.reason, summary, exposure=exposure, log=log)
        ended = await store.deployment(record.id)
        return Succeeded(rolled_back_output(ended or record, index, figures=summary))
    output = {"stage": index + 1, "weight": stage.weight, "verdict": decision.reason, **summary}
    if index == len(record.stages) - 1:
        outcome = {
            "reason": decision.reason,
            "actor": "engine",
            "stage": index + 1,
            "figures": summary,
        }
        changed = await store.end_deployment(record, DeploymentStatus.SUCCEEDED, outcome)
    else:
        event = stage_event(index + 1, _weight(record, index + 1), now, note=decision.reason)
        changed = await store.enter_stage(record, index + 1, event)
    if not changed:
        return None
    await _passed(record, index, decision.reason, summary, log)
    return Succeeded(output)


async def _passed(
    record: DeploymentRecord, index: int, reason: str, summary: dict[str, Any], log: LogFn
) -> None:
    """Say that stage `index` passed (committed): the next stage's weight, or the promotion."""
    name, candidate = record.workflow_name, record.candidate_version
    last = index == len(record.stages) - 1
    if last:
        what = (
            f"promoted: {name} v{candidate} now serves every new run (was "
            f"v{record.serving_version})"
        )
    else:
        weight = _weight(record, index + 1)
        what = f"stage {index + 2} begins: v{candidate} gets {weight:g} % of new runs"
    await log("info", f"{reason}; {what}", summary)
    log_event(
        logger,
        logging.INFO,
        "promoted" if last else "stage_passed",
        f"deployment {record.id} of {name}: {reason}; {what}",
        record,
        stage=index + 1,
        actor="engine",
        figures=summary,
        weight=None if last else _weight(record, index + 1),
    )


async def _rolled_back(
    record: DeploymentRecord,
    index: int,
    reason: str,
    summary: dict[str, Any],
    *,
    exposure: int,
    log: LogFn,
) -> None:
    """Say that the engine rolled the candidate back at stage `index` (committed)."""
    what = (
        f"rolled back at stage {index + 1}: {reason}; v{record.serving_version} serves every "
        f"new run again; exposure {exposure} runs went to v{record.candidate_version}"
    )
    await log("warning", what, {**summary, "exposure": exposure})
    log_event(
        logger,
        logging.WARNING,
        "rolled_back",
        f"deployment {record.id} of {record.workflow_name} v{record.candidate_version} {what} "
        f"(v{record.candidate_version}: {figures_text(summary)})",
        record,
        stage=index + 1,
        actor="engine",
        figures=summary,
        exposure=exposure,
    )


def _figures(counts: DeploymentCounts, record: DeploymentRecord, now: float) -> deploy.Figures:
    return deploy.Figures(
        candidate=counts.candidate,
        serving=counts.serving,
        stage_runs=counts.stage_runs,
        stage_elapsed_s=max(0.0, now - record.stage_started_at),
    )


def _weight(record: DeploymentRecord, index: int) -> float:
    return float(record.stages[index]["weight"])


def _passed_output(record: DeploymentRecord, index: int) -> dict[str, Any]:
    """The output of a stage found already passed (its step ran again after the change)."""
    return {
        "stage": index + 1,
        "weight": _weight(record, index),
        "verdict": "stage already passed",
        "deployment": record.status,
    }


def rolled_back_output(
    record: DeploymentRecord, index: int, *, figures: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The output of stage `index` of a deployment the engine rolled back: the verdict at the
    stage that judged it (`outcome` `rolled_back`), `not_run` at the stages after it."""
    outcome = record.outcome or {}
    judged = outcome.get("stage") == index + 1
    output: dict[str, Any] = {
        "stage": index + 1,
        "weight": _weight(record, index),
        "outcome": "rolled_back" if judged else "not_run",
        "verdict": ended_message(record) if judged else f"not run: {ended_message(record)}",
        "deployment": record.status,
    }
    if judged:
        output.update(figures or outcome.get("figures") or {})
        output["exposure"] = outcome.get("exposure")
    return output


def ended_message(record: DeploymentRecord) -> str:
    """Why a deployment's run fails: how the deployment ended, with its figures."""
    outcome = record.outcome or {}
    verb = "rolled back" if record.status == DeploymentStatus.ROLLED_BACK.value else "aborted"
    where = f" at stage {outcome['stage']}" if "stage" in outcome else ""
    reason = outcome.get("reason", record.status)
    exposure = f"; exposure {outcome['exposure']} runs" if "exposure" in outcome else ""
    return (
        f"deployment {record.id} of {record.workflow_name} v{record.candidate_version} "
        f"{verb}{where}: {reason}{exposure}"
    )
