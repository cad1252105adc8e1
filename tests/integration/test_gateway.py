"""GATEWAY against a real HTTP server (the demo downstream on loopback): what is sent, what
comes back, and admission's hook. Retry timing lives in test_gateway_retries.py.

The helpers here (`RecordingSleep`, `LogRecorder`, `gateway_ctx`, `gateway_config`,
`RecordingGuard`) are shared with the other test_gateway*.py modules.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from schemas.definitions import GatewayConfig
from schemas.errors import FailureKind, RetryRefused, StepFailure
from vertices import gateway
from vertices.contract import StepContext, TimeoutTier
from vertices.http_client import HttpClient, build_http_client, close_http_client

FAST = gateway.GatewayTimeouts(collect_ms=5000, process_ms=5000, gateway_ms=5000)


class RecordingSleep:
    """Records every wait the gateway asks for; really sleeps only when `real`."""

    def __init__(self, *, real: bool) -> None:
        self.real = real
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.real:
            await asyncio.sleep(seconds)


@dataclass
class LogRecorder:
    lines: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, level: str, message: str, data: dict[str, Any]) -> None:
        self.lines.append((level, message, data))

    def field(self, name: str) -> list[Any]:
        return [data[name] for _, _, data in self.lines]


def gateway_ctx(
    log: LogRecorder | None = None,
    *,
    tier: TimeoutTier = TimeoutTier.PROCESS,
    **input_: Any,
) -> StepContext:
    return StepContext(
        run_id="run-1",
        vertex_id="call",
        tenant_id="tenant-a",
        attempt=1,
        context={"input": input_, "vertices": {}, "run": {"id": "run-1", "tenantId": "tenant-a"}},
        timeout_tier=tier,
        idempotency_key="idem-run-1-call",
        log=log or LogRecorder(),
    )


def gateway_config(url: str, *, base_delay_ms: int = 10, **fields: Any) -> GatewayConfig:
    retry = {"baseDelayMs": base_delay_ms, **fields.pop("retry", {})}
    return GatewayConfig.model_validate({"url": url, "retry": retry, **fields})


@dataclass
class RecordingGuard:
    before: list[tuple[str, bool]] = field(default_factory=list)
    after: list[tuple[str, int | None, str | None]] = field(default_factory=list)
    retry_after: list[float | None] = field(default_factory=list)
    refuse_retries: bool = False
    """Refuse retries as a low retry budget does."""
    block_retries: bool = False
    """Refuse retries as an open breaker does."""

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None:
        self.before.append((destination, retry))
        if retry and self.refuse_retries:
            raise RetryRefused("retry budget exhausted")
        if retry and self.block_retries:
            raise StepFailure(FailureKind.EXTERNAL_OVERLOAD, "circuit open")

    async def after_attempt(
        self,
        destination: str,
        status: int | None,
        error_kind: str | None,
        duration_s: float,
        *,
        retry_after_s: float | None = None,
    ) -> None:
        assert duration_s >= 0
        self.after.append((destination, status, error_kind))
        self.retry_after.append(retry_after_s)


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll a condition every 5 ms until it holds; fail after about `timeout_s`."""
    for _ in range(int(timeout_s / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"condition still false after {timeout_s} s")


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = build_http_client(max_connections=16)
    yield http
    await close_http_client(http)


async def test_output_shape(downstream: RunningDownstream, client: HttpClient) -> None:
    config = gateway_config(f"{downstream.url}/items", query={"count": 3})
    result = await gateway.execute(config, gateway_ctx(), client, FAST)
    assert set(result.output) == {"status", "headers", "body"}
    assert result.output["status"] == 200
    assert result.output["body"] == {"items": [{"id": i, "name": f"item-{i}"} for i in range(3)]}
    headers = result.output["headers"]
    assert headers["content-type"].startswith("application/json")
    assert all(name == name.lower() for name in headers)


async def test_expressions_are_rendered_everywhere(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    config = gateway_config(
        "{{ input.base }}/orders/{{ input.order.id }}",
        method="POST",
        headers={"X-Tenant": "{{ run.tenantId }}", "X-Qty": "{{ input.order.qty }}", "X-No": None},
        query={"tag": "{{ input.tags }}", "q": "id={{ input.order.id }}", "skip": "{{ input.no }}"},
        body={"id": "{{ input.order.id }}", "qty": "{{ input.order.qty }}", "run": "{{ run.id }}"},
    )
    ctx = gateway_ctx(base=downstream.url, order={"id": "A7", "qty": 3}, tags=["x", "y"])
    result = await gateway.execute(config, ctx, client, FAST)
    echo = result.output["body"]
    assert echo["method"] == "POST"
    assert echo["path"] == "/orders/A7"
    assert echo["query"] == {"tag": ["x", "y"], "q": "id=A7"}  # null dropped, list repeated
    assert echo["headers"]["x-tenant"] == "tenant-a"
    assert echo["headers"]["x-qty"] == "3"
    assert "x-no" not in echo["headers"]
    assert echo["headers"]["content-type"] == "application/json"
    assert echo["body"] == {"id": "A7", "qty": 3, "run": "run-1"}  # exact expression keeps type


async def test_a_string_body_with_a_text_content_type_is_sent_verbatim(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    config = gateway_config(
        downstream.url,
        method="PUT",
        headers={"Content-Type": "text/plain"},
        body="hi {{ input.n }}",
    )
    result = await gateway.execute(config, gateway_ctx(n=5), client, FAST)
    assert result.output["body"]["body"] == "hi 5"


@pytest.mark.parametrize(
    ("fields", "where", "expression"),
    [
        (
            {"headers": {"X-A": "{{ length(input.missing) }}"}},
            "/config/headers/X-A:",
            "length(input.missing)",
        ),
        ({"query": {"a": "{{ input.[ }}"}}, "/config/query/a:", "input.["),
        ({"body": {"a": "{{ abs(input.text) }}"}}, "/config/body/a:", "abs(input.text)"),
    ],
)
async def test_expression_errors_name_the_expression(
    downstream: RunningDownstream,
    client: HttpClient,
    fields: dict[str, Any],
    where: str,
    expression: str,
) -> None:
    config = gateway_config(downstream.url, **fields)
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(text="abc"), client, FAST)
    assert caught.value.kind is FailureKind.EXPRESSION_ERROR
    assert expression in caught.value.message
    assert caught.value.message.startswith(where)
    assert downstream.stats.total == 0  # nothing was sent


async def test_idempotency_key_is_identical_across_attempts(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([503, 500, 200])
    config = gateway_config(downstream.url)
    result = await gateway.execute(
        config, gateway_ctx(), client, FAST, sleep=RecordingSleep(real=False)
    )
    keys = [r.idempotency_key for r in downstream.stats.recent]
    assert keys == ["idem-run-1-call"] * 3
    assert result.output["body"]["headers"]["idempotency-key"] == "idem-run-1-call"


async def test_a_user_idempotency_key_is_kept(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    config = gateway_config(downstream.url, headers={"idempotency-key": "order-{{ input.id }}"})
    result = await gateway.execute(config, gateway_ctx(id=9), client, FAST)
    assert result.output["body"]["headers"]["idempotency-key"] == "order-9"


async def test_text_bodies_are_returned_as_text(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    config = gateway_config(
        f"{downstream.url}/t", query={"raw": "héllo", "content_type": "text/plain"}
    )
    result = await gateway.execute(config, gateway_ctx(), client, FAST)
    assert result.output["body"] == "héllo"


async def test_json_garbage_is_an_invalid_response(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    query = {"raw": '{"items": [1, 2', "content_type": "application/json"}
    config = gateway_config(downstream.url, query=query)
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(), client, FAST)
    failure = caught.value
    assert failure.kind is FailureKind.INVALID_RESPONSE
    # The kind is the failure's code, shown beside the message: not repeated inside it.
    assert failure.message.startswith(f"GET {downstream.url}: body declared application/json")
    assert "invalid_response" not in failure.message
    assert not failure.redispatchable
    assert failure.http is not None
    assert failure.http.status == 200
    assert failure.http.attempts == 1  # the destination answered: retrying would not help
    assert failure.http.body_excerpt == '{"items": [1, 2'
    assert downstream.stats.total == 1


async def test_json_nested_past_the_limit_is_an_invalid_response_not_a_crash(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    # 200 KB of brackets: the parser alone would raise RecursionError on it.
    deep = "[" * 100_000 + "]" * 100_000
    downstream.script([{"raw": deep, "content_type": "application/json"}], path="/deep")
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(gateway_config(f"{downstream.url}/deep"), gateway_ctx(), client, FAST)
    failure = caught.value
    assert failure.kind is FailureKind.INVALID_RESPONSE
    assert failure.message == (
        f"GET {downstream.url}/deep: body declared application/json; charset=utf-8 nests "
        "arrays and objects deeper than 64 levels, the limit of "
        "SCHEMABRIDGE_MAX_NESTING_DEPTH (1 attempt)"
    )
    assert not failure.redispatchable
    assert failure.http is not None and failure.http.attempts == 1  # like any invalid JSON
    assert downstream.stats.total == 1
    # The deployment's limit is the one applied.
    downstream.script([{"raw": "[[[0]]]", "content_type": "application/json"}], path="/three")
    config = gateway_config(f"{downstream.url}/three")
    with pytest.raises(StepFailure, match="deeper than 2 levels"):
        await gateway.execute(config, gateway_ctx(), client, FAST, max_nesting_depth=2)


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_cap_is_cut_and_flagged(
    downstream: RunningDownstream, client: HttpClient, chunked: bool
) -> None:
    limit = 1024 * 1024
    query = {"body_bytes": 2 * limit, "chunked": int(chunked), "content_type": "application/json"}
    log = LogRecorder()
    config = gateway_config(downstream.url, query=query)
    result = await gateway.execute(config, gateway_ctx(log), client, FAST, max_body_bytes=limit)
    output = result.output
    assert output["status"] == 200
    assert output["bodyTruncated"] is True
    # Kept as text (the start of a JSON document is not JSON), exactly the limit long.
    assert isinstance(output["body"], str) and len(output["body"]) == limit
    # The attempt's line, then the warning that says the body was cut.
    assert [data.get("bodyTruncated") for _, _, data in log.lines] == [None, True]


async def test_a_body_at_the_cap_is_whole(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    size = 64 * 1024
    config = gateway_config(downstream.url, query={"body_bytes": size, "chunked": 1})
    result = await gateway.execute(config, gateway_ctx(), client, FAST, max_body_bytes=size)
    assert len(result.output["body"]) == size
    assert "bodyTruncated" not in result.output


async def test_the_default_cap_is_1_mib(downstream: RunningDownstream, client: HttpClient) -> None:
    size = 1024 * 1024
    query = {"body_bytes": size, "content_type": "text/plain"}
    result = await gateway.execute(
        gateway_config(downstream.url, query=query), gateway_ctx(), client, FAST
    )
    assert len(result.output["body"]) == size and "bodyTruncated" not in result.output
    query = {"body_bytes": size + 1, "chunked": 1, "content_type": "text/plain"}
    result = await gateway.execute(
        gateway_config(downstream.url, query=query), gateway_ctx(), client, FAST
    )
    assert len(result.output["body"]) == size and result.output["bodyTruncated"] is True


async def test_success_codes_replace_2xx(downstream: RunningDownstream, client: HttpClient) -> None:
    found = gateway_config(downstream.url, query={"status": 404}, successCodes=[200, 404])
    result = await gateway.execute(found, gateway_ctx(), client, FAST)
    assert result.output["status"] == 404
    created = gateway_config(downstream.url, query={"status": 201}, successCodes=[200])
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(created, gateway_ctx(), client, FAST)
    assert caught.value.kind is FailureKind.HTTP_ERROR
    assert downstream.stats.total == 2  # a non-success 201 is final at once
    # "201 Created" alone reads as a success: the message says why it is not one.
    assert str(caught.value).endswith(": 201 Created is not in successCodes [200] (1 attempt)")


async def test_a_redirect_is_an_answer_not_followed(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([{"status": 302, "headers": {"Location": "/elsewhere"}}])
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(gateway_config(downstream.url), gateway_ctx(), client, FAST)
    assert caught.value.http is not None and caught.value.http.status == 302
    assert downstream.stats.total == 1
    # The tour: "302 Found" alone left the author looking for a setting that follows it.
    assert str(caught.value).endswith(
        ": 302 Found; redirects are not followed: add 302 to successCodes to take it as the "
        "answer, and read where it points at output.headers.location (1 attempt)"
    )
    downstream.script([{"status": 301, "headers": {"Location": "/elsewhere"}}])
    listed = gateway_config(downstream.url, successCodes=[200])
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(listed, gateway_ctx(), client, FAST)
    assert str(caught.value).endswith(
        ": 301 Moved Permanently is not in successCodes [200]; redirects are not followed: "
        "add 301 to successCodes to take it as the answer, and read where it points at "
        "output.headers.location (1 attempt)"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"url": "{{ input.n }}"},
        {"headers": {"X-Bad": "a\r\nX-Injected: 1"}},
        {"headers": {"Bad Name": "x"}},
    ],
)
async def test_unsendable_requests_are_invalid_config(
    downstream: RunningDownstream, client: HttpClient, fields: dict[str, Any]
) -> None:
    config = gateway_config(fields.pop("url", downstream.url), **fields)
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(n=3), client, FAST)
    assert caught.value.kind is FailureKind.INVALID_CONFIG
    assert downstream.stats.total == 0


async def test_every_attempt_is_logged(downstream: RunningDownstream, client: HttpClient) -> None:
    downstream.script([503, 200])
    log = LogRecorder()
    config = gateway_config(f"{downstream.url}/p?secret=s3cr3t")
    await gateway.execute(config, gateway_ctx(log), client, FAST, sleep=RecordingSleep(real=False))
    assert [level for level, _, _ in log.lines] == ["warning", "info"]
    assert log.field("status") == [503, 200]
    assert log.field("attempt") == [1, 2]
    assert log.field("retryInMs") == [10, None]
    assert all(ms >= 0 for ms in log.field("durationMs"))
    assert "retrying in" in log.lines[0][1]
    assert all("s3cr3t" not in message for _, message, _ in log.lines)  # query strings stay out
    # A worker that runs as no service (`schemabridge run`) has no id to write: no key.
    assert all("worker" not in data for _, _, data in log.lines)


async def test_each_attempt_names_its_worker_a_refused_one_too(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    """The service id the engine gives the step is on every attempt's line, the one
    admission refused included: the history says which worker made (or asked for) each."""
    downstream.script([500, 200])
    guard, log = RecordingGuard(refuse_retries=True), LogRecorder()
    ctx = dataclasses.replace(gateway_ctx(log), worker="worker-eu-3-4242")
    with pytest.raises(StepFailure):
        await gateway.execute(
            gateway_config(downstream.url),
            ctx,
            client,
            FAST,
            sleep=RecordingSleep(real=False),
            guard=guard,
        )
    assert [(data["attempt"], "kind" in data) for _, _, data in log.lines] == [
        (1, False),
        (2, True),
    ]
    assert log.field("worker") == ["worker-eu-3-4242"] * 2


async def test_the_guard_sees_every_attempt(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([503, {"reset": True}, 200])
    guard = RecordingGuard()
    config = gateway_config(downstream.url)
    await gateway.execute(
        config, gateway_ctx(), client, FAST, sleep=RecordingSleep(real=False), guard=guard
    )
    key = f"http://127.0.0.1:{downstream.port}"
    assert guard.before == [(key, False), (key, True), (key, True)]
    assert guard.after == [(key, 503, None), (key, None, "network_error"), (key, 200, None)]


@pytest.mark.parametrize(
    ("status", "kind"), [(503, FailureKind.EXTERNAL_OVERLOAD), (500, FailureKind.HTTP_ERROR)]
)
async def test_a_retry_the_budget_refuses_leaves_the_last_answer_as_the_failure(
    downstream: RunningDownstream, client: HttpClient, status: int, kind: FailureKind
) -> None:
    """'While the bucket is low, failures are not retried': a 500 then stays a terminal
    http_error (it must not turn into a redispatchable refusal), a 503 an overload."""
    downstream.script([status, 200])
    guard, log = RecordingGuard(refuse_retries=True), LogRecorder()
    config = gateway_config(downstream.url, destination="orders-api")
    with pytest.raises(StepFailure) as failed:
        await gateway.execute(
            config, gateway_ctx(log), client, FAST, sleep=RecordingSleep(real=False), guard=guard
        )
    assert failed.value.kind is kind and not isinstance(failed.value, RetryRefused)
    assert failed.value.http is not None and failed.value.http.status == status
    assert "(1 attempt)" in failed.value.message
    assert "attempt 2 refused by admission: retry budget exhausted" in log.lines[-1][1]
    assert guard.before == [("orders-api", False), ("orders-api", True)]
    assert guard.after == [("orders-api", status, None)]
    assert downstream.stats.total == 1


async def test_a_retry_blocked_by_a_breaker_fails_as_the_refusal(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([500, 200])
    guard = RecordingGuard(block_retries=True)
    config = gateway_config(downstream.url, destination="orders-api")
    with pytest.raises(StepFailure, match="circuit open") as failed:
        await gateway.execute(
            config, gateway_ctx(LogRecorder()), client, FAST, sleep=RecordingSleep(real=False),
            guard=guard,
        )  # fmt: skip
    assert failed.value.redispatchable
    assert downstream.stats.total == 1


async def test_a_cancelled_attempt_still_settles_the_guard(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    guard = RecordingGuard()
    config = gateway_config(downstream.url, query={"sleep_ms": 10_000})
    call = asyncio.create_task(gateway.execute(config, gateway_ctx(), client, FAST, guard=guard))
    await wait_until(lambda: downstream.stats.in_flight == 1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert [(status, kind) for _, status, kind in guard.after] == [(None, "cancelled")]


async def test_the_guard_hears_the_destinations_retry_after(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([{"status": 429, "headers": {"Retry-After": "1"}}, 200])
    guard = RecordingGuard()
    config = gateway_config(downstream.url)
    await gateway.execute(
        config, gateway_ctx(), client, FAST, sleep=RecordingSleep(real=False), guard=guard
    )
    assert [status for _, status, _ in guard.after] == [429, 200]
    assert guard.retry_after == [1.0, None]
