"""Run events: "these runs changed (status, steps or fan-out progress): read them again".

Whoever changes runs calls `changed(run_ids)`: a worker for the runs of the steps it claims,
of the results it records, of the steps whose admission wait it shows and of the steps whose
expired leases it requeues or whose claims it gives back, each with its parent when it is a
child (a child that starts, waits or ends moves its parent's fan-out progress), plus the
parents of the children that ended up a nested fan-out; the operator actions for the runs they
act on (`changed_everything()` when they touch too many to name: retry, resolve, reprocess,
cancel, batch retry); a deployment's abort or rollback for its cancelled `gradual_deploy` run.
Whoever shows a run — the progress stream `GET /runs/{id}/events`, a submission's
`?wait=true` — holds a `watch(run_id)` and waits on it instead of polling.

Like wake-ups (`engine.coordination.wakeup`), an event is a hint, never the truth: the watcher
reads the run from the store when woken, and also after its own bounded fallback timeout, so a
lost event costs latency, never correctness. Hence:

- Local first: watches in the same process wake at once.
- Remote by PUBLISH on `sb:run-events` (`engine.coordination.keys.RUN_EVENTS_CHANNEL`) through
  `PubSubChannel`: the run ids changed since the last message, at most one message per
  `coalesce_s` (default 20 ms) however many flushes happen meanwhile, so a worker recording
  thousands of children a second costs a set insertion per child and a few dozen small
  messages a second. More than `MAX_IDS_PER_MESSAGE` ids become `*` (every watch wakes and
  reads its run once): a message stays small whatever the burst.
- Ends named: a worker names the runs its flush ended (`changed(ids, ended=...)`, `+<id>` in
  the message), and a deployment's stop its `gradual_deploy` run. A waiter for a run's end
  alone (`?wait=true`) reads it on those events only (`RunWatch.take_ended`), not on each of
  its steps' starts; an event that cannot say (everything changed, a resubscription, a message
  from a process that does not name ends) counts as a possible end.
- Level-triggered per watch: an event that arrives while its watcher is busy reading makes the
  next `wait()` return at once. A resubscription (messages may have been lost) and `stop()` wake
  every watch.
- Only watchers read the channel: the listener starts with the process's first watch, so a
  worker, or an API process nobody streams from, never parses the workers' messages. (Events
  published before that first subscription is confirmed are lost: the fallback read covers
  them.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Unpack

import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.channel import ChannelOptions, PubSubChannel, Signal

MAX_IDS_PER_MESSAGE = 2_000
"""More run ids than this pending at once are published as `*` (everything changed)."""
EVERYTHING = b"*"
ENDED = "+"
"""After a message's plain ids, `+` alone, then `+<id>` for each of them that ended: the ids
stay plain too, so a process that does not read the marks still wakes their watches, and a
message without the lone `+` came from one that does not write them."""


class RunWatch:
    """One watcher's view of one run's events (see `RunEvents.watch`)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events = 0
        """Times this watch was woken."""
        self._signal = Signal()
        self._may_have_ended = False

    def wake(self, ended: bool = True) -> None:
        """The run changed; `ended` False when the event said it changed without ending."""
        self.events += 1
        self._may_have_ended = self._may_have_ended or ended
        self._signal.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the run to change; True if it did (or had since the last
        wait), False on timeout. Consumes the pending event."""
        return await self._signal.wait(timeout_s)

    def take_ended(self) -> bool:
        """Whether an event since the last call may mean the run ended: one that said so, or
        one that could not say (everything changed, a resubscription, an older process's
        message). A waiter for the end alone reads the run on these only."""
        ended, self._may_have_ended = self._may_have_ended, False
        return ended


class RunEvents(PubSubChannel):
    """One process's end of the run-events channel; see the module docstring. Build one per
    process (the `Runtime` does), `start()` it, `stop()` it at the end."""

    what = "run events"
    listens_at_start = False  # only a process that watches a run reads the channel

    default_channel = keys.RUN_EVENTS_CHANNEL
    default_coalesce_s = 0.02

    def __init__(self, client: redis.Redis, **options: Unpack[ChannelOptions]) -> None:
        super().__init__(client, **options)
        self._watches: dict[str, set[RunWatch]] = {}
        self._pending: set[str] = set()
        self._pending_ended: set[str] = set()
        self._everything = False

    async def changed(self, run_ids: Iterable[str], ended: Iterable[str] = ()) -> None:
        """Tell every watch of these runs, here and in other processes, that they changed.
        `ended` names those that ended (changed too, named in `run_ids` or not): a waiter for
        a run's end reads it on those events alone, and at its fallback. Never raises for a
        coordination failure (the watchers' fallback reads cover it)."""
        ended_ids = set(ended)
        ids = ended_ids.union(run_ids)
        if not ids:
            return
        for run_id in ids:
            for watch in self._watches.get(run_id, ()):
                watch.wake(run_id in ended_ids)
        if not self._everything:
            self._pending |= ids
            self._pending_ended |= ended_ids
            if len(self._pending) > MAX_IDS_PER_MESSAGE:
                self._everything, self._pending, self._pending_ended = True, set(), set()
        await self._hint()

    async def changed_everything(self) -> None:
        """Every watch, everywhere, reads its run again (more changed than is worth naming)."""
        self._wake_all()
        self._everything, self._pending, self._pending_ended = True, set(), set()
        await self._hint()

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[RunWatch]:
        """A watch of `run_id` for as long as the block lasts. Register it before reading the
        run, so that no change between the read and the first `wait()` goes unnoticed."""
        watch = RunWatch(run_id)
        self._watches.setdefault(run_id, set()).add(watch)
        self._listen_now()
        try:
            yield watch
        finally:
            watches = self._watches.get(run_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[run_id]

    @property
    def watched(self) -> int:
        """Runs watched in this process now."""
        return len(self._watches)

    def _wake_all(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.wake()

    def _body(self) -> bytes:
        if self._everything:
            body = EVERYTHING
        else:
            ended = (ENDED + run_id for run_id in sorted(self._pending_ended))
            body = " ".join([*sorted(self._pending), ENDED, *ended]).encode()
        self._everything, self._pending, self._pending_ended = False, set(), set()
        return body

    def _received(self, body: bytes) -> None:
        if not self._watches or not body:
            return  # nobody here watches (a worker): nothing to parse
        if body == EVERYTHING:
            self._wake_all()
            return
        words = body.decode().split(" ")
        marks = {word[1:] for word in words if word.startswith(ENDED)}
        for run_id in words:
            for watch in self._watches.get(run_id, ()):
                # No mark at all: a process that does not name ends (an older one, during a
                # rolling restart) sent it, so any of its events may be the end.
                watch.wake(run_id in marks or not marks)

    def _resubscribed(self) -> None:
        self._wake_all()

    def _stopped(self) -> None:
        self._wake_all()
