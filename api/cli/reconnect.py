"""Riding out an API that goes away while a command follows a run (`runs watch`, `runs logs
--follow`, `runs submit --wait`): the API restarts, a proxy answers 502/503 while it does, or
the event stream's connection drops.

A failure is worth another try when it says so (`ApiFailure.transient`: no answer at all, or
a 5xx); anything else (401, 404, JSON this CLI does not understand) would only be answered the
same way again. Tries back off exponentially from `first_delay_s` up to `max_delay_s`, and the
outage is bounded twice: by time (`window_s` since the first failure of the outage) and by
count (`max_attempts` failures in a row), so a command never hangs on an API that is gone for
good. Any success ends the outage and starts the next one's count afresh.

An API process that stops on purpose (SIGTERM: a rolling restart) says so on its event
streams (`event: stopping`) before it closes them. A client that polls (`runs logs --follow`)
hears no such event: to it a restart is what `looks_like_restart` tells, an answer 503
`not_ready` (the API starting or stopping) or no answer because nothing listens for a moment
or the connection broke (a stopping API closes its listener first).

What follows a stop is a restart, not a failure (`restarting`): it begins at the stop, with
no failure counted yet, and is bounded by `restart_window_s` (or `window_s` when longer) and
the same count, so a restart neither eats into nor is cut short by a `--reconnect-for` meant
for failures, and still ends in the same one-line failure when the API never comes back.

The clock is injected, so the policy is arithmetic a unit test feeds timestamps to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from schemas.counts import plural
from schemas.durations import duration

DEFAULT_WINDOW_S = 60.0
"""How long a follower keeps trying to get the API back, by default (`--reconnect-for`)."""
MAX_ATTEMPTS = 30
"""Failures in a row a follower tolerates within its window."""
RESTART_WINDOW_S = 120.0
"""How long a follower waits at least for an API that said it is stopping to answer again (a
rolling restart drains for up to its grace, 20 s by default, before the next process starts)."""
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 5.0


@dataclass
class Reconnect:
    """One follower's reconnection policy and the state of its current outage (if any)."""

    window_s: float = DEFAULT_WINDOW_S
    max_attempts: int = MAX_ATTEMPTS
    first_delay_s: float = FIRST_DELAY_S
    max_delay_s: float = MAX_DELAY_S
    clock: Callable[[], float] = time.monotonic
    restart_window_s: float = RESTART_WINDOW_S
    lost_at: float | None = field(default=None, init=False)
    """When the current outage began (None: connected)."""
    attempts: int = field(default=0, init=False)
    """Failures in the current outage."""
    restarting: bool = field(default=False, init=False)
    """The current outage began with the API saying it stops (a planned restart)."""

    @property
    def lost(self) -> bool:
        return self.lost_at is not None

    def recovered(self) -> float | None:
        """The API answered: the outage (if any) is over. Answers how long it lasted, when it
        was a failure's (a restart's one line said already that following goes on)."""
        if self.lost_at is None:
            return None
        lasted = None if self.restarting else self.clock() - self.lost_at
        self.lost_at = None
        self.attempts = 0
        self.restarting = False
        return lasted

    def stopped(self) -> None:
        """The API said it is stopping: a restart begins now, whatever came before (the
        stream that said so was an answer), with no failure counted."""
        self.lost_at = self.clock()
        self.attempts = 0
        self.restarting = True

    def delay_after(self, failure: ApiFailure) -> float | None:
        """Count `failure`; answer how long to wait before trying again, or None when the
        outage has lasted too long (or the failure is not worth another try)."""
        if not failure.transient:
            return None
        now = self.clock()
        if self.lost_at is None:
            self.lost_at = now
        self.attempts += 1
        window_s = max(self.window_s, self.restart_window_s) if self.restarting else self.window_s
        left = self.lost_at + window_s - now
        if self.attempts > self.max_attempts or left <= 0:
            return None
        delay: float = min(self.first_delay_s * 2.0 ** (self.attempts - 1), self.max_delay_s)
        return min(delay, left)

    def gave_up(self, failure: ApiFailure, resume: str) -> ApiFailure:
        """The one-line failure (exit 4) that ends a follower after `failure`; `resume` is the
        command that follows the run again."""
        if not failure.transient:
            return failure
        lasted = 0.0 if self.lost_at is None else self.clock() - self.lost_at
        reason = failure.message.splitlines()[0]
        after = " after it stopped" if self.restarting else ""
        return ApiFailure(
            f"gave up after {plural(self.attempts, 'try', 'tries')} in {duration(lasted)} to "
            f"get the API back{after} ({reason}); the run goes on: `{resume}`",
            ExitCode.UNREACHABLE,
            status=failure.status,
            code=failure.code,
        )

    def waiting_line(self, failure: ApiFailure) -> str:
        """The one warning line of a command whose first request found no API (it may be
        restarting as the command starts): what it waits for, and how long."""
        reason = failure.message.splitlines()[0]
        return f"warning: {reason}; waiting up to {duration(self.window_s)} for it to answer"

    def lost_line(self, failure: ApiFailure) -> str:
        """The one warning line of an outage, said when it begins."""
        reason = failure.message.splitlines()[0]
        return f"warning: {reason}; reconnecting for up to {duration(self.window_s)}"


RESTARTING_LINE = "the API is restarting; following again when it is back"
"""The one line of a restart (`Reconnect.stopped`): no warning, since nothing failed."""


NOT_READY = "not_ready"
"""The code of the 503 an API process answers while it starts or stops (`api.rest.deps`)."""


def looks_like_restart(failure: ApiFailure) -> bool:
    """Whether `failure` is what an API restarting looks like to a request between two of
    its processes: a 503 `not_ready`, or no answer because the connection was refused or
    broke (`ApiFailure.dropped`). A proxy's 5xx, a timeout or a name that does not resolve
    are failures."""
    return (failure.status == 503 and failure.code == NOT_READY) or failure.dropped
