"""SPAWNER: fan-out as durable child runs (docs/architecture.md, 'Fan-out and the join').

The vertex decides; the engine writes. `execute` evaluates `items`, runs the guards before the
first child (tenant quota, ready-queue backpressure, payload-store pressure), then hands the
children to the engine's `FanoutPort` in batches. Each child's identity is derived from
(parent run id, spawner vertex id, item index), and the store creates a child only if that key
does not exist (a unique constraint, not a look-up), so a re-delivered or racing spawner
re-attaches the children that exist, whatever their status, and creates only the missing ones.

Child inputs are rendered one batch at a time from the item list, which is never copied per
child.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import expressions
from schemas.definitions import SpawnerConfig
from schemas.errors import FailureKind, StepFailure, set_quota_command
from schemas.waiting import WaitReason
from vertices.contract import AwaitingChildren, Parked, StepContext, StepStopped

BACKPRESSURE_PARK_S = 10.0
"""How long a spawner parks when the ready queue is too deep: 10 s, as documented for
`BACKPRESSURE_MAX_DEPTH` (docs/architecture.md, 'Backpressure and quotas')."""
PAYLOAD_PARK_S = 10.0
"""How long a spawner parks while the payload store is over its high-water mark."""
DEFAULT_BATCH = 500


@dataclass(frozen=True)
class ChildSpec:
    """One child run to create."""

    index: int
    input: Any
    item: Any
    """Stored only when it differs from `input` (None otherwise)."""


class FanoutPort(Protocol):
    """What a spawner needs from the engine; implemented over the store."""

    async def existing_children(self) -> int:
        """How many children of this spawner step exist already."""
        ...

    async def ready_depth(self) -> int:
        """READY steps in the queue (the backpressure signal)."""
        ...

    async def payload_pressure(self) -> bool:
        """True while the payload store is above its high-water mark."""
        ...

    async def quota(self) -> tuple[int, int] | None:
        """The tenant's run quota as (max_runs, used_runs); None = unlimited."""
        ...

    async def create_children(self, total: int, batch: Sequence[ChildSpec]) -> int:
        """Create the children in `batch` that do not exist yet; returns how many were new."""
        ...


DEFAULT_MAX_ITEMS = 1_000_000


@dataclass(frozen=True)
class FanoutLimits:
    backpressure_max_depth: int = 10_000
    batch_size: int = DEFAULT_BATCH
    max_items: int = DEFAULT_MAX_ITEMS
    """Most children one spawner step may start (`MAX_FANOUT_ITEMS`); more items fail the step
    with `too_many_items` before any child is created."""


def items_of(config: SpawnerConfig, ctx: StepContext) -> list[Any]:
    try:
        items = expressions.render(config.items, ctx.context)
    except expressions.ExpressionError as exc:
        raise StepFailure(FailureKind.EXPRESSION_ERROR, f"/config/items: {exc}") from exc
    if not isinstance(items, list):
        kind = expressions.json_type(items)
        raise StepFailure(
            FailureKind.INVALID_CONFIG,
            f"/config/items must evaluate to an array, got {kind}: check the expression "
            f"{config.items!r}",
        )
    return items


def _quota_exceeded(tenant_id: str, missing: int, max_runs: int, used_runs: int) -> StepFailure:
    """The failure of a fan-out its tenant's quota is too small for, with the fix: the quota
    it needs (`set_quota_command`, which `runs show` suggests before the retry). A retry
    alone fails the same way: the quota counts runs created, which waiting does not lower."""
    left, needed = max(0, max_runs - used_runs), used_runs + missing
    return StepFailure(
        FailureKind.QUOTA_EXCEEDED,
        f"the fan-out needs {missing} runs but tenant {tenant_id} has {left} left in its quota "
        f"({used_runs} of {max_runs} used); raise the quota to {needed} or more "
        f"(`{set_quota_command(tenant_id, needed)}`) and retry the run, or split the input",
    )


def child_specs(
    config: SpawnerConfig, ctx: StepContext, items: list[Any], start: int, stop: int
) -> Iterator[ChildSpec]:
    """Render the child inputs of items[start:stop]."""
    for index in range(start, min(stop, len(items))):
        item = items[index]
        if config.input is None:
            yield ChildSpec(index, item, None)
            continue
        context = {**ctx.context, "item": item, "index": index}
        try:
            child_input = expressions.render(config.input, context)
        except expressions.ExpressionError as exc:
            raise StepFailure(
                FailureKind.EXPRESSION_ERROR, f"input of item {index}: {exc}"
            ) from exc
        yield ChildSpec(index, child_input, item)


async def execute(
    config: SpawnerConfig, ctx: StepContext, port: FanoutPort, limits: FanoutLimits
) -> AwaitingChildren | Parked:
    items = items_of(config, ctx)
    total = len(items)
    if total > limits.max_items:
        raise StepFailure(
            FailureKind.TOO_MANY_ITEMS,
            f"items holds {total:,} entries, over the limit of {limits.max_items:,} children "
            "per fan-out; split the list across several runs or raise "
            "SCHEMABRIDGE_MAX_FANOUT_ITEMS",
        )
    existing = await port.existing_children()
    if existing < total:
        parked = await _guards(port, limits, total - existing, ctx.tenant_id)
        if parked is not None:
            return parked
    created = 0
    for start in range(0, total, limits.batch_size):
        if ctx.stop is not None and ctx.stop.reason is not None:
            # Its run failed (or was cancelled): no more children. Those created run on; the
            # run's retry re-attaches them and creates the rest, one child per item.
            raise StepStopped(f"children {start:,} to {total - 1:,} of {total:,} not created")
        batch = list(child_specs(config, ctx, items, start, start + limits.batch_size))
        created += await port.create_children(total, batch)
    await ctx.log(
        "info",
        f"fan-out of {total} children: {created} created, {total - created} re-attached",
        {"total": total, "created": created},
    )
    return AwaitingChildren(total)


async def _guards(
    port: FanoutPort, limits: FanoutLimits, missing: int, tenant_id: str
) -> Parked | None:
    """The checks before creating children; a Parked outcome defers the whole fan-out."""
    quota = await port.quota()
    if quota is not None and quota[0] - quota[1] < missing:
        raise _quota_exceeded(tenant_id, missing, *quota)
    depth = await port.ready_depth()
    if depth > limits.backpressure_max_depth:
        return Parked(
            BACKPRESSURE_PARK_S,
            f"ready queue depth {depth} is over {limits.backpressure_max_depth}; the fan-out "
            f"starts once workers catch up",
            WaitReason.BACKPRESSURE,
        )
    if await port.payload_pressure():
        return Parked(
            PAYLOAD_PARK_S,
            "the payload store, which keeps MERGE outputs past 256 KiB, is over "
            "SCHEMABRIDGE_PAYLOAD_HIGH_WATER_BYTES; it drains as workers delete the payloads "
            "of runs ended over SCHEMABRIDGE_PAYLOAD_RETENTION_S ago, and the fan-out starts "
            "then",
            WaitReason.PAYLOAD_STORE,
        )
    return None
