"""Reading a run's log for `schemabridge runs logs` (`--follow`: polling it until the run ends).

A follower rides out the API going away under `Reconnect`'s bounds, resuming after the last
line it printed, so no line is printed twice and none is missed. A poller hears no `event:
stopping` as a stream's reader does: once it has read the log, an answer or a failure that
looks like a restart (`looks_like_restart`: 503 `not_ready`, a connection refused or broken)
is one calm line (`RESTARTING_LINE`) and the restart's own bound, not a warning and the
`--reconnect-for` of failures. Its first read finding no API is an ordinary outage: nothing
says it was ever there (a wrong --api-url looks the same).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from api.cli.client_errors import ApiFailure
from api.cli.reconnect import RESTARTING_LINE, Reconnect, looks_like_restart
from api.cli.remote import say
from api.cli.run_options import ENDED
from schemas.durations import duration

if TYPE_CHECKING:
    from api.cli.client import ApiClient

LOG_POLL_S = 1.0
MAX_LOG_POLLS = 7 * 24 * 3_600
"""`logs --follow` stops after this many polls (a week at one a second) at the latest."""


async def read_log(
    api: ApiClient,
    run_id: str,
    emit: Callable[[list[Any]], None],
    *,
    follow: bool,
    reconnect: Reconnect,
) -> None:
    """Print the run's log with `emit`; with `follow`, until the run ends. Raises
    `ApiFailure`: at once without `follow`, else when `reconnect` gives up."""
    after: str | None = None
    heard = False  # a read answered: a connection refused from now on may be a restart
    for _ in range(MAX_LOG_POLLS):
        try:
            ended, after, more = await _log_poll(api, run_id, after, follow, emit)
        except ApiFailure as failure:
            if not follow:
                raise  # only a follower rides out an outage; a one-off read fails at once
            if heard and not reconnect.lost and looks_like_restart(failure):
                reconnect.stopped()
                say(RESTARTING_LINE)
            delay = reconnect.delay_after(failure)
            if delay is None:
                resume = f"schemabridge runs logs {run_id} --follow"
                raise reconnect.gave_up(failure, resume) from None
            if reconnect.attempts == 1 and not reconnect.restarting:
                say(reconnect.lost_line(failure))
            await asyncio.sleep(delay)
            continue
        heard = True
        lasted = reconnect.recovered()
        if lasted is not None:
            say(f"reconnected to the API after {duration(lasted)}")
        if more:
            continue  # a full page: read on at once
        if ended:
            return
        await asyncio.sleep(LOG_POLL_S)


async def _log_poll(
    api: ApiClient,
    run_id: str,
    after: str | None,
    follow_log: bool,
    emit: Callable[[list[Any]], None],
) -> tuple[bool, str | None, bool]:
    """One read of the log after `after`: whether the run had ended before the read (so the
    read saw its last lines), the id to read after next, and whether a full page says more
    lines are waiting. A line is printed once: `after` moves past each page as it is shown,
    and a read that fails prints nothing (both requests come before `emit`)."""
    from api.cli.client_routes import PAGE_LIMIT  # with the client: see call()

    ended = True
    if follow_log:
        ended = (await api.runs.get(run_id)).status in ENDED
    page = await api.runs.logs(run_id, after=after, limit=PAGE_LIMIT)
    emit(page.items)
    if page.items:
        after = str(page.items[-1].id)
    return ended, after, page.next is not None
