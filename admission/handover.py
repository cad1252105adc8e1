"""Handing a slot over inside one process, without waiting for Redis.

When a call succeeds and another call of this process is waiting for the same destination
and tenant, the waiter starts at once on the slot that was just freed, instead of waiting for
the settlement and a new admission to travel to Redis and back (two round trips through the
batcher, several milliseconds in which the slot serves nobody: at 50 ms per call about a
tenth of the destination's capacity). Redis is told in the same exchange as the settlement:
the old slot is released, the new call is recorded on its own lease (`AdmitOp.handover`),
and every outcome still counts for AIMD, the breakers and the retry budget.

A hand-over skips the checks an admission makes, so it happens only when they would pass as
far as this process can tell from the replies it has seen (`DestinationView`, at most one
exchange old):

* the call that ended succeeded (no cut, no breaker failure) and was not a half-open probe,
  and both breaker layers (the destination's and the tenant's) were last seen closed: every
  settlement's reply says what they are, and a grant that was no probe, a refusal naming a
  layer or a transition refreshes what is known;
* the waiter is of the same tenant (its tenant breaker just counted a success) and is not a
  retry (retries need the retry budget);
* the destination is not over its limit (the latest reply left no negative free slots: a cut
  elsewhere stops hand-overs until slots turn over) and no overload answer seen here is still
  on its way to Redis (from the 429 until the reply to its settlement, which shows the cut:
  a reply to an exchange already in flight must not count as room; if that exchange fails,
  until some later reply), and it has no `ratePerSecond`;
* if the waiter takes a tenant item, the tenant's window was under 90 % full;
* the slot was not handed over already `MAX_HANDOVERS` (4) times in a row: then it goes back
  through Redis, so that waiters of other processes (which only poll) get their turn.

So the limit is never exceeded by more than what other processes changed within one exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TENANT_ROOM = 0.9
"""A tenant's window must be under this share full for a hand-over that takes an item."""


@dataclass
class DestinationView:
    """What the latest replies said about one destination."""

    free_slots: int = 0
    epoch: int = 0
    rate_capped: bool = True
    """Until a reply says otherwise, assume the worst (no hand-overs)."""
    seen: bool = False
    tenant_windows: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Tenant id → (items used, limit) as of the latest admit that took one."""
    global_closed: bool = False
    tenant_closed: dict[str, bool] = field(default_factory=dict)
    """Breaker layers as last seen closed (True) or not; unknown counts as not closed."""
    overloads_unanswered: int = 0
    """Overload settlements (429/503/timeout) of this process not yet answered by Redis."""
    waiting_cures: bool = False
    """This process's latest own ask was refused for a reason waiting cures (no free slot,
    or the destination's rate): a new caller then queues without asking first."""

    def allows(self, tenant_id: str, takes_item: bool) -> bool:
        if not self.seen or self.rate_capped or self.free_slots < 0 or self.overloads_unanswered:
            return False
        if not (self.global_closed and self.tenant_closed.get(tenant_id, False)):
            return False
        if not takes_item:
            return True
        window = self.tenant_windows.get(tenant_id)
        return window is not None and window[0] < TENANT_ROOM * window[1]


class Views:
    """Every destination's view, updated from replies."""

    def __init__(self) -> None:
        self._views: dict[str, DestinationView] = {}

    def get(self, destination: str) -> DestinationView:
        return self._views.setdefault(destination, DestinationView())

    def saw_admit(
        self,
        destination: str,
        tenant_id: str,
        *,
        free_slots: int,
        epoch: int,
        rate_capped: bool,
        breakers: tuple[bool | None, bool | None] = (None, None),
        tenant_window: tuple[int, int] | None = None,
        events: tuple[str, ...] = (),
    ) -> None:
        """`breakers`: (global layer closed, tenant layer closed), each None when the reply
        does not tell."""
        view = self.get(destination)
        view.free_slots, view.rate_capped, view.seen = free_slots, rate_capped, True
        view.epoch = epoch  # the latest reply is the newest: one exchange at a time
        if tenant_window is not None and tenant_window[1] > 0:
            view.tenant_windows[tenant_id] = tenant_window
        global_closed, tenant_closed = breakers
        if global_closed is not None:
            view.global_closed = global_closed
        if tenant_closed is not None:
            view.tenant_closed[tenant_id] = tenant_closed
        _apply_transitions(view, tenant_id, events)

    def saw_overload(self, destination: str) -> None:
        """A call of this process was just answered 429/503/timeout: the limit is (about to
        be) exceeded until Redis has answered its settlement (`overload_answered`)."""
        self.get(destination).overloads_unanswered += 1

    def overload_answered(self, destination: str, *, replied: bool) -> None:
        """Redis answered the settlement of an overload (`replied`: its reply, which shows the
        cut, is applied next), or the exchange failed: then nobody knows whether the cut was
        made, and the destination counts as over its limit until a later reply says what is
        free (only one exchange is in flight at a time, so any later reply is newer)."""
        view = self.get(destination)
        view.overloads_unanswered = max(0, view.overloads_unanswered - 1)
        if not replied:
            view.free_slots = min(view.free_slots, -1)

    def saw_settle(
        self,
        destination: str,
        tenant_id: str,
        *,
        free_slots: int,
        epoch: int,
        breakers: tuple[bool, bool],
    ) -> None:
        """`breakers`: whether the global and the tenant layer were closed after it."""
        view = self.get(destination)
        view.free_slots = free_slots
        view.epoch = epoch  # the latest reply is the newest: one exchange at a time
        view.global_closed, view.tenant_closed[tenant_id] = breakers


def _apply_transitions(view: DestinationView, tenant_id: str, events: tuple[str, ...]) -> None:
    """Breaker transitions `layer:from:to` a reply reported (`admission.breaker`)."""
    for event in events:
        layer, _, to = event.split(":")
        closed = to == "closed"
        if layer == "global":
            view.global_closed = closed
        else:
            view.tenant_closed[tenant_id] = closed
