"""Cheap waiting for an admission slot: no busy loop, no thread, no connection per waiter.

Callers of one process that wait for the same destination form a FIFO queue. Only the
**head** of the queue polls Redis (it retries the atomic admission script after a pause);
every other waiter sleeps on an `asyncio.Event` until woken. Wake-ups come from:

- a call to that destination settling **in this process** (`notify_one` signals the first
  waiter not yet signalled, so a slot freed locally is reused at once), and any slots the
  destination's limit leaves unused after a settlement or an admit (the limit grew, or
  another process gave slots back): that many more waiters are woken (`notify`), so capacity
  is used as soon as it appears instead of at the head's next poll;
- the head leaving the queue (admitted, handed a slot, timed out or cancelled): the next
  waiter becomes head and is woken to take over polling — it starts with a pause, not a
  poll, since the previous head asked moments ago or was just handed the slot that freed up
  (a poll then would be a sure refusal for every hand-over). When the head was admitted
  after a poll that left slots free, the baton passes with a slot signal instead, so several
  slots freed elsewhere are taken one after another without waiting a pause each.

A caller that finds others of its process already waiting for the destination, and the
latest answer was "no slot" (or the destination's rate), joins the back of the queue without
asking Redis first: the answer would be no, and a yes would overtake the callers in front. A
waiter refused for any other reason (an open breaker) signals the next one on its way out,
so a queue learns it in one pass.

The head's pause is an exponential backoff with jitter (10 ms doubling to 250 ms by
default), or exactly the wait the script named when the destination's `ratePerSecond` is
the limit. So a process costs Redis at most about one admission attempt per destination
per pause plus one per release, however many callers wait; and a slot freed by another
process is noticed within one pause.

Why not Redis pub/sub on release: it needs a long-lived subscriber connection and a
supervised listener task per process, and would still need polling as a fallback
(notifications are lost across reconnects). A listener can be added later by calling
`notify_one` from it.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Callable

from admission.backend import AdmitOp
from admission.ticket import Ticket


class Backoff:
    """Pauses between attempts: `initial_s * 2^attempt`, capped at `max_s`, "equal jitter"
    (half fixed, half random) so a pause is never near zero but pollers still spread out."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None):
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng or random.Random()

    def pause_s(self, attempt: int) -> float:
        """Seconds to pause after failed attempt number `attempt` (counting from 0)."""
        ceiling = min(self._max_s, self._initial_s * float(2 ** min(attempt, 30)))
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)


class Wake(enum.Enum):
    """Why a waiter's pause ended."""

    TIMEOUT = "timeout"
    """Its time ran out: for the head, a poll is due."""
    SLOT = "slot"
    """A slot was freed or handed to it: ask (or take the handed slot) now."""
    PROMOTED = "promoted"
    """It became the head: start polling, after a pause."""


class Waiter:
    """One caller's place in a destination's queue. Leave it exactly once (`leave`).

    `request` is what the caller asks for (the admission layer's operation); `handed` is a
    slot handed to it while it waited (see `admission.handover`); `busy` is set while the
    caller is asking Redis itself, when nothing must be handed to it."""

    def __init__(self, queue: list[Waiter], request: AdmitOp | None = None) -> None:
        self._queue = queue
        self._woken = asyncio.Event()
        self._signalled = False
        self.request = request
        self.handed: Ticket | None = None
        self.busy = False

    @property
    def is_head(self) -> bool:
        """Whether this waiter is the one that polls."""
        return bool(self._queue) and self._queue[0] is self

    @property
    def woken(self) -> bool:
        return self._woken.is_set()

    def wake(self) -> None:
        """A slot may be free: the waiter should ask now."""
        self._signalled = True
        self._woken.set()

    def promote(self) -> None:
        """This waiter is the head now: it should start polling."""
        self._woken.set()

    def hand(self, ticket: Ticket) -> None:
        """Give this waiter a slot and wake it."""
        self.handed = ticket
        self.wake()

    @property
    def idle(self) -> bool:
        """Sleeping, not woken and not handed anything: a hand-over may go to it."""
        return not self.busy and self.handed is None and not self._woken.is_set()

    async def pause(self, *, head_pause_s: float, remaining_s: float) -> Wake:
        """Sleep until woken, or for `head_pause_s` if this waiter is the head; never longer
        than `remaining_s`. A wake-up that arrived while the caller was busy is not lost: the
        pause then returns at once."""
        timeout = min(remaining_s, head_pause_s) if self.is_head else remaining_s
        woke = False
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await self._woken.wait()
                woke = True
        except TimeoutError:
            pass
        finally:
            self._woken.clear()
        signalled, self._signalled = self._signalled, False
        if signalled:
            return Wake.SLOT
        return Wake.PROMOTED if woke else Wake.TIMEOUT

    @property
    def signalled(self) -> bool:
        """A slot signal (or a handed slot) is pending for this waiter."""
        return self._signalled

    def leave(self) -> None:
        """Leave the queue; if this was the head, wake the next waiter to take over."""
        was_head = self.is_head
        if self in self._queue:
            self._queue.remove(self)
        if was_head and self._queue:
            self._queue[0].promote()


class SlotWaiters:
    """The per-destination queues of waiting callers of one process."""

    def __init__(self) -> None:
        self._queues: dict[str, list[Waiter]] = {}

    def join(self, destination: str, request: AdmitOp | None = None) -> Waiter:
        """Enter the back of `destination`'s queue. Call `leave()` when done, always."""
        queue = self._queues.setdefault(destination, [])
        waiter = Waiter(queue, request)
        queue.append(waiter)
        return waiter

    def first_idle(self, destination: str, accepts: Callable[[AdmitOp], bool]) -> Waiter | None:
        """The first idle waiter of `destination` whose request `accepts` approves."""
        for waiter in self._queues.get(destination, ()):
            if waiter.idle and waiter.request is not None and accepts(waiter.request):
                return waiter
        return None

    def leave(self, destination: str, waiter: Waiter) -> None:
        """`waiter.leave()`, dropping the queue once it is empty."""
        waiter.leave()
        queue = self._queues.get(destination)
        if queue is not None and not queue:
            del self._queues[destination]

    def waiting(self, destination: str) -> int:
        """How many callers of this process wait for `destination`."""
        return len(self._queues.get(destination, ()))

    def notify_one(self, destination: str) -> None:
        """A slot of `destination` was freed here: signal the first waiter not yet signalled."""
        self.notify(destination, 1)

    def notify(self, destination: str, count: int) -> None:
        """`count` slots of `destination` are free: signal that many waiters not yet signalled."""
        if count <= 0:
            return
        for waiter in self._queues.get(destination, ()):
            # A waiter only promoted to head (woken, no signal) still gets the signal: it
            # would otherwise pause before asking.
            if not waiter.signalled:
                waiter.wake()
                count -= 1
                if count == 0:
                    return
