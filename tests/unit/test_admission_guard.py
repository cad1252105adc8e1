"""How the engine's admission guard turns Redis trouble into step outcomes: an unreachable
Redis is an outage to wait out, an error answer from Redis is a defect to show."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from admission import AdmissionConfig, CallOutcome, DestinationPaced
from engine.execution.admission_guard import AdmissionGuard, CoordinationDown, outcome_of
from schemas.errors import FailureKind, StepFailure


class Refusing:
    """Stands in for `Admission` (only `admit` is used): raises what it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.config = AdmissionConfig()

    async def admit(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


async def test_an_unreachable_redis_is_coordination_down() -> None:
    guard = AdmissionGuard(Refusing(RedisConnectionError("refused")), "t", 1.0)  # type: ignore[arg-type]
    with pytest.raises(CoordinationDown, match="admission unavailable"):
        await guard.before_attempt("d", retry=False, timeout_s=30)


async def test_a_script_error_is_not_mistaken_for_an_outage() -> None:
    guard = AdmissionGuard(Refusing(ResponseError("bad script")), "t", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ResponseError):
        await guard.before_attempt("d", retry=False, timeout_s=30)


@pytest.mark.parametrize(
    ("status", "kind", "outcome"),
    [
        (200, None, CallOutcome.SUCCESS),
        (404, None, CallOutcome.SUCCESS),
        (429, None, CallOutcome.THROTTLED),
        (503, None, CallOutcome.OVERLOAD),
        (None, "timeout", CallOutcome.OVERLOAD),
        (500, None, CallOutcome.FAILURE),
        (None, "network_error", CallOutcome.FAILURE),
        (200, "invalid_response", CallOutcome.FAILURE),
        (None, "cancelled", CallOutcome.IGNORE),
        (None, "invalid_config", CallOutcome.IGNORE),
        # Nothing was sent: an egress refusal says nothing about the destination's health.
        (None, "egress_denied", CallOutcome.IGNORE),
    ],
)
def test_outcomes(status: int | None, kind: str | None, outcome: CallOutcome) -> None:
    assert outcome_of(status, kind) is outcome


async def test_pacing_parks_a_first_attempt_and_fails_an_in_process_retry() -> None:
    """Held back by the destination's cap, a step's first attempt is paced (the executor
    parks it); an in-process retry has an answer already, so it fails as an overload (a
    redispatch) rather than starting the step's attempts over."""
    paced = DestinationPaced("admission wait exhausted: no slot", "waiting for the cap")
    guard = AdmissionGuard(Refusing(paced), "t", 1.0)  # type: ignore[arg-type]
    with pytest.raises(DestinationPaced):
        await guard.before_attempt("d", retry=False, timeout_s=30)
    with pytest.raises(StepFailure, match="admission wait exhausted") as retry:
        await guard.before_attempt("d", retry=True, timeout_s=30)
    assert not isinstance(retry.value, DestinationPaced)
    assert retry.value.kind is FailureKind.EXTERNAL_OVERLOAD
