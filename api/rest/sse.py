"""`GET /runs/{id}/events`: server-sent events of a run's status and progress, so clients need
not poll.

    event: progress            whenever the run's status, a step's status or the fan-out
    id: 1                      counters changed (the first event is the run as it is now)
    data: {RunProgress}

    : heartbeat                a comment every `HEARTBEAT_S` while nothing changed

    event: end                 once, when the run has ended; then the stream closes
    data: {RunProgress}

The stream does not poll: it holds a watch of the run (`Operations.runs.watch`: the run events
workers and operator actions publish through Redis), opened before its first read so that a
change landing during that read is not lost, and reads the run through
`Operations.runs.progress` (three small reads, whatever the fan-out's size) when an event says
it changed — at most every `MIN_READ_S`, however busy the run — and every `FALLBACK_S` anyway,
since an event can be lost (Redis down): a lost event costs latency, never an update. A stream
on an idle run reads it once per `FALLBACK_S`. It lasts at most `MAX_STREAM_S`; a client that
wants more reconnects. An unknown run (or another tenant's) is a 404 before the stream starts; a
refusal while streaming (the database unreachable) ends it with `event: error` and the error
body, and so does the stream's key being revoked or expiring (checked every `KEY_CHECK_S`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.rest.auth import CallerDep, KeyCheck, LiveKeyDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import OperationsDep
from api.rest.errors import error_body, error_responses
from engine.operations import Operations
from engine.operations.views import RunProgress
from schemas.errors import OperationError

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)

FALLBACK_S = 5.0
"""A stream reads its run at least this often, events or not."""
MIN_READ_S = 0.25
"""A stream reads its run at most this often (4 a second), however many events arrive."""
HEARTBEAT_S = 15.0
"""A comment line this often while nothing changed, so proxies keep the connection open."""
MAX_STREAM_S = 3_600.0
"""The longest one stream lasts; it then closes with no `end` event and the client
reconnects."""
MEDIA_TYPE = "text/event-stream"
KEY_ENDED = "the API key that opened this stream was revoked or has expired"
KEY_CHECK_S = 5.0
"""A stream asks whether its key is still live at most this often (a look-up costs what a
request's authentication costs)."""
EVENT_MODELS = (RunProgress,)
"""The models of the events' `data`: listed in the OpenAPI components by the app, since no
route answers them as JSON (FastAPI would leave them out)."""


class RunWatch(Protocol):
    """What a stream needs of `Operations.runs.watch`'s watch."""

    async def wait(self, timeout_s: float) -> bool: ...


def event(name: str, data: Any, event_id: int | None = None) -> str:
    """One server-sent event: its name, an optional id and its data as one JSON line."""
    head = f"event: {name}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _as_data(progress: RunProgress) -> dict[str, Any]:
    return progress.model_dump(mode="json", by_alias=True)


async def progress_events(
    ops: Operations,
    first: RunProgress,
    watch: RunWatch,
    *,
    tenant: str | None,
    key_live: KeyCheck | None = None,
    key_check_s: float = KEY_CHECK_S,
    fallback_s: float = FALLBACK_S,
    min_read_s: float = MIN_READ_S,
    heartbeat_s: float = HEARTBEAT_S,
    max_s: float = MAX_STREAM_S,
) -> AsyncIterator[str]:
    """The stream's text, starting from `first` (the run as read before the answer began);
    `watch` is the run's, opened before `first` was read, so no change since goes unseen.
    `key_live`: whether the key that opened the stream is still live, asked at most every
    `key_check_s` (between events and heartbeats), so a key revoked mid-stream ends it within
    about `key_check_s` with `event: error` (401)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_s
    current = first
    sent = 1
    yield event("progress", _as_data(current), sent)
    read_at = spoke_at = loop.time()
    # Each turn reads the run (at most one per min_read_s) or says a heartbeat.
    turns = math.ceil(max_s / min_read_s) + math.ceil(max_s / heartbeat_s) + 1
    key_checked_at = loop.time()
    for _ in range(turns):
        if key_live is not None and loop.time() - key_checked_at >= key_check_s:
            key_checked_at = loop.time()
            try:
                live = await key_live()
            except OperationError as exc:  # the keys cannot be read: as a failed run read
                yield event("error", error_body(exc.code, exc.message, exc.details))
                return
            if not live:
                yield event("error", error_body("unauthorized", KEY_ENDED))
                return
        if current.ended:
            yield event("end", _as_data(current), sent + 1)
            return
        now = loop.time()
        if now >= deadline:
            return
        wait_s = min(read_at + fallback_s, spoke_at + heartbeat_s, deadline) - now
        changed = await watch.wait(max(0.0, wait_s))
        if not changed and loop.time() - read_at < fallback_s:
            if loop.time() >= deadline:
                return
            yield ": heartbeat\n\n"
            spoke_at = loop.time()
            continue
        pause = read_at + min_read_s - loop.time()
        if pause > 0:
            await asyncio.sleep(pause)
        await watch.wait(0.0)  # events until now are covered by this read: consume them
        try:
            latest = await ops.runs.progress(current.id, tenant=tenant)
        except OperationError as exc:
            yield event("error", error_body(exc.code, exc.message, exc.details))
            return
        read_at = loop.time()
        if latest != current and not latest.ended:
            sent += 1
            yield event("progress", _as_data(latest), sent)
            spoke_at = read_at
        current = latest


class WatchedStream(StreamingResponse):
    """A stream that holds its run's watch (an `ExitStack` that closes it) until the answer
    is over: ended, its client gone, or never started."""

    def __init__(
        self, watching: contextlib.ExitStack, content: AsyncIterator[str], **kw: Any
    ) -> None:
        super().__init__(content, **kw)
        self.watching = watching

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.watching:
            await super().__call__(scope, receive, send)


@router.get(
    "/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
            "description": "Server-sent events: `progress` (data: a `RunProgress`, "
            "#/components/schemas/RunProgress) when something changed, `: heartbeat` comments, "
            "`end` (data: the last `RunProgress`) once the run has ended, or `error` (data: an "
            "`ErrorBody`) when the run can no longer be read.",
        },
        **error_responses(401, 404, 422, 503),
    },
    summary="Server-sent events of a run's status and progress until it ends",
)
async def run_events(
    run_id: Annotated[str, Path(description="The run's id.", max_length=64)],
    ops: OperationsDep,
    caller: CallerDep,
    key_live: LiveKeyDep,
) -> StreamingResponse:
    # The watch opens before the first read: a change landing during that read (a worker's
    # claim, a cancel) wakes it, rather than waiting for the fallback read.
    with contextlib.ExitStack() as opening:
        watch = opening.enter_context(ops.runs.watch(run_id))
        first = await ops.runs.progress(run_id, tenant=caller.tenant)  # 404 before the stream
        # Read: from here the stream holds the watch, closed when the answer is over.
        held = opening.pop_all()
    return WatchedStream(
        held,
        # The module's settings read at each request, so a test can shorten them.
        progress_events(
            ops,
            first,
            watch,
            tenant=caller.tenant,
            key_live=key_live,
            key_check_s=KEY_CHECK_S,
            fallback_s=FALLBACK_S,
            min_read_s=MIN_READ_S,
            heartbeat_s=HEARTBEAT_S,
            max_s=MAX_STREAM_S,
        ),
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
