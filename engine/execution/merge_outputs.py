"""A MERGE's `outputs` as expressions see them, whatever its size.

A MERGE whose children's outputs pass `fanout.INLINE_OUTPUT_MAX_BYTES` records them in the
payload store and its output holds `outputsRef` instead of `outputs`. The recorded output
stays that way (the API, the monitor and the run's output show the reference), but the
expression context a step is given has `outputs` loaded from the payload store next to
`counts` and `outputsRef`, so a template reads the same shape at 5 children and at 100,000.

The load costs memory (the whole list, parsed) and a read of every chunk, so it is done only
for a step whose expressions may read that join's outputs (decided from their parsed paths,
`schemas.expressions.root_paths`, erring towards loading), and only up to the worker's
`merge_outputs_read_max_bytes`; above it the step fails, saying what stays readable.

Payloads do not last: workers delete those of runs that ended more than
`payload_retention_s` ago (docs/architecture.md, 'Payload retention'). An operator's Retry
of such a run meets a join whose outputs are gone, or only partly there (the deletion goes
a batch of chunks at a time), and the step reading them fails saying so and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.store import Store
from schemas.definitions import MergeVertex, Vertex, Workflow
from schemas.errors import FailureKind, StepFailure
from schemas.expressions import root_paths, templates_in

READ_MAX_BYTES_SETTING = "SCHEMABRIDGE_MERGE_OUTPUTS_READ_MAX_BYTES"
RETENTION_SETTING = "SCHEMABRIDGE_PAYLOAD_RETENTION_S"


def outputs_read(vertex: Vertex, join_id: str) -> bool:
    """Whether `vertex`'s expressions may read `vertices.<join_id>.output.outputs`: some path
    from the context root leads to it (`vertices.join.output.outputs[0]`) or holds it
    (`vertices.join.output`, `vertices`, `@`). `vertices.join.output.counts` does not."""
    wanted = ("vertices", join_id, "output", "outputs")
    for template in templates_in(vertex.config.model_dump(mode="json")):
        for part in template.parts:
            if isinstance(part, str):
                continue
            for names in root_paths(part):
                shared = min(len(names), len(wanted))
                if tuple(names[:shared]) == wanted[:shared]:
                    return True
    return False


async def with_outputs(
    store: Store,
    outputs: Mapping[str, Any],
    workflow: Workflow,
    vertex: Vertex,
    read_max_bytes: int,
    *,
    retention_s: float,
) -> Mapping[str, Any]:
    """`outputs` (the step's completed vertices' outputs) with `outputs` loaded into each
    referenced MERGE output that `vertex`'s expressions may read; `outputs` itself when there
    is none, as for nearly every step. The values of `outputs` are never changed.

    Raises a terminal `expression_error` when such a MERGE's outputs are over
    `read_max_bytes`, or were deleted by retention (`retention_s`, for the message)."""
    loaded: dict[str, Any] = {}
    for join_id, output in outputs.items():
        ref = _outputs_ref(output)
        if ref is None or not isinstance(workflow.vertices.get(join_id), MergeVertex):
            continue
        if outputs_read(vertex, join_id):
            items = await _load(store, join_id, ref, read_max_bytes, retention_s)
            loaded[join_id] = {**output, "outputs": items}
    return {**outputs, **loaded} if loaded else outputs


async def _load(
    store: Store, join_id: str, ref: dict[str, Any], read_max_bytes: int, retention_s: float
) -> list[Any]:
    size = int(ref.get("bytes", 0))
    if size > read_max_bytes:
        # Terminal: another try meets the same size; the operator raises the setting and
        # retries the run, or the author reads counts instead.
        raise StepFailure(FailureKind.EXPRESSION_ERROR, too_large(join_id, size, read_max_bytes))
    items = await store.get_payload(str(ref["payloadRef"]))
    # In the engine only retention deletes payloads (`Store.delete_payload` is the tests').
    # Fewer items than the join counted: retention deleted some of its chunks and the rest go
    # at its next pass.
    if not isinstance(items, list) or len(items) != int(ref.get("count", len(items))):
        # Terminal: the outputs do not come back; merging again is what brings them.
        raise StepFailure(FailureKind.EXPRESSION_ERROR, expired(join_id, retention_s))
    return items


def _outputs_ref(output: Any) -> dict[str, Any] | None:
    """The `outputsRef` of a MERGE output that has no inline `outputs`, else None."""
    if not isinstance(output, dict) or "outputs" in output:
        return None
    ref = output.get("outputsRef")
    return ref if isinstance(ref, dict) and "payloadRef" in ref else None


def too_large(join_id: str, size: int, read_max_bytes: int) -> str:
    """Why a step may not read the outputs of MERGE `join_id`, and what it may read."""
    return (
        f"the outputs of MERGE {join_id!r} are {size:,} bytes, over the {read_max_bytes:,} "
        f"an expression may load ({READ_MAX_BYTES_SETTING}); raise it, or read "
        f"vertices.{join_id}.output.counts and .outputsRef, which stay readable"
    )


def expired(join_id: str, retention_s: float) -> str:
    """Why a step may not read the outputs of MERGE `join_id` any more, and what to do."""
    return (
        f"the outputs of MERGE {join_id!r} expired: a join's outputs past the inline limit "
        f"are deleted {_duration(retention_s)} after their run ends ({RETENTION_SETTING}); "
        f"start over the run to merge again, or raise {RETENTION_SETTING} to keep them longer"
    )


def _duration(seconds: float) -> str:
    """`seconds` in the largest whole unit that fits: "7 days", "36 hours", "90 s"."""
    for unit, size in (("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{seconds:g} s"
