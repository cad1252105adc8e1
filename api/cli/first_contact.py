"""A follower's first request, when the API may not be there yet (`runs watch` typed while it
restarts): tried again under the same `Reconnect` bounds as a later outage (`--reconnect-for`),
with one warning line saying what it waits for. A refusal (401, 404, an ambiguous prefix) is
not an outage and ends the command at once; an API that never answers (a wrong --api-url) ends
it within the bound with the failure's own one-line error, since nothing says it was ever
there (no "gave up getting it back").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from api.cli.client_errors import ApiFailure
from api.cli.reconnect import NOT_READY, Reconnect
from api.cli.remote import say
from schemas.durations import duration

Answer = TypeVar("Answer")


async def first_answer(
    reconnect: Reconnect,
    ask: Callable[[], Awaitable[Answer]],
    repeatable: Callable[[ApiFailure], bool] = lambda failure: True,
) -> Answer:
    """`ask()`'s answer, asked again while it fails worth another try within `reconnect`'s
    bounds; raises the last `ApiFailure` once they pass (or at once, one not worth it, or one
    after which `repeatable` says asking again could do twice what was asked once)."""
    while True:
        try:
            answer = await ask()
        except ApiFailure as failure:
            delay = reconnect.delay_after(failure) if repeatable(failure) else None
            if delay is None:
                raise
            if reconnect.attempts == 1:
                say(reconnect.waiting_line(failure))
            await asyncio.sleep(delay)
            continue
        lasted = reconnect.recovered()
        if lasted is not None:
            say(f"the API answered after {duration(lasted)}")
        return answer


def changed_nothing(failure: ApiFailure) -> bool:
    """Whether the request that failed is known to have changed nothing: it never reached a
    server, or the API refused it while starting or stopping (503 `not_ready`, before any
    route ran). A submission without an idempotency key is sent again only then: after a
    broken connection or a proxy's 502 its run may exist, and a repeat would start a second."""
    return failure.unsent or (failure.status == 503 and failure.code == NOT_READY)
