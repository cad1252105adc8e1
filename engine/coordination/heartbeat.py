"""Service liveness in Redis: each service beats, a monitor reads the beats.

A `Heartbeat` writes `heartbeat:<service>` = `{"pid", "uptime", "timestamp", "started", "host",
"instance", "lease", "role"}` (JSON; `started` is when the process started and `timestamp` when
it beat, epoch seconds by the injected clock; `uptime` the seconds between them, kept for readers
older than `started`; `host` the machine's name and `instance` a token of this process alone;
`lease` its own claim lease, `SCHEMABRIDGE_LEASE_S`, when it was given one; `role` the kind of
process, `ServiceRole`, when it was given one: a worker's name is the operator's to choose, so
the name alone does not tell a `worker` from a `serve`)
every `interval_s` (default 10 s) with a TTL of `ttl_s` (default 30 s, three missed beats), and
records the service in the sorted set `sb:services` (score = the beat's timestamp). If the
service stops beating the key expires; the set still names it, so readers report it down, with
when it was last seen, instead of forgetting it. The same beat writes the same payload to
`sb:last-beat:<service>`, which expires only with `forget_after_s`: a service down (killed, or
stopped and its key deleted) still reads with the pid and host of its last beat, which is when an
operator looks for its process. Two SETs, a ZADD and a ZREMRANGEBYSCORE per beat, whatever the
number of services. Services silent for `forget_after_s` (default 7 days) are dropped from the
set by the next beat of any service, and their last beats expire then by themselves.

A name is one process's at a time, but nothing stops a second process from being started
under the name of a live one (a mistake) or of one killed a moment ago (a restart, whose
predecessor's beat lives on up to the TTL). So a process deletes the key on `stop()` only while
it holds its own `instance` (read and deleted in one Lua script), never the live namesake's beat;
and a starting process claims the name (`Heartbeat.claim`: its beat written only where none
is, in one script, so two processes started at once cannot both find the name free), which
tells it whose beat is there before its own, for it to refuse (the same host, that pid alive
as the process that beat) or warn; `read_namesake` reads the same without writing.

Coordination failures never stop a service: a failed beat is logged and the next interval
tries again; the first beat that works again after failures says so once, with how long the
beats failed (the `api` has no listener that would tell). Missing a few beats at worst shows
the service as down for a while.

`read_services` reads the set plus one MGET of the heartbeat and last-beat keys (no keyspace
SCAN: the set is authoritative and SCAN cost grows with every admission key). A service is up
when its key exists and its payload is at most `ttl_s` old by the reader's clock; a payload
stamped by a machine whose clock lags by more than the TTL reads as down, so keep clocks in sync
(NTP). A service down reads its pid, host and start from its heartbeat while the key is there,
else from its last beat when that is the beat the set scored (not one an older process wrote).
A service's uptime is the time since its process started, up to the reader's now while it is
up (to its latest beat once it is down); a payload without `started` (written before it was
added) reads its `uptime` counted on from its timestamp the same way.
`ServiceMonitor` polls `read_services` every `POLL_INTERVAL_MS` (default 15 s) and keeps the
latest answer, for a monitor to show (no process runs one yet; `Operations.settings.services`
calls `read_services` itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

import psutil
import redis.asyncio as redis

from engine.coordination import keys
from engine.coordination.redis_client import COORDINATION_ERRORS
from engine.settings import Settings
from schemas.clock import Clock

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
DEFAULT_TTL_S = 30.0
DEFAULT_FORGET_AFTER_S = 7 * 24 * 3600.0
DEFAULT_POLL_INTERVAL_MS = 15_000
API_SERVICE_PREFIX = "api-"
"""The start of the service id of a `schemabridge api` process (`api-<host>-<port>`), the one
kind of service that runs no worker."""


class ServiceRole(StrEnum):
    """What kind of process beats under a service name (`Heartbeat.role`)."""

    API = "api"
    """`schemabridge api`: the REST API and the monitor, no worker."""
    WORKER = "worker"
    """`schemabridge worker`: a worker, no API."""
    SERVE = "serve"
    """`schemabridge serve`: the API and a worker in one process."""


def is_worker_service(name: str) -> bool:
    """Whether the service `name` runs a worker: every service but an API process does
    (`schemabridge worker`, `serve`)."""
    return not name.startswith(API_SERVICE_PREFIX)


@dataclass(frozen=True)
class Namesake:
    """Another process's live beat under the name a process is about to beat under."""

    pid: int
    host: str | None
    """None in a beat written before `host` was."""
    started: float | None
    silent_s: float
    """Seconds since it beat, by the reader's clock."""
    role: ServiceRole | None = None
    """What kind of process it is, as its beat says (None: a beat that does not say)."""

    def alive_here(self) -> bool:
        """Whether it is a live process of this machine: the same host, and its pid running
        a process that started when the beat says (a reused pid started later). A process
        killed but not yet reaped by its parent (a zombie: `kill -9`, then a restart under
        its name at once) runs nothing and is gone."""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            return False
        try:
            process = psutil.Process(self.pid)
            created = process.create_time()
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            return False
        return self.started is None or abs(created - self.started) < 2.0


def process_age_s() -> float:
    """Seconds since this process started, by the system's own record of its start: on
    Linux the kernel's uptime less the process's start, both in clock ticks' precision
    (psutil's `create_time` adds the boot time in whole seconds, up to 1 s early, and a step's
    holder is judged by whether its claim is older than the process beating under its name);
    elsewhere psutil's."""
    try:
        with open("/proc/uptime", encoding="ascii") as uptime_file:
            uptime = float(uptime_file.read().split()[0])
        with open("/proc/self/stat", encoding="ascii", errors="replace") as stat_file:
            # After the command name, in parentheses (which may hold spaces): field 3 on.
            fields = stat_file.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[STARTTIME_FIELD - 3])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return max(0.0, time.time() - psutil.Process().create_time())


STARTTIME_FIELD = 22
"""`starttime` in `/proc/<pid>/stat` (proc(5)): clock ticks after boot when it started."""


async def read_namesake(
    client: redis.Redis, clock: Clock, service: str, *, ttl_s: float = DEFAULT_TTL_S
) -> Namesake | None:
    """The live beat under the name `service` that a process about to beat under it finds
    (None: none, a stale one, or Redis not answering: a check, not a gate)."""
    key = keys.heartbeat(service)
    try:
        raw = cast(bytes | None, await client.get(key))
    except COORDINATION_ERRORS as error:
        logger.warning("heartbeat %s: reading it before the first beat failed: %s", key, error)
        return None
    return _namesake(service, raw, clock.now(), ttl_s)


def _namesake(service: str, raw: bytes | None, now: float, ttl_s: float) -> Namesake | None:
    """The beat `raw` found under `service` as a live namesake (None: none, or stale)."""
    payload = _parse_payload(service, raw)
    if payload is None or raw is None:
        return None
    silent_s = now - payload["timestamp"]
    if silent_s > ttl_s:
        return None
    return Namesake(
        pid=int(payload["pid"]),
        host=_payload_host(raw),
        started=payload.get("started"),
        silent_s=round(max(0.0, silent_s), 1),
        role=_payload_role(raw),
    )


class Heartbeat:
    """Publishes one service's liveness; see the module docstring for the key and payload.

    `interval_s` (default 10 s) must be positive and below `ttl_s` (default 30 s), or the key
    would expire between beats. `pid` defaults to this process's pid, `started_at` (epoch
    seconds by `clock`) to when this process started (`process_age_s` before `clock.now()`).
    The client is borrowed: the caller closes it.
    """

    def __init__(
        self,
        service: str,
        client: redis.Redis,
        clock: Clock,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        ttl_s: float = DEFAULT_TTL_S,
        pid: int | None = None,
        forget_after_s: float = DEFAULT_FORGET_AFTER_S,
        started_at: float | None = None,
        lease_s: float | None = None,
        role: ServiceRole | None = None,
    ) -> None:
        if not service:
            raise ValueError("a heartbeat needs a service name")
        if not 0 < interval_s < ttl_s:
            raise ValueError(
                f"heartbeat interval {interval_s} s must be positive and below the TTL "
                f"{ttl_s} s, or the key expires between beats; the default is 10 s / 30 s"
            )
        self.service = service
        self.key = keys.heartbeat(service)
        self._last_key = keys.last_beat(service)
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.pid = os.getpid() if pid is None else pid
        self.started_at = clock.now() - process_age_s() if started_at is None else started_at
        """When the service's process started: what its uptime counts from."""
        self.forget_after_s = forget_after_s
        self.lease_s = lease_s
        """The claim lease this process renews its claims by: a reader judging whether a claim
        is this process's reads it here, not from its own settings, which may differ."""
        self.role = role
        """What kind of process this is, for readers (`ServiceStatus.role`); None: not said."""
        self.host = socket.gethostname()
        self.instance = uuid.uuid4().hex
        """This process's token in the key: `stop()` deletes only a key that holds it."""
        self.beats = 0
        """Successful beats so far."""
        self.failures = 0
        """Beats that failed because Redis was unreachable."""
        self._client = client
        self._clock = clock
        self._stopped = False
        self._failing_since: float | None = None
        """When the current run of failed beats began (monotonic); None while beats work."""
        # Serializes a beat with `stop()`, so a beat already in flight cannot re-create the key
        # right after `stop()` deleted it.
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(
        cls,
        service: str,
        client: redis.Redis,
        clock: Clock,
        settings: Settings,
        *,
        role: ServiceRole | None = None,
    ) -> Heartbeat:
        """A heartbeat of a `role` process with `heartbeat_interval_s`, `heartbeat_ttl_s` and
        `lease_s` from `settings`."""
        return cls(
            service,
            client,
            clock,
            interval_s=settings.heartbeat_interval_s,
            ttl_s=float(settings.heartbeat_ttl_s),
            lease_s=float(settings.lease_s),
            role=role,
        )

    def payload(self) -> dict[str, float | int | str]:
        """The JSON object a beat writes now."""
        now = self._clock.now()
        body: dict[str, float | int | str] = {
            "pid": self.pid,
            "uptime": round(now - self.started_at, 3),
            "timestamp": now,
            "started": self.started_at,
            "host": self.host,
            "instance": self.instance,
        }
        if self.lease_s is not None:
            body["lease"] = self.lease_s
        if self.role is not None:
            body["role"] = self.role.value
        return body

    async def beat(self) -> bool:
        """Write the key once. Returns False (and logs) when Redis is unreachable or after
        `stop()`; never raises for a coordination failure."""
        async with self._lock:
            if self._stopped:
                return False
            body = self.payload()
            now = float(body["timestamp"])
            try:
                async with self._client.pipeline(transaction=True) as pipe:
                    written = json.dumps(body)
                    pipe.set(self.key, written, px=math.ceil(self.ttl_s * 1000))
                    pipe.set(self._last_key, written, px=math.ceil(self.forget_after_s * 1000))
                    pipe.zadd(keys.SERVICES_SET, {self.service: now})
                    pipe.zremrangebyscore(keys.SERVICES_SET, "-inf", now - self.forget_after_s)
                    await pipe.execute()
            except COORDINATION_ERRORS as error:
                self.failures += 1
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                logger.warning("heartbeat %s: Redis write failed, retrying: %s", self.key, error)
                return False
            self.beats += 1
            if self._failing_since is not None:
                logger.info(
                    "heartbeat %s works again after %.1f s of failed beats",
                    self.key,
                    time.monotonic() - self._failing_since,
                    extra={"event": "redis.heartbeat_recovered"},
                )
                self._failing_since = None
            return True

    async def claim(self) -> Namesake | None:
        """Before the first beat: write this beat only while no beat is under the name, in
        one script, so of two processes started at once under one name the second finds
        the first's beat instead of both finding the name free (each read it, then beat).
        Returns the live namesake found there (None: the name was free and is this
        process's now, the beat there is stale, or Redis did not answer: a check, not a
        gate). Nothing else is written: the first beat records the service."""
        body = json.dumps(self.payload())
        try:
            raw = await self._client.eval(_CLAIM, 1, self.key, body, math.ceil(self.ttl_s * 1000))
        except COORDINATION_ERRORS as error:
            logger.warning(
                "heartbeat %s: claiming the name before the first beat failed: %s", self.key, error
            )
            return None
        return _namesake(self.service, cast(bytes | None, raw), self._clock.now(), self.ttl_s)

    async def run(self, stop: asyncio.Event) -> None:
        """Beat now and then every `interval_s` until `stop` is set; returns promptly after.

        Does not delete the key: call `stop()` for that (graceful shutdown does both).
        """
        while not stop.is_set():
            await self.beat()
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except TimeoutError:
                continue

    async def stop(self) -> None:
        """Stop beating and delete the key, so monitors see the service down at once rather
        than after the TTL; only while it is this process's own (`instance`): a namesake's
        live beat stays. If Redis is unreachable the key simply expires."""
        async with self._lock:
            self._stopped = True
            try:
                await self._delete_own()
            except COORDINATION_ERRORS as error:
                logger.warning(
                    "heartbeat %s: delete failed, the key expires in %s s: %s",
                    self.key,
                    self.ttl_s,
                    error,
                )

    async def _delete_own(self) -> None:
        """DEL the key if it holds this `instance`, in one script (atomic: a namesake's beat
        cannot land between the read and the delete); a key that is not ours stays."""
        kept = await self._client.eval(_DELETE_OWN, 1, self.key, self.instance)
        if kept == -1:
            logger.warning(
                "heartbeat %s: left in place, another process beats under this name",
                self.key,
                extra={"event": "service.name_shared"},
            )


_CLAIM = """
local raw = redis.call('GET', KEYS[1])
if raw then return raw end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
"""Writes `heartbeat:<service>` (ARGV[1], its TTL ARGV[2] ms) unless a beat is there, which
it returns instead (nil: written)."""

_DELETE_OWN = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if string.find(raw, '"instance": "' .. ARGV[1] .. '"', 1, true) then
  return redis.call('DEL', KEYS[1])
end
return -1
"""
"""Deletes `heartbeat:<service>` only when its payload holds the caller's `instance` (the
token is a uuid's hex, so a plain substring of the JSON `json.dumps` writes identifies it):
1 deleted, 0 already gone, -1 another process's."""


@dataclass(frozen=True)
class ServiceStatus:
    """One service as the monitor sees it."""

    name: str
    up: bool
    """True when its heartbeat key exists and the payload is at most the TTL old."""
    pid: int | None
    """From the latest payload (the heartbeat, else the last beat of a service down); None when
    neither is there."""
    uptime_s: float | None
    """Seconds since the service's process started, to the reader's now while it is up, to its
    latest beat once down; None when no payload is there."""
    last_seen: float | None
    """Epoch seconds of the latest beat (payload, else the `sb:services` score); None if never."""
    started_at: float | None = None
    """Epoch seconds its process started; None when no payload is there or it is older than
    the field."""
    lease_s: float | None = None
    """The claim lease its process renews by (`Heartbeat.lease_s`); None when no payload is
    there, or it has none (older, or a process given none)."""
    host: str | None = None
    """The machine its process beat from (`socket.gethostname()`: a container's id in
    Docker); None when no payload is there or it is older than the field."""
    role: ServiceRole | None = None
    """What kind of process it is (`Heartbeat.role`); None when no payload is there, it is
    older than the field, or it names a role this reader does not know."""

    @property
    def runs_worker(self) -> bool:
        """Whether its process runs a worker: by the role its beat says (`worker`, `serve`),
        else by its name (`is_worker_service`: every one but an `api-…`). A worker's --name
        may start with `api-` too."""
        if self.role is not None:
            return self.role is not ServiceRole.API
        return is_worker_service(self.name)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form for the API: `{name, status: "up"|"down", role, pid, host, uptime,
        lastSeen, startedAt}`."""
        return {
            "name": self.name,
            "status": "up" if self.up else "down",
            "role": None if self.role is None else self.role.value,
            "pid": self.pid,
            "host": self.host,
            "uptime": self.uptime_s,
            "lastSeen": self.last_seen,
            "startedAt": self.started_at,
        }


def _parse_payload(name: str, raw: bytes | None) -> dict[str, float] | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        parsed = {
            "pid": int(data["pid"]),
            "uptime": float(data["uptime"]),
            "timestamp": float(data["timestamp"]),
        }
        if data.get("started") is not None:  # absent from heartbeats written before it
            parsed["started"] = float(data["started"])
        if data.get("lease") is not None:  # likewise
            parsed["lease"] = float(data["lease"])
        return parsed
    except (ValueError, TypeError, KeyError) as error:
        logger.warning(
            "heartbeat of %s is not a valid payload, reading it as down: %s", name, error
        )
        return None


def _payload_host(raw: bytes) -> str | None:
    """The `host` of a payload `_parse_payload` read (None in one written before it)."""
    host = json.loads(raw).get("host")
    return host if isinstance(host, str) else None


def _payload_role(raw: bytes) -> ServiceRole | None:
    """The `role` of a payload `_parse_payload` read: None in one written before it, or
    naming a role added after this reader (unknown, rather than the whole list refused)."""
    role = json.loads(raw).get("role")
    try:
        return ServiceRole(role) if isinstance(role, str) else None
    except ValueError:
        return None


def _status(
    name: str,
    raw: bytes | None,
    last_raw: bytes | None,
    seen_score: float | None,
    *,
    now: float,
    ttl_s: float,
) -> ServiceStatus:
    """`name`'s status from its heartbeat `raw`, else (down) from its last beat `last_raw`."""
    live = raw is not None
    if not live:
        raw = last_raw
    payload = _parse_payload(name, raw)
    beat = None if payload is None else payload["timestamp"]
    if not live and beat is not None and seen_score is not None and beat < seen_score:
        # The set scored a later beat: of a process that wrote no last beat (older code), so
        # this pid and host are not the ones last seen.
        payload = None
    if payload is None or raw is None:
        return ServiceStatus(name, up=False, pid=None, uptime_s=None, last_seen=seen_score)
    beat = payload["timestamp"]
    # Down without its key however recent the beat: a service stopping deletes it at once.
    up = live and now - beat <= ttl_s
    until = now if up else beat
    started = payload.get("started")
    # an older heartbeat, without its start: its uptime at the beat, counted on from there
    uptime = payload["uptime"] + (until - beat) if started is None else until - started
    return ServiceStatus(
        name,
        up=up,
        pid=int(payload["pid"]),
        uptime_s=round(max(0.0, uptime), 3),
        last_seen=beat,
        started_at=started,
        lease_s=payload.get("lease"),
        host=_payload_host(raw),
        role=_payload_role(raw),
    )


async def read_services(
    client: redis.Redis, clock: Clock, *, ttl_s: float = DEFAULT_TTL_S
) -> list[ServiceStatus]:
    """Every known service, sorted by name, up or down (see the module docstring).

    `ttl_s` (default 30 s) is the age beyond which a payload counts as stale. Raises one of
    `COORDINATION_ERRORS` when Redis is unreachable; `ServiceMonitor` absorbs that.
    """
    # redis-py types replies for both decode modes; open_redis clients always return bytes.
    members = cast(
        list[tuple[bytes, float]],
        await client.zrange(keys.SERVICES_SET, 0, -1, withscores=True),
    )
    if not members:
        return []
    names = [member.decode() for member, _ in members]
    raws = cast(
        list[bytes | None],
        await client.mget(
            [keys.heartbeat(name) for name in names] + [keys.last_beat(name) for name in names]
        ),
    )
    now = clock.now()
    statuses = [
        _status(name, raw, last_raw, score, now=now, ttl_s=ttl_s)
        for name, raw, last_raw, (_, score) in zip(
            names, raws[: len(names)], raws[len(names) :], members, strict=True
        )
    ]
    return sorted(statuses, key=lambda status: status.name)


async def read_named_services(
    client: redis.Redis, clock: Clock, names: Iterable[str], *, ttl_s: float = DEFAULT_TTL_S
) -> dict[str, ServiceStatus]:
    """The services `names`, by name, judged by the rule `read_services` applies (one MGET of
    their heartbeats and last beats and a ZSCORE each, in one round trip; not ZMSCORE, which
    needs Redis 6.2): a
    reader that needs a few services (the holders of a run's claims) does not read them all.
    A name never heard of reads as down, never seen. Raises one of `COORDINATION_ERRORS` when
    Redis is unreachable."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    async with client.pipeline(transaction=False) as pipe:
        pipe.mget([keys.heartbeat(name) for name in wanted])
        pipe.mget([keys.last_beat(name) for name in wanted])
        for name in wanted:
            pipe.zscore(keys.SERVICES_SET, name)
        replies = await pipe.execute()
    # open_redis clients always return bytes (see `read_services`).
    raws = cast(list[bytes | None], replies[0])
    last_raws = cast(list[bytes | None], replies[1])
    scores = cast(list[float | None], replies[2:])
    now = clock.now()
    return {
        name: _status(name, raw, last_raw, score, now=now, ttl_s=ttl_s)
        for name, raw, last_raw, score in zip(wanted, raws, last_raws, scores, strict=True)
    }


class ServiceMonitor:
    """Polls `read_services` every `poll_interval_ms` (default 15 s) and keeps the answer.

    `latest` is the last successful read (empty before the first); `polled_at` is its epoch
    time by the injected clock, so a consumer can tell a stale list while Redis is down, when
    the previous list is kept and `last_error` says why.
    """

    def __init__(
        self,
        client: redis.Redis,
        clock: Clock,
        *,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        if poll_interval_ms <= 0:
            raise ValueError(f"poll interval must be positive, got {poll_interval_ms} ms")
        self.poll_interval_ms = poll_interval_ms
        self.ttl_s = ttl_s
        self.latest: list[ServiceStatus] = []
        self.polled_at: float | None = None
        self.last_error: str | None = None
        self.polls = 0
        """Successful polls so far."""
        self._client = client
        self._clock = clock

    @classmethod
    def from_settings(cls, client: redis.Redis, clock: Clock, settings: Settings) -> ServiceMonitor:
        """A monitor with `poll_interval_ms` and `heartbeat_ttl_s` from `settings`."""
        return cls(
            client,
            clock,
            poll_interval_ms=settings.poll_interval_ms,
            ttl_s=float(settings.heartbeat_ttl_s),
        )

    async def poll_once(self) -> list[ServiceStatus]:
        """Read the services now; on a coordination failure keep the previous list."""
        try:
            statuses = await read_services(self._client, self._clock, ttl_s=self.ttl_s)
        except COORDINATION_ERRORS as error:
            self.last_error = f"{type(error).__name__}: {error}"
            logger.warning("service monitor: reading heartbeats failed: %s", error)
            return self.latest
        self.latest = statuses
        self.polled_at = self._clock.now()
        self.last_error = None
        self.polls += 1
        return statuses

    async def run(self, stop: asyncio.Event) -> None:
        """Poll now and then every `poll_interval_ms` until `stop` is set."""
        while not stop.is_set():
            await self.poll_once()
            try:
                await asyncio.wait_for(stop.wait(), self.poll_interval_ms / 1000)
            except TimeoutError:
                continue
