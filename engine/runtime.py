"""The factory: builds the store, coordination client, wake-ups and HTTP client from `Settings`
and hands them down (docs/architecture.md, 'No process-global state'). Nothing connects at
import time; every process (CLI `run`, `serve`, `worker`, `api`, a test) builds its own
`Runtime` and closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis.asyncio as redis

from admission import Admission, AdmissionConfig, AimdConfig, TenantRateConfig
from engine import coordination
from engine.coordination.cancellations import Cancellations
from engine.coordination.heartbeat import (
    API_SERVICE_PREFIX,
    Heartbeat,
    Namesake,
)

# Re-exported (mypy: explicitly) for the service commands: api/ imports engine.runtime only.
from engine.coordination.heartbeat import ServiceRole as ServiceRole  # noqa: PLC0414
from engine.coordination.invalidations import Invalidations
from engine.coordination.run_events import RunEvents
from engine.coordination.wakeup import Wakeup
from engine.execution.admission_guard import StoreSettingsSource
from engine.health import HealthMarker
from engine.secret_cipher import SecretCipher
from engine.settings import Settings
from engine.store import Store
from schemas.clock import Clock, SystemClock
from vertices.host_resolver import HostResolver
from vertices.http_client import HttpClient, build_http_client

if TYPE_CHECKING:
    # The worker and the executor (every vertex, their HTTP handling) are imported by the
    # methods that build them: a command that only reads the store starts without them.
    from engine.execution.executor import ExecutorDeps
    from engine.execution.worker import Worker, WorkerConfig
    from engine.execution.worker_metrics import WorkerMetrics

logger = logging.getLogger(__name__)


def admission_config(settings: Settings) -> AdmissionConfig:
    return AdmissionConfig(
        aimd=AimdConfig(backoff_ratio=settings.aimd_backoff_ratio),
        tenant_rate=TenantRateConfig(limit=settings.tenant_rate_per_minute),
        default_max_concurrency=settings.default_max_concurrency,
    )


RedisClient = redis.Redis
"""(A field of `Runtime` is named `redis`.)"""


@dataclass
class Runtime:
    """Everything a SchemaBridge process shares. Build with `Runtime.open`, end with `close`."""

    settings: Settings
    clock: Clock
    store: Store
    redis: RedisClient
    wakeup: Wakeup
    http: HttpClient
    admission: Admission
    admission_redis: RedisClient
    """Admission's own client, which never resends a command: its exchange script is not
    idempotent (see `admission.batching`)."""
    secret_cipher: SecretCipher
    """Encrypts and decrypts secrets with `SCHEMABRIDGE_SECRET_KEYS` (its `problem` says why
    it cannot, when no usable key is configured)."""
    run_events: RunEvents
    """"These runs changed": published by workers and operator actions, watched by the
    progress streams and `?wait=true` (see `engine.coordination.run_events`)."""
    invalidations: Invalidations
    """The change tokens of the rows processes keep copies of (API keys, routing rows):
    replaced by whoever changes them, read by their caches (see
    `engine.coordination.invalidations`)."""
    invalidations_redis: RedisClient
    """The change tokens' own client, which never resends: a request asks Redis for a token
    with a short timeout and reads the store instead, rather than wait out retries."""
    cancellations: Cancellations
    """"These runs were cancelled": announced by the cancel, heard by the workers, which stop
    the steps they hold of those runs (see `engine.coordination.cancellations`)."""

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        migrate: bool = True,
        resolver: HostResolver | None = None,
    ) -> Runtime:
        """Open everything `settings` describe. `resolver` replaces the system's name
        resolution for GATEWAY calls (tests); the egress policy applies to it all the same."""
        clock = clock or SystemClock()
        async with contextlib.AsyncExitStack() as opened:
            # Whatever was opened is closed again if a later part fails to open.
            store = await Store.open(
                settings.database_url, clock, migrate=migrate, pooler=settings.database_pooler
            )
            opened.push_async_callback(store.close)
            client = await coordination.open_redis(settings)
            opened.push_async_callback(coordination.close_redis, client)
            admission_client = await coordination.open_redis(settings, retries=False)
            opened.push_async_callback(coordination.close_redis, admission_client)
            wakeup = Wakeup(client)
            await wakeup.start()
            opened.push_async_callback(wakeup.stop)
            run_events = RunEvents(client)
            await run_events.start()
            opened.push_async_callback(run_events.stop)
            cancellations = Cancellations(client)
            await cancellations.start()
            opened.push_async_callback(cancellations.stop)
            invalidations_client = await coordination.open_redis(settings, retries=False)
            opened.push_async_callback(coordination.close_redis, invalidations_client)
            invalidations = Invalidations(invalidations_client)
            opened.push_async_callback(invalidations.stop)
            http = build_http_client(
                max_connections=max(100, settings.worker_concurrency * 2),
                egress=settings.egress_policy(),
                resolver=resolver,
            )
            source = StoreSettingsSource(store)
            admission = Admission(
                admission_client,
                clock,
                admission_config(settings),
                caps_source=source,
                tenant_limits=source,
                settings=source,
            )
            keys = settings.secret_keys
            cipher = SecretCipher.from_setting(None if keys is None else keys.get_secret_value())
            runtime = cls(
                settings,
                clock,
                store,
                client,
                wakeup,
                http,
                admission,
                admission_client,
                cipher,
                run_events,
                invalidations,
                invalidations_client,
                cancellations,
            )
            store.on_committed_change(runtime.committed_change)
            opened.pop_all()  # opened: `close` owns them now
        return runtime

    def committed_change(self, topic: str) -> None:
        """The store committed a change to rows of `topic` that processes keep copies of: tell
        them (through `self.invalidations` when called, not bound to the one of `open`: tests
        give a runtime tokens of their own)."""
        self.invalidations.announce_soon(topic)

    async def close(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            # Run last first, and each even when one before it fails (a half-closed runtime
            # would leak the rest).
            stack.push_async_callback(self.store.close)
            stack.push_async_callback(coordination.close_redis, self.admission_redis)
            stack.push_async_callback(coordination.close_redis, self.redis)
            stack.push_async_callback(coordination.close_redis, self.invalidations_redis)
            stack.push_async_callback(self.http.aclose)
            stack.push_async_callback(self.wakeup.stop)
            stack.push_async_callback(self.run_events.stop)
            stack.push_async_callback(self.cancellations.stop)
            stack.push_async_callback(self.invalidations.stop)

    def worker_config(self) -> WorkerConfig:
        from engine.execution.worker import WorkerConfig  # see the imports at the top

        s = self.settings
        return WorkerConfig(
            concurrency=s.worker_concurrency,
            claim_batch=s.claim_batch,
            lease_s=s.lease_s,
            idle_poll_s=s.idle_poll_s,
            shutdown_grace_s=s.shutdown_grace_s,
            payload_retention_s=s.payload_retention_s,
            run_retention_s=s.run_retention_s,
        )

    def executor_deps(self, metrics: WorkerMetrics | None = None) -> ExecutorDeps:
        """`metrics`: where the worker's figures go (default: a registry of its own that
        nothing serves)."""
        from engine.execution.executor import ExecutorDeps  # see the imports at the top
        from engine.execution.worker_metrics import WorkerMetrics
        from vertices import gateway, spawner

        s = self.settings
        return ExecutorDeps(
            store=self.store,
            http=self.http,
            timeouts=gateway.GatewayTimeouts(
                collect_ms=s.timeout_collect_ms,
                process_ms=s.timeout_process_ms,
                gateway_ms=s.timeout_gateway_ms,
            ),
            clock=self.clock,
            redispatch_delays_s=tuple(s.redispatch_delays_s),
            fanout_limits=spawner.FanoutLimits(
                backpressure_max_depth=s.backpressure_max_depth,
                batch_size=s.spawn_batch,
                max_items=s.max_fanout_items,
                max_child_input_bytes=s.max_input_bytes,
                max_fanout_input_bytes=s.max_fanout_input_bytes,
            ),
            max_response_bytes=s.max_response_bytes,
            max_nesting_depth=s.nesting_depth_limit,
            payload_high_water_bytes=s.payload_high_water_bytes,
            merge_outputs_read_max_bytes=s.merge_outputs_read_max_bytes,
            payload_retention_s=s.payload_retention_s,
            admission=self.admission if s.admission_enabled else None,
            admission_wait_s=s.admission_wait_s,
            notify=self.wakeup.notify,
            secret_cipher=self.secret_cipher,
            run_changed=self.run_events.changed,
            metrics=metrics or WorkerMetrics(),
        )

    def worker(
        self,
        config: WorkerConfig | None = None,
        *,
        metrics: WorkerMetrics | None = None,
        service: str | None = None,
    ) -> Worker:
        """`metrics`: as `executor_deps` takes them (a service passes the ones it serves);
        `service`: the name its heartbeat beats under, recorded on the steps it claims."""
        from engine.execution.worker import Worker  # see the imports at the top

        config = config or self.worker_config()
        if service is not None:
            config = dataclasses.replace(config, service=service)
        # A worker waits on wake-ups when idle: it starts subscribing now, before its first
        # claim (one published before Redis confirms the subscription costs it one poll).
        self.wakeup.listen()
        return Worker(
            self.store,
            self.executor_deps(metrics),
            self.wakeup,
            config,
            run_events=self.run_events,
            cancellations=self.cancellations,
        )


GC_GEN0_THRESHOLD = 10_000
"""Allocations between young-generation collections in a long-running process (Python's
default is 700)."""


def settle_heap() -> None:
    """Call once a long-running process has built its `Runtime`: move everything alive now
    (modules, the runtime) out of the garbage collector's reach and collect the young
    generation less often.

    Measured on a worker (one full-heap collection every few seconds under load): each took
    about 100 ms, during which no HTTP answer is read and every admission slot is held for
    nothing; with the start-up heap frozen they take a few milliseconds. The collector stays
    on: cycles created from now on are still found. Process-wide by nature, so only the
    process entry points (`schemabridge worker`, `serve`, `run`) call it.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def api_service_name(host: str, port: int) -> str:
    """The service id of a `schemabridge api` process: by host and port, as several may run
    on one machine; its prefix tells readers of heartbeats that it runs no worker
    (`engine.coordination.heartbeat.is_worker_service`)."""
    return f"{API_SERVICE_PREFIX}{host}-{port}"


async def live_namesake(
    runtime: Runtime, service: str, *, role: ServiceRole = ServiceRole.WORKER
) -> Namesake | None:
    """Another process's live heartbeat under `service`, found as this `role` process claims
    the name before it beats under it (`engine.coordination.heartbeat.Heartbeat.claim`: a
    namesake started at the same moment finds this one's claim)."""
    heartbeat = Heartbeat.from_settings(
        service, runtime.redis, runtime.clock, runtime.settings, role=role
    )
    return await heartbeat.claim()


async def run_presence(
    runtime: Runtime, service: str, stop: asyncio.Event, *, role: ServiceRole
) -> None:
    """Show a named service of `role` alive until `stop`: heartbeat `heartbeat:<service>` (the
    Services page, `GET /services`) and marker file `.healthy/<service>` (a container's probe).
    First thing on `stop` both go, so the service looks unhealthy and leaves the monitor while
    it drains (docs/architecture.md, 'Graceful shutdown')."""
    heartbeat = Heartbeat.from_settings(
        service, runtime.redis, runtime.clock, runtime.settings, role=role
    )
    marker = HealthMarker.from_settings(service, runtime.settings)
    with marker:
        beating = asyncio.create_task(heartbeat.run(stop), name="heartbeat")
        try:
            await stop.wait()
        finally:
            marker.remove()
            await heartbeat.stop()
            await beating


async def run_service(
    runtime: Runtime,
    service: str,
    stop: asyncio.Event,
    *,
    role: ServiceRole,
    metrics: WorkerMetrics | None = None,
) -> None:
    """Run a worker as a named service of `role` (a `worker`, or the one of a `serve`) until
    `stop`: its presence (`run_presence`) and a graceful drain (docs/architecture.md,
    'Graceful shutdown'). `metrics`: where its figures go (the ones its `/metrics` serves)."""
    worker = runtime.worker(metrics=metrics, service=service)
    async with asyncio.TaskGroup() as group:
        group.create_task(run_presence(runtime, service, stop, role=role), name="presence")
        await worker.run(stop)
    logger.info(
        "service %s stopped: %s",
        service,
        worker.stats.summary(),
        extra={"event": "service.stopped"},
    )
