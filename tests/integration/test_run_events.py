"""engine.coordination.run_events on the embedded server and on a real Redis.

Two `RunEvents` on two clients stand for two processes (a worker that records results, an
API that streams a run's progress). The channel machinery they share with wake-ups (restarts,
coalescing, echoes) is tested in test_wakeup.py; these tests are about naming runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import fakeredis
import pytest

from engine import coordination
from engine.coordination import run_events
from engine.coordination.run_events import RunEvents
from tests.integration.scripts.helpers import open_client, unique, wait_until


@pytest.fixture
async def pair(coord_url: str | None) -> AsyncIterator[tuple[RunEvents, RunEvents]]:
    """(publisher, watcher): two started instances on separate clients. Neither listens until
    it has a watch (the tests open theirs, then wait for the subscription)."""
    channel = unique("sb:run-events-test")
    async with AsyncExitStack() as stack:
        first = RunEvents(await stack.enter_async_context(open_client(coord_url)), channel=channel)
        second = RunEvents(await stack.enter_async_context(open_client(coord_url)), channel=channel)
        for events in (first, second):
            await stack.enter_async_context(events)
        yield first, second


async def test_only_a_process_with_a_watch_reads_the_channel(
    pair: tuple[RunEvents, RunEvents],
) -> None:
    publisher, watcher = pair
    await publisher.changed(["run-a"])
    assert not await watcher.wait_ready(0.2), "no watch, no subscription (a worker's case)"
    assert watcher.received == 0
    with watcher.watch("run-a"):
        assert await watcher.wait_ready(5.0)
    assert watcher.subscribed, "the listener stays once started"


async def test_a_change_wakes_the_watches_of_that_run_only(
    pair: tuple[RunEvents, RunEvents],
) -> None:
    publisher, watcher = pair
    with watcher.watch("run-a") as a, watcher.watch("run-a") as a_too, watcher.watch("b") as b:
        assert await watcher.wait_ready(5.0)
        await publisher.changed(["run-a", "unwatched"])
        assert await a.wait(5.0) and await a_too.wait(5.0)
        await wait_until(lambda: watcher.received == 1, what="delivery")
        assert not await b.wait(0.0), "another run's watch stays asleep"
        assert not await a.wait(0.0), "level-triggered: consumed once"
    assert watcher.watched == 0, "a watch ends with its block"


async def test_changes_are_coalesced_into_few_messages(
    pair: tuple[RunEvents, RunEvents],
) -> None:
    publisher, watcher = pair
    with watcher.watch("run-7") as seven, watcher.watch("run-123") as last, publisher.watch("x"):
        assert await watcher.wait_ready(5.0) and await publisher.wait_ready(5.0)
        for i in range(200):  # 200 flushes naming a run each, in a burst
            await publisher.changed([f"run-{i}"])
        assert await seven.wait(5.0) and await last.wait(5.0)
    await wait_until(lambda: publisher.echoes == publisher.published, what="all echoes")
    assert 1 <= publisher.published <= 3, publisher.published


async def test_an_event_says_which_runs_ended(
    pair: tuple[RunEvents, RunEvents], coord_url: str | None
) -> None:
    """A waiter for a run's end reads it on the events that say it ended, and on those that
    cannot say: everything changed, or a message of a process that names no ends."""
    publisher, watcher = pair
    with watcher.watch("going") as going, watcher.watch("done") as done:
        assert await watcher.wait_ready(5.0)
        await publisher.changed(["going"], ended=["done"])  # an ended run is changed too
        assert await going.wait(5.0) and await done.wait(5.0)
        assert not going.take_ended(), "a step started: not an end"
        assert done.take_ended()
        assert not done.take_ended(), "consumed once"

        async with open_client(coord_url) as older:  # a process that names no ends
            await older.publish(watcher.channel, b"older-process\ngoing")
        assert await going.wait(5.0)
        assert going.take_ended(), "a message without the marks may be the end"

        await publisher.changed_everything()
        assert await going.wait(5.0) and going.take_ended()


async def test_local_watches_hear_ends_too(pair: tuple[RunEvents, RunEvents]) -> None:
    publisher, _ = pair
    with publisher.watch("here") as here:
        await publisher.changed(["here"])
        assert await here.wait(0.0) and not here.take_ended()
        await publisher.changed([], ended=["here"])
        assert await here.wait(0.0) and here.take_ended()


async def test_local_watches_wake_without_redis(pair: tuple[RunEvents, RunEvents]) -> None:
    publisher, _ = pair
    with publisher.watch("here") as here:
        await publisher.changed(["here"])
        assert await here.wait(0.0)


async def test_too_many_runs_and_everything_wake_every_watch(
    pair: tuple[RunEvents, RunEvents], monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher, watcher = pair
    monkeypatch.setattr(run_events, "MAX_IDS_PER_MESSAGE", 10)
    with watcher.watch("x") as x, watcher.watch("y") as y:
        assert await watcher.wait_ready(5.0)
        await publisher.changed(f"other-{i}" for i in range(11))  # neither x nor y named
        assert await x.wait(5.0) and await y.wait(5.0)
        await publisher.changed_everything()
        assert await x.wait(5.0) and await y.wait(5.0)


async def test_a_resubscription_wakes_every_watch() -> None:
    """Events sent while the listener was away are lost: its watches read their runs again."""
    server = fakeredis.FakeServer()  # private: the outage must not reach other tests
    client = fakeredis.FakeAsyncRedis(server=server)
    try:
        events = RunEvents(
            client,
            channel=unique("sb:run-events-outage"),
            read_timeout_s=0.05,
            restart_backoff_s=0.01,
            max_restart_backoff_s=0.05,
        )
        async with events:
            with events.watch("r") as watch:
                assert await events.wait_ready(5.0)
                server.connected = False
                await wait_until(lambda: events.restarts >= 1, what="the listener to die")
                server.connected = True
                await wait_until(lambda: events.subscriptions >= 2, what="resubscription")
                assert await watch.wait(0.0)
    finally:
        await coordination.close_redis(client)


async def test_stop_wakes_every_watch(coord_url: str | None) -> None:
    async with open_client(coord_url) as client:
        events = RunEvents(client, channel=unique("sb:run-events-stop"))
        await events.start()
        with events.watch("r") as watch:
            waiting = asyncio.create_task(watch.wait(5.0))
            await asyncio.sleep(0)
            await events.stop()
            assert await asyncio.wait_for(waiting, 1.0)


async def test_deployments_on_two_databases_of_one_server_do_not_hear_each_other(
    redis_url: str,
) -> None:
    """Redis's pub/sub is one namespace per server, not per database: two deployments on one
    server (a database each) woke each other's watches (and workers) for nothing. A channel
    is named for its client's database; only pub/sub is used on the other one (no key)."""
    here = int(redis_url.rsplit("/", 1)[1])
    elsewhere = redis_url.rsplit("/", 1)[0] + f"/{(here + 8) % 16}"
    async with AsyncExitStack() as stack:
        publisher, same, other = [
            RunEvents(await stack.enter_async_context(open_client(url)))
            for url in (redis_url, redis_url, elsewhere)
        ]
        for events in (publisher, same, other):
            await stack.enter_async_context(events)
        assert publisher.channel == same.channel == f"sb:run-events:db{here}"
        assert other.channel != publisher.channel
        with same.watch("run-a") as heard, other.watch("run-a") as deaf:
            assert await same.wait_ready(5.0) and await other.wait_ready(5.0)
            await publisher.changed(["run-a"], ended=["run-a"])
            assert await heard.wait(5.0)
            assert not await deaf.wait(0.5), "another database's deployment heard it"
        assert other.received == 0
