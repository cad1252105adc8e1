"""`GET /runs/{id}/events`: server-sent events of a run's status and progress, so clients need
not poll.

    retry: 3000                once, before the first event: how long to wait before
                               reconnecting (ms)
    event: progress            whenever the run's status, a step's status or the fan-out
    id: 1767225600123456       counters changed (the first event is the run as it is now);
    data: {RunProgress}        not for a dead holder's `silentS` alone, which each read
                               counts anew (its `lastSeen` stays: count on from it)

    : heartbeat                a comment every `HEARTBEAT_S` while nothing changed

    event: end                 once, when the run has ended; then the stream closes
    data: {RunProgress}

    event: stopping            when the API process stops (SIGTERM, a rolling restart): the
    data: {"message": …}       stream closes, and the client reconnects (to another process)

The stream does not poll: it holds a watch of the run (`Operations.runs.watch`: the run events
workers and operator actions publish through Redis), opened before its first read so that a
change landing during that read is not lost, and reads the run through
`Operations.runs.progress` (three small reads, whatever the fan-out's size) when an event says
it changed — at most every `MIN_READ_S`, however busy the run — and every `FALLBACK_S` anyway,
since an event can be lost (Redis down): a lost event costs latency, never an update. A stream
on an idle run reads it once per `FALLBACK_S`. It lasts at most `MAX_STREAM_S`; a client that
wants more reconnects, and so does one whose API process stops: the stream ends at once
with `event: stopping` (`STOPPING`), rather than hold the server's drain for its grace, so a
client can tell a planned restart from a broken connection (and one that does not know the
event skips it, as an `EventSource` does an event nobody listens for). An
unknown run (or another tenant's) is a 404 before the stream starts; a
refusal while streaming (the database unreachable) ends it with `event: error` and the error
body, and so does the stream's key being revoked or expiring (checked every `KEY_CHECK_S`).

Reconnecting: every event's `data` is the whole run as it is then, never a change to apply, and
every connection starts with the run as it is now. So a client that reconnects (after
`MAX_STREAM_S`, a proxy's cut, a restart) loses nothing and replays nothing: it shows each
event as the current state, and drops none by its id. Ids still mean something across
connections (`EventIds`): each is the time it was sent in epoch microseconds, and past the
`Last-Event-ID` the client sends (what `EventSource` sends by itself when it reconnects), so
they increase over a client's connections, to any API process, whatever its clock. The `retry:`
hint (`RECONNECT_MS`) is what an `EventSource` waits before it reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Header, Path
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.rest.auth import CallerDep, KeyCheck, LiveKeyDep
from api.rest.body_shape import JsonBodyRoute
from api.rest.deps import ContextDep, OperationsDep
from api.rest.errors import error_body, run_read_responses
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
RECONNECT_MS = 3_000
"""The `retry:` sent before the first event: how long a client waits before it reconnects a
stream that ended without `end` or broke (an `EventSource` reads it; others may)."""
MAX_EVENT_ID_CHARS = 40
"""A `Last-Event-ID` longer than this is not one of ours: it is ignored, as any other value
that is not a whole number."""
STOPPING = "the server is stopping; reconnect"
"""The message of the `stopping` event, the last of a stream whose API process stops; the
stream then closes without `end`, so the client reconnects, as after `MAX_STREAM_S`."""
EVENT_MODELS = (RunProgress,)
"""The models of the events' `data`: listed in the OpenAPI components by the app, since no
route answers them as JSON (FastAPI would leave them out)."""


class RunWatch(Protocol):
    """What a stream needs of `Operations.runs.watch`'s watch."""

    async def wait(self, timeout_s: float) -> bool: ...


class EventIds:
    """The ids of one stream's events: the time each is sent, in epoch microseconds, always
    past the previous one and past `last_seen` (the `Last-Event-ID` the client reconnected
    with), so a client sees them increase over all its connections even when it reconnects
    to an API process whose clock is behind the last one's. An id orders events; it names no
    event to resume from: each connection starts with the run as it is (module docstring)."""

    def __init__(self, now: Callable[[], float], last_seen: int | None = None) -> None:
        self._now = now
        self._last = last_seen or 0

    def next(self) -> int:
        self._last = max(int(self._now() * 1_000_000), self._last + 1)
        return self._last


def last_event_id(header: str | None) -> int | None:
    """The `Last-Event-ID` a client sent, when it is one of ours (a whole number); None for
    none or anything else (a stream by another server: ignored, not refused)."""
    if header is None or len(header) > MAX_EVENT_ID_CHARS:
        return None
    text = header.strip()
    return int(text) if text.isdigit() else None


def event(name: str, data: Any, event_id: int | None = None) -> str:
    """One server-sent event: its name, an optional id and its data as one JSON line."""
    head = f"event: {name}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _as_data(progress: RunProgress) -> dict[str, Any]:
    return progress.model_dump(mode="json", by_alias=True)


def _as_seen(progress: RunProgress) -> RunProgress:
    """`progress` less what every read counts anew though nothing happened: a dead holder's
    `silent_s` (now less its `last_seen`, which stays). Compared whole, a stream sent the same
    run again at each fallback read for as long as a dead worker held children."""
    fanout = progress.fanout
    if not fanout.presumed_dead:
        return progress
    dead = [
        held.model_copy(update={"holder": held.holder.model_copy(update={"silent_s": None})})
        for held in fanout.presumed_dead
    ]
    return progress.model_copy(update={"fanout": fanout.model_copy(update={"presumed_dead": dead})})


async def _key_ended(key_live: KeyCheck) -> str | None:
    """The `error` event that ends a stream whose key is no longer live (or whose keys
    cannot be read), None while it is."""
    try:
        live = await key_live()
    except OperationError as exc:  # the keys cannot be read: as a failed run read
        return event("error", error_body(exc.code, exc.message, exc.details))
    return None if live else event("error", error_body("unauthorized", KEY_ENDED))


async def _wait(watch: RunWatch, timeout_s: float, stopping: asyncio.Event | None) -> bool:
    """`watch.wait(timeout_s)`, cut short (False) when `stopping` is set."""
    if stopping is None:
        return await watch.wait(timeout_s)
    if stopping.is_set():
        return False
    changed = asyncio.ensure_future(watch.wait(timeout_s))
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((changed, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        changed.cancel()
        stopped.cancel()
    return changed.done() and not changed.cancelled() and changed.result()


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
    ids: EventIds | None = None,
    reconnect_ms: int = RECONNECT_MS,
    stopping: asyncio.Event | None = None,
) -> AsyncIterator[str]:
    """The stream's text, starting from `first` (the run as read before the answer began),
    after the `retry:` hint (`reconnect_ms`); `watch` is the run's, opened before `first` was
    read, so no change since goes unseen. `key_live`: whether the key that opened the stream
    is still live, asked at most every `key_check_s` (between events and heartbeats), so a key
    revoked mid-stream ends it within about `key_check_s` with `event: error` (401). `ids`
    numbers the events (default: from the system clock, no `Last-Event-ID`). `stopping`: set
    when the API process stops; the stream then ends at once with `event: stopping`."""
    loop = asyncio.get_running_loop()
    ids = ids or EventIds(time.time)
    deadline = loop.time() + max_s
    current = first
    # In the first event's block: a block of its own, with no data, would reach some
    # clients as an event of no name.
    yield f"retry: {reconnect_ms}\n" + event("progress", _as_data(current), ids.next())
    read_at = spoke_at = loop.time()
    # Each turn reads the run (at most one per min_read_s) or says a heartbeat.
    turns = math.ceil(max_s / min_read_s) + math.ceil(max_s / heartbeat_s) + 1
    key_checked_at = loop.time()
    for _ in range(turns):
        if key_live is not None and loop.time() - key_checked_at >= key_check_s:
            key_checked_at = loop.time()
            ended = await _key_ended(key_live)
            if ended is not None:
                yield ended
                return
        if current.ended:
            yield event("end", _as_data(current), ids.next())
            return
        now = loop.time()
        if now >= deadline:
            return
        wait_s = min(read_at + fallback_s, spoke_at + heartbeat_s, deadline) - now
        changed = await _wait(watch, max(0.0, wait_s), stopping)
        if stopping is not None and stopping.is_set():
            yield event("stopping", {"message": STOPPING})
            return
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
        if _as_seen(latest) != _as_seen(current) and not latest.ended:
            yield event("progress", _as_data(latest), ids.next())
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
            "description": "Server-sent events: `retry:` (ms to wait before reconnecting) "
            "first, then `progress` (data: a `RunProgress`, "
            "#/components/schemas/RunProgress) when something changed, `: heartbeat` comments, "
            "`end` (data: the last `RunProgress`) once the run has ended, `error` (data: an "
            "`ErrorBody`) when the run can no longer be read, or `stopping` (data: an object "
            "with a `message`) when the API process stops (a restart): reconnect, to it or "
            "another. `progress` and `end` have an `id:` that increases across connections.",
        },
        **run_read_responses(),
    },
    summary="Server-sent events of a run's status and progress until it ends",
)
async def run_events(
    run_id: Annotated[str, Path(description="The run's id.", max_length=64)],
    *,
    ops: OperationsDep,
    context: ContextDep,
    caller: CallerDep,
    key_live: LiveKeyDep,
    last_seen: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The `id` of the last event seen, on a reconnect (`EventSource` sends "
            "it by itself): the new stream's ids continue past it. Its first event is still "
            "the run as it is now. A value that is not a whole number is ignored.",
        ),
    ] = None,
) -> StreamingResponse:
    """Follow a run until it ends: `progress` events, each the whole run as it is then (not a
    change), then `end`; a `: heartbeat` comment every 15 s while nothing changes.

    Reconnecting: a stream lasts at most an hour, and a proxy or a restart may cut it sooner;
    an API process that stops on purpose (a rolling restart) says `stopping` first, so a
    client can tell a planned restart from a failure. Reconnect after the `retry:` the stream
    starts with (3 s), sending the last `id:` seen as `Last-Event-ID`. A connection always
    starts with the run as it is now, so nothing is lost while disconnected: treat every event
    as the full current state and drop none by its id (the ids increase across connections, to
    any API process, but name nothing to resume from). A stream that ended with `end` or
    `error` is not reconnected."""
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
            ids=EventIds(ops.runtime.clock.now, last_event_id(last_seen)),
            reconnect_ms=RECONNECT_MS,
            stopping=context.stopping,
        ),
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
