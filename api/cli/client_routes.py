"""The REST API's routes as typed calls, one class per group of the operations layer
(`workflows`, `runs`, `actions`, `settings`, `deployments`, `audit`), each over an
`ApiSession`.

A method names its route in its docstring; it answers the route's answer as an
`api.cli.wire` model and leaves refusals to the session's error mapping (`ApiFailure`).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from api.cli.wire import (
    AuditEventView,
    AuditQuery,
    BatchReprocessResult,
    BatchRetryPreview,
    BatchRetryResult,
    BreakersReset,
    CancelResult,
    CapsRemoved,
    CapsView,
    CurrentKey,
    DeploymentChange,
    DeploymentIdMatches,
    DeploymentPreview,
    DeploymentView,
    DestinationView,
    GraphView,
    LogEntry,
    Page,
    PublishResult,
    ReprocessPreview,
    ReprocessResult,
    ResolveResult,
    RetryPreview,
    RetryResult,
    RunDetail,
    RunIdMatches,
    RunQuery,
    RunSummary,
    ServiceView,
    ServingChange,
    ServingView,
    StartOverPreview,
    StartOverResult,
    SubmitResult,
    TenantView,
    VersionDetail,
    VersionSummary,
    WorkflowSummary,
)

if TYPE_CHECKING:
    from api.cli.session import ApiSession, ServerEvent

T = TypeVar("T")

UNSET: Any = object()
"""A tenant limit left as it is (`None` puts it back to its default)."""


PAGE_LIMIT = 500
"""The most rows the API answers per page."""
MAX_PAGES = 100
"""Pages one `collect_pages` reads at most (50,000 rows)."""


async def collect_pages(
    fetch: Callable[[int, str | None], Awaitable[Page[T]]], limit: int, cursor: str | None
) -> Page[T]:
    """Up to `limit` rows of a paged list from `cursor` on, reading as many pages as it takes;
    the answer's `next` continues after the last row (None at the end of the list)."""
    items: builtins.list[T] = []
    after = cursor
    for _ in range(MAX_PAGES):
        page = await fetch(min(PAGE_LIMIT, limit - len(items)), after)
        items += page.items
        after = page.next
        if after is None or len(items) >= limit:
            break
    return Page[T](items=items, next=after)


def segment(value: str) -> str:
    """`value` as one path segment (a destination key holds `/` and `:`)."""
    return quote(value, safe="")


def filter_params(selection: RunQuery) -> dict[str, Any]:
    """A run filter as the query parameters (or batch body fields) the API takes."""
    return {
        "workflow": selection.workflow,
        "version": selection.version,
        "status": selection.status,
        "tenantId": selection.tenant,
        "parent": selection.parent,
        "createdAfter": selection.created_after,
        "createdBefore": selection.created_before,
        "route": selection.route,
    }


class WorkflowsApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    async def publish(self, documents: builtins.list[Any]) -> builtins.list[PublishResult]:
        """`POST /workflows` with a list: one transaction, one result per workflow."""
        return await self._session.fetch(
            builtins.list[PublishResult], "POST", "/workflows", body=documents
        )

    async def list(self, *, system: bool = False) -> Page[WorkflowSummary]:
        """`GET /workflows`; with `system`, the engine's own (`gradual_deploy`) too."""
        params = {"system": "true"} if system else None
        return await self._session.fetch(Page[WorkflowSummary], "GET", "/workflows", params=params)

    async def versions(self, name: str) -> Page[VersionSummary]:
        """`GET /workflows/{name}/versions`, newest first."""
        path = f"/workflows/{segment(name)}/versions"
        return await self._session.fetch(Page[VersionSummary], "GET", path)

    async def get(self, name: str, version: int | None = None) -> VersionDetail:
        """`GET /workflows/{name}` (the latest) or `/workflows/{name}/versions/{version}`."""
        path = f"/workflows/{segment(name)}"
        if version is not None:
            path += f"/versions/{version}"
        return await self._session.fetch(VersionDetail, "GET", path)

    async def graph(self, name: str, version: int) -> GraphView:
        """`GET /workflows/{name}/versions/{version}/graph`."""
        path = f"/workflows/{segment(name)}/versions/{version}/graph"
        return await self._session.fetch(GraphView, "GET", path)


class RunsApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    async def submit(
        self,
        workflow: str,
        run_input: Any,
        *,
        tenant: str | None = None,
        version: int | None = None,
        idempotency_key: str | None = None,
    ) -> SubmitResult:
        """`POST /workflows/{name}/runs` (`created` False: the key's earlier run)."""
        body: dict[str, Any] = {"input": run_input}
        if tenant is not None:
            body["tenantId"] = tenant
        if version is not None:
            body["version"] = version
        headers = None if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        path = f"/workflows/{segment(workflow)}/runs"
        return await self._session.fetch(SubmitResult, "POST", path, body=body, headers=headers)

    async def list(
        self,
        selection: RunQuery,
        *,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[RunSummary]:
        """`GET /runs`: one page, newest first."""
        params = {
            **filter_params(selection),
            # Said either way: an API before roots became the default lists every run
            # without it, and this one lists the roots.
            "roots": "true" if selection.roots_only else "false",
            "limit": limit,
            "cursor": cursor,
        }
        return await self._session.fetch(Page[RunSummary], "GET", "/runs", params=params)

    async def match_prefix(self, prefix: str, *, limit: int = 5) -> RunIdMatches:
        """`GET /run-ids?prefix=`: the ids of the runs starting with `prefix`, in id order."""
        params = {"prefix": prefix, "limit": limit}
        return await self._session.fetch(RunIdMatches, "GET", "/run-ids", params=params)

    async def get(self, run_id: str) -> RunDetail:
        """`GET /runs/{id}`: steps, attempt histories, fan-out progress."""
        return await self._session.fetch(RunDetail, "GET", f"/runs/{segment(run_id)}")

    async def children(
        self,
        run_id: str,
        *,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[RunSummary]:
        """`GET /runs/{id}/children`: one page in item order."""
        params = {"status": status, "limit": limit, "cursor": cursor}
        path = f"/runs/{segment(run_id)}/children"
        return await self._session.fetch(Page[RunSummary], "GET", path, params=params)

    async def logs(
        self, run_id: str, *, after: str | None = None, limit: int = 200
    ) -> Page[LogEntry]:
        """`GET /runs/{id}/logs`: lines after the id `after`, oldest first."""
        params = {"cursor": after, "limit": limit}
        path = f"/runs/{segment(run_id)}/logs"
        return await self._session.fetch(Page[LogEntry], "GET", path, params=params)

    @contextlib.asynccontextmanager
    async def events(self, run_id: str) -> AsyncIterator[AsyncIterator[ServerEvent]]:
        """`GET /runs/{id}/events`: `progress` events (data: a `RunProgress` as JSON), then
        `end` once the run has ended; `error` when the API could not read the run, `stopping`
        when its process stops (a restart)."""
        async with self._session.events(f"/runs/{segment(run_id)}/events") as stream:
            yield stream


class ActionsApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    def _path(self, run_id: str, action: str) -> str:
        return f"/runs/{segment(run_id)}/{action}"

    async def retry(self, run_id: str) -> RetryResult:
        """`POST /runs/{id}/retry` (409 `run_not_failed`)."""
        return await self._session.fetch(RetryResult, "POST", self._path(run_id, "retry"))

    async def retry_preview(self, run_id: str) -> RetryPreview:
        """`GET /runs/{id}/retry/preview`: what a retry would run again, retrying nothing."""
        path = self._path(run_id, "retry/preview")
        return await self._session.fetch(RetryPreview, "GET", path)

    async def resolve(self, run_id: str, vertex_id: str, output: Any) -> ResolveResult:
        """`POST /runs/{id}/steps/{vertex}/resolve` with the step's output."""
        path = self._path(run_id, f"steps/{segment(vertex_id)}/resolve")
        return await self._session.fetch(ResolveResult, "POST", path, body={"output": output})

    async def start_over(self, run_id: str) -> StartOverResult:
        """`POST /runs/{id}/start-over` (409 `run_not_ended`)."""
        path = self._path(run_id, "start-over")
        return await self._session.fetch(StartOverResult, "POST", path)

    async def start_over_preview(self, run_id: str) -> StartOverPreview:
        """`GET /runs/{id}/start-over/preview`: what a start over would do, starting nothing."""
        path = self._path(run_id, "start-over/preview")
        return await self._session.fetch(StartOverPreview, "GET", path)

    async def reprocess(self, run_id: str) -> ReprocessResult:
        """`POST /runs/{id}/reprocess` (409 `run_cancelled`)."""
        path = self._path(run_id, "reprocess")
        return await self._session.fetch(ReprocessResult, "POST", path)

    async def batch_reprocess(self, ids: builtins.list[str]) -> BatchReprocessResult:
        """`POST /runs/reprocess`: each run's dead letters run again, as one run's would."""
        body = {"ids": ids}
        return await self._session.fetch(BatchReprocessResult, "POST", "/runs/reprocess", body=body)

    async def reprocess_preview(self, run_id: str) -> ReprocessPreview:
        """`GET /runs/{id}/reprocess/preview`: what a reprocess would do, doing nothing."""
        path = self._path(run_id, "reprocess/preview")
        return await self._session.fetch(ReprocessPreview, "GET", path)

    async def cancel(self, run_id: str) -> CancelResult:
        """`POST /runs/{id}/cancel` (409 `run_ended`)."""
        return await self._session.fetch(CancelResult, "POST", self._path(run_id, "cancel"))

    async def batch_retry(
        self,
        *,
        ids: builtins.list[str] | None = None,
        selection: RunQuery | None = None,
        limit: int | None = None,
    ) -> BatchRetryResult:
        """`POST /runs/retry` with exactly one of `ids` and `selection`."""
        body: dict[str, Any] = {}
        if ids is not None:
            body["ids"] = ids
        if selection is not None:
            body["filter"] = _batch_filter(selection)
        if limit is not None:
            body["limit"] = limit
        return await self._session.fetch(BatchRetryResult, "POST", "/runs/retry", body=body)

    async def batch_retry_preview(
        self, selection: RunQuery | None, limit: int, *, ids: list[str] | None = None
    ) -> BatchRetryPreview:
        """`POST /runs/retry/preview`: what a batch retry with `selection` (or of `ids`)
        would take, counted by the API, retrying nothing."""
        chosen = {"ids": ids} if selection is None else {"filter": _batch_filter(selection)}
        body = {**chosen, "limit": limit}
        return await self._session.fetch(
            BatchRetryPreview, "POST", "/runs/retry/preview", body=body
        )


def _batch_filter(selection: RunQuery) -> dict[str, Any]:
    """A batch retry's `filter` body from the CLI's run query (`roots` always said)."""
    fields = {k: v for k, v in filter_params(selection).items() if v is not None}
    return {**fields, "roots": selection.roots_only}


class AuditApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    async def list(
        self, selection: AuditQuery, *, limit: int = 50, cursor: str | None = None
    ) -> Page[AuditEventView]:
        """`GET /audit` (admin): one page of administrative changes, newest first."""
        params = {
            "actor": selection.actor,
            "action": selection.action,
            "subjectKind": selection.subject_kind,
            "subjectId": selection.subject_id,
            "limit": limit,
            "cursor": cursor,
        }
        return await self._session.fetch(Page[AuditEventView], "GET", "/audit", params=params)


class SettingsApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    async def destinations(self) -> Page[DestinationView]:
        """`GET /destinations` (admin)."""
        return await self._session.fetch(Page[DestinationView], "GET", "/destinations")

    async def current_key(self) -> CurrentKey:
        """`GET /keys/current` (any key): the key the client sends, as the API knows it."""
        return await self._session.fetch(CurrentKey, "GET", "/keys/current")

    async def services(self) -> Page[ServiceView]:
        """`GET /services` (admin): every service that sent a heartbeat."""
        return await self._session.fetch(Page[ServiceView], "GET", "/services")

    async def change_caps(
        self,
        destination: str,
        *,
        max_concurrency: int = UNSET,
        rate_per_second: float | None = UNSET,
    ) -> CapsView:
        """`PATCH /destinations/{key}/caps`: each cap given is set (a rate of None removes
        it); one left `UNSET` stays as it is, merged by the API in one step (422
        `caps_not_set`: a rate alone for a destination without caps of its own;
        `invalid_destination` for a key no call has)."""
        body: dict[str, Any] = {}
        if max_concurrency is not UNSET:
            body["maxConcurrency"] = max_concurrency
        if rate_per_second is not UNSET:
            body["ratePerSecond"] = rate_per_second
        path = f"/destinations/{segment(destination)}/caps"
        return await self._session.fetch(CapsView, "PATCH", path, body=body)

    async def remove_caps(self, destination: str) -> CapsRemoved:
        """`DELETE /destinations/{key}/caps` (`removed` False: it had none)."""
        path = f"/destinations/{segment(destination)}/caps"
        return await self._session.fetch(CapsRemoved, "DELETE", path)

    async def reset_breakers(self, destination: str, tenant: str | None = None) -> BreakersReset:
        """`POST /destinations/{key}/breakers/reset`: close its open breakers (404
        `destination_not_found` for a key no call has reached)."""
        path = f"/destinations/{segment(destination)}/breakers/reset"
        params = {} if tenant is None else {"tenantId": tenant}
        return await self._session.fetch(BreakersReset, "POST", path, params=params)

    async def tenants(self) -> Page[TenantView]:
        """`GET /tenants` (admin)."""
        return await self._session.fetch(Page[TenantView], "GET", "/tenants")

    async def tenant(self, tenant_id: str) -> TenantView:
        """`GET /tenants/{id}` (the defaults for a tenant no one configured)."""
        return await self._session.fetch(TenantView, "GET", f"/tenants/{segment(tenant_id)}")

    async def set_limits(
        self,
        tenant_id: str,
        *,
        rate_per_minute: int | None = UNSET,
        max_runs: int | None = UNSET,
    ) -> TenantView:
        """`PUT /tenants/{id}/limits`: each limit given is set (None: back to the default,
        unlimited for the quota); one left `UNSET` stays as it is."""
        body: dict[str, Any] = {}
        if rate_per_minute is not UNSET:
            body["ratePerMinute"] = rate_per_minute
        if max_runs is not UNSET:
            body["maxRuns"] = max_runs
        path = f"/tenants/{segment(tenant_id)}/limits"
        return await self._session.fetch(TenantView, "PUT", path, body=body)


class DeploymentsApi:
    def __init__(self, session: ApiSession) -> None:
        self._session = session

    async def start(
        self,
        workflow: str,
        version: int,
        *,
        stages: builtins.list[dict[str, Any]] | None = None,
        rollback: dict[str, Any] | None = None,
        check_interval_s: float | None = None,
    ) -> DeploymentView:
        """`POST /workflows/{name}/deployments` (409 `deployment_running`, 422
        `invalid_deployment`); left out: the API's defaults."""
        body = _start_body(version, stages, rollback, check_interval_s)
        path = f"/workflows/{segment(workflow)}/deployments"
        return await self._session.fetch(DeploymentView, "POST", path, body=body)

    async def start_preview(
        self,
        workflow: str,
        version: int,
        *,
        stages: builtins.list[dict[str, Any]] | None = None,
        rollback: dict[str, Any] | None = None,
        check_interval_s: float | None = None,
    ) -> DeploymentPreview:
        """`POST /workflows/{name}/deployments/preview`: what `start` with the same arguments
        would do and warn about (refused alike), starting nothing."""
        body = _start_body(version, stages, rollback, check_interval_s)
        path = f"/workflows/{segment(workflow)}/deployments/preview"
        return await self._session.fetch(DeploymentPreview, "POST", path, body=body)

    async def list(
        self, workflow: str | None = None, *, limit: int = 20, cursor: str | None = None
    ) -> Page[DeploymentView]:
        """`GET /workflows/{name}/deployments`, or `GET /deployments` (every workflow's),
        newest first, a page from `cursor` on."""
        path = "/deployments" if workflow is None else f"/workflows/{segment(workflow)}/deployments"
        params: dict[str, Any] = {"limit": limit, "cursor": cursor}
        return await self._session.fetch(Page[DeploymentView], "GET", path, params=params)

    async def match_prefix(self, prefix: str, *, limit: int = 5) -> DeploymentIdMatches:
        """`GET /deployment-ids?prefix=`: the ids of the deployments starting with `prefix`,
        in id order (admin)."""
        params = {"prefix": prefix, "limit": limit}
        return await self._session.fetch(
            DeploymentIdMatches, "GET", "/deployment-ids", params=params
        )

    async def get(self, deployment_id: str) -> DeploymentView:
        """`GET /deployments/{id}` (404 `deployment_not_found`)."""
        path = f"/deployments/{segment(deployment_id)}"
        return await self._session.fetch(DeploymentView, "GET", path)

    async def abort(self, deployment_id: str, reason: str | None = None) -> DeploymentChange:
        """`POST /deployments/{id}/abort` (409 `deployment_ended`), with the operator's
        `reason` if given."""
        path = f"/deployments/{segment(deployment_id)}/abort"
        body = None if reason is None else {"reason": reason}
        return await self._session.fetch(DeploymentChange, "POST", path, body=body)

    async def rollback(self, deployment_id: str, reason: str | None = None) -> DeploymentChange:
        """`POST /deployments/{id}/rollback` (409 `deployment_ended`), with the operator's
        `reason` if given."""
        path = f"/deployments/{segment(deployment_id)}/rollback"
        body = None if reason is None else {"reason": reason}
        return await self._session.fetch(DeploymentChange, "POST", path, body=body)

    async def serving(self, workflow: str) -> ServingView:
        """`GET /workflows/{name}/serving`."""
        path = f"/workflows/{segment(workflow)}/serving"
        return await self._session.fetch(ServingView, "GET", path)

    async def set_serving(self, workflow: str, version: int) -> ServingChange:
        """`POST /workflows/{name}/serving` (admin; 409 `deployment_running`)."""
        path = f"/workflows/{segment(workflow)}/serving"
        return await self._session.fetch(ServingChange, "POST", path, body={"version": version})


def _start_body(
    version: int,
    stages: builtins.list[dict[str, Any]] | None,
    rollback: dict[str, Any] | None,
    check_interval_s: float | None,
) -> dict[str, Any]:
    """A deployment start's body (its preview's too); left out: the API's defaults."""
    body: dict[str, Any] = {"version": version}
    if stages is not None:
        body["stages"] = stages
    if rollback:
        body["rollback"] = rollback
    if check_interval_s is not None:
        body["checkIntervalSeconds"] = check_interval_s
    return body
