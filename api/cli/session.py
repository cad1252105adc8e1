"""The transport under the CLI's REST client: one httpx connection pool to the API, the key
sent as `Authorization: Bearer`, every answer checked by the error mapping of
`api.cli.client_errors`, and server-sent event streams (httpx-sse).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pydantic
from httpx_sse import SSEError, aconnect_sse

from api.cli.client_errors import ApiFailure, response_failure, transport_failure
from api.cli.exit_codes import ExitCode
from api.cli.target import DEFAULT_API_URL, DEFAULT_TIMEOUT_S, ApiTarget

__all__ = ["DEFAULT_API_URL", "DEFAULT_TIMEOUT_S", "ApiSession", "ApiTarget", "ServerEvent"]

STREAM_READ_TIMEOUT_S = 60.0
"""A stream sends a heartbeat comment every 15 s; four missed ones mean it is gone."""

T = TypeVar("T")


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event: its name (`progress`, `end`, `error`) and its JSON data."""

    name: str
    data: Any


class ApiSession:
    """One HTTP connection pool to the API, with the error mapping applied to every answer."""

    def __init__(
        self,
        target: ApiTarget,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.target = target
        self.api_url = target.url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"Accept": "application/json", "User-Agent": "schemabridge-cli"}
        if target.key:
            headers["Authorization"] = f"Bearer {target.key}"
        try:
            self._http = httpx.AsyncClient(
                base_url=self.api_url,
                headers=headers,
                timeout=timeout_s,
                transport=transport,
                # A proxy from the environment would stand between an operator and an API on
                # loopback; `HTTPS_PROXY` users can still reach a remote API through one.
                trust_env=not _is_loopback(self.api_url),
            )
        except (httpx.InvalidURL, ValueError) as error:
            raise ApiFailure(
                f"--api-url {target.url!r} is not a URL: {error}", ExitCode.USAGE
            ) from None

    async def close(self) -> None:
        await self._http.aclose()

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request; an error answer or a transport failure is an `ApiFailure`."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = await self._http.request(
                method,
                path,
                params=query,
                json=body,
                headers=headers,
            )
        except httpx.TransportError as error:
            raise transport_failure(error, self.api_url, self.timeout_s) from error
        except httpx.InvalidURL as error:
            raise ApiFailure(f"--api-url {self.api_url!r}: {error}", ExitCode.USAGE) from None
        if response.status_code >= 400:
            raise response_failure(response, self.api_url)
        return response

    async def fetch(
        self,
        kind: type[T],
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> T:
        """`call`, with the JSON answer parsed as `kind` (a view model, a list of them)."""
        response = await self.call(method, path, params=params, body=body, headers=headers)
        return self.parse(kind, response)

    def parse(self, kind: type[T], response: httpx.Response) -> T:
        try:
            return pydantic.TypeAdapter(kind).validate_json(response.content)
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            where = "/".join(str(part) for part in first["loc"])
            # Most often the URL is another service's (any JSON API answers some paths);
            # a SchemaBridge API newer than this CLI is the rarer case, so it comes second.
            raise ApiFailure(
                f"{self.api_url} may not be a SchemaBridge API: it answered "
                f"{response.request.method} {response.request.url.path} with JSON this CLI "
                f"does not understand (at {where or '/'}: {first['msg']}); check --api-url "
                "(SCHEMABRIDGE_API_URL), or if it is one, whether this CLI is as new as the API",
                ExitCode.UNREACHABLE,
            ) from None

    @contextlib.asynccontextmanager
    async def events(self, path: str) -> AsyncIterator[AsyncIterator[ServerEvent]]:
        """A server-sent event stream: the events as they come (comments left out); an
        error answer before the stream starts is an `ApiFailure`. The caller decides what a
        stream that ends, or breaks, means."""
        timeout = httpx.Timeout(self.timeout_s, read=STREAM_READ_TIMEOUT_S)
        try:
            async with aconnect_sse(self._http, "GET", path, timeout=timeout) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise response_failure(source.response, self.api_url)
                yield _decoded(source.aiter_sse(), self.api_url)
        except httpx.TransportError as error:
            raise transport_failure(error, self.api_url, STREAM_READ_TIMEOUT_S) from error
        except SSEError as error:
            raise ApiFailure(
                f"{self.api_url}{path} is not an event stream ({error}); check --api-url",
                ExitCode.UNREACHABLE,
            ) from None


async def _decoded(events: AsyncIterator[Any], api_url: str) -> AsyncIterator[ServerEvent]:
    async for event in events:
        try:
            data = json.loads(event.data) if event.data else None
        except json.JSONDecodeError:
            raise ApiFailure(
                f"{api_url} sent an event whose data is not JSON: {event.data[:80]!r}",
                ExitCode.UNREACHABLE,
            ) from None
        yield ServerEvent(event.event, data)


def _is_loopback(url: str) -> bool:
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    return host in {"localhost", "::1"} or host.startswith("127.")
