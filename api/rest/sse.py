"""`GET /runs/{id}/events`: server-sent events of a run's status and progress, so clients need
not poll.

    event: progress            whenever the run's status, a step's status or the fan-out
    id: 1                      counters changed (the first event is the run as it is now)
    data: {RunProgress}

    : heartbeat                a comment every `HEARTBEAT_S` while nothing changed

    event: end                 once, when the run has ended; then the stream closes
    data: {RunProgress}

The stream reads the run through `Operations.runs.progress` every `POLL_S` (three small reads,
whatever the fan-out's size) and lasts at most `MAX_STREAM_S`; a client that wants more
reconnects. An unknown run (or another tenant's) is a 404 before the stream starts; a
refusal while streaming (the database unreachable) ends it with `event: error` and the error
body.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse

from api.rest.auth import CallerDep
from api.rest.deps import OperationsDep
from api.rest.errors import error_responses
from engine.operations import Operations
from engine.operations.views import RunProgress
from schemas.errors import OperationError

router = APIRouter(tags=["runs"])

POLL_S = 0.5
"""How often a stream reads its run: at most twice a second per stream."""
HEARTBEAT_S = 15.0
"""A comment line this often while nothing changed, so proxies keep the connection open."""
MAX_STREAM_S = 3_600.0
"""The longest one stream lasts; it then closes with no `end` event and the client
reconnects."""
MEDIA_TYPE = "text/event-stream"


def event(name: str, data: Any, event_id: int | None = None) -> str:
    """One server-sent event: its name, an optional id and its data as one JSON line."""
    head = f"event: {name}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _as_data(progress: RunProgress) -> dict[str, Any]:
    return progress.model_dump(mode="json", by_alias=True)


async def progress_events(
    ops: Operations,
    first: RunProgress,
    *,
    tenant: str | None,
    poll_s: float = POLL_S,
    heartbeat_s: float = HEARTBEAT_S,
    max_s: float = MAX_STREAM_S,
) -> AsyncIterator[str]:
    """The stream's text, starting from `first` (the run as read before the answer began)."""
    current = first
    sent = 1
    yield event("progress", _as_data(current), sent)
    quiet_s = 0.0
    for _ in range(math.ceil(max_s / poll_s)):
        if current.ended:
            yield event("end", _as_data(current), sent + 1)
            return
        await asyncio.sleep(poll_s)
        try:
            latest = await ops.runs.progress(current.id, tenant=tenant)
        except OperationError as exc:
            yield event("error", {"code": exc.code, "message": exc.message})
            return
        if latest != current and not latest.ended:
            sent += 1
            yield event("progress", _as_data(latest), sent)
            quiet_s = 0.0
        else:
            quiet_s += poll_s
            if quiet_s >= heartbeat_s:
                yield ": heartbeat\n\n"
                quiet_s = 0.0
        current = latest


@router.get(
    "/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
            "description": "Server-sent events: `progress` (data: RunProgress) when something "
            "changed, `: heartbeat` comments, `end` once the run has ended.",
        },
        **error_responses(401, 404, 422, 503),
    },
    summary="Server-sent events of a run's status and progress until it ends",
)
async def run_events(
    run_id: Annotated[str, Path(description="The run's id.", max_length=64)],
    ops: OperationsDep,
    caller: CallerDep,
) -> StreamingResponse:
    first = await ops.runs.progress(run_id, tenant=caller.tenant)  # 404 before the stream
    return StreamingResponse(
        # The module's settings read at each request, so a test can shorten them.
        progress_events(
            ops,
            first,
            tenant=caller.tenant,
            poll_s=POLL_S,
            heartbeat_s=HEARTBEAT_S,
            max_s=MAX_STREAM_S,
        ),
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
