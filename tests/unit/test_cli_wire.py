"""The CLI's models of the API's answers (api/cli/wire.py) name only fields the operations
layer's views have, so a field renamed on the server fails here rather than reading as
missing in the CLI."""

from __future__ import annotations

import pydantic
import pytest

from api.cli import wire
from api.cli.run_options import STATUSES
from api.rest.keys import CurrentKey
from api.rest.routes_admin import CapsRemoved
from engine.operations import action_views, audit_views, deployment_views, settings_views, views
from engine.store.models import RunStatus

MIRRORS: list[tuple[type[wire.Wire], type[pydantic.BaseModel]]] = [
    (wire.PublishResult, views.PublishResult),
    (wire.WorkflowSummary, views.WorkflowSummary),
    (wire.VersionSummary, views.VersionSummary),
    (wire.VersionDetail, views.VersionDetail),
    (wire.GraphNode, views.GraphNode),
    (wire.GraphView, views.GraphView),
    (wire.SentRequestView, views.SentRequestView),
    (wire.ErrorView, views.ErrorView),
    (wire.ChildCauseView, views.ChildCauseView),
    (wire.RunSummary, views.RunSummary),
    (wire.SubmitResult, views.SubmitResult),
    (wire.AttemptView, views.AttemptView),
    (wire.SpawnerCounts, views.SpawnerCounts),
    (wire.HolderView, views.HolderView),
    (wire.StepView, views.StepView),
    (wire.WaitingChildren, views.WaitingChildren),
    (wire.HeldChildren, views.HeldChildren),
    (wire.FanoutProgress, views.FanoutProgress),
    (wire.RunDetail, views.RunDetail),
    (wire.StepProgress, views.StepProgress),
    (wire.RunProgress, views.RunProgress),
    (wire.LogEntry, views.LogEntry),
    (wire.RunIdMatches, views.RunIdMatches),
    (wire.IdMatches, views.IdMatches),
    (wire.DeploymentIdMatches, views.DeploymentIdMatches),
    (wire.RetryResult, action_views.RetryResult),
    (wire.RetryPreview, action_views.RetryPreview),
    (wire.ResolveResult, action_views.ResolveResult),
    (wire.StartOverResult, action_views.StartOverResult),
    (wire.StartOverPreview, action_views.StartOverPreview),
    (wire.ReprocessResult, action_views.ReprocessResult),
    (wire.ReprocessPreview, action_views.ReprocessPreview),
    (wire.ReopenedJoin, action_views.ReopenedJoin),
    (wire.StepAgain, action_views.StepAgain),
    (wire.CancelResult, action_views.CancelResult),
    (wire.AbortedDeployment, action_views.AbortedDeployment),
    (wire.SkippedRun, action_views.SkippedRun),
    (wire.StuckRun, action_views.StuckRun),
    (wire.BatchRetryResult, action_views.BatchRetryResult),
    (wire.BatchReprocessResult, action_views.BatchReprocessResult),
    (wire.ReprocessedRun, action_views.ReprocessedRun),
    (wire.BatchRetryPreview, action_views.BatchRetryPreview),
    (wire.SkippedRuns, action_views.SkippedRuns),
    (wire.FixFirstRuns, action_views.FixFirstRuns),
    (wire.StuckRuns, action_views.StuckRuns),
    (wire.CapsView, settings_views.CapsView),
    (wire.CapsRemoved, CapsRemoved),
    (wire.CurrentKey, CurrentKey),
    (wire.BreakerView, settings_views.BreakerView),
    (wire.ClosedBreakerView, settings_views.ClosedBreakerView),
    (wire.BreakersReset, settings_views.BreakersReset),
    (wire.DestinationView, settings_views.DestinationView),
    (wire.ServiceView, settings_views.ServiceView),
    (wire.TenantRateView, settings_views.TenantRateView),
    (wire.QuotaView, settings_views.QuotaView),
    (wire.TenantView, settings_views.TenantView),
    (wire.StageView, deployment_views.StageView),
    (wire.RollbackSpec, deployment_views.RollbackSpec),
    (wire.VersionFigures, deployment_views.VersionFigures),
    (wire.TimelineEvent, deployment_views.TimelineEvent),
    (wire.OutcomeView, deployment_views.OutcomeView),
    (wire.DeploymentView, deployment_views.DeploymentView),
    (wire.DeploymentChange, deployment_views.DeploymentChange),
    (wire.DeploymentPreview, deployment_views.DeploymentPreview),
    (wire.ServingView, deployment_views.ServingView),
    (wire.ServingChange, deployment_views.ServingChange),
    (wire.AuditEventView, audit_views.AuditEventView),
]

NOT_YET_SERVED = {(wire.StepView, "waiting"), (wire.StepProgress, "waiting")}
"""Fields the CLI prints as soon as the API sends them (why a step waits), which the views
do not have yet."""


def _aliases(model: type[pydantic.BaseModel]) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


@pytest.mark.parametrize(("mirror", "view"), MIRRORS, ids=lambda m: m.__name__)
def test_every_field_is_a_field_of_the_view(
    mirror: type[wire.Wire], view: type[pydantic.BaseModel]
) -> None:
    pending = {
        name for cls, name in NOT_YET_SERVED if cls is mirror and name not in view.model_fields
    }
    pending_aliases = {mirror.model_fields[name].alias or name for name in pending}
    assert _aliases(mirror) - pending_aliases <= _aliases(view)


def test_every_answer_model_is_checked() -> None:
    checked = {mirror for mirror, _ in MIRRORS}
    answers = {
        cls
        for cls in vars(wire).values()
        if isinstance(cls, type)
        and issubclass(cls, wire.Wire)
        and cls not in (wire.Wire, wire.Waiting)
        and not issubclass(cls, wire.Page)
        and cls is not wire.ActionResult
    }
    assert answers <= checked


def test_an_answer_reads_back_as_it_came() -> None:
    sent = {
        "id": "r1",
        "workflow": "w",
        "version": 1,
        "tenantId": "t",
        "status": "RUNNING",
        "createdAt": 1.5,
        "timeoutTier": "process",
        "steps": [{"vertexId": "a", "status": "READY", "newField": [1, 2]}],
    }
    run = wire.RunDetail.model_validate(sent)
    assert run.raw() == sent, "unknown fields kept, defaults not added"


def test_the_cli_offers_the_engines_run_statuses() -> None:
    # The CLI keeps its own copy so that `runs list` starts without the engine.
    assert set(STATUSES) == {status.value for status in RunStatus}
