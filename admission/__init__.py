"""Protecting destinations and tenants: AIMD admission, caps, breakers, rate limits."""

from admission.aimd import Aimd, AimdConfig, AimdState
from admission.breaker import (
    GLOBAL_DEFAULT,
    TENANT_DEFAULT,
    BreakerConfig,
    BreakerState,
    ClosedBreaker,
    Layer,
    LayerView,
    Transition,
)
from admission.caps import CapsSource, DestinationCaps, RedisCapsStore
from admission.config import AdmissionConfig, RetryBudgetConfig, TenantRateConfig
from admission.controller import Admission
from admission.rate_limit import RateDecision, TenantRateLimited, TenantRateLimiter
from admission.refusals import DestinationPaced
from admission.retry_budget import RetryBudget, SharedRetryBudget
from admission.ticket import CallOutcome, Ticket, TicketAlreadySettled
from admission.visibility import AdmissionSnapshot, DestinationState, LayerStatus, TenantUsage

__all__ = [
    "GLOBAL_DEFAULT",
    "TENANT_DEFAULT",
    "Admission",
    "AdmissionConfig",
    "AdmissionSnapshot",
    "Aimd",
    "AimdConfig",
    "AimdState",
    "BreakerConfig",
    "BreakerState",
    "CallOutcome",
    "CapsSource",
    "ClosedBreaker",
    "DestinationCaps",
    "DestinationPaced",
    "DestinationState",
    "Layer",
    "LayerStatus",
    "LayerView",
    "RateDecision",
    "RedisCapsStore",
    "RetryBudget",
    "RetryBudgetConfig",
    "SharedRetryBudget",
    "TenantRateConfig",
    "TenantRateLimited",
    "TenantRateLimiter",
    "TenantUsage",
    "Ticket",
    "TicketAlreadySettled",
    "Transition",
]
