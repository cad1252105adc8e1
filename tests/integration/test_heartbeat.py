"""engine.coordination.heartbeat on the embedded server and on a real Redis.

Time that matters (timestamps, staleness) comes from a `FakeClock`; the only real waiting is
for loops with a short interval, always through a bounded condition wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import cast

import fakeredis
import psutil
import pytest
import redis.asyncio as redis

from engine import coordination
from engine.coordination import keys
from engine.coordination.heartbeat import (
    Heartbeat,
    Namesake,
    ServiceMonitor,
    ServiceRole,
    ServiceStatus,
    read_named_services,
    read_namesake,
    read_services,
)
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.clock import FakeClock, SystemClock
from tests.integration.scripts.helpers import (
    BACKENDS,
    UNREACHABLE_REDIS_URL,
    open_client,
    unique,
    wait_until,
)


@pytest.fixture(params=BACKENDS)
async def client(request: pytest.FixtureRequest) -> AsyncIterator[redis.Redis]:
    url = None if request.param == "embedded" else request.getfixturevalue("redis_url")
    async with open_client(url) as opened:
        yield opened


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def mine(statuses: list[ServiceStatus], *names: str) -> dict[str, ServiceStatus]:
    """The statuses of this test's services (the embedded keyspace is shared by the suite)."""
    return {status.name: status for status in statuses if status.name in names}


async def test_beat_writes_the_payload_with_a_ttl(client: redis.Redis, clock: FakeClock) -> None:
    service = unique("api")
    started = clock.now() - 2.0  # the process started 2 s before its heartbeat was made
    heartbeat = Heartbeat(
        service, client, clock, interval_s=10.0, ttl_s=30.0, pid=4242, started_at=started
    )
    clock.advance(12.5)
    assert await heartbeat.beat()

    raw = await client.get(f"heartbeat:{service}")
    assert raw is not None
    assert json.loads(raw) == {
        "pid": 4242,
        "uptime": 14.5,
        "timestamp": clock.now(),
        "started": started,
        "host": socket.gethostname(),
        "instance": heartbeat.instance,
    }
    assert 29_000 < await client.pttl(keys.heartbeat(service)) <= 30_000
    assert await client.zscore(keys.SERVICES_SET, service) == clock.now()
    # The same payload, kept as long as the set remembers the service (7 days by default).
    assert await client.get(keys.last_beat(service)) == raw
    week_ms = 7 * 24 * 3600 * 1000
    assert week_ms - 1000 < await client.pttl(keys.last_beat(service)) <= week_ms


async def test_a_live_service_reads_as_up(client: redis.Redis, clock: FakeClock) -> None:
    service = unique("worker")
    started = clock.now()
    heartbeat = Heartbeat(service, client, clock, pid=7, started_at=started)
    clock.advance(3.0)
    await heartbeat.beat()
    clock.advance(5.0)

    status = mine(await read_services(client, clock), service)[service]
    assert status == ServiceStatus(
        service,
        up=True,
        pid=7,
        uptime_s=8.0,
        last_seen=clock.now() - 5,
        started_at=started,
        host=socket.gethostname(),
    )
    assert status.as_dict() == {
        "name": service,
        "status": "up",
        "role": None,
        "pid": 7,
        "host": socket.gethostname(),
        "uptime": 8.0,
        "lastSeen": clock.now() - 5,
        "startedAt": started,
    }


async def test_uptime_is_the_time_since_the_process_started(
    client: redis.Redis, clock: FakeClock
) -> None:
    """Uptime counts from when the process started (which its heartbeat carries), not from
    when the heartbeat was made, and up to the reader's now, not to the latest beat."""
    service = unique("api")
    started = clock.now() - 100.0  # start-up (migrations, connections) before the heartbeat
    heartbeat = Heartbeat(service, client, clock, pid=9, started_at=started)
    clock.advance(3.0)
    await heartbeat.beat()
    clock.advance(8.0)  # 8 s after the latest beat: still up

    status = mine(await read_services(client, clock), service)[service]
    assert status.up and status.uptime_s == 111.0 and status.started_at == started
    assert status.as_dict()["uptime"] == 111.0 and status.as_dict()["startedAt"] == started

    clock.advance(30.0)  # silent past the TTL: down, with the uptime it had when last seen
    status = mine(await read_services(client, clock), service)[service]
    assert not status.up and status.uptime_s == 103.0


TEST_IMPORTED_AT = time.time()


async def test_a_heartbeat_knows_when_its_process_started(client: redis.Redis) -> None:
    """Without `started_at`, a heartbeat takes its process's start from the system: earlier
    than this test module was imported, let alone than the heartbeat was made."""
    heartbeat = Heartbeat(unique("api"), client, SystemClock())
    assert heartbeat.started_at < TEST_IMPORTED_AT
    assert heartbeat.payload()["started"] == heartbeat.started_at
    assert time.time() - heartbeat.started_at < 24 * 3600  # the start of this process


async def test_a_heartbeat_without_its_start_still_reads(
    client: redis.Redis, clock: FakeClock
) -> None:
    """A heartbeat written before it carried the process's start (`{pid, uptime, timestamp}`)
    reads as before: its uptime, counted on to the reader's now while it is up."""
    service = unique("old")
    payload = {"pid": 11, "uptime": 50.0, "timestamp": clock.now()}
    await client.set(keys.heartbeat(service), json.dumps(payload), px=30_000)
    await client.zadd(keys.SERVICES_SET, {service: clock.now()})
    clock.advance(5.0)
    status = mine(await read_services(client, clock), service)[service]
    assert status == ServiceStatus(
        service, up=True, pid=11, uptime_s=55.0, last_seen=clock.now() - 5, started_at=None
    )


async def test_a_stale_payload_reads_as_down(client: redis.Redis, clock: FakeClock) -> None:
    service = unique("worker")
    await Heartbeat(service, client, clock, ttl_s=30.0).beat()
    clock.advance(30.5)  # the key may still exist (the reader's clock says otherwise)
    status = mine(await read_services(client, clock, ttl_s=30.0), service)[service]
    assert not status.up
    assert status.last_seen == clock.now() - 30.5


async def test_a_stopped_service_reads_as_down_with_its_last_beat(
    client: redis.Redis, clock: FakeClock
) -> None:
    """Down at once, its key deleted, however recent its beat; with the pid and host it beat
    from and its uptime to that beat."""
    stopped, running = unique("stopped"), unique("running")
    started = clock.now() - 40.0
    beat_stopped = Heartbeat(stopped, client, clock, pid=4242, started_at=started)
    await beat_stopped.beat()
    seen_at = clock.now()
    clock.advance(1.0)
    await Heartbeat(running, client, clock).beat()

    await beat_stopped.stop()
    assert await client.exists(keys.heartbeat(stopped)) == 0
    assert not await beat_stopped.beat(), "no beat after stop()"
    assert await client.exists(keys.heartbeat(stopped)) == 0

    statuses = mine(await read_services(client, clock), stopped, running)
    assert [name for name in sorted(statuses)] == sorted([stopped, running])
    assert statuses[stopped] == ServiceStatus(
        stopped,
        up=False,
        pid=4242,
        uptime_s=40.0,
        last_seen=seen_at,
        started_at=started,
        host=socket.gethostname(),
    )
    assert statuses[running].up


async def test_a_killed_service_reads_as_down_with_the_pid_and_host_it_beat_from(
    client: redis.Redis, clock: FakeClock
) -> None:
    """A process killed (`kill -9`) beats no more and its key expires: it reads down with
    the pid and host of its last beat, which is when an operator looks for its process (the
    heartbeat key itself keeps its TTL and its shape)."""
    service = unique("gone")
    started = clock.now() - 5.0
    heartbeat = Heartbeat(service, client, clock, pid=31337, started_at=started)
    await heartbeat.beat()
    seen_at = clock.now()
    await client.delete(keys.heartbeat(service))  # what the TTL does to a dead service
    clock.advance(3600.0)
    expected = ServiceStatus(
        service,
        up=False,
        pid=31337,
        uptime_s=5.0,
        last_seen=seen_at,
        started_at=started,
        host=socket.gethostname(),
    )
    assert mine(await read_services(client, clock), service)[service] == expected
    assert (await read_named_services(client, clock, [service]))[service] == expected
    assert expected.as_dict()["pid"] == 31337 and expected.as_dict()["status"] == "down"


async def test_a_last_beat_older_than_the_latest_beat_is_not_shown(
    client: redis.Redis, clock: FakeClock
) -> None:
    """A process that writes no last beat (older code) beat after one that did, under the
    same name: once down, the name reads without a pid or host rather than the earlier
    process's, when it was last seen by the set's score."""
    service = unique("upgraded")
    await Heartbeat(service, client, clock, pid=1).beat()
    clock.advance(10.0)
    await client.zadd(keys.SERVICES_SET, {service: clock.now()})  # the older process's beat
    await client.delete(keys.heartbeat(service))
    expected = ServiceStatus(service, up=False, pid=None, uptime_s=None, last_seen=clock.now())
    assert mine(await read_services(client, clock), service)[service] == expected
    assert (await read_named_services(client, clock, [service]))[service] == expected


async def test_named_services_read_as_every_service_does(
    client: redis.Redis, clock: FakeClock
) -> None:
    """`read_named_services` (the holders of a run's steps) judges by the rule of
    `read_services`: the same statuses for the names asked, and a name never heard of reads
    as down, never seen."""
    live, stale, gone, never = (unique(n) for n in ("live", "stale", "gone", "never"))
    await Heartbeat(stale, client, clock, ttl_s=30.0).beat()
    await Heartbeat(gone, client, clock).beat()
    await client.delete(keys.heartbeat(gone))
    clock.advance(31.0)
    await Heartbeat(live, client, clock).beat()
    named = await read_named_services(client, clock, [live, stale, gone, never], ttl_s=30.0)
    every = mine(await read_services(client, clock, ttl_s=30.0), live, stale, gone)
    assert {name: named[name] for name in every} == every
    assert (named[live].up, named[stale].up, named[gone].up) == (True, False, False)
    assert named[never] == ServiceStatus(never, up=False, pid=None, uptime_s=None, last_seen=None)
    assert await read_named_services(client, clock, []) == {}


async def test_named_services_against_an_unreachable_server(clock: FakeClock) -> None:
    async with open_client(UNREACHABLE_REDIS_URL) as client:
        with pytest.raises(coordination.COORDINATION_ERRORS):
            await read_named_services(client, clock, ["w-1"])


async def test_a_malformed_payload_reads_as_down(
    client: redis.Redis, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    service = unique("odd")
    await Heartbeat(service, client, clock).beat()
    await client.set(keys.heartbeat(service), b"{not json", ex=30)
    with caplog.at_level(logging.WARNING, logger="engine.coordination.heartbeat"):
        status = mine(await read_services(client, clock), service)[service]
    assert not status.up
    assert "not a valid payload" in caplog.text


async def test_long_silent_services_are_forgotten(client: redis.Redis, clock: FakeClock) -> None:
    old, new = unique("old"), unique("new")
    await Heartbeat(old, client, clock).beat()
    await client.delete(keys.heartbeat(old))
    clock.advance(100.0)
    await Heartbeat(new, client, clock, forget_after_s=50.0).beat()
    assert set(mine(await read_services(client, clock), old, new)) == {new}


async def test_run_beats_every_interval_until_stopped(
    client: redis.Redis, clock: FakeClock
) -> None:
    service = unique("loop")
    heartbeat = Heartbeat(service, client, clock, interval_s=0.02, ttl_s=5.0)
    stop = asyncio.Event()
    task = asyncio.create_task(heartbeat.run(stop))
    try:
        await wait_until(lambda: heartbeat.beats >= 3, what="three beats")
    finally:
        stop.set()
        await asyncio.wait_for(task, 2.0)
    assert task.done()
    assert await client.exists(keys.heartbeat(service)) == 1, "run() leaves the key to stop()"
    await heartbeat.stop()
    assert await client.exists(keys.heartbeat(service)) == 0


async def test_from_settings_takes_interval_and_ttl(client: redis.Redis, clock: FakeClock) -> None:
    settings = Settings(heartbeat_interval_s=2.0, heartbeat_ttl_s=7)
    heartbeat = Heartbeat.from_settings("svc", client, clock, settings)
    assert (heartbeat.interval_s, heartbeat.ttl_s) == (2.0, 7.0)


async def test_a_beat_says_the_lease_its_process_renews_claims_by(
    client: redis.Redis, clock: FakeClock
) -> None:
    """A reader judges whether a claim is the beating process's by that process's lease, not
    its own setting, which may differ (run_views.holder_view)."""
    service = unique("worker")
    settings = Settings(lease_s=6.0)
    await Heartbeat.from_settings(service, client, clock, settings).beat()
    raw = await client.get(keys.heartbeat(service))
    assert raw is not None and json.loads(raw)["lease"] == 6.0
    assert mine(await read_services(client, clock), service)[service].lease_s == 6.0
    named = await read_named_services(client, clock, [service])
    assert named[service].lease_s == 6.0
    # A heartbeat given no lease writes none, and reads as None.
    other = unique("worker")
    await Heartbeat(other, client, clock).beat()
    raw = await client.get(keys.heartbeat(other))
    assert raw is not None and "lease" not in json.loads(raw)
    assert mine(await read_services(client, clock), other)[other].lease_s is None


async def test_a_beat_says_its_role_and_an_older_one_reads_as_unknown(
    client: redis.Redis, clock: FakeClock
) -> None:
    """A worker's name is its operator's to choose, so the beat says what kind of process it
    is; a service down keeps the role of its last beat. A beat without one (written before
    beats said it) or with a role this reader does not know reads as None, not a refusal."""
    worker, old, newer = unique("serve"), unique("worker"), unique("worker")
    settings = Settings()
    beat = Heartbeat.from_settings(worker, client, clock, settings, role=ServiceRole.WORKER)
    await beat.beat()
    raw = await client.get(keys.heartbeat(worker))
    assert raw is not None and json.loads(raw)["role"] == "worker"
    payload = json.loads(raw)
    del payload["role"]
    await client.set(keys.heartbeat(old), json.dumps(payload), px=30_000)
    await client.set(keys.heartbeat(newer), json.dumps(payload | {"role": "gateway"}), px=30_000)
    await client.zadd(keys.SERVICES_SET, {old: clock.now(), newer: clock.now()})
    read = mine(await read_services(client, clock), worker, old, newer)
    assert read[worker].role is ServiceRole.WORKER
    assert read[worker].as_dict()["role"] == "worker"
    assert read[old].role is None and read[newer].role is None
    await beat.stop()  # down: its last beat says what it was
    assert mine(await read_services(client, clock), worker)[worker].role is ServiceRole.WORKER
    named = await read_named_services(client, clock, [worker])
    assert named[worker].role is ServiceRole.WORKER


def test_an_interval_at_or_above_the_ttl_is_refused() -> None:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    with pytest.raises(ValueError, match="below the TTL"):
        Heartbeat("svc", client, FakeClock(), interval_s=30.0, ttl_s=30.0)


# ── losing Redis never crashes the service ──────────────────────────────────────────────────


async def test_beats_survive_an_outage_and_resume(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = fakeredis.FakeServer()  # private: the outage must not reach other tests
    client = fakeredis.FakeAsyncRedis(server=server)
    heartbeat = Heartbeat("flaky", client, clock, interval_s=0.02, ttl_s=5.0)
    stop = asyncio.Event()
    try:
        server.connected = False
        with caplog.at_level(logging.INFO, logger="engine.coordination.heartbeat"):
            task = asyncio.create_task(heartbeat.run(stop))
            await wait_until(lambda: heartbeat.failures >= 2, what="failed beats")
            assert not task.done(), "the loop keeps going through the outage"
            assert "Redis write failed" in caplog.text
            assert "works again" not in caplog.text
            server.connected = True
            await wait_until(lambda: heartbeat.beats >= 3, what="beats after recovery")
        assert await client.exists(keys.heartbeat("flaky")) == 1
        # The recovery is said once (the api's only sign that Redis is back), not per beat.
        recovered = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
        assert len(recovered) == 1, recovered
        assert recovered[0].startswith("heartbeat heartbeat:flaky works again after ")
        stop.set()
        await asyncio.wait_for(task, 2.0)
    finally:
        stop.set()
        await coordination.close_redis(client)


async def test_beat_and_stop_against_an_unreachable_server(clock: FakeClock) -> None:
    async with open_client(UNREACHABLE_REDIS_URL) as client:
        heartbeat = Heartbeat("lonely", client, clock)
        assert not await heartbeat.beat()
        assert heartbeat.failures == 1
        await heartbeat.stop()  # logs; the key would expire on its own


# ── the monitor ─────────────────────────────────────────────────────────────────────────────


async def test_monitor_polls_and_keeps_the_latest_list(
    client: redis.Redis, clock: FakeClock
) -> None:
    service = unique("watched")
    heartbeat = Heartbeat(service, client, clock)
    await heartbeat.beat()
    monitor = ServiceMonitor(client, clock, poll_interval_ms=20)
    stop = asyncio.Event()
    task = asyncio.create_task(monitor.run(stop))
    try:
        await wait_until(lambda: service in mine(monitor.latest, service), what="first poll")
        assert mine(monitor.latest, service)[service].up
        assert monitor.polled_at == clock.now()

        await heartbeat.stop()
        polls = monitor.polls
        await wait_until(lambda: monitor.polls > polls + 1, what="two more polls")
        assert not mine(monitor.latest, service)[service].up
    finally:
        stop.set()
        await asyncio.wait_for(task, 2.0)


async def test_monitor_keeps_the_previous_list_while_redis_is_down(clock: FakeClock) -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server)
    try:
        await Heartbeat("svc", client, clock).beat()
        monitor = ServiceMonitor(client, clock)
        first = await monitor.poll_once()
        assert [status.name for status in first] == ["svc"]
        polled_at = monitor.polled_at

        server.connected = False
        clock.advance(15.0)
        assert await monitor.poll_once() == first
        assert monitor.polled_at == polled_at, "polled_at shows how stale the list is"
        assert monitor.last_error is not None

        server.connected = True
        await monitor.poll_once()
        assert monitor.last_error is None
        assert monitor.polled_at == clock.now()
    finally:
        await coordination.close_redis(client)


def test_monitor_from_settings_uses_poll_interval() -> None:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    settings = Settings(poll_interval_ms=15_000, heartbeat_ttl_s=30)
    monitor = ServiceMonitor.from_settings(client, FakeClock(), settings)
    assert (monitor.poll_interval_ms, monitor.ttl_s) == (15_000, 30.0)


async def test_a_process_stopping_leaves_its_namesakes_live_beat(
    client: redis.Redis, clock: FakeClock
) -> None:
    """Two processes beat under one name (a mistake): the one that stops deletes the key
    only while it holds its own beat, so the other does not read as down."""
    service = unique("worker")
    live, second = Heartbeat(service, client, clock), Heartbeat(service, client, clock)
    assert live.instance != second.instance
    await second.beat()
    await live.beat()  # the latest beat is the live one's
    await second.stop()
    status = mine(await read_services(client, clock), service)[service]
    assert status.up, "the live namesake's beat is kept"
    await live.stop()
    assert await client.exists(keys.heartbeat(service)) == 0, "its own beat goes"


async def test_a_starting_process_reads_a_live_namesake(
    client: redis.Redis, clock: FakeClock
) -> None:
    service = unique("worker")
    assert await read_namesake(client, clock, service) is None
    await Heartbeat(service, client, clock, pid=os.getpid(), ttl_s=30.0).beat()
    clock.advance(2.0)
    found = await read_namesake(client, clock, service, ttl_s=30.0)
    assert found is not None
    assert (found.pid, found.host, found.silent_s) == (os.getpid(), socket.gethostname(), 2.0)
    assert not found.alive_here(), "this very process is not another one"
    assert found.role is None, "a beat that does not say its role"
    clock.advance(29.0)
    assert await read_namesake(client, clock, service, ttl_s=30.0) is None, "stale: gone"


def test_a_killed_process_not_yet_reaped_is_not_alive_here() -> None:
    """The tour's `kill -9` of worker hb-w1, then `worker --name hb-w1` at once: refused, "a
    worker named hb-w1 is running here already (pid 24474 …)", for a process killed but not
    yet reaped by its parent (a zombie, which runs nothing). It is gone: the name is taken
    over, as from any process that is gone."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        process = psutil.Process(child.pid)
        here = Namesake(child.pid, socket.gethostname(), process.create_time(), silent_s=1.0)
        assert here.alive_here(), "running: alive"
        child.kill()  # and not reaped (no wait) until the end
        for _ in range(100):
            if process.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert process.status() == psutil.STATUS_ZOMBIE
        assert not here.alive_here(), "killed, a zombie until reaped: gone"
    finally:
        child.kill()
        child.wait(timeout=10)


async def test_a_name_claimed_is_found_by_the_next_process_before_its_first_beat(
    client: redis.Redis, clock: FakeClock
) -> None:
    """Two workers started at once under one name each read the name as free before either
    beat, and both ran under it: a process claims the name in one script (its beat written
    only where none is), so the next one finds it, before the first beat, and is refused;
    a claim never overwrites the beat it finds."""
    service = unique("worker")
    parent = psutil.Process(os.getppid())  # a live process of this machine, not this one
    first = Heartbeat(
        service, client, clock, pid=parent.pid, started_at=parent.create_time(), ttl_s=30.0
    )
    second = Heartbeat(service, client, clock, ttl_s=30.0, role=ServiceRole.WORKER)
    assert await first.claim() is None, "a free name is this process's"
    clock.advance(1.0)
    found = await second.claim()
    assert found is not None and (found.pid, found.silent_s) == (parent.pid, 1.0)
    assert found.alive_here(), "refused: the first process is alive on this machine"
    raw = await client.get(keys.heartbeat(service))
    assert raw is not None and json.loads(raw)["instance"] == first.instance
    ttl_ms = await client.pttl(keys.heartbeat(service))
    assert 0 < ttl_ms <= 30_000, "a claim expires like a beat"
    clock.advance(30.0)  # its process never beat: a stale claim is no namesake
    assert await read_namesake(client, clock, service, ttl_s=30.0) is None


@pytest.mark.parametrize(
    ("role", "said"),
    [
        (ServiceRole.API, "an api process (`schemabridge api`) named "),
        (ServiceRole.SERVE, "a serve process (`schemabridge serve`: an API and a worker) named "),
        (ServiceRole.WORKER, "a worker named "),
    ],
)
async def test_a_worker_refused_a_live_processs_name_says_what_process_holds_it(
    client: redis.Redis,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    role: ServiceRole,
    said: str,
) -> None:
    """`worker --name api-vm-44117` beside the api process of that name said "a worker named
    api-vm-44117 is running here already": the beat says which process it is."""
    from api.cli import services
    from engine import runtime

    service = unique("api-vm")
    parent = psutil.Process(os.getppid())  # a live process of this machine, not this one
    started = parent.create_time()
    beat = Heartbeat(
        service, client, clock, pid=parent.pid, started_at=started, ttl_s=30.0, role=role
    )
    await beat.beat()
    found = await read_namesake(client, clock, service, ttl_s=30.0)
    assert found is not None and found.role is role and found.alive_here()

    async def namesake(_runtime: object, name: str) -> Namesake | None:
        return found if name == service else None

    monkeypatch.setattr(runtime, "live_namesake", namesake)
    with pytest.raises(services.CannotStart) as refused:
        await services._check_name(cast(Runtime, None), service, None)
    message = str(refused.value)
    assert message.startswith(f"{said}{service} is running here already (pid {parent.pid} on ")
    assert "give this one another --name, or stop that one first" in message
