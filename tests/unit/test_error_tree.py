"""Every exception SchemaBridge raises on purpose sits in the error tree of schemas/errors.py,
with a stable `code`, and keeps the standard base class its catchers rely on."""

from __future__ import annotations

import pytest

from admission.config import TenantRateConfig
from admission.rate_limit import RateDecision, TenantRateLimited
from admission.ticket import TicketAlreadySettled
from engine.execution.admission_guard import CoordinationDown
from engine.store import ClaimLost, UnknownWorkflow
from schemas.errors import NotFound, Refusal, SchemaBridgeError, StepDeferred, StepFailure
from schemas.expressions import ExpressionError, compile_template
from vertices.gateway_response import Answer, InvalidResponse

ANSWER = Answer(status=200, reason="OK", headers={}, content=b"{", charset=None)
DECISION = RateDecision(False, TenantRateConfig().delay_s, 3, 3, 1.5)


@pytest.mark.parametrize(
    ("error", "code", "base"),
    [
        (ClaimLost("step r/a lost its claim"), "claim_lost", RuntimeError),
        (UnknownWorkflow("no published workflow w@2"), "workflow_not_found", LookupError),
        (CoordinationDown("admission unavailable: ConnectionError"), "admission_unavailable", None),
        (TicketAlreadySettled("settled twice"), "ticket_already_settled", RuntimeError),
        (TenantRateLimited("acme", DECISION), "tenant_rate_limited", None),
        (InvalidResponse("invalid JSON", ANSWER), "invalid_response", None),
        (ExpressionError("a.b", "unknown function"), "expression_error", ValueError),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_each_error_is_in_the_tree_with_a_stable_code(
    error: SchemaBridgeError, code: str, base: type[Exception] | None
) -> None:
    assert isinstance(error, SchemaBridgeError)
    assert error.code == code
    assert error.message == str(error)
    if base is not None:
        assert isinstance(error, base)


def test_deferrals_are_not_failures() -> None:
    # The executor parks a deferred step; a StepFailure would be recorded as its failure.
    for deferred in (TenantRateLimited("acme", DECISION), CoordinationDown("down")):
        assert isinstance(deferred, StepDeferred)
        assert not isinstance(deferred, StepFailure)


def test_an_unknown_workflow_is_refused_as_not_found() -> None:
    error = UnknownWorkflow("no published workflow w")
    assert isinstance(error, NotFound)
    assert error.refusal is Refusal.NOT_FOUND
    assert error.details == {}


def test_a_refused_tenant_keeps_its_decision() -> None:
    error = TenantRateLimited("acme", DECISION)
    assert (error.tenant_id, error.decision) == ("acme", DECISION)
    assert str(error) == "tenant acme at its rate limit (3/3 items per window)"


def test_an_invalid_response_keeps_what_was_read() -> None:
    error = InvalidResponse("response body is not valid JSON", ANSWER)
    assert error.answer is ANSWER
    assert error.message == "response body is not valid JSON"


def test_a_compile_error_is_an_expression_error_and_a_value_error() -> None:
    with pytest.raises(ValueError) as caught:
        compile_template("{{ a[ }}")
    assert isinstance(caught.value, ExpressionError)
    assert caught.value.code == "expression_error"
