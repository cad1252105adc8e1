"""SPAWNER: fan-out as durable child runs (docs/architecture.md, 'Fan-out and the join').

The vertex decides; the engine writes. `execute` evaluates `items`, runs the guards before the
first child (tenant quota, ready-queue backpressure, payload-store pressure), then hands the
children to the engine's `FanoutPort` in batches (`batch_bounds`: a small first one, so the
first children start while the rest are written). Each child's identity is derived from
(parent run id, spawner vertex id, item index), and the store creates a child only if that key
does not exist (a unique constraint, not a look-up), so a re-delivered or racing spawner
re-attaches the children that exist, whatever their status, and creates only the missing ones.

Child inputs are rendered one batch at a time from the item list, which is never copied per
child, and serialized here, once: the text goes to the insert as it is, and its size is what
the two limits on what a fan-out writes count (docs/security.md, 'Input limits'). A child's
input may be no larger than a submitted run's (`MAX_INPUT_BYTES`), and one fan-out's child
inputs together no larger than `MAX_FANOUT_INPUT_BYTES`; a batch that would cross either
fails the step before it is written, so the children of earlier batches stay and nothing is
half-written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import expressions, json_codec
from schemas.definitions import SpawnerConfig
from schemas.errors import FailureKind, StepFailure, set_quota_command
from schemas.waiting import WaitReason
from vertices.contract import AwaitingChildren, Parked, StepContext, StepStopped
from vertices.fanout_limits import FanoutLimits

__all__ = [
    "ChildSpec",
    "FanoutLimits",
    "FanoutPort",
    "batch_bounds",
    "child_specs",
    "execute",
    "items_of",
]

BACKPRESSURE_PARK_S = 10.0
"""How long a spawner parks when the ready queue is too deep: 10 s, as documented for
`BACKPRESSURE_MAX_DEPTH` (docs/architecture.md, 'Backpressure and quotas')."""
PAYLOAD_PARK_S = 10.0
"""How long a spawner parks while the payload store is over its high-water mark."""
FIRST_BATCH = 64
"""Children in a fan-out's first batch when its `batch_size` is larger. No child starts before
its batch commits, and a batch of 500 takes about 70 ms to write on PostgreSQL; the batches
after the first double up to `batch_size`, so the first children call out while the rest are
written (bench/RESULTS.md, 'Time to the first call')."""


@dataclass(frozen=True)
class ChildSpec:
    """One child run to create."""

    index: int
    input_json: str
    """The child's input as compact JSON text, as the store writes it."""
    input_bytes: int
    """The size of `input_json` in UTF-8 bytes."""
    item: Any
    """Stored only when it differs from the input (None otherwise)."""


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


def items_of(config: SpawnerConfig, ctx: StepContext) -> list[Any]:
    try:
        items = expressions.render(config.items, ctx.context)
    except expressions.ExpressionError as exc:
        raise StepFailure(FailureKind.EXPRESSION_ERROR, f"/config/items: {exc}") from exc
    if not isinstance(items, list):
        kind = expressions.json_type(items)
        cut = expressions.cut_body(config.items, ctx.context) if items is None else None
        if cut:
            raise StepFailure(
                FailureKind.INVALID_CONFIG,
                f"/config/items must evaluate to an array, got null: {cut}.body was longer "
                "than SCHEMABRIDGE_MAX_RESPONSE_BYTES, so it was cut there and kept as text "
                f"({cut}.bodyTruncated is true); have the destination answer less (a page "
                "at a time) or raise SCHEMABRIDGE_MAX_RESPONSE_BYTES",
            )
        # Where a chain of fields stops says whether the expression or the data is wrong (a
        # downstream that answered HTML leaves a string where the items were looked for).
        stops = expressions.where_path_stops(config.items, ctx.context) if items is None else None
        raise StepFailure(
            FailureKind.INVALID_CONFIG,
            f"/config/items must evaluate to an array, got {kind}"
            + (f" ({stops})" if stops else "")
            + f": check the expression {config.items!r}",
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
    """Render the child inputs of items[start:stop], each serialized once (see the module
    docstring)."""
    for index in range(start, min(stop, len(items))):
        item = items[index]
        if config.input is None:
            child_input, stored_item = item, None
        else:
            context = {**ctx.context, "item": item, "index": index}
            try:
                child_input = expressions.render(config.input, context)
            except expressions.ExpressionError as exc:
                raise StepFailure(
                    FailureKind.EXPRESSION_ERROR, f"input of item {index}: {exc}"
                ) from exc
            stored_item = item
        text, size = json_codec.dumps_sized(child_input)
        yield ChildSpec(index, text, size, stored_item)


def _child_input_too_large(pointer: str, index: int, size: int, limit: int) -> StepFailure:
    return StepFailure(
        FailureKind.INVALID_CONFIG,
        f"{pointer}: the input of item {index:,} is {size:,} bytes as compact JSON, over "
        f"the limit of {limit:,} a run's input has (SCHEMABRIDGE_MAX_INPUT_BYTES); pass large "
        "values to children by reference (a URL or an id they fetch) rather than copying them "
        "into every child's input, or raise SCHEMABRIDGE_MAX_INPUT_BYTES",
    )


def _fanout_too_large(
    pointer: str, batch: Sequence[ChildSpec], written: int, limit: int, total: int
) -> StepFailure:
    """The failure of a batch whose inputs would take the fan-out's past `limit`, naming the
    item that crosses it (read only now: a fan-out within its limit pays one sum a batch)."""
    size, crossing = written, batch[-1]
    for spec in batch:
        size += spec.input_bytes
        if size > limit:
            crossing = spec
            break
    kept = (
        f"children 0 to {batch[0].index - 1:,} exist and run on"
        if batch[0].index
        else "no child was created"
    )
    return StepFailure(
        FailureKind.INVALID_CONFIG,
        f"{pointer}: the children's inputs reach {size:,} bytes as compact JSON at item "
        f"{crossing.index:,} of {total:,}, over the limit of {limit:,} per fan-out "
        f"(SCHEMABRIDGE_MAX_FANOUT_INPUT_BYTES); {kept}. Copy less into each child's input "
        "(pass large values by reference), split the items across several runs, or raise "
        "SCHEMABRIDGE_MAX_FANOUT_INPUT_BYTES",
    )


def _checked_batch(
    config: SpawnerConfig, batch: list[ChildSpec], written: int, limits: FanoutLimits, total: int
) -> int:
    """The bytes of `batch`'s child inputs; a StepFailure when one of them is over the child
    input limit, or when they would take the fan-out's `written` bytes over its limit."""
    size = 0
    for spec in batch:
        size += spec.input_bytes
        if spec.input_bytes > limits.max_child_input_bytes:
            raise _child_input_too_large(
                _input_pointer(config), spec.index, spec.input_bytes, limits.max_child_input_bytes
            )
    if written + size > limits.max_fanout_input_bytes:
        raise _fanout_too_large(
            _input_pointer(config), batch, written, limits.max_fanout_input_bytes, total
        )
    return size


def _input_pointer(config: SpawnerConfig) -> str:
    """Where a child's input comes from: the spawner's `input`, else the item itself."""
    return "/config/input" if config.input is not None else "/config/items"


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
    created = written = 0
    for start, end in batch_bounds(total, limits.batch_size):
        if ctx.stop is not None and ctx.stop.reason is not None:
            # Its run failed (or was cancelled): no more children. Those created run on; the
            # run's retry re-attaches them and creates the rest, one child per item.
            raise StepStopped(f"children {start:,} to {total - 1:,} of {total:,} not created")
        batch = list(child_specs(config, ctx, items, start, end))
        # Every batch counts, re-attached children's too: a fan-out delivered again fails at
        # the same item, whatever its first delivery created.
        written += _checked_batch(config, batch, written, limits, total)
        created += await port.create_children(total, batch)
    await ctx.log(
        "info",
        f"fan-out of {total:,} children: {created:,} created, {total - created:,} re-attached",
        {"total": total, "created": created},
    )
    return AwaitingChildren(total)


def batch_bounds(total: int, batch_size: int) -> Iterator[tuple[int, int]]:
    """The `[start, end)` item ranges a fan-out of `total` writes, one transaction each: the
    first of at most `FIRST_BATCH` items, each next one twice the last, up to `batch_size`."""
    start, size = 0, min(batch_size, FIRST_BATCH)
    while start < total:
        end = min(total, start + size)
        yield start, end
        start, size = end, min(batch_size, 2 * size)


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
