"""A typed client of the SchemaBridge REST API, for the command line.

    async with ApiClient(ApiTarget("http://127.0.0.1:8000", key)) as api:
        submitted = await api.runs.submit("renewals", {"batchSize": 10})
        page = await api.runs.list(RunQuery(status="FAILED"), limit=20)
        await api.actions.retry(page.items[0].id)

Its groups mirror the operations layer's (`workflows`, `runs`, `actions`, `settings`,
`deployments`, `audit`;
`api.cli.client_routes`) and answer the API's JSON as the models of `api.cli.wire` (the
views' fields, under the same names; unknown fields are kept, so a newer server does not break
an older CLI). Every refusal, and every way of not reaching the API, is an `ApiFailure` with
its exit code (`api.cli.client_errors`, the one place HTTP is mapped). `ApiSession`
(`api.cli.session`) is the transport underneath: new groups are built on its `call`, `fetch`
and `events`.

Async like every other API of the project: commands run it with `asyncio.run`.
"""

from __future__ import annotations

from types import TracebackType

import httpx

from api.cli.client_errors import ApiFailure
from api.cli.client_routes import (
    ActionsApi,
    AuditApi,
    DeploymentsApi,
    RunsApi,
    SettingsApi,
    WorkflowsApi,
)
from api.cli.exit_codes import ExitCode
from api.cli.session import DEFAULT_API_URL, DEFAULT_TIMEOUT_S, ApiSession, ApiTarget, ServerEvent


class ApiClient:
    """The REST API as typed groups of calls (see the module docstring). Use it as an async
    context manager: the connection pool is closed at the end."""

    def __init__(
        self,
        target: ApiTarget,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.session = ApiSession(target, timeout_s=timeout_s, transport=transport)
        self.workflows = WorkflowsApi(self.session)
        self.runs = RunsApi(self.session)
        self.actions = ActionsApi(self.session)
        self.settings = SettingsApi(self.session)
        self.deployments = DeploymentsApi(self.session)
        self.audit = AuditApi(self.session)

    @property
    def api_url(self) -> str:
        return self.session.api_url

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.session.close()


__all__ = [
    "DEFAULT_API_URL",
    "ApiClient",
    "ApiFailure",
    "ApiSession",
    "ApiTarget",
    "ExitCode",
    "ServerEvent",
]
