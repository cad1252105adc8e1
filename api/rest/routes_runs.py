"""Runs: submit (`POST /workflows/{name}/runs`, with `Idempotency-Key` and `?wait=true`), list,
read, children, a fan-out's long tail and logs. The progress stream `/runs/{id}/events` is in
`api.rest.sse`.

Tenant isolation: a tenant key submits only for its own tenant (a `tenantId` naming another is
a 403 `tenant_forbidden`: the caller names a tenant it already knows is not its own, so the
refusal reveals nothing), and reads only its tenant's runs: another tenant's run is a 404
`run_not_found`, exactly like a run that does not exist, and never appears in a list. Admin
keys see every tenant.

`?wait=true` runs the run's GATEWAY calls under the gateway timeout tier (`TIMEOUT_GATEWAY_MS`,
15 s) and waits as long, plus `SYNC_WAIT_GRACE_S`, for the run to end: 200 with the output when
it SUCCEEDED, 502 `run_failed` with its error when it FAILED, 409 `run_cancelled` when it was
cancelled, 504 `run_still_running` with its id and URL when time ran out (the run goes on).
Each says whether this request created the run (`created`, as the answer without a wait
does: false when it replayed an `Idempotency-Key`), and each has its own model in OpenAPI
(`RunOutcome`, `RunFailedError`, `RunCancelledError`, `RunStillRunningError`): a client
behind a proxy tells the API's 502 and 504 from the proxy's by their `code`.
"""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse

from api.rest.auth import Caller, CallerDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import ContextDep, OperationsDep
from api.rest.errors import RUN_NOT_FOUND, ErrorBody, error_responses, run_read_responses
from api.rest.id_prefix_params import MatchLimit, prefix_query
from api.rest.middleware import note_submission
from api.rest.page_params import Cursor, page_limit
from api.rest.renamed import OLD_TENANT_PARAMETER, one_of
from api.rest.run_models import (
    RunCancelledDetails,
    RunCancelledError,
    RunFailedDetails,
    RunFailedError,
    RunOutcome,
    RunStillRunningDetails,
    RunStillRunningError,
    SubmitRequest,
    SubmittedRun,
)
from engine.operations import Operations
from engine.operations.fix_first import FailedCause, fix_first_words
from engine.operations.pagination import MAX_INTEGER, MAX_LIMIT
from engine.operations.runs import MAX_LONG_TAIL
from engine.operations.views import (
    UNKNOWN_KIND,
    LogList,
    LongTail,
    RunDetail,
    RunEnd,
    RunFilter,
    RunIdMatches,
    RunList,
    RunProgress,
    RunStatus,
    RunSummary,
    StepStatus,
)
from schemas.errors import NotFound
from schemas.message_excerpt import message_excerpt

SYNC_WAIT_GRACE_S = 2.0
"""How much longer than `TIMEOUT_GATEWAY_MS` a `?wait=true` waits. A call that times out uses
the whole tier, and it started after the wait did (the run had to be claimed first); without
the grace its failure would land just after the wait ended, and the caller would get 504
`run_still_running` instead of the 502 with the timeout. Two seconds cover the claim and the
recording of the run's end on a busy host; they do not cover a retried attempt (that is a
second tier)."""

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)

RunId = Annotated[str, Path(description="The run's id.", max_length=64)]

STATUS_FILTER = Query(
    alias="status",
    max_length=20,
    description="Only runs in this status: "
    + ", ".join(status.value for status in RunStatus)
    + " (any case). Another value is a 422 `invalid_filter` whose `details.accepted` lists "
    "these.",
)
"""The `status` filter of a run list and of a run's children."""

LOCATION = {
    "Location": {
        "description": "Where the run is read (`/runs/{id}`), as the body's `url`.",
        "schema": {"type": "string"},
    }
}
"""The header every answer naming a submitted run carries."""


def run_url(run_id: str) -> str:
    """Where a run is read, relative to the API's root."""
    return f"/runs/{run_id}"


def _tenant_of(caller: Caller, requested: str | None) -> str:
    return caller.own_tenant(requested, "submits for") or caller.tenant or "default"


def _outcome(detail: RunEnd | RunDetail, *, created: bool) -> JSONResponse:
    """The answer of `?wait=true` once the wait is over; `created`: whether this request
    created the run (False: it replayed an `Idempotency-Key`)."""
    url = run_url(detail.id)
    summary = RunSummary(**{k: getattr(detail, k) for k in RunSummary.model_fields})
    if detail.status == RunStatus.SUCCEEDED:
        outcome = RunOutcome(
            id=detail.id,
            url=url,
            created=created,
            status=RunStatus.SUCCEEDED,
            output=detail.output,
            run=summary,
        )
        # Always 200, whether this request created the run or not: answered here rather than
        # through the route's `response_model`, which is the 201's (`SubmittedRun`) alone.
        body = outcome.model_dump(mode="json", by_alias=True)
        return JSONResponse(body, status_code=200, headers={"Location": url})
    common: dict[str, Any] = {"run_id": detail.id, "url": url, "created": created}
    answer: RunFailedError | RunCancelledError | RunStillRunningError
    if detail.status == RunStatus.FAILED:
        answer = RunFailedError(
            code="run_failed",
            message=_failed_words(detail),
            details=RunFailedDetails(**common, status=RunStatus.FAILED, error=detail.error),
        )
        status_code = 502
    elif detail.status == RunStatus.CANCELLED:
        answer = RunCancelledError(
            code="run_cancelled",
            message=f"run {detail.id} was cancelled",
            details=RunCancelledDetails(
                **common, state=RunStatus.CANCELLED, status=RunStatus.CANCELLED
            ),
        )
        status_code = 409
    else:
        # A run still going is answered with its whole detail (`wait_for_end`).
        assert isinstance(detail, RunDetail)
        progress = detail.as_progress()
        answer = RunStillRunningError(
            code="run_still_running",
            message=f"run {detail.id} has not ended yet"
            f"{_why_waiting(progress) or _why_running(detail)}; it goes on: "
            f"read it at {url}",
            details=RunStillRunningDetails(**common, status=RunStatus.RUNNING, progress=progress),
        )
        status_code = 504
    # Serialised by its model, so the body is what /openapi.json says it is.
    body = answer.model_dump(mode="json", by_alias=True)
    return JSONResponse(body, status_code=status_code, headers={"Location": url})


def _why_waiting(progress: RunProgress) -> str:
    """ " (step call waits: tenant acme is at its rate limit …)": the first waiting step's
    reason, or its children's, in words; empty when nothing says the run waits."""
    for step in progress.steps:
        if step.waiting is not None:
            return f" (step {step.vertex_id} waits: {step.waiting.text or step.waiting.message})"
    for children in progress.fanout.waiting:
        words = children.text or children.message or children.reason.value
        return f" ({children.children:,} children wait: {words})"
    return ""


def _why_running(detail: RunDetail) -> str:
    """ " (step call has been running for 3.0 s)": for a run that waits on no limit, how long
    its first running step's execution has gone on (its attempts and their in-process retries
    are written when the step ends, or when a retry waits a second or more, which
    `_why_waiting` says); empty when no step runs."""
    for step in detail.steps:
        if step.status is StepStatus.RUNNING and step.started_at is not None:
            running_s = max(0.0, time.time() - step.started_at)
            return f" (step {step.vertex_id} has been running for {running_s:.1f} s)"
    return ""


SUBMIT_ANSWERS: dict[int | str, dict[str, Any]] = {
    201: {
        "model": SubmittedRun,
        "headers": LOCATION,
        "description": "This request created the run (`created` true); with `?wait=true` a "
        "run that ends is never a 201: its outcome is one of the statuses below.",
    },
    200: {
        # `RunOutcome` first: a generated client tries a union's models in order and keeps the
        # first that parses (openapi-python-client does), and `SubmittedRun` parses every
        # `RunOutcome` (its fields are a subset), dropping `status` and `output`.
        "model": RunOutcome | SubmittedRun,
        "headers": LOCATION,
        "description": "Without `?wait=true`: the run this `Idempotency-Key` and request "
        "created before (`SubmittedRun`, `created` false). With `?wait=true`: the run "
        "SUCCEEDED (`RunOutcome`, with its output; `created` says whether this request "
        "created it or replayed an `Idempotency-Key`).",
    },
    **error_responses(
        401,
        403,
        404,
        422,
        429,
        503,
        codes={
            403: "The key is a tenant key and `tenantId` names another tenant "
            "(`tenant_forbidden`).",
            404: "No such published workflow, or no such version of it (`workflow_not_found`; "
            "close names in `details.meant`; for a name written `workflow@N` whose workflow is "
            'published, the message says to send `"version": N` in the body).',
            422: "The input is not what the workflow's inputSchema takes (`invalid_input`, "
            "with `details.problems`), is over `SCHEMABRIDGE_MAX_INPUT_BYTES` "
            "(`input_too_large`) or nested too deep (`input_too_deep`, or `too_deep` for the "
            "whole body); `tenantId` is not a tenant id (`invalid_tenant`); the "
            "`Idempotency-Key` is not 1 to 256 characters (`invalid_request`); the workflow "
            "is a system workflow (`system_workflow`); a key written twice in one object "
            "(`duplicate_key`); a body that is the input itself, not wrapped in `input` "
            "(`invalid_request` whose problem's code is `input_not_wrapped`).",
            429: "The ready queue is full (`queue_full`, with `Retry-After`), or the tenant's "
            "run quota is used up (`quota_exceeded`, `details` `tenantId`, `usedRuns`, "
            "`maxRuns`, no `Retry-After`: only raising the quota helps).",
        },
    ),
    409: {
        "model": RunCancelledError | ErrorBody,
        "headers": {
            "Location": {
                **LOCATION["Location"],
                "description": "With `run_cancelled` only: where the run is read "
                "(`/runs/{id}`), as `details.url`.",
            }
        },
        "description": "The same `Idempotency-Key` with another request "
        "(`idempotency_conflict`, an `ErrorBody`: `details.runId` the run the key names, "
        "`details.differs` what differs from the request that created it — `workflow`, "
        "`version` (named where the first left it out counts), `input` — and "
        "`details.inputPointer` where the input first differs, never its values); or, "
        "with `?wait=true`, the run was CANCELLED while the request waited (`run_cancelled`: "
        "a `RunCancelledError`). `run_cancelled` is also what the operator actions answer for "
        "a CANCELLED run (resolve, reprocess): it says the run is CANCELLED, in both, with the "
        "same `details` (`runId`, `state`; `url` and `created` only here).",
    },
    502: {
        "model": RunFailedError,
        "headers": LOCATION,
        "description": "With `?wait=true`: the run FAILED (`run_failed`; `details.error` its "
        "error: `kind`, `vertexId`, `httpStatus`, `bodyExcerpt`, …). The body's `code` tells "
        "this 502 from one a proxy in front of the API answers.",
    },
    504: {
        "model": RunStillRunningError,
        "headers": LOCATION,
        "description": "With `?wait=true`: the run had not ended when the wait did "
        "(`run_still_running`); it goes on: read it at `details.url` (`Location`). "
        "`details.progress` says why it had not ended (`steps[].waiting`: the tenant's rate "
        "limit, an open breaker, a retry's backoff, with `until`). The body's `code` tells "
        "this 504 from a proxy's gateway timeout.",
    },
}
"""What `POST /workflows/{name}/runs` answers, each status with its codes."""


def _failed_words(run: RunEnd | RunDetail) -> str:
    """A `?wait=true` 502's message: which step failed and why, in one bounded line (the
    whole error is `details.error`), and the request that runs it again once the cause is
    fixed. "run … failed (http_error)" left a client to dig the step and the fix out. A
    failure the workflow or the input caused (`FIX_FIRST_KINDS`, the step's or its failed
    children's) is not offered the retry, which fails the same way: the fix-first sentence
    `GET /runs/{id}` and `runs show` say instead."""
    run_id, error = run.id, run.error
    if error is None:
        return f"run {run_id} failed ({UNKNOWN_KIND}); GET /runs/{run_id} shows its steps"
    where = f" at step {error.vertex_id}" if error.vertex_id else ""
    said = message_excerpt(error.message) if error.message else ""
    why = f"{error.kind}: {said}" if said else error.kind
    child = error.child_cause
    fix_first = fix_first_words(
        [
            FailedCause(
                error.vertex_id or "",
                error.kind,
                child.kind if child is not None else None,
                child.count if child is not None else 0,
            )
        ],
        workflow=run.workflow,
        version=run.version,
        tenant_id=run.tenant_id,
        child_run=False,
        run_id=run_id,
    )
    if fix_first is not None:
        return f"run {run_id} failed{where}: {why}; {fix_first}"
    return (
        f"run {run_id} failed{where}: {why}; once the cause is fixed, "
        f"POST /runs/{run_id}/retry runs the failed step again"
    )


@router.post(
    "/workflows/{name}/runs",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmittedRun,
    responses=SUBMIT_ANSWERS,
    summary="Start a run of a workflow (optionally waiting for its end)",
)
async def submit(
    *,
    name: Annotated[str, Path(description="The workflow's name.", max_length=200)],
    body: SubmitRequest,
    request: Request,
    response: Response,
    ops: OperationsDep,
    context: ContextDep,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=256,
            description="The same key and request again: the same run (200); another "
            "request: 409 `idempotency_conflict`, naming what differs (`details.differs`). "
            "Scoped to the tenant.",
        ),
    ] = None,
    wait: Annotated[
        bool,
        Query(
            description="Wait up to the gateway tier (`TIMEOUT_GATEWAY_MS`, 15 s) and "
            f"{SYNC_WAIT_GRACE_S:g} s more for the run's end. Each of its GATEWAY calls is "
            "bounded by that tier, so a call that times out on its last attempt fails the run "
            "within the wait (502); one with attempts left is retried after the answer, a 504 "
            "`run_still_running`, and the run goes on."
        ),
    ] = False,
) -> SubmittedRun | JSONResponse:
    """201 with the new run's id and URL (`Location` too); 200 for a repeated submission
    (`created` false). With `?wait=true`, once the run ends or the wait does: 200
    `RunOutcome` (SUCCEEDED), 502 `run_failed`, 409 `run_cancelled`, 504
    `run_still_running`, each with `created` (false: this request replayed an
    `Idempotency-Key`) and `Location`. Every refusal, with its code, is listed under
    Responses; a used-up quota is raised by an admin with `PUT /tenants/{id}/limits`."""
    tenant_id = _tenant_of(caller, body.tenant_id)
    try:
        result = await ops.runs.submit(
            name,
            body.input,
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            version=body.version,
            synchronous=wait,
            actor=caller.actor,
        )
    except NotFound as refused:
        raise await _version_in_name(ops, name, refused) from None
    note_submission(request.state, result.run.id, replayed=not result.created)
    url = run_url(result.run.id)
    response.headers["Location"] = url
    if wait:
        timeout_s = context.settings.timeout_gateway_ms / 1000 + SYNC_WAIT_GRACE_S
        detail = await ops.runs.wait_for_end(result.run.id, timeout_s, tenant=caller.tenant)
        return _outcome(detail, created=result.created)
    if not result.created:
        response.status_code = status.HTTP_200_OK
    return SubmittedRun(id=result.run.id, url=url, created=result.created, run=result.run)


_NAME_AT_VERSION = re.compile(r"(?P<name>.+)@(?P<version>[1-9][0-9]{0,8})")
"""A name written `workflow@N`, as the command line takes it: over REST the version goes in
the body."""


async def _version_in_name(ops: Operations, name: str, refused: NotFound) -> NotFound:
    """`refused`, or, when `name` is `workflow@N` and that workflow is published, a refusal
    that says how to run version N over REST (a did-you-mean alone does not)."""
    written = _NAME_AT_VERSION.fullmatch(name)
    if refused.code != "workflow_not_found" or written is None:
        return refused
    workflow, version = written["name"], int(written["version"])
    try:
        await ops.workflows.versions(workflow)
    except NotFound:
        return refused
    return NotFound(
        f"no published workflow {name!r}; to run version {version} of {workflow!r}, POST "
        f'/workflows/{workflow}/runs with "version": {version} in the body',
        code=refused.code,
        details=refused.details,
    )


@router.get(
    "/runs",
    response_model=RunList,
    responses=error_responses(
        401,
        403,
        404,
        422,
        503,
        codes={
            403: "A tenant key's `tenantId` names another tenant (`tenant_forbidden`).",
            404: "`workflow` names a workflow, or `version` a version of it, that was never "
            "published (`workflow_not_found`: close names in `details.meant`, or the "
            "workflow's versions in `details.versions`), as `POST /runs/retry` with that "
            "filter answers: no run could match it.",
            422: "A filter no run can match (`invalid_filter`: `details.parameter` names it, "
            "`details.accepted` lists the values a status or route takes), or a cursor this "
            "list did not give out (`invalid_cursor`), or `parent` with `roots=true` (a "
            "parent's children are never root runs), or a `parent` that is a prefix of a run's "
            "id rather than the whole id (`invalid_filter`: `GET /run-ids?prefix=` finds it).",
        },
    ),
    summary="List runs (root runs unless roots=false), newest first, with filters and cursors",
)
async def list_runs(
    *,
    ops: OperationsDep,
    caller: CallerDep,
    workflow: Annotated[
        str | None,
        Query(
            max_length=200,
            description="Only runs of this workflow (a name never published is a 404 "
            "`workflow_not_found`, with the close names).",
        ),
    ] = None,
    version: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_INTEGER,
            description="Only runs of this version of `workflow`, which it needs.",
        ),
    ] = None,
    status_: Annotated[str | None, STATUS_FILTER] = None,
    tenant_id: Annotated[
        str | None, Query(alias="tenantId", max_length=200, description="Only this tenant's.")
    ] = None,
    tenant: Annotated[
        str | None, Query(max_length=200, deprecated=True, description=OLD_TENANT_PARAMETER)
    ] = None,
    parent: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Children of this run, by its whole id as `GET /runs/{id}` takes it "
            "(a prefix is a 422: `GET /run-ids?prefix=` finds the whole id).",
        ),
    ] = None,
    created_after: Annotated[
        float | None, Query(alias="createdAfter", description="Epoch seconds, inclusive.")
    ] = None,
    created_before: Annotated[
        float | None, Query(alias="createdBefore", description="Epoch seconds, exclusive.")
    ] = None,
    roots: Annotated[
        bool | None,
        Query(
            description="Only root runs (runs no spawner started), which is the default: "
            "`false` lists child runs too. With `parent`, its children are listed whether "
            "`roots` is left out or `false`; `parent` with `roots=true` is a 422 "
            "`invalid_filter` (children are never roots)."
        ),
    ] = None,
    route: Annotated[
        str | None,
        Query(
            max_length=20,
            description="Only runs whose version was chosen so: serving, candidate (a "
            "deployment's share), pinned, system or start_over (an operator's start over).",
        ),
    ] = None,
    limit: Annotated[int, page_limit("Runs")] = 50,
    cursor: Cursor = None,
) -> RunList:
    """Root runs by default, as `schemabridge runs list`, the monitor and a batch retry by
    filter (`POST /runs/retry`) take them, so the runs a list shows are those a batch retry
    of the same filter acts on: one fan-out's children do not bury a tenant's runs.
    `roots=false` lists every run; `parent` lists that run's children (newest first; in
    item order, `GET /runs/{id}/children`). Another tenant's runs never appear for a tenant
    key; a `tenantId` naming another is a 403 `tenant_forbidden`."""
    selection = RunFilter(
        workflow=workflow,
        version=version,
        status=status_,
        tenant=caller.own_tenant(
            one_of(tenant_id, tenant, name="tenantId", old_name="tenant"), "reads"
        ),
        parent=parent,
        created_after=created_after,
        created_before=created_before,
        roots_only=roots,
        route=route,
    )
    return await ops.runs.list(selection, limit=limit, cursor=cursor, tenant=caller.tenant)


@router.get(
    "/run-ids",
    response_model=RunIdMatches,
    responses=error_responses(401, 422, 503),
    summary="The ids of the runs whose id starts with a prefix (the monitor's short ids)",
)
async def match_run_ids(
    *,
    ops: OperationsDep,
    caller: CallerDep,
    prefix: Annotated[str, prefix_query("run")],
    limit: MatchLimit = 5,
) -> RunIdMatches:
    """One id: the prefix names that run; several: it is ambiguous (`more`: even more match
    than listed); none: no run (of the key's tenant) starts with it. 422 `invalid_request`
    for anything but 8 to 32 hex digits and hyphens. Not under `/runs/`, where the segment
    after it is a run's id."""
    return await ops.runs.match_prefix(prefix, limit=limit, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}",
    response_model=RunDetail,
    responses=run_read_responses(),
    summary="A run with its steps, errors, attempt histories and fan-out progress",
)
async def get_run(run_id: RunId, ops: OperationsDep, caller: CallerDep) -> RunDetail:
    return await ops.runs.get(run_id, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}/children",
    response_model=RunList,
    responses=run_read_responses(
        {
            422: "An unknown status (`invalid_filter`: `details.parameter` names it, "
            "`details.accepted` lists the statuses), or a cursor this list did not give out "
            "(`invalid_cursor`).",
        }
    ),
    summary="A run's children in item order (cursor pagination)",
)
async def list_children(
    *,
    run_id: RunId,
    ops: OperationsDep,
    caller: CallerDep,
    status_: Annotated[str | None, STATUS_FILTER] = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description="Children in this page; `next` continues.")
    ] = 100,
    cursor: Cursor = None,
) -> RunList:
    return await ops.runs.children(
        run_id, status=status_, limit=limit, cursor=cursor, tenant=caller.tenant
    )


@router.get(
    "/runs/{run_id}/steps/{vertex_id}/long-tail",
    response_model=LongTail,
    responses=run_read_responses(
        {
            404: RUN_NOT_FOUND + ", or a vertex the run does not have (`step_not_found`: "
            "`details.steps` the run's steps, `details.meant` the close names).",
            422: "The vertex is a GATEWAY or a MERGE, not a SPAWNER (`not_a_spawner`).",
        }
    ),
    summary="A fan-out's long tail: child duration percentiles, slowest and oldest running",
)
async def long_tail(
    *,
    run_id: RunId,
    vertex_id: Annotated[str, Path(description="A SPAWNER vertex of the run.", max_length=200)],
    ops: OperationsDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LONG_TAIL, description="Children per list.")] = 10,
) -> LongTail:
    """Nearest-rank p50/p95/p99, max and mean of the SUCCEEDED and FAILED children's
    durations (created to ended), the `limit` slowest of them and the `limit` children still
    running that started first. 404 `step_not_found` for a vertex the run does not have; 422
    `not_a_spawner` for a GATEWAY or MERGE."""
    return await ops.runs.long_tail(run_id, vertex_id, limit=limit, tenant=caller.tenant)


@router.get(
    "/runs/{run_id}/logs",
    response_model=LogList,
    responses=run_read_responses(
        {
            422: "A `cursor` that is not a log line's id, a whole number 0 to 2^63 - 1 "
            "(`invalid_cursor`, `details.parameter`).",
        }
    ),
    summary="A run's log lines, oldest first (cursor pagination)",
)
async def list_logs(
    run_id: RunId,
    ops: OperationsDep,
    caller: CallerDep,
    limit: Annotated[int, page_limit("Log lines")] = 200,
    cursor: Annotated[
        str | None,
        Query(
            description="The `next` of the previous page (the last line's id): lines after "
            "it. To follow a live log, pass the last id seen.",
            max_length=20,
        ),
    ] = None,
) -> LogList:
    return await ops.runs.logs(run_id, after=cursor, limit=limit, tenant=caller.tenant)
