"""A Redis restarted without its data does not undo the operator's settings: the tenant rate
limit and the destination caps stored in the database are copied back before any admission
decides with the defaults (`admission.seeding`). Real parts: PostgreSQL (the store, as the
operator's commands write it) and a `redis-server` of the test's own, restarted mid-test (the
shared one is never touched); first under one `Admission`, then under `schemabridge api` and
`worker` processes running a fan-out.

The default tenant rate here is 5 items a minute and the default cap 100; the operator raised
the tenant to 1,000 and capped the destination at 1 call at a time.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from admission import (
    Admission,
    AdmissionConfig,
    DestinationCaps,
    DestinationPaced,
    TenantRateConfig,
    TenantRateLimited,
)
from demo.downstream import RunningDownstream
from engine.execution.admission_guard import StoreSettingsSource
from engine.store import Store
from schemas.clock import SystemClock
from tests.conftest import Backend
from tests.e2e.outage_harness import fan_out, throwaway_redis
from tests.e2e.rest_harness import process_env, schemabridge, service

DESTINATION = "http://127.0.0.1:9/charge"
DEFAULT_RATE = 5
RAISED_RATE = 1_000
TAKES = 40
"""Items taken after the restart: far over the default, far under the raised rate."""
WAIT_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def store(pg_database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(pg_database_url, SystemClock())
    yield opened
    await opened.close()


async def _configured(store: Store, admission: Admission) -> None:
    """What `tenants set-rate default 1000` and `destinations set-caps --max 1` do."""

    async def rate(limit: int | None) -> None:
        await admission.rate.set_limit("default", limit)

    await store.change_tenant_rate("default", RAISED_RATE, rate)

    async def caps(cap: int, per_second: float | None) -> None:
        await admission.set_caps(DESTINATION, DestinationCaps(cap, per_second))

    assert await store.change_destination_caps(DESTINATION, {"max_concurrency": 1}, caps) == (
        1,
        None,
    )


def _admission(
    redis: Redis, source: StoreSettingsSource | None, settings: StoreSettingsSource | None
) -> Admission:
    """An admission as a worker's runtime builds it (`settings` None: as it was before
    Redis's loss of the settings was checked for)."""
    return Admission(
        redis,
        SystemClock(),
        AdmissionConfig(tenant_rate=TenantRateConfig(limit=DEFAULT_RATE)),
        caps_source=source,
        tenant_limits=source,
        settings=settings,
    )


async def _takes_after_restart(
    store: Store, tmp_path: Path, *, copy_back: bool
) -> tuple[int, bool]:
    """Configure, admit (the process has loaded the settings), restart Redis under the same
    process, then take `TAKES` tenant items and ask for a second slot of the capped
    destination: (items refused by the tenant rate, second slot refused)."""
    port = _free_port()
    redis = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    source = StoreSettingsSource(store)
    admission = _admission(redis, source, source if copy_back else None)
    try:
        with throwaway_redis(port, tmp_path) as first:
            await _configured(store, admission)
            ticket = await admission.admit(DESTINATION, "default", wait_timeout_s=0, take_item=True)
            await ticket.success()
            first.kill()
            first.wait(timeout=30)
        with throwaway_redis(port, tmp_path):  # the same port, every key gone
            # The pooled connections died with the server, as a worker's did.
            await redis.connection_pool.disconnect()
            limited = 0
            for _ in range(TAKES):
                try:
                    ticket = await admission.admit(
                        DESTINATION, "default", wait_timeout_s=0, take_item=True
                    )
                except TenantRateLimited:
                    limited += 1
                    continue
                await ticket.success()
            held = await admission.admit(DESTINATION, "default", wait_timeout_s=0)
            try:
                await admission.admit(DESTINATION, "default", wait_timeout_s=0)
                second_refused = False
            except DestinationPaced:
                second_refused = True
            await held.success()
    finally:
        await redis.aclose()
    return limited, second_refused


async def test_settings_are_copied_back_before_the_defaults_apply(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="admission.seeding"):
        limited, second_refused = await _takes_after_restart(store, tmp_path, copy_back=True)
    assert limited == 0  # no item waited on the default rate
    assert second_refused  # the cap of 1 held, not the default of 100
    copied = [
        r.getMessage() for r in caplog.records if "copied from the database" in r.getMessage()
    ]
    # Once as the first Redis started empty, once after the restart; never per admission.
    assert len(copied) == 2, copied
    assert copied[1].endswith(": 1 of 1 tenant rate limit and 1 of 1 destination cap")


async def test_without_a_copy_the_restart_would_undo_them(store: Store, tmp_path: Path) -> None:
    """The same restart with no settings to copy from: the defaults decide (what the check
    above guards against), so the test above can fail."""
    limited, second_refused = await _takes_after_restart(store, tmp_path, copy_back=False)
    assert limited == TAKES - DEFAULT_RATE
    assert not second_refused


async def test_a_copy_that_fails_is_said_and_the_defaults_apply_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database unreachable while Redis is empty: one warning, admission goes on with
    the defaults rather than wait, and tries the copy again after `seeding.RETRY_S`."""
    nowhere = f"postgresql+asyncpg://postgres@127.0.0.1:{_free_port()}/absent"
    unreachable = await Store.open(nowhere, SystemClock(), migrate=False)  # connects lazily
    port = _free_port()
    with throwaway_redis(port, tmp_path):
        redis = Redis.from_url(f"redis://127.0.0.1:{port}/0")
        # The process loaded its settings earlier; only the copy of them all is asked for.
        admission = _admission(redis, None, StoreSettingsSource(unreachable))
        try:
            with caplog.at_level(logging.INFO, logger="admission.seeding"):
                for _ in range(3):
                    ticket = await admission.admit(DESTINATION, "default", wait_timeout_s=0)
                    await ticket.success()
        finally:
            await redis.aclose()
            await unreachable.close()
    failed = [
        r for r in caplog.records if "copying them from the database failed" in r.getMessage()
    ]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert admission.reseeder is not None and admission.reseeder.copies == 0


# ── the same under `schemabridge api` and `worker` processes ────────────────────────────────


async def _fan_out(http: httpx.AsyncClient, items: int) -> list[str]:
    """Run `fan` over `items` children to its end; answers the children's ids."""
    submitted = await http.post("/workflows/fan/runs", json={"input": {"items": [0] * items}})
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    deadline = time.monotonic() + WAIT_S
    while (run := (await http.get(f"/runs/{run_id}")).json())["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"run {run_id} still running: {run}"
        await asyncio.sleep(0.2)
    assert run["status"] == "SUCCEEDED", run
    children = (await http.get("/runs", params={"parent": run_id, "limit": 200})).json()
    return [child["id"] for child in children["items"]]


async def test_no_child_waits_on_the_default_rate_after_a_redis_restart(
    pg_database_url: str, tmp_path: Path, downstream: RunningDownstream
) -> None:
    port, items = _free_port(), 30
    backend = Backend("throwaway", pg_database_url, f"redis://127.0.0.1:{port}/0")
    env = process_env(backend, tmp_path, auth="off", tenant_rate_per_minute=str(DEFAULT_RATE))
    assert schemabridge(env, "db", "upgrade").returncode == 0
    worker_log = tmp_path / "worker.log"
    with (
        throwaway_redis(port, tmp_path) as first,
        service(["api", "--port", "0"], env, tmp_path / "api.log") as api,
        service(["worker"], env, worker_log),
    ):
        url = api.wait_for_url()
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
            raised = await http.put("/tenants/default/limits", json={"ratePerMinute": RAISED_RATE})
            assert raised.status_code == 200, raised.text
            assert (await http.post("/workflows", json=fan_out(downstream.url))).status_code in (
                200,
                201,
            )
            await _fan_out(http, 2)  # the worker has loaded the tenant's limit
            first.kill()  # every key lost, the processes left running
            first.wait(timeout=30)
            with throwaway_redis(port, tmp_path):
                children = await _fan_out(http, items)
                logs = [(await http.get(f"/runs/{c}/logs")).json()["items"] for c in children]
    assert len(children) == items
    waited = [line for lines in logs for line in lines if "at its rate limit" in line["message"]]
    assert waited == []
    copies = [
        line for line in worker_log.read_text().splitlines() if "copied from the database" in line
    ]
    assert len(copies) == 2, copies  # the first Redis, then the restarted one
