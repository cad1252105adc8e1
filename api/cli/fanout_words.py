"""How a fan-out's running children read on a terminal: the running count with what holds
them (`23 running (15 of them waiting for an admission slot, 8 held by a worker presumed
dead)`) and a line per worker presumed dead that holds some, with when their leases end; and
who holds a RUNNING step. Shared by `runs show` / `runs watch` (`api.cli.run_display`,
`api.cli.watch`), which read the API's JSON (`api.cli.wire`), and `schemabridge run`'s live
display (`api.cli.run_live_display`), which reads the engine's views in process: both are
read through the protocols below, so the two say it in the same words."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from api.cli.remote import shown
from api.cli.text import clock
from schemas.durations import duration
from schemas.waiting import HELD_WAITS


class HolderView(Protocol):
    """Who holds a claim (`HolderView` of the API or of the engine)."""

    @property
    def worker(self) -> str | None: ...
    @property
    def state(self) -> str: ...
    @property
    def silent_s(self) -> float | None: ...


class HeldChildren(Protocol):
    """Running children one worker presumed dead holds (`FanoutProgress.presumed_dead`)."""

    @property
    def holder(self) -> HolderView: ...
    @property
    def children(self) -> int: ...
    @property
    def lease_expires_at(self) -> float | None: ...


class WaitingChildren(Protocol):
    """Children waiting for one reason (`FanoutProgress.waiting`)."""

    @property
    def reason(self) -> str: ...
    @property
    def children(self) -> int: ...


class FanoutProgress(Protocol):
    """What these words read of a fan-out's progress."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> Sequence[WaitingChildren]: ...
    @property
    def presumed_dead(self) -> Sequence[HeldChildren]: ...


def running_words(fanout: FanoutProgress) -> str:
    """`23 running (15 of them waiting for an admission slot)`: the running children and,
    of them, those whose held step waits inside its call, by reason, and those held by a
    worker presumed dead (`held_children_line` says which and until when)."""
    held = [g for g in fanout.waiting if g.reason in HELD_WAITS]
    words = f"{fanout.running:,} running"
    parts = [_held_words(g, i == 0) for i, g in enumerate(held)]
    dead = sum(group.children for group in fanout.presumed_dead)
    if dead:
        parts.append(f"{dead:,}{'' if parts else ' of them'} held by a worker presumed dead")
    return f"{words} ({', '.join(parts)})" if parts else words


def _held_words(group: WaitingChildren, first: bool) -> str:
    return f"{group.children:,}{' of them' if first else ''} {HELD_WAITS[group.reason]}"


START_ONE = "(`schemabridge services` lists the workers alive; start one if none is)"
"""After a dead holder's ended lease: only a running worker's next claim takes its steps back."""


def holder_line(holder: HolderView, lease_expires_at: float | None, now: float) -> str:
    """Who holds a RUNNING step, whether it is alive and when a dead holder's step is taken
    back: `held by worker w-1 (no heartbeat for 42 s: presumed dead); taken back when its
    lease ends at 04:07:58`. A lease that has ended already is said so, with what takes the
    step back: a worker's next claim, so none may be running."""
    line = f"held by {_holder_words(holder)}"
    if lease_expires_at is None:
        return line
    ends = clock(lease_expires_at)[:8]
    if holder.state == "alive":
        return f"{line}; its lease ends at {ends} unless renewed"
    if lease_expires_at <= now:
        # The tour read "taken back when its lease ends at 18:59:11" at 19:05, with no worker
        # alive to take it: the lease is over, and only a running worker claims the step.
        return (
            f"{line}; its lease ended at {ends}: the next worker to claim takes it back "
            + START_ONE
        )
    return f"{line}; taken back when its lease ends at {ends}"


def _holder_words(holder: HolderView) -> str:
    """`worker w-1 (no heartbeat for 42 s: presumed dead)`: the holder and its liveness."""
    who = f"worker {shown(holder.worker)}" if holder.worker else "a worker"
    silent = "" if holder.silent_s is None else duration(holder.silent_s)
    if holder.state == "alive":
        state = f"alive, last heartbeat {silent} ago" if silent else "alive"
    elif holder.state == "presumed_dead":
        state = f"no heartbeat for {silent}: presumed dead" if silent else "presumed dead"
    else:
        state = "liveness unknown"
    return f"{who} ({state})"


def held_children_line(held: HeldChildren, now: float) -> str:
    """The running children of a fan-out that one worker presumed dead holds, in
    `holder_line`'s words: `37 running children held by worker w-2 (no heartbeat for 42 s:
    presumed dead); taken back when their leases end, by 00:03:16` (the latest of their
    leases). A kill -9 left the parent saying "37 running" until those leases ended."""
    if held.children == 1:
        one = holder_line(held.holder, held.lease_expires_at, now)
        return f"1 running child {one}"
    line = f"{held.children:,} running children held by {_holder_words(held.holder)}"
    if held.lease_expires_at is None:
        return line
    ends = clock(held.lease_expires_at)[:8]
    if held.lease_expires_at <= now:
        return (
            f"{line}; their leases ended by {ends}: the next worker to claim takes them back "
            + START_ONE
        )
    return f"{line}; taken back when their leases end, by {ends}"


def held_lines(fanout: FanoutProgress, now: float) -> list[str]:
    """`held_children_line` for each worker presumed dead that holds running children."""
    return [held_children_line(held, now) for held in fanout.presumed_dead]
