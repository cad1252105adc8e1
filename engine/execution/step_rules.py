"""Pure scheduling decisions: redispatch timing, idempotency keys, the expression context.

No I/O here, so every rule is unit-tested with plain values (docs/architecture.md, 'Testing').
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from engine.store.records import ClaimedStep
from schemas.errors import StepFailure

REDISPATCH_JITTER = 0.2
"""A redispatch waits up to this share longer than its minimum (uniformly at random)."""


def redispatch_at(
    failure: StepFailure,
    *,
    max_auto_retries: int,
    auto_retries_used: int,
    now: float,
    delays_s: Sequence[float],
    spread: float = 0.0,
) -> float | None:
    """When to redispatch a failed step, or None when the failure is terminal
    (docs/architecture.md, 'Redispatch').

    Only an `external_overload` is redispatched, at most `max_auto_retries` times (0 = never),
    no sooner than 5 s, 10 s, 20 s after each failure (the last delay repeats) or the
    destination's Retry-After, whichever is later. `spread` (a random number in [0, 1)) adds
    up to `REDISPATCH_JITTER` of that wait: steps refused together (by one breaker opening,
    with one Retry-After) must not all come back in the same instant when it recovers.
    """
    if not failure.redispatchable or auto_retries_used >= max_auto_retries:
        return None
    delay = delays_s[min(auto_retries_used, len(delays_s) - 1)] if delays_s else 0.0
    wait = max(delay, failure.retry_after_s or 0.0)
    return now + wait * (1.0 + REDISPATCH_JITTER * spread)


def idempotency_key(run_id: str, vertex_id: str) -> str:
    """The `Idempotency-Key` a step sends: stable across attempts, unique per (run, vertex)."""
    digest = hashlib.sha256(f"{run_id}\x00{vertex_id}".encode()).hexdigest()
    return f"sb-{digest[:40]}"


def expression_context(
    step: ClaimedStep, outputs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `{{ }}` context `{input, vertices: {id: {output}}, run: {id, tenantId}}`, plus
    `item` and `index` in a child run. `outputs` replaces the step's recorded outputs (a
    MERGE's `outputs` loaded from the payload store, `merge_outputs.with_outputs`)."""
    shown = step.outputs if outputs is None else outputs
    context: dict[str, Any] = {
        "input": step.run_input,
        "vertices": {vid: {"output": out} for vid, out in shown.items()},
        "run": {"id": step.run_id, "tenantId": step.tenant_id},
    }
    if step.item_index is not None:
        # A child's item is stored only when the spawner's `input` transformed it.
        context["item"] = step.item if step.item is not None else step.run_input
        context["index"] = step.item_index
    return context
