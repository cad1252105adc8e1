"""The GATEWAY vertex: one outbound HTTP call with the in-process retry policy
(docs/architecture.md, 'HTTP-layer retries').

`execute` renders the call (vertices/gateway_request.py), then runs up to
`retry.maxAttempts` attempts. Each attempt has a hard deadline — the vertex's `timeoutMs`, else
its run's timeout tier — enforced with `asyncio.timeout` around the whole exchange, because the
transport's own timeouts only bound connecting and each read. After an attempt:

* a status in `successCodes` (default 2xx) → `Succeeded({status, headers, body})`;
* 5xx, 429, a timeout or an I/O error → wait (vertices/gateway_retry.py) and try again, until
  the attempts run out: then a final 429/503 is `external_overload` (with `retry_after_s` when
  the destination sent Retry-After), another status `http_error`, a timeout `timeout`, an I/O
  error `network_error`;
* any other status → `http_error` at once; an unusable answer (JSON that does not parse or
  nests deeper than the nesting limit, undecodable text) → `invalid_response` at once; a
  request that cannot be sent → `invalid_config`.

Every attempt is written to the run log (status, duration, error, the wait before the next,
the service id of the worker that made it, the execution it belongs to: `ctx.attempt`, the
step's claim number; a failed one with what it sent, which the step's
failure carries too: vertices/gateway_sent.py, and the start of the answer's body, as the
step's failure keeps it);
before each wait between attempts the step tells `ctx.retry_wait`, so the engine can show the
wait and the attempts so far while it lasts (docs/architecture.md, 'Why a step waits').
Admission plugs in through `CallGuard`, called around every attempt.

`ctx.stop` (the step's run was cancelled, or its claim lost) ends the step before its next
attempt is sent: it interrupts a wait between attempts or for admission, and is checked once
admitted, right before sending, with no await in between; it raises `StepStopped`. A request
already on the wire is not interrupted (docs/architecture.md, 'Cancelling a run').
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import Enum
from typing import Any, Protocol, TypeVar

from schemas.definitions import GatewayConfig
from schemas.errors import FailureKind, HttpDetail, RetryRefused, SentRequest, StepFailure
from schemas.json_depth import DEFAULT_MAX_NESTING_DEPTH
from schemas.redaction import Redactor
from schemas.waiting import HELD_WAITS, WaitReason
from vertices import gateway_retry
from vertices.contract import StepContext, StepStopped, StopSignal, Succeeded, TimeoutTier
from vertices.egress import EgressDenied
from vertices.gateway_request import GatewayRequest, build_request, destination_key
from vertices.gateway_response import (
    DEFAULT_MAX_BODY_BYTES,
    Answer,
    InvalidResponse,
    detail_headers,
    excerpt,
    parse_body,
    read_answer,
    read_error_answer,
)
from vertices.gateway_sent import sent_request
from vertices.http_client import (
    HttpClient,
    TransportErrorKind,
    classify_transport_error,
    transport_error_message,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "CallGuard",
    "GatewayTimeouts",
    "TimeoutSettings",
    "destination_key",
    "execute",
]

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")

logger = logging.getLogger(__name__)


class TimeoutSettings(Protocol):
    """The part of `engine.settings.Settings` the timeouts come from (vertices never import
    the engine, so it is described here rather than imported)."""

    @property
    def timeout_collect_ms(self) -> int: ...
    @property
    def timeout_process_ms(self) -> int: ...
    @property
    def timeout_gateway_ms(self) -> int: ...


@dataclass(frozen=True)
class GatewayTimeouts:
    """Per-attempt timeouts by tier, in ms (docs/architecture.md, 'Timeout tiers')."""

    collect_ms: int = 60_000
    """A run that feeds a spawner. Default 60 s."""
    process_ms: int = 30_000
    """A child run, or any other run. Default 30 s."""
    gateway_ms: int = 15_000
    """A run behind a synchronous REST wait. Default 15 s."""

    @classmethod
    def from_settings(cls, settings: TimeoutSettings) -> GatewayTimeouts:
        """From `TIMEOUT_COLLECT_MS`, `TIMEOUT_PROCESS_MS` and `TIMEOUT_GATEWAY_MS`."""
        return cls(
            collect_ms=settings.timeout_collect_ms,
            process_ms=settings.timeout_process_ms,
            gateway_ms=settings.timeout_gateway_ms,
        )

    def for_tier(self, tier: TimeoutTier) -> int:
        """The timeout in ms of `tier`."""
        if tier is TimeoutTier.COLLECT:
            return self.collect_ms
        if tier is TimeoutTier.GATEWAY:
            return self.gateway_ms
        return self.process_ms

    def resolve_ms(self, vertex_timeout_ms: int | None, tier: TimeoutTier) -> int:
        """A vertex's own `timeoutMs` wins over its tier."""
        return vertex_timeout_ms if vertex_timeout_ms is not None else self.for_tier(tier)


class CallGuard(Protocol):
    """Admission's hook around every attempt (docs/architecture.md, 'Admission').

    `before_attempt` may wait (for a concurrency slot, a rate window) or raise StepFailure to
    stop the call (open breaker, exhausted retry budget). Every `before_attempt` that returned
    is settled by exactly one `after_attempt`, also when the attempt is cancelled (`error_kind`
    "cancelled") or fails unexpectedly ("internal_error"). `status` is the HTTP status when one
    arrived; `error_kind` is then None, or "invalid_response" for an unusable answer; for
    transport failures `status` is None and `error_kind` is "timeout", "network_error" or
    "invalid_config". `retry_after_s` is the answer's Retry-After in seconds, when it sent one
    (the destination asking for less traffic for that long). `timeout_s` bounds the attempt
    (so what it holds, e.g. a slot lease, must last at least that long or be renewed).
    """

    async def before_attempt(self, destination: str, retry: bool, *, timeout_s: float) -> None: ...

    async def after_attempt(
        self,
        destination: str,
        status: int | None,
        error_kind: str | None,
        duration_s: float,
        *,
        retry_after_s: float | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class _Attempt:
    """One attempt: what arrived (`answer`) and/or why it failed (`failure`, `error`)."""

    duration_s: float
    answer: Answer | None = None
    """None when nothing usable arrived (timeout, I/O error, request not sendable)."""
    failure: FailureKind | None = None
    error: str | None = None
    operator_detail: str | None = None
    """What only the worker's log may say about the failure (`EgressDenied.operator_detail`)."""
    body: Any = None
    """The parsed body of a successful answer."""

    @property
    def status(self) -> int | None:
        return self.answer.status if self.answer is not None else None

    @functools.cached_property
    def retry_after_s(self) -> float | None:
        """The answer's Retry-After in seconds, if it sent one (parsed once: the admission
        settlement, the retry wait and the final failure all ask)."""
        return _retry_after_s(self.answer)


class _Verdict(Enum):
    SUCCESS = "success"
    RETRY = "retry"
    FINAL = "final"


_TRANSPORT_FAILURES = {
    TransportErrorKind.TIMEOUT: FailureKind.TIMEOUT,
    TransportErrorKind.NETWORK: FailureKind.NETWORK_ERROR,
    TransportErrorKind.INVALID_REQUEST: FailureKind.INVALID_CONFIG,
    TransportErrorKind.INVALID_RESPONSE: FailureKind.INVALID_RESPONSE,
}
_RETRYABLE_FAILURES = frozenset({FailureKind.TIMEOUT, FailureKind.NETWORK_ERROR})


async def _exchange(
    client: HttpClient,
    request: GatewayRequest,
    success_codes: list[int] | None,
    timeout_s: float,
    *,
    max_body_bytes: int,
    max_nesting_depth: int,
) -> tuple[Answer, Any]:
    """One request and its answer; the body is read in full and parsed only on success."""
    async with (
        asyncio.timeout(timeout_s),
        client.request(
            request.method,
            request.url,
            params=request.params,
            headers=request.headers,
            content=request.content,
            timeout_s=timeout_s,
        ) as response,
    ):
        if not gateway_retry.is_success(response.status, success_codes):
            return await read_error_answer(response), None
        answer = await read_answer(response, max_body_bytes)
    return answer, parse_body(answer, max_nesting_depth)


async def _attempt(
    client: HttpClient,
    request: GatewayRequest,
    success_codes: list[int] | None,
    timeout_s: float,
    *,
    max_body_bytes: int,
    max_nesting_depth: int,
) -> _Attempt:
    started = time.perf_counter()
    try:
        answer, body = await _exchange(
            client,
            request,
            success_codes,
            timeout_s,
            max_body_bytes=max_body_bytes,
            max_nesting_depth=max_nesting_depth,
        )
    except InvalidResponse as exc:
        return _Attempt(
            time.perf_counter() - started,
            answer=exc.answer,
            failure=FailureKind.INVALID_RESPONSE,
            error=exc.message,
        )
    except EgressDenied as exc:  # every address the host resolved to is refused
        duration = time.perf_counter() - started
        return _Attempt(
            duration,
            failure=FailureKind.EGRESS_DENIED,
            error=exc.message,
            operator_detail=exc.operator_detail,
        )
    except Exception as exc:
        kind = classify_transport_error(exc)
        if kind is None:
            raise
        if kind is TransportErrorKind.TIMEOUT:
            message = f"no answer within {timeout_s * 1000:g} ms"
        else:
            message = transport_error_message(exc)
        return _Attempt(
            time.perf_counter() - started, failure=_TRANSPORT_FAILURES[kind], error=message
        )
    return _Attempt(time.perf_counter() - started, answer=answer, body=body)


def _verdict(attempt: _Attempt, success_codes: list[int] | None) -> _Verdict:
    if attempt.failure is not None:
        return _Verdict.RETRY if attempt.failure in _RETRYABLE_FAILURES else _Verdict.FINAL
    if attempt.answer is None:
        return _Verdict.FINAL
    status = attempt.answer.status
    if gateway_retry.is_success(status, success_codes):
        return _Verdict.SUCCESS
    return _Verdict.RETRY if gateway_retry.is_retryable_status(status) else _Verdict.FINAL


def _stop_reason(stop: StopSignal | None) -> str | None:
    return stop.reason if stop is not None else None


async def _unless_stopped(stop: StopSignal | None, work: Awaitable[T], not_done: str) -> T:
    """`work`'s result, unless `stop` comes first: then `work` is interrupted and StepStopped
    (`not_done`) raised."""
    if stop is None:
        return await work
    if stop.reason is not None:
        if inspect.iscoroutine(work):
            work.close()  # never started: nothing to wait for
        raise StepStopped(not_done)
    try:
        with stop.interruptible():
            return await work
    except StepStopped:
        raise StepStopped(not_done) from None


async def _guarded_attempt(
    guard: CallGuard | None,
    destination: str,
    retry: bool,
    run: Callable[[], Awaitable[_Attempt]],
    timeout_s: float,
    *,
    stop: StopSignal | None = None,
    not_sent: str = "",
) -> _Attempt:
    """Run one attempt between `before_attempt` and exactly one `after_attempt`. A `stop`
    before the request is sent (while waiting for admission, or once admitted) raises
    StepStopped (`not_sent`) and sends nothing."""
    if _stop_reason(stop) is not None:
        raise StepStopped(not_sent)
    if guard is None:
        return await run()
    await _unless_stopped(
        stop, guard.before_attempt(destination, retry, timeout_s=timeout_s), not_sent
    )
    if _stop_reason(stop) is not None:
        # Admitted as the stop came: the slot goes back unused, and nothing is sent.
        await guard.after_attempt(destination, None, "cancelled", 0.0)
        raise StepStopped(not_sent)
    started = time.perf_counter()
    try:
        attempt = await run()
    except BaseException as exc:
        kind = "cancelled" if isinstance(exc, asyncio.CancelledError) else "internal_error"
        # Shielded: the settlement must happen even when the step is being cancelled.
        await asyncio.shield(
            guard.after_attempt(destination, None, kind, time.perf_counter() - started)
        )
        raise
    error_kind = attempt.failure.value if attempt.failure is not None else None
    await guard.after_attempt(
        destination,
        attempt.status,
        error_kind,
        attempt.duration_s,
        retry_after_s=attempt.retry_after_s,
    )
    return attempt


def _server_now(answer: Answer) -> datetime:
    """The destination's clock (its Date header), else ours: an HTTP-date Retry-After is
    measured against the clock that wrote it, so clock skew does not stretch the wait."""
    date = answer.headers.get("date")
    if date:
        try:
            now = parsedate_to_datetime(date)
        except (TypeError, ValueError, IndexError):
            return datetime.now(UTC)
        return now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _retry_after_s(answer: Answer | None) -> float | None:
    if answer is None or "retry-after" not in answer.headers:
        return None
    return gateway_retry.parse_retry_after(answer.headers["retry-after"], _server_now(answer))


def _describe(attempt: _Attempt) -> str:
    if attempt.failure is not None:
        return f"{attempt.failure.value}: {attempt.error}"
    if attempt.answer is not None:
        return f"{attempt.answer.status} {attempt.answer.reason}".rstrip()
    return "no answer"


_NOT_SENT = frozenset({FailureKind.EGRESS_DENIED, FailureKind.INVALID_CONFIG})
"""Attempt failures that mean the request never left: refused by the egress policy, or one
the HTTP client could not make. Such an attempt has nothing to show as sent."""


def _sent(
    request: GatewayRequest, attempt: _Attempt, redactor: Redactor, known: SentRequest | None
) -> SentRequest | None:
    """What the failed `attempt` sent (None: nothing left); `known` when an earlier attempt
    of this execution built it already (the request is the same for all of them)."""
    if attempt.failure in _NOT_SENT:
        return None
    return known if known is not None else sent_request(request, redactor)


def _failure(
    request: GatewayRequest,
    attempt: _Attempt,
    attempts: int,
    redactor: Redactor,
    sent: SentRequest | None = None,
    *,
    success_codes: list[int] | None = None,
) -> StepFailure:
    """The step's failure after its last attempt (its body excerpt redacted by `redactor`),
    with what the attempt `sent`; `success_codes`: the vertex's own list, if it has one."""
    plural = "attempt" if attempts == 1 else "attempts"
    # The failure's kind is its code, shown beside the message: the message says only what
    # happened ("GET …: no answer within 300 ms", not "GET …: timeout: no answer …").
    what = attempt.error if attempt.failure is not None and attempt.error else _describe(attempt)
    if attempt.failure is None and attempt.answer is not None and success_codes is not None:
        # Else "200 OK" reads as a success: the answer failed only by the vertex's own list.
        what += f" is not in successCodes {success_codes}"
    if (
        attempt.failure is None
        and attempt.answer is not None
        and 300 <= attempt.answer.status < 400
    ):
        # A 3xx reads as "go there", and the author looks for a retry or a redirect setting:
        # nothing follows it, so the way to use it is to take it as the answer.
        status = attempt.answer.status
        what += (
            f"; redirects are not followed: add {status} to successCodes to take it as the "
            "answer, and read where it points at output.headers.location"
        )
    message = f"{request.method} {request.url_for_log}: {what} ({attempts} {plural})"
    answer = attempt.answer
    if answer is None:
        detail = HttpDetail(status=None, attempts=attempts, request=sent)
        return StepFailure(attempt.failure or FailureKind.INTERNAL_ERROR, message, http=detail)
    detail = HttpDetail(
        status=answer.status,
        body_excerpt=excerpt(answer, redactor),
        headers=detail_headers(answer.headers),
        attempts=attempts,
        request=sent,
    )
    kind = attempt.failure or gateway_retry.failure_kind_for_status(answer.status)
    if kind is not FailureKind.EXTERNAL_OVERLOAD:
        return StepFailure(kind, message, http=detail)
    return StepFailure(
        kind,
        message,
        http=detail,
        retry_after_s=attempt.retry_after_s,
        wait_cause=f"{request.destination} {_answered(attempt)}",
    )


async def _log_attempt(
    ctx: StepContext,
    level: str,
    request: GatewayRequest,
    attempt: _Attempt,
    *,
    position: tuple[int, int],
    wait_s: float | None = None,
    final: bool = False,
    sent: SentRequest | None = None,
) -> None:
    """`final`: the answer ends the step although attempts were left (a 4xx other than 408
    and 429, an error that would come back the same): the line says it is not retried, so
    "attempt 1/4" is not read as three more to come. `sent`: what a failed attempt sent
    (never given for one that succeeded); with it, the start of the answer's body, if one
    came."""
    number, max_attempts = position
    duration_ms = round(attempt.duration_s * 1000, 1)
    counted = f"attempt {number}/{max_attempts}"
    if final and number < max_attempts:
        counted = f"attempt {number}, not retried: {_not_retryable(attempt)}"
    message = (
        f"{request.method} {request.url_for_log} → {_describe(attempt)} in {duration_ms:g} ms "
        f"({counted})"
    )
    if wait_s is not None:
        message += f"; retrying in {wait_s:.3g} s"
    data: dict[str, Any] = {
        "attempt": number,
        "maxAttempts": max_attempts,
        "method": request.method,
        "url": request.url_for_log,
        "status": attempt.status,
        "durationMs": duration_ms,
        "error": attempt.error,
        "retryInMs": None if wait_s is None else round(wait_s * 1000),
        # Which execution (claim) made it: an execution lost with its worker writes no
        # attempt, so the history numbers executions by this, not by the attempt restarting.
        "execution": ctx.attempt,
    }
    if ctx.worker is not None:
        # Which worker made the call (at most 128 characters, a service name's bound): one
        # host with a bad resolver or proxy shows in the history as the one whose calls fail.
        data["worker"] = ctx.worker
    if sent is not None:
        data["request"] = sent.as_dict()
        if attempt.answer is not None and (answered := excerpt(attempt.answer, ctx.redactor)):
            # The answer's start, bounded and redacted as the step's error keeps it: what the
            # destination said ("database connection pool exhausted") on every failed attempt,
            # not only on the last one, whose answer the step's error keeps.
            data["bodyExcerpt"] = answered
    await ctx.log(level, message, data)


def _not_retryable(attempt: _Attempt) -> str:
    """Why an attempt that failed is the last one before its attempts ran out."""
    if attempt.failure is not None:
        return f"{attempt.failure.value} is not retryable"
    return f"{attempt.status} is not retryable"


def _answered(attempt: _Attempt) -> str:
    """What the destination did, in words true of every call it answered so: "answered 429
    Too Many Requests, Retry-After 7 s", or the failure ("timeout: no answer within …")."""
    if attempt.answer is None:
        return _describe(attempt)
    answered = f"answered {_describe(attempt)}"
    if attempt.retry_after_s is not None:
        answered += f", Retry-After {attempt.retry_after_s:.3g} s"
    return answered


RETRY_WAIT_WORDS = f"{HELD_WAITS[WaitReason.RETRY_BACKOFF]} to"
"""How a wait before the next attempt starts: the front doors' words for it
(`schemas.waiting.HELD_WAITS`), then its destination."""


def _retry_message(request: GatewayRequest, attempt: _Attempt, position: tuple[int, int]) -> str:
    """What a wait before the next attempt is for (`position`: the next attempt's number, of).
    What the destination answered comes first and the call's own URL and count last, so a
    fan-out's children waiting for one destination share their messages' start, which their
    group says of them all (`engine.store.children.common_message`)."""
    number, max_attempts = position
    call = f"{request.method} {request.url_for_log}"
    return (
        f"{RETRY_WAIT_WORDS} {request.destination}: {_answered(attempt)}; retrying {call} "
        f"(attempt {number}/{max_attempts})"
    )


async def _log_refusal(
    ctx: StepContext, request: GatewayRequest, number: int, refused: StepFailure
) -> None:
    message = f"{request.method} {request.url_for_log}: attempt {number} refused by admission"
    data: dict[str, Any] = {
        "attempt": number,
        "kind": refused.kind.value,
        "error": refused.message,
        "execution": ctx.attempt,
    }
    if ctx.worker is not None:
        data["worker"] = ctx.worker
    # Held back by the destination's own cap, the step parks and asks again: the operator's
    # pacing, said at info, not a warning on every turn of a long, healthy wait.
    paced = refused.wait_reason is WaitReason.DESTINATION_CAP
    await ctx.log("info" if paced else "warning", f"{message}: {refused.message}", data)


async def _output(ctx: StepContext, answer: Answer, body: Any) -> dict[str, Any]:
    """The step's output; a body cut at the limit is flagged (`bodyTruncated`) and logged."""
    output = {"status": answer.status, "headers": answer.headers, "body": body}
    if answer.truncated:
        output["bodyTruncated"] = True
        size = len(answer.content)
        await ctx.log(
            "warning",
            f"response body cut at {size:,} bytes (MAX_RESPONSE_BYTES); kept as text",
            {"bodyTruncated": True, "keptBytes": size},
        )
    return output


async def execute(
    config: GatewayConfig,
    ctx: StepContext,
    client: HttpClient,
    timeouts: GatewayTimeouts,
    *,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
    guard: CallGuard | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH,
) -> Succeeded:
    """Make the call; return `Succeeded({"status", "headers", "body"})` or raise StepFailure.

    `sleep` waits between attempts (tests record it); `rng` draws full jitter (default: a
    fresh `random.Random`); `guard` is admission's hook (none by default); `max_body_bytes`
    is the most of a successful answer's body kept (default 1 MiB; the rest is cut, and the
    output says `bodyTruncated: true`); `max_nesting_depth` is the deepest a JSON answer may
    nest (`MAX_NESTING_DEPTH`, default 64; deeper is `invalid_response`).

    Raises `EgressDenied` (kind `egress_denied`, terminal) when the client's egress policy
    refuses the URL, before admission is asked; a host whose every address is refused fails
    the same way from inside the attempt, which admission then ignores.
    """
    request = build_request(config, ctx)
    if client.egress is not None:
        # An IP literal or a non-HTTP scheme is refused before admission is even asked: no
        # slot is taken and the destination's breakers never hear of it.
        client.egress.check_url(request.url)
    timeout_s = timeouts.resolve_ms(config.timeout_ms, ctx.timeout_tier) / 1000
    policy = config.retry
    run = functools.partial(
        _attempt,
        client,
        request,
        config.success_codes,
        timeout_s,
        max_body_bytes=max_body_bytes,
        max_nesting_depth=max_nesting_depth,
    )
    previous: _Attempt | None = None
    sent: SentRequest | None = None
    """Built at the first failed attempt, reused by the later ones (see `_sent`)."""
    for number in range(1, policy.max_attempts + 1):
        not_sent = f"attempt {number}/{policy.max_attempts} not sent"
        try:
            attempt = await _guarded_attempt(
                guard,
                request.destination,
                number > 1,
                run,
                timeout_s,
                stop=ctx.stop,
                not_sent=not_sent,
            )
        except StepFailure as refused:  # only `guard.before_attempt` raises it
            await _log_refusal(ctx, request, number, refused)
            if isinstance(refused, RetryRefused) and previous is not None:
                # "While the bucket is low, failures are not retried": the last answer is the
                # step's failure (a 500 stays a terminal http_error), not a redispatchable
                # refusal. The refusal is in the log line above.
                raise _failure(
                    request,
                    previous,
                    number - 1,
                    ctx.redactor,
                    sent,
                    success_codes=config.success_codes,
                ) from refused
            raise
        previous = attempt
        if attempt.operator_detail is not None:
            logger.warning("step %s/%s: %s", ctx.run_id, ctx.vertex_id, attempt.operator_detail)
        position = (number, policy.max_attempts)
        verdict = _verdict(attempt, config.success_codes)
        if verdict is _Verdict.SUCCESS and attempt.answer is not None:
            await _log_attempt(ctx, "info", request, attempt, position=position)
            return Succeeded(await _output(ctx, attempt.answer, attempt.body))
        # Past the success above: this attempt failed, and what it sent is recorded with it.
        sent = _sent(request, attempt, ctx.redactor, sent)
        if verdict is _Verdict.FINAL or number == policy.max_attempts:
            final = verdict is _Verdict.FINAL
            await _log_attempt(
                ctx, "error", request, attempt, position=position, final=final, sent=sent
            )
            raise _failure(
                request, attempt, number, ctx.redactor, sent, success_codes=config.success_codes
            )
        if _stop_reason(ctx.stop) is not None:
            # Stopped while this attempt was on the wire: no wait is announced for a retry
            # that will not come.
            await _log_attempt(ctx, "warning", request, attempt, position=position, sent=sent)
            raise StepStopped(f"attempt {number + 1}/{policy.max_attempts} not sent")
        if rng is None and policy.jitter == "full":
            rng = random.Random()
        wait_s = gateway_retry.retry_delay_s(
            number,
            policy,
            status=attempt.status,
            retry_after_s=attempt.retry_after_s,
            rng=rng,
        )
        await _log_attempt(
            ctx, "warning", request, attempt, position=position, wait_s=wait_s, sent=sent
        )
        await ctx.retry_wait(
            wait_s, _retry_message(request, attempt, (number + 1, policy.max_attempts))
        )
        next_not_sent = f"attempt {number + 1}/{policy.max_attempts} not sent"
        await _unless_stopped(ctx.stop, sleep(wait_s), next_not_sent)
    # Unreachable: the last attempt either returns or raises above.
    raise StepFailure(FailureKind.INTERNAL_ERROR, "the retry loop ended without an outcome")
