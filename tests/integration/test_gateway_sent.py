"""What a failed GATEWAY attempt sent (vertices/gateway_sent.py), against the demo downstream
on loopback: recorded with each failed attempt and with the failure, redacted and bounded,
built once per execution, and neither built nor stored when the call succeeds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from schemas.errors import FailureKind, SentRequest, StepFailure
from schemas.redaction import REDACTED, Redactor
from tests.basic_auth import basic_credential
from tests.integration.egress_harness import ControlledResolver, canary
from tests.integration.test_gateway import (
    FAST,
    LogRecorder,
    RecordingGuard,
    RecordingSleep,
    gateway_config,
    gateway_ctx,
)
from vertices import gateway, gateway_sent
from vertices.contract import StepContext
from vertices.egress import EgressPolicy
from vertices.gateway_response import EXCERPT_CHARS
from vertices.http_client import HttpClient, build_http_client, close_http_client

SECRET = "tok_5Jx+Q9v=Wm/Lr7"
PASSWORD = "pw-8Kd2Lm7Qz"


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = build_http_client(max_connections=16)
    yield http
    await close_http_client(http)


def secret_ctx(log: LogRecorder, **input_: Any) -> StepContext:
    """A step context whose `secrets.TOKEN` is `SECRET`, known to its redactor as the engine
    makes it (engine/execution/step_secrets.py)."""
    ctx = gateway_ctx(log, **input_)
    context = {**ctx.context, "secrets": {"TOKEN": SECRET}}
    return dataclasses.replace(ctx, context=context, redactor=Redactor([SECRET]))


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[SentRequest]:
    """Every record the gateway builds (the real function, watched)."""
    made: list[SentRequest] = []
    real: Callable[..., SentRequest] = gateway_sent.sent_request

    def watched(*args: Any) -> SentRequest:
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(gateway, "sent_request", watched)
    return made


def leaked_forms(text: str) -> list[str]:
    forms = {SECRET, PASSWORD, basic_credential("user", PASSWORD)}
    forms |= {SECRET.replace("+", "%2B").replace("=", "%3D").replace("/", "%2F")}
    return [form for form in forms if form in text]


async def test_a_422_records_what_was_sent_with_secrets_redacted(
    downstream: RunningDownstream, client: HttpClient, built: list[SentRequest]
) -> None:
    downstream.script([{"status": 422, "body": {"error": "validation_failed"}}])
    host = downstream.url.removeprefix("http://")
    config = gateway_config(
        f"http://user:{PASSWORD}@{host}/orders/{{{{ input.id }}}}/{{{{ secrets.TOKEN }}}}"
        "?mode=strict#frag",
        method="POST",
        headers={"X-Api-Key": "{{ secrets.TOKEN }}", "X-Trace": "t-1"},
        query={"key": "{{ secrets.TOKEN }}", "page": 2},
        body={"id": "{{ input.id }}", "token": "{{ secrets.TOKEN }}"},
    )
    log = LogRecorder()
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, secret_ctx(log, id="A7"), client, FAST)
    failure = caught.value
    assert failure.kind is FailureKind.HTTP_ERROR and failure.http is not None
    sent = failure.http.request
    assert sent == SentRequest(
        method="POST",
        url=f"{downstream.url}/orders/A7/{REDACTED}?mode=strict&key={REDACTED}&page=2",
        header_names=("X-Api-Key", "X-Trace", "Idempotency-Key", "Content-Type"),
        body_excerpt=f'{{"id":"A7","token":"{REDACTED}"}}',
        body_bytes=len(json.dumps({"id": "A7", "token": SECRET}, separators=(",", ":"))),
        body_truncated=False,
    )
    # The log line of the attempt carries the same record, and the failure's dict both.
    assert log.lines[-1][2]["request"] == sent.as_dict()
    assert failure.as_dict()["http"]["request"] == sent.as_dict()
    assert built == [sent]
    # The record is redacted here (the message and the log's other fields are redacted by the
    # executor on their way out: tests/e2e/test_sent_request.py sees them end to end).
    assert leaked_forms(json.dumps(sent.as_dict())) == []
    assert "user:" not in sent.url and "frag" not in sent.url


async def test_a_body_over_the_bound_is_cut_with_a_marker_and_no_half_secret(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    """The secret straddles the cut: redacted first, it leaves none of its characters."""
    downstream.script([422])
    head = '{"note":"'
    pad = "x" * (EXCERPT_CHARS - len(head) - 5)
    config = gateway_config(
        downstream.url,
        method="PUT",
        body={"note": pad + "{{ secrets.TOKEN }}", "rest": "y" * 3000},
    )
    log = LogRecorder()
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, secret_ctx(log), client, FAST)
    assert caught.value.http is not None
    sent = caught.value.http.request
    assert sent is not None
    assert sent.body_truncated is True
    assert len(sent.body_excerpt) == EXCERPT_CHARS
    assert sent.body_excerpt.startswith(head + pad + REDACTED)
    assert sent.body_bytes > 3000
    assert not any(SECRET[:n] in sent.body_excerpt for n in range(4, len(SECRET) + 1))


async def test_a_body_at_the_bound_is_whole(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([400])
    text = "é" * EXCERPT_CHARS  # two bytes each: the bound counts characters
    config = gateway_config(
        downstream.url, method="POST", headers={"Content-Type": "text/plain"}, body=text
    )
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(), client, FAST)
    assert caught.value.http is not None
    sent = caught.value.http.request
    assert sent is not None
    assert (sent.body_excerpt, sent.body_bytes, sent.body_truncated) == (text, 1000, False)


async def test_a_long_url_is_cut_with_a_marker(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([404])
    config = gateway_config(f"{downstream.url}/{'a' * 3000}")
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(), client, FAST)
    assert caught.value.http is not None
    sent = caught.value.http.request
    assert sent is not None
    assert len(sent.url) == gateway_sent.URL_CHARS + 1 and sent.url.endswith(gateway_sent.CUT)
    assert (sent.body_excerpt, sent.body_bytes) == ("", 0)  # a GET sends no body


async def test_a_step_that_succeeds_builds_and_stores_none_of_it(
    downstream: RunningDownstream, client: HttpClient, built: list[SentRequest]
) -> None:
    log = LogRecorder()
    config = gateway_config(downstream.url, method="POST", body={"token": "{{ secrets.TOKEN }}"})
    result = await gateway.execute(config, secret_ctx(log), client, FAST)
    assert result.output["status"] == 200
    assert built == []
    assert [data for _, _, data in log.lines if "request" in data] == []
    assert "request" not in result.output


async def test_every_failed_attempt_has_it_built_once(
    downstream: RunningDownstream, client: HttpClient, built: list[SentRequest]
) -> None:
    """Three failed attempts of one execution share one record; the attempt that then
    succeeds has none."""
    downstream.script([500, 503, 502, 200])
    log = LogRecorder()
    config = gateway_config(downstream.url, method="POST", body={"n": 1})
    await gateway.execute(config, gateway_ctx(log), client, FAST, sleep=RecordingSleep(real=False))
    assert log.field("status") == [500, 503, 502, 200]
    sent = [data.get("request") for _, _, data in log.lines]
    assert sent[:3] == [built[0].as_dict()] * 3 and sent[3] is None
    assert len(built) == 1


async def test_a_transport_failure_records_what_it_was_sending(client: HttpClient) -> None:
    """Nothing listens: the I/O error's failure (no HTTP status) still says what it tried."""
    async with canary("127.0.0.1") as closed:
        url = f"{closed.url}/gone"
    config = gateway_config(url, method="DELETE", retry={"maxAttempts": 2})
    log = LogRecorder()
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(config, gateway_ctx(log), client, FAST)
    failure = caught.value
    assert failure.kind is FailureKind.NETWORK_ERROR and failure.http is not None
    assert failure.http.status is None
    assert failure.http.request is not None
    assert (failure.http.request.method, failure.http.request.url) == ("DELETE", url)
    assert [data["request"]["url"] for _, _, data in log.lines] == [url, url]


async def test_a_call_the_egress_policy_stopped_records_nothing_sent() -> None:
    """A host whose every address the policy refuses: the attempt never left."""
    async with canary("127.0.0.1") as listener:
        dns = ControlledResolver({"inside.example": ["127.0.0.1"]})
        client = build_http_client(max_connections=4, egress=EgressPolicy(), resolver=dns)
        config = gateway_config(f"http://inside.example:{listener.port}/", method="POST", body={})
        log = LogRecorder()
        try:
            with pytest.raises(StepFailure) as caught:
                await gateway.execute(config, gateway_ctx(log), client, FAST)
        finally:
            await client.aclose()
    assert caught.value.kind is FailureKind.EGRESS_DENIED
    assert caught.value.http is not None and caught.value.http.request is None
    assert "request" not in caught.value.as_dict()["http"]
    assert all("request" not in data for _, _, data in log.lines)


async def test_a_call_admission_refused_first_records_nothing_sent(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    """The breaker refuses the retry of a 500: the failure is the refusal, nothing attached;
    the 500's own attempt line keeps what it sent."""
    downstream.script([500])
    log = LogRecorder()
    guard = RecordingGuard(block_retries=True)
    config = gateway_config(downstream.url, method="POST", body={"a": 1})
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(
            config, gateway_ctx(log), client, FAST, guard=guard, sleep=RecordingSleep(real=False)
        )
    assert caught.value.message == "circuit open" and caught.value.http is None
    assert log.lines[0][2]["request"]["bodyExcerpt"] == '{"a":1}'
    assert "request" not in log.lines[-1][2]  # the refusal's line


async def test_a_retry_the_budget_refuses_keeps_the_last_answer_and_what_it_sent(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    downstream.script([500])
    guard = RecordingGuard(refuse_retries=True)
    config = gateway_config(downstream.url, method="PATCH", body="plain")
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(
            config, gateway_ctx(), client, FAST, guard=guard, sleep=RecordingSleep(real=False)
        )
    http = caught.value.http
    assert http is not None and http.status == 500
    assert http.request is not None and http.request.body_excerpt == '"plain"'


# ── what each failed attempt was answered ───────────────────────────────────────────────────

POOL_EXHAUSTED = "database connection pool exhausted"


async def test_each_failed_attempt_keeps_the_start_of_its_answer(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    """Every failed attempt's line keeps what the destination answered, not only the last one
    (which the step's error keeps): a 500 and a 502 with other words; an empty answer, a
    success and an attempt that got no answer keep none."""
    downstream.script(
        [
            {"status": 500, "raw": POOL_EXHAUSTED},
            {"status": 502, "raw": "bad gateway: upstream reset"},
            {"status": 503, "raw": ""},
            200,
        ]
    )
    log = LogRecorder()
    config = gateway_config(downstream.url, method="POST", body={"n": 1})
    await gateway.execute(config, gateway_ctx(log), client, FAST, sleep=RecordingSleep(real=False))
    assert log.field("status") == [500, 502, 503, 200]
    answered = [data.get("bodyExcerpt") for _, _, data in log.lines]
    assert answered == [POOL_EXHAUSTED, "bad gateway: upstream reset", None, None]
    async with canary("127.0.0.1") as closed:
        url = f"{closed.url}/gone"
    log = LogRecorder()
    with pytest.raises(StepFailure):
        await gateway.execute(
            gateway_config(url, retry={"maxAttempts": 1}), gateway_ctx(log), client, FAST
        )
    assert "request" in log.lines[0][2] and "bodyExcerpt" not in log.lines[0][2]


async def test_an_attempts_answer_is_bounded_and_redacted_as_the_errors(
    downstream: RunningDownstream, client: HttpClient
) -> None:
    """The secret straddles the excerpt's bound in a long answer: each attempt's line keeps
    the same excerpt the step's error keeps, redacted before the cut, never the whole body."""
    pad = "p" * (EXCERPT_CHARS - len(POOL_EXHAUSTED) - 5)
    body = f"{POOL_EXHAUSTED}{pad}{SECRET}" + "z" * 3000
    downstream.script([{"status": 500, "raw": body}] * 2)
    log = LogRecorder()
    config = gateway_config(downstream.url, retry={"maxAttempts": 2})
    with pytest.raises(StepFailure) as caught:
        await gateway.execute(
            config, secret_ctx(log), client, FAST, sleep=RecordingSleep(real=False)
        )
    assert caught.value.http is not None
    kept = caught.value.http.body_excerpt
    assert kept.startswith(POOL_EXHAUSTED + pad + REDACTED) and len(kept) == EXCERPT_CHARS
    assert [data["bodyExcerpt"] for _, _, data in log.lines] == [kept, kept]
    assert not any(SECRET[:n] in kept for n in range(4, len(SECRET) + 1))
