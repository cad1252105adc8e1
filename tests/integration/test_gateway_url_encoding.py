"""Run input in a GATEWAY's URL, sent for real to a loopback aiohttp server that records the
raw request line: a value lands as one encoded path segment or query value, never as a path
or parameters of its own (a traversal such as `../../admin?delete=1#` must not reach /admin
with the vertex's headers and secrets); a password arrives as it was, whatever it holds; and a
value in the port or host cannot send the call to another server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import BasicAuth, web

from schemas.errors import FailureKind, StepFailure
from tests.integration.test_gateway import FAST, gateway_config, gateway_ctx
from vertices import gateway
from vertices.http_client import HttpClient, build_http_client, close_http_client

TRAVERSAL = "../../admin?delete=1#"


@dataclass
class Recorder:
    base: str = ""
    raw_paths: list[str] = field(default_factory=list)
    """Every request's raw path and query, as the request line carried them."""
    logins: list[tuple[str, str]] = field(default_factory=list)
    """Every request's Basic credential, decoded: (user, password)."""


@contextlib.asynccontextmanager
async def recording_server() -> AsyncIterator[Recorder]:
    recorder = Recorder()

    async def orders(request: web.Request) -> web.Response:
        recorder.raw_paths.append(request.raw_path)
        query = {name: request.query.getall(name) for name in request.query}
        return web.json_response({"id": request.match_info["id"], "query": query})

    async def login(request: web.Request) -> web.Response:
        recorder.raw_paths.append(request.raw_path)
        if "Authorization" in request.headers:
            auth = BasicAuth.decode(request.headers["Authorization"])
            recorder.logins.append((auth.login, auth.password))
        return web.json_response({"ok": True})

    async def anything_else(request: web.Request) -> web.Response:
        recorder.raw_paths.append(request.raw_path)
        return web.json_response({"error": "not found"}, status=404)

    app = web.Application()
    app.router.add_get("/customers/{id}/orders", orders)
    app.router.add_get("/login", login)
    app.router.add_route("*", "/{tail:.*}", anything_else)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    recorder.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield recorder
    finally:
        await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = build_http_client(max_connections=4)
    yield http
    await close_http_client(http)


@pytest.fixture
async def server() -> AsyncIterator[Recorder]:
    async with recording_server() as recorder:
        yield recorder


async def call(client: HttpClient, url: str, **input_: Any) -> dict[str, Any]:
    result = await gateway.execute(gateway_config(url), gateway_ctx(**input_), client, FAST)
    output: dict[str, Any] = result.output
    return output


async def test_a_traversal_in_the_path_arrives_as_one_segment(
    server: Recorder, client: HttpClient
) -> None:
    output = await call(client, f"{server.base}/customers/{{{{ input.id }}}}/orders", id=TRAVERSAL)
    assert output["status"] == 200
    assert output["body"] == {"id": TRAVERSAL, "query": {}}
    assert server.raw_paths == ["/customers/..%2F..%2Fadmin%3Fdelete=1%23/orders"]


async def test_a_value_in_the_query_is_one_value(server: Recorder, client: HttpClient) -> None:
    url = f"{server.base}/customers/7/orders?note={{{{ input.note }}}}&page=1"
    output = await call(client, url, note="a b&page=9&delete=1#x")
    assert output["body"]["query"] == {"note": ["a b&page=9&delete=1#x"], "page": ["1"]}
    assert server.raw_paths == ["/customers/7/orders?note=a%20b%26page%3D9%26delete%3D1%23x&page=1"]


@pytest.mark.parametrize("value", ["..", "."])
async def test_a_dot_segment_is_refused_before_anything_is_sent(
    server: Recorder, client: HttpClient, value: str
) -> None:
    with pytest.raises(StepFailure) as caught:
        await call(client, f"{server.base}/customers/{{{{ input.id }}}}/orders", id=value)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert server.raw_paths == []


@pytest.mark.parametrize(
    ("path", "input_"),
    [
        ("/del/{{ input.id }}", {}),  # null: DELETE /del/ would hit the whole collection
        ("/del/{{ input.id }}", {"id": ""}),
        ("/customers/{{ input.id }}/orders", {}),  # a misspelt name gives null: /customers//orders
        ("/customers/c{{ input.id }}/orders", {"id": None}),  # beside literal text too
    ],
)
async def test_a_null_or_empty_path_value_is_refused_before_anything_is_sent(
    server: Recorder, client: HttpClient, path: str, input_: dict[str, Any]
) -> None:
    with pytest.raises(StepFailure) as caught:
        await call(client, server.base + path, **input_)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    message = caught.value.message
    assert message.startswith("vertex 'call': url: {{ input.id }} gave null or an empty string")
    assert "inputSchema's `required`" in message and "\n" not in message
    assert server.raw_paths == []


@pytest.mark.parametrize(
    ("path", "input_", "sent"),
    [
        (
            "/customers/{{ input.a }}{{ input.id }}/orders",
            {"a": "", "id": "7"},
            "/customers/7/orders",
        ),
        ("/customers/c{{ input.id }}/orders", {"id": ""}, "/customers/c/orders"),
    ],
)
async def test_an_empty_string_beside_what_fills_its_segment_is_sent(
    server: Recorder, client: HttpClient, path: str, input_: dict[str, Any], sent: str
) -> None:
    """An optional part of a segment (a prefix or suffix left empty) is the author's to leave
    empty; only a segment left empty, or a null (a misspelt name), is refused."""
    await call(client, server.base + path, **input_)
    assert server.raw_paths == [sent]


async def test_a_null_port_is_refused_not_sent_to_the_default_port(client: HttpClient) -> None:
    with pytest.raises(StepFailure) as caught:
        await call(client, "http://127.0.0.1:{{ input.port }}/x")
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert "is empty (null)" in caught.value.message


async def test_a_null_query_value_in_the_url_is_sent_empty(
    server: Recorder, client: HttpClient
) -> None:
    """The documented choice: a value in the url's query string may be empty (`config.query`
    is where a null drops the parameter)."""
    output = await call(client, f"{server.base}/customers/7/orders?note={{{{ input.note }}}}")
    assert output["body"]["query"] == {"note": [""]}
    assert server.raw_paths == ["/customers/7/orders?note="]


PASSWORD = "p#?/@%:%41 é"
"""Every character that ends or changes a URL's userinfo: unencoded, `#` `?` `/` cut it (the
rest went to the wrong host as a path), `@` moved the host and `%41` arrived as `A`."""


async def test_a_password_in_the_userinfo_arrives_as_it_was(
    server: Recorder, client: HttpClient
) -> None:
    host = server.base.removeprefix("http://")
    url = f"http://{{{{ input.user }}}}:{{{{ input.password }}}}@{host}/login"
    output = await call(client, url, user="svc ops", password=PASSWORD)
    assert output["status"] == 200
    assert server.logins == [("svc ops", PASSWORD)]
    assert server.raw_paths == ["/login"]


@pytest.mark.parametrize(
    "template", ["http://127.0.0.1:{{ input.v }}/x", "http://127.0.0.1{{ input.v }}/x"]
)
async def test_run_input_in_the_port_cannot_send_the_call_elsewhere(
    server: Recorder, client: HttpClient, template: str
) -> None:
    """`server` plays the other host: `http://127.0.0.1:1@127.0.0.1:<its port>/x` calls it."""
    with pytest.raises(StepFailure) as caught:
        await call(client, template, v=f"1@{server.base.removeprefix('http://')}")
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert server.raw_paths == []
