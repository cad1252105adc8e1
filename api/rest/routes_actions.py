"""Operator actions on runs: retry, resolve, start over, batch retry, reprocess, cancel.

Each route is one call of `Operations.actions` for the caller: the action is logged in the
run's log with the caller's key (`key:<id>`, or `demo` with authentication off), and a tenant
key acts within its tenant (another tenant's run answers 404 `run_not_found`, as a run that
does not exist). A run in a state the action does not take answers 409 with the action's
`code` and `details.state`, the run's (or step's) current state.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from api.rest.auth import Caller, CallerDep
from api.rest.body_shape import JsonBodyRoute, not_wrapped
from api.rest.deps import OperationsDep
from api.rest.errors import RUN_NOT_FOUND, ErrorBody, error_responses, run_read_responses
from api.rest.renamed import renamed_fields
from api.rest.routes_runs import RunId
from api.rest.run_models import RunCancelledError
from engine.operations.action_views import (
    BatchReprocessResult,
    BatchRetryPreview,
    BatchRetryResult,
    CancelResult,
    ReprocessPreview,
    ReprocessResult,
    ResolveResult,
    RetryPreview,
    RetryResult,
    StartOverPreview,
    StartOverResult,
)
from engine.operations.batch_reprocess import MAX_REPROCESS_BATCH
from engine.operations.pagination import MAX_INTEGER
from engine.operations.views import RunFilter
from schemas.batch_limits import DEFAULT_BATCH, MAX_BATCH
from schemas.close_names import close_names

router = APIRouter(tags=["operator actions"], route_class=JsonBodyRoute)


TENANT_FORBIDDEN = "A tenant key's filter names another tenant (`tenant_forbidden`)."


UNPUBLISHED_FILTER = (
    "The filter names a workflow, or a version of it, that was never published "
    "(`workflow_not_found`: close names in `details.meant`, or the workflow's versions in "
    "`details.versions`): no run could match it."
)
BATCH_REFUSALS = (
    "A filter a run list refuses (`invalid_filter`, naming its `parameter`), neither or "
    "both of `ids` and `filter` (`invalid_batch`), more ids than `limit` (`too_many_runs`), "
    "or a body that does not fit (`invalid_request`)."
)


def _action_errors(
    conflicts: str, not_found: str = "", *, cancelled: bool = False, invalid: str = ""
) -> dict[int | str, dict[str, Any]]:
    """The answers of an action on one run: `conflicts` says its 409 codes; `cancelled`: one
    of them is `run_cancelled`, whose body is a `RunCancelledError` (its `details` as every
    `run_cancelled` has them: `runId`, `state`); `invalid`: what its 422 says, when not the
    common words."""
    codes = {
        404: RUN_NOT_FOUND + not_found + ".",
        409: conflicts + " (`details.state`: the run's or step's state).",
    }
    if invalid:
        codes[422] = invalid
    answers = error_responses(401, 404, 409, 422, 503, codes=codes)
    if cancelled:
        answers[409]["model"] = RunCancelledError | ErrorBody
    return answers


def _preview_errors() -> dict[int | str, dict[str, Any]]:
    """The answers of an action's read-only preview: a preview says in its answer what the
    action would refuse, so only a run it cannot read is refused (404)."""
    return run_read_responses()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ResolveRequest(_Body):
    """The output the failed step should have given."""

    output: Any = Field(description="Any JSON value (null included): the step's output.")

    @model_validator(mode="before")
    @classmethod
    def _output_required(cls, data: Any) -> Any:
        # `Any` alone would make the field optional with None; an absent output is a mistake,
        # an explicit null a legitimate output.
        if isinstance(data, dict) and "output" not in data:
            keys = [str(key) for key in data]
            if keys and not any(close_names(key, ["output"]) for key in keys):
                # None of them is `output` misspelt: the body is the output itself (what a
                # step answered, `{"status": 200, ...}`), which goes under `output`.
                raise not_wrapped(
                    "output_not_wrapped",
                    keys,
                    'of a resolve: the step\'s output goes under "output", as in {"output": {...}}',
                )
            if keys:
                # `output` misspelt: the unknown key is refused (extra="forbid") at its pointer
                # with the close field name, not hidden behind "'output' is required"; this
                # stand-in never reaches the route, as that key fails the body.
                return {**data, "output": None}
            raise PydanticCustomError("missing", "'output' is required (null is a valid output)")
        return data


class BatchFilter(_Body):
    """Which runs a batch retry covers; every field is optional, set fields combine with AND.
    `status` defaults to FAILED (only FAILED runs can be retried); root runs only unless
    `parent` is given or `roots` is false."""

    workflow: str | None = None
    version: int | None = Field(default=None, ge=1, le=MAX_INTEGER)
    status: str | None = None
    tenant_id: str | None = Field(
        default=None, description="Only this tenant's (`tenant`, its old name, is still taken)."
    )
    parent: str | None = Field(
        default=None,
        description="Only the children of this run, by its whole id (a prefix is a 422 "
        "`invalid_filter`: `GET /run-ids?prefix=` finds the whole id).",
    )
    created_after: float | None = Field(default=None, description="Epoch seconds, inclusive.")
    created_before: float | None = Field(default=None, description="Epoch seconds, exclusive.")
    route: str | None = Field(
        default=None,
        max_length=20,
        description="Only runs whose version was chosen so, as `GET /runs?route=`: serving, "
        "candidate (a deployment's share: with `workflow`, `version`, `createdAfter` and "
        "`createdBefore`, its exposure), pinned, system or start_over.",
    )
    roots: bool | None = Field(
        default=None,
        description="Only runs no spawner started; by default true unless `parent` is "
        "given, as for `GET /runs`: false covers child runs too, and `parent` with true is a "
        "422 `invalid_filter`.",
    )

    @model_validator(mode="before")
    @classmethod
    def _roots_only_is_roots(cls, data: Any) -> Any:
        """`rootsOnly`, the field's name until `roots` replaced it, still works (deprecated,
        not in the schema): clients and CLIs written for it keep their meaning."""
        data = renamed_fields(data)
        if not isinstance(data, dict):
            return data
        for old in ("rootsOnly", "roots_only"):
            if old in data:
                data = dict(data)
                given = data.pop(old)
                if "roots" in data and data["roots"] != given:
                    raise PydanticCustomError(
                        "roots_conflict",
                        f"`{old}` (deprecated) and `roots` differ: give only `roots`",
                    )
                data["roots"] = given
        return data

    def selection(self) -> RunFilter:
        return RunFilter(
            workflow=self.workflow,
            version=self.version,
            status=self.status,
            tenant=self.tenant_id,
            parent=self.parent,
            created_after=self.created_after,
            created_before=self.created_before,
            roots_only=self.roots,
            route=self.route,
        )


class BatchRetryRequest(_Body):
    """Exactly one of `ids` and `filter`."""

    ids: list[str] | None = Field(default=None, description="The runs to retry.")
    filter: BatchFilter | None = Field(default=None, description="Retry the runs it matches.")
    limit: int = Field(
        default=DEFAULT_BATCH,
        ge=1,
        le=MAX_BATCH,
        description=f"The most runs considered (1 … {MAX_BATCH}, {DEFAULT_BATCH} by default); "
        "more ids are refused, a "
        "filter matching more answers `truncated: true`. A filter's deployment runs "
        "(`gradual_deploy`) are skipped beside the limit, not counted in it.",
    )


class BatchRetryPreviewRequest(_Body):
    """What a batch retry would be sent with: exactly one of `ids` and `filter`."""

    ids: list[str] | None = Field(
        default=None, description="The runs a batch retry of these ids would consider."
    )
    filter: BatchFilter | None = Field(
        default=None, description="The runs a batch retry with it would take."
    )
    limit: int = Field(
        default=DEFAULT_BATCH,
        ge=1,
        le=MAX_BATCH,
        description=f"The batch's `limit` (1 … {MAX_BATCH}, by default {DEFAULT_BATCH}, as "
        "the batch's own): runs are counted up to it, and `truncated` says more match; "
        "more ids are refused.",
    )


def _selection(batch: BatchFilter, caller: Caller) -> RunFilter:
    """The filter's runs, once a tenant key's filter is known to name only its own tenant."""
    caller.own_tenant(batch.tenant_id, "retries runs of")
    return batch.selection()


@router.post(
    "/runs/retry/preview",
    response_model=BatchRetryPreview,
    responses=error_responses(
        401,
        403,
        404,
        422,
        503,
        codes={
            403: TENANT_FORBIDDEN,
            404: UNPUBLISHED_FILTER,
            422: BATCH_REFUSALS,
        },
    ),
    summary="Count what a batch retry by ids or a filter would take, retrying nothing",
)
async def batch_retry_preview(
    body: BatchRetryPreviewRequest, ops: OperationsDep, caller: CallerDep
) -> BatchRetryPreview:
    """Read-only: what a confirm step says before `POST /runs/retry` with the same `ids` or
    `filter` and `limit` — `matching`, the runs it would take (counted in the database, up to
    `limit`), `truncated` when more match, `fixFirst` and `stuck`, those of them that would
    fail the same way at once or whose joins would (reprocess those instead), and
    `warnings`/`breakers`, which say those and each open breaker the steps of those runs that
    would run again call. A tenant key counts its tenant's runs only (a filter naming another
    tenant is a 403 `tenant_forbidden`)."""
    return await ops.actions.batch_retry_preview(
        None if body.filter is None else _selection(body.filter, caller),
        body.limit,
        ids=body.ids,
        tenant=caller.tenant,
    )


@router.post(
    "/runs/retry",
    response_model=BatchRetryResult,
    responses=error_responses(
        401,
        403,
        404,
        422,
        503,
        codes={403: TENANT_FORBIDDEN, 404: UNPUBLISHED_FILTER, 422: BATCH_REFUSALS},
    ),
    summary="Retry many FAILED runs at once, by ids or by a filter",
)
async def batch_retry(
    body: BatchRetryRequest, ops: OperationsDep, caller: CallerDep
) -> BatchRetryResult:
    """Answers the runs retried and those skipped, each with the reason a single retry would
    have refused it (`run_not_found`, `run_not_failed`, `deployment_run` for a deployment's
    own `gradual_deploy` run, `started_over` for a run started over: its `message` names the
    new run, `run_past_retention` for a run whose tree run retention or an operator's
    `schemabridge runs purge` is deleting) and its state, or `parent_succeeded`:
    a FAILED child whose retry would reopen the join of a run that has SUCCEEDED and run the
    steps after it again (start over that run, or retry the child alone by id). `stuck`: the
    runs retried whose joins fail again at once, their children still FAILED. `warnings`: each
    open breaker of a destination the retried steps call, once however many runs call it
    (when it half-opens, and the command that closes it), and the same breakers as data in
    `breakers` (destination, tenant: what `POST /destinations/{key}/breakers/reset` closes).
    `POST /runs/retry/preview` counts what a filter would take first."""
    return await ops.actions.batch_retry(
        ids=body.ids,
        filter=None if body.filter is None else _selection(body.filter, caller),
        limit=body.limit,
        actor=caller.actor,
        tenant=caller.tenant,
    )


@router.post(
    "/runs/{run_id}/retry",
    response_model=RetryResult,
    responses=_action_errors(
        "The run is not FAILED (`run_not_failed`), is a deployment's own `gradual_deploy` "
        "run (`deployment_run`), or was started over, or is under a run that was "
        "(`started_over`, `details.newRunId` and `newRunStatus`: look at that run), or its "
        "tree is being deleted by run retention or an operator's `schemabridge runs purge` "
        "(`run_past_retention`, `details.rootRunId`: start that run over instead; "
        "`details.retentionS`: null for a purge)"
    ),
    summary="Re-run the failed steps of a FAILED run (completed steps are kept)",
)
async def retry(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> RetryResult:
    """409 `run_not_failed` when the run is not FAILED; `deployment_run` (with
    `details.deploymentId`) for a deployment's own `gradual_deploy` run, whose stage checks a
    retry would rewrite: abort or roll back the deployment, or start a new one. Its FAILED
    steps run again (`stepsRetried`), and so do the steps stopped when it failed
    (`stepsHeldBack`); `message` says both. A dead-lettered child of a run that has SUCCEEDED
    is retried (a batch would skip it): that run reopens its join and the steps after it run
    again, which `warnings` and `reopenedRun` say. A run of a version a deployment rolled back
    (or that no longer serves) runs that version again: `warnings` says so. An open breaker
    the steps call is a warning, and in `breakers` as data (destination, tenant: what
    `POST /destinations/{key}/breakers/reset` closes)."""
    return await ops.actions.retry(run_id, actor=caller.actor, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}/retry/preview",
    response_model=RetryPreview,
    responses=_preview_errors(),
    summary="What a retry of the run would do now, with its warnings, doing nothing",
)
async def retry_preview(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> RetryPreview:
    """Read-only and cheap (the retry's own checks, without its writes): what a confirm step
    shows before `POST /runs/{id}/retry` — the FAILED steps that would run again and the
    steps stopped when the run failed (`stepsRetried`, `stepsHeldBack`, in words in
    `message`), the joins that would fail again at once (`stuckJoins`: reprocess the run
    instead), the ancestor that would reopen, a version rolled back that it would run again,
    and each open breaker the steps would meet (`warnings`, and `breakers` as data). A run not
    FAILED answers `retriable: false` with its status (the retry would answer 409
    `run_not_failed`); so does a deployment's `gradual_deploy` run, with the refusal's
    sentence (409 `deployment_run`) in `warnings`."""
    return await ops.actions.retry_preview(run_id, tenant=caller.tenant)


@router.post(
    "/runs/{run_id}/steps/{vertex_id}/resolve",
    response_model=ResolveResult,
    responses=_action_errors(
        "The run is CANCELLED (`run_cancelled`) or a deployment's own `gradual_deploy` run "
        "(`deployment_run`), the run was started over (`started_over`), its tree is being "
        "deleted (`run_past_retention`), the step is not FAILED "
        "(`step_not_failed`) or was resolved with another output (`step_already_resolved`)",
        "; a vertex the run does not have (`step_not_found`)",
        cancelled=True,
        invalid='The body is not `{"output": ...}` (`invalid_request`, with '
        "`details.problems`; a body that is the output itself, not wrapped in `output`: the "
        "problem's code is `output_not_wrapped`).",
    ),
    summary="Supply the output of a FAILED step; the run continues",
)
async def resolve(
    run_id: RunId,
    vertex_id: Annotated[str, Path(description="The FAILED step's vertex id.", max_length=200)],
    body: ResolveRequest,
    ops: OperationsDep,
    caller: CallerDep,
) -> ResolveResult:
    """404 `step_not_found` for a vertex the run does not have; 409 `step_not_failed`, or
    `step_already_resolved` for another output (the same output again changes nothing).
    Resolving the last FAILED step of a child run brings it back into its parent's join, as
    its retry would: when that reopens a run that had ended SUCCEEDED, `warnings`,
    `reopenedRun` and `reopenedJoin` say that the steps after the join run again
    (`GET /runs/{child}/retry/preview` says it before)."""
    return await ops.actions.resolve(
        run_id, vertex_id, body.output, actor=caller.actor, tenant=caller.tenant
    )


@router.post(
    "/runs/{run_id}/start-over",
    response_model=StartOverResult,
    responses={
        **_action_errors(
            "The run has not ended (`run_not_ended`), is a deployment's `gradual_deploy` run "
            "(`deployment_run`) or a child run of a fan-out (`start_over_child_run`)"
        ),
        **error_responses(
            429,
            codes={
                429: "The tenant's run quota is used up (`quota_exceeded`): a start over is "
                "a new run and takes one."
            },
        ),
    },
    summary="Start an ended run over as a new run with the same input",
)
async def start_over(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> StartOverResult:
    """409 `run_not_ended` while it runs, `deployment_run` for a deployment's own
    `gradual_deploy` run (act on the deployment, or start a new one), `start_over_child_run`
    for a child run of a fan-out (retry it, or start over its parent), each with
    `details.state`. Starting the same run over again answers the run the first time created
    (`changed: false`). The new run runs the old run's version, always: `warnings` says so
    when a deployment rolled it back or it no longer serves (to run the input on the serving
    version, submit it anew)."""
    return await ops.actions.start_over(run_id, actor=caller.actor, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}/start-over/preview",
    response_model=StartOverPreview,
    responses=_preview_errors(),
    summary="What a start over of the run would do now, with its warnings, doing nothing",
)
async def start_over_preview(
    run_id: RunId, ops: OperationsDep, caller: CallerDep
) -> StartOverPreview:
    """Read-only (the start over's own checks, without its writes): what a confirm step shows
    before `POST /runs/{id}/start-over` — `startable` with the version the new run would run
    (`message`) and the warnings the start over would answer (a version a deployment rolled
    back, or that no longer serves, runs again). A run started over before answers
    `startable: false` with the run that start over created (`newRunId`: a start over now
    answers it); a start over that would be refused (`run_not_ended`, `deployment_run`,
    `start_over_child_run`) answers `startable: false` with the refusal's sentence in
    `message`."""
    return await ops.actions.start_over_preview(run_id, tenant=caller.tenant)


class BatchReprocessRequest(_Body):
    """The runs whose dead letters run again."""

    # The bounds are documented, not checked here: the operations layer refuses with its own
    # codes and words (`invalid_batch`, `too_many_runs`), as the CLI's batch meets them.
    ids: list[str] = Field(
        description=f"The runs to reprocess, 1 … {MAX_REPROCESS_BATCH:,} (a batch retry's "
        "`stuck` runs, say); each id once however often it is given.",
        json_schema_extra={"minItems": 1, "maxItems": MAX_REPROCESS_BATCH},
    )


@router.post(
    "/runs/reprocess",
    response_model=BatchReprocessResult,
    responses=error_responses(
        401,
        422,
        503,
        codes={
            422: "No ids (`invalid_batch`), more than the batch takes (`too_many_runs`), "
            "or a body that does not fit (`invalid_request`)."
        },
    ),
    summary="Re-run the dead-lettered children of many runs at once, by ids",
)
async def batch_reprocess(
    body: BatchReprocessRequest, ops: OperationsDep, caller: CallerDep
) -> BatchReprocessResult:
    """Each run is reprocessed as `POST /runs/{id}/reprocess` does it alone (its own
    transaction, logged with the caller's key), in the order given. Skipped, each with its
    reason, state and words: a run the single action refuses (`run_not_found` for an
    unknown id or another tenant's run, `run_cancelled`, `deployment_run`, `started_over`,
    `run_past_retention`), a run with no dead letter (`no_dead_letters`), and a run whose
    reprocess would reopen the join of a run that had ended SUCCEEDED, itself or one above
    it, and run the steps after that join again (`reopens_succeeded`: reprocess it alone if
    that is really wanted). `revived` counts the children that run again; `warnings` and
    `breakers` are the runs' own, each once."""
    return await ops.actions.batch_reprocess(body.ids, actor=caller.actor, tenant=caller.tenant)


@router.post(
    "/runs/{run_id}/reprocess",
    response_model=ReprocessResult,
    responses=_action_errors(
        "The run is CANCELLED (`run_cancelled`, as `?wait=true` answers for a run cancelled "
        "while it waited), a deployment's own `gradual_deploy` run (`deployment_run`), a "
        "run that was started over (`started_over`) or whose tree is being deleted "
        "(`run_past_retention`)",
        cancelled=True,
    ),
    summary="Re-run the run's dead-lettered (FAILED) children; their joins reopen",
)
async def reprocess(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> ReprocessResult:
    """409 `run_cancelled` for a CANCELLED run, `deployment_run` for a deployment's own
    `gradual_deploy` run; nothing to revive answers `changed: false`. A run that had
    SUCCEEDED (its MERGE tolerated the dead letters) is reprocessed, as a single retry of a
    child under it is: it runs again from its join, and the steps after the join send their
    calls a second time, which `warnings`, `reopenedRun` and `reopenedJoins` say
    (`GET /runs/{id}/reprocess/preview` says it before)."""
    return await ops.actions.reprocess(run_id, actor=caller.actor, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}/reprocess/preview",
    response_model=ReprocessPreview,
    responses=_preview_errors(),
    summary="What a reprocess of the run would do now, with its warnings, doing nothing",
)
async def reprocess_preview(
    run_id: RunId, ops: OperationsDep, caller: CallerDep
) -> ReprocessPreview:
    """Read-only (the reprocess's own reads and rules, without its writes): what a confirm
    step shows before `POST /runs/{id}/reprocess` — how many dead-lettered children would run
    again (`revived`, nested fan-outs' included) and the run's own first 100
    (`deadLetters`), each join that would reopen with the steps after it that would run
    again and what they call (`reopenedJoins`), the run that had SUCCEEDED and would run
    again (`reopenedRun`), and the warnings the reprocess would answer. A CANCELLED run
    answers `reprocessable: false` (the reprocess would answer 409 `run_cancelled`), and so
    does a deployment's `gradual_deploy` run, with the refusal in `warnings` (409
    `deployment_run`)."""
    return await ops.actions.reprocess_preview(run_id, tenant=caller.tenant)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=CancelResult,
    responses=_action_errors("The run has ended SUCCEEDED or FAILED (`run_ended`)"),
    summary="Cancel the run and every descendant still going",
)
async def cancel(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> CancelResult:
    """409 `run_ended` for a SUCCEEDED or FAILED run; already CANCELLED answers
    `changed: false`."""
    return await ops.actions.cancel(
        run_id, actor=caller.actor, tenant=caller.tenant, deployment_actor=caller.named_actor
    )
