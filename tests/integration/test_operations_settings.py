"""Operator settings through the operations layer (both backends, real store and Redis):
destination caps, tenant rate limits and quotas, services, and every refusal."""

from __future__ import annotations

import asyncio
import math
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.exceptions

from admission import DestinationCaps, keys
from engine.coordination.heartbeat import Heartbeat
from engine.execution import executor
from engine.operations import Operations
from engine.operations.settings import SettingsOperations
from engine.runtime import Runtime
from engine.store.records import StepAwaitingChildren, StepFailed
from schemas.definitions import Workflow
from schemas.errors import InvalidRequest, StepFailure, Unavailable
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for
from tests.integration.operations_harness import single, slow_to_redis
from tests.integration.scripts.helpers import UNREACHABLE_REDIS_URL

DEFAULT_CAP = 100
DEFAULT_RATE = 10_000_000  # what settings_for gives every test


def unique(prefix: str) -> str:
    """A name no other test uses (the embedded Redis is shared by every test of a process)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend))
    yield runtime
    await runtime.close()


@pytest.fixture
def settings(runtime: Runtime) -> SettingsOperations:
    return Operations(runtime).settings


async def caps_key_exists(runtime: Runtime, destination: str) -> bool:
    return bool(await runtime.admission_redis.exists(keys.destination_caps(destination)))


async def stored_only(runtime: Runtime, destination: str, max_concurrency: int) -> None:
    """Caps in the store and not in Redis (as caps stored by an older version)."""

    async def nowhere(_cap: int, _rate: float | None) -> None:
        return None

    changes = {"max_concurrency": max_concurrency, "rate_per_second": None}
    await runtime.store.change_destination_caps(destination, changes, nowhere)


async def refused_at_once(runtime: Runtime, destination: str) -> bool:
    """Whether a call to `destination` that cannot wait is refused for want of a slot."""
    try:
        ticket = await runtime.admission.admit(destination, "ops", wait_timeout_s=0)
    except StepFailure as failure:
        assert "admission wait exhausted" in failure.message
        return True
    await ticket.success()
    return False


# ── destination caps ─────────────────────────────────────────────────────────────────────────


async def test_a_cap_set_then_removed_applies_to_admission_in_every_process(
    backend: Backend, runtime: Runtime, settings: SettingsOperations
) -> None:
    destination = unique("erp")
    view = await settings.set_caps(destination, 1, 5.0)
    assert (view.destination, view.max_concurrency, view.rate_per_second) == (destination, 1, 5.0)
    assert await runtime.store.get_destination_caps(destination) == (1, 5.0)
    assert await caps_key_exists(runtime, destination)

    # Another process (same database and Redis) is held to the cap ...
    other = await Runtime.open(settings_for(backend))
    try:
        held = await other.admission.admit(destination, "ops", wait_timeout_s=0)
        assert await refused_at_once(other, destination)
        (listed,) = [d for d in await settings.destinations() if d.destination == destination]
        assert (listed.cap, listed.cap_configured, listed.in_flight) == (1, True, 1)
        assert listed.rate_per_second == 5.0 and listed.slots == 1

        # ... and let through at the default cap once the cap is removed, with no restart.
        assert await settings.remove_caps(destination) is True
        assert await runtime.store.get_destination_caps(destination) is None
        assert not await caps_key_exists(runtime, destination)  # the Redis copy is gone
        assert not await refused_at_once(other, destination)
        await held.success()
    finally:
        await other.close()
    (listed,) = [d for d in await settings.destinations() if d.destination == destination]
    assert (listed.cap, listed.cap_configured, listed.rate_per_second) == (DEFAULT_CAP, False, None)
    # Removing it again has nothing to do.
    assert await settings.remove_caps(destination) is False


async def test_destinations_lists_seen_and_capped_destinations_with_their_state(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    seen, capped = unique("http://seen"), unique("capped")
    seen = f"{seen}:80"
    ticket = await runtime.admission.admit(seen, "acme", wait_timeout_s=0)
    await ticket.failure()
    # A cap stored while Redis lost its copy: listed with the stored cap, never admitted.
    await settings.set_caps(capped, 7)
    await runtime.admission_redis.delete(keys.destination_caps(capped))
    views = {d.destination: d for d in await settings.destinations()}
    assert views[capped].cap == 7 and views[capped].cap_configured
    assert views[capped].in_flight == 0 and views[capped].slots <= 7
    assert views[seen].cap == DEFAULT_CAP and not views[seen].cap_configured
    assert views[seen].global_breaker.state == "closed"
    assert views[seen].global_breaker.failures == 1
    assert views[seen].tenant_breakers["acme"].failures == 1
    assert views[seen].retry_allowed and views[seen].retry_tokens > 0
    wire = views[seen].model_dump(by_alias=True)
    assert {"capConfigured", "inFlight", "globalBreaker", "retryTokens"} <= set(wire)


ACCEPTED_KEYS = [
    "erp",
    "billing/eu",
    "http://127.0.0.1:8765",
    "https://api.example.com:443",
    "http://[::1]:8080",
]
REFUSED_KEYS = [
    pytest.param("127.0.0.1:8765/", "http://127.0.0.1:8765", id="address-without-scheme"),
    pytest.param("billing:8080", "http://billing:8080", id="host-port-without-scheme"),
    pytest.param("http://host:8080/path", "http://host:8080", id="with-a-path"),
    pytest.param("http://host:8080?q=1", "http://host:8080", id="with-a-query"),
    pytest.param("http://host", "http://host:80", id="without-its-port"),
    pytest.param("HTTP://Host:80", "http://host:80", id="upper-case"),
    pytest.param("http://[0:0:0:0:0:0:0:1]:80", "http://[::1]:80", id="ipv6-uncompressed"),
    pytest.param("http://0x7f000001:80", "http://127.0.0.1:80", id="ipv4-spelled-in-hex"),
    pytest.param("http://api.example.com.:443", "http://api.example.com:443", id="trailing-dot"),
    pytest.param("ftp://host:21", None, id="not-http"),
    pytest.param("http://host:99999", None, id="port-out-of-range"),
    pytest.param("http://:80", None, id="no-host"),
    pytest.param(" erp", "erp", id="spaces"),
    pytest.param("", None, id="empty"),
    pytest.param("{{ input.destination }}", None, id="an-expression"),
    pytest.param("x" * 301, None, id="too-long"),
]


@pytest.mark.parametrize("key", ACCEPTED_KEYS)
async def test_keys_a_call_can_have_are_accepted(
    key: str, runtime: Runtime, settings: SettingsOperations
) -> None:
    await settings.set_caps(key, 3)
    assert await runtime.store.get_destination_caps(key) == (3, None)
    assert await settings.remove_caps(key) is True


@pytest.mark.parametrize(("key", "suggestion"), REFUSED_KEYS)
async def test_keys_no_call_can_have_are_refused_saying_what_a_key_looks_like(
    key: str, suggestion: str | None, runtime: Runtime, settings: SettingsOperations
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await settings.set_caps(key, 3)
    assert refused.value.code == "invalid_destination"
    assert "scheme://host:port" in refused.value.message
    assert "explicit destination name" in refused.value.message
    if suggestion is not None:
        assert f"did you mean {suggestion!r}" in refused.value.message
    with pytest.raises(InvalidRequest, match="can never match a call"):
        await settings.remove_caps(key)
    assert await runtime.store.list_destination_caps() == []


async def test_caps_stored_under_a_bad_key_before_keys_were_checked_can_be_removed(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    await stored_only(runtime, "127.0.0.1:8765/", 2)
    assert await settings.remove_caps("127.0.0.1:8765/") is True
    assert await runtime.store.list_destination_caps() == []


@pytest.mark.parametrize(
    ("max_concurrency", "rate"),
    [
        (0, None),
        (-3, None),
        (True, None),
        (2**31, None),  # more than the store's column holds
        (2, 0.0),
        (2, -1.0),
        (2, math.nan),
        (2, math.inf),
    ],
)
async def test_caps_out_of_range_are_refused(
    max_concurrency: Any, rate: float | None, runtime: Runtime, settings: SettingsOperations
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await settings.set_caps("erp", max_concurrency, rate)
    assert refused.value.code == "invalid_caps"
    assert await runtime.store.list_destination_caps() == []


async def test_a_change_of_one_cap_keeps_the_other(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    destination = unique("erp")
    await settings.set_caps(destination, 4, 2.0)
    view = await settings.change_caps(destination, max_concurrency=6)
    assert (view.max_concurrency, view.rate_per_second) == (6, 2.0)
    view = await settings.change_caps(destination, rate_per_second=0.5)
    assert (view.max_concurrency, view.rate_per_second) == (6, 0.5)
    view = await settings.change_caps(destination, rate_per_second=None)  # the rate removed
    assert (view.max_concurrency, view.rate_per_second) == (6, None)
    assert await runtime.store.get_destination_caps(destination) == (6, None)
    assert await runtime.admission.get_caps(destination) == DestinationCaps(6, None)
    # A new destination takes a concurrency alone (no rate); a rate alone has nothing to join.
    fresh = unique("crm")
    assert (await settings.change_caps(fresh, max_concurrency=3)).rate_per_second is None
    bare = unique("billing")
    with pytest.raises(InvalidRequest) as refused:
        await settings.change_caps(bare, rate_per_second=1.0)
    assert refused.value.code == "caps_not_set"
    assert refused.value.message == (
        f"{bare} has no caps of its own yet: give maxConcurrency with ratePerSecond"
    )
    with pytest.raises(InvalidRequest) as nothing:
        await settings.change_caps(bare)
    assert nothing.value.code == "invalid_caps"
    with pytest.raises(InvalidRequest) as bad:
        await settings.change_caps(destination, rate_per_second=0)
    assert bad.value.code == "invalid_caps"
    assert await runtime.store.get_destination_caps(bare) is None
    assert not await caps_key_exists(runtime, bare)
    assert await runtime.store.get_destination_caps(destination) == (6, None)


async def test_concurrent_changes_of_different_caps_all_survive(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    """20 rounds of a concurrency change and a rate change at once: both land, and Redis ends
    as the store does (each change reaches Redis while it holds the row)."""
    destination = unique("erp")
    await settings.set_caps(destination, 1, 1.0)
    for round_ in range(2, 22):
        await asyncio.gather(
            settings.change_caps(destination, max_concurrency=round_),
            settings.change_caps(destination, rate_per_second=float(round_)),
        )
        assert await runtime.store.get_destination_caps(destination) == (round_, float(round_))
        operative = await runtime.admission.get_caps(destination)
        assert operative == DestinationCaps(round_, float(round_)), round_


async def test_a_cap_change_redis_refuses_is_not_stored(
    runtime: Runtime, settings: SettingsOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis failing once the row is written (after the probe) rolls the change back: the
    store keeps what Redis has, and the operation may be sent again."""
    destination = unique("erp")
    await settings.set_caps(destination, 2, None)

    async def refuse(_destination: str, _caps: DestinationCaps) -> None:
        raise redis.exceptions.ConnectionError("connection reset")

    monkeypatch.setattr(runtime.admission, "set_caps", refuse)
    with pytest.raises(Unavailable) as unavailable:
        await settings.change_caps(destination, max_concurrency=9)
    assert unavailable.value.code == "coordination_unavailable"
    assert f"the caps of {destination} were not changed" in unavailable.value.message
    assert await runtime.store.get_destination_caps(destination) == (2, None)
    monkeypatch.undo()
    assert await runtime.admission.get_caps(destination) == DestinationCaps(2, None)
    assert (await settings.change_caps(destination, max_concurrency=9)).max_concurrency == 9


# ── tenants ──────────────────────────────────────────────────────────────────────────────────


async def test_a_tenant_rate_limit_applies_at_once_and_resets_to_the_default(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    tenant = unique("acme")
    rate = await settings.set_tenant_rate(tenant, 2)
    assert (rate.per_minute, rate.configured, rate.used, rate.window_s) == (2, True, 0, 60.0)
    assert await runtime.store.get_tenant_rate(tenant) == 2
    checks = [(await runtime.admission.tenant_check(tenant)).allowed for _ in range(3)]
    assert checks == [True, True, False]
    shown = await settings.tenant(tenant)
    assert (shown.rate.per_minute, shown.rate.used, shown.quota) == (2, 2, None)

    rate = await settings.reset_tenant_rate(tenant)
    assert (rate.per_minute, rate.configured, rate.used) == (DEFAULT_RATE, False, 2)
    assert await runtime.store.get_tenant_rate(tenant) is None
    assert (await runtime.admission.tenant_check(tenant)).allowed
    # Resetting a tenant without a limit leaves it as it is.
    assert (await settings.reset_tenant_rate(tenant)).per_minute == DEFAULT_RATE


async def test_concurrent_tenant_rate_changes_leave_redis_as_the_store(
    backend: Backend,
    runtime: Runtime,
    settings: SettingsOperations,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 rounds of two changes of one tenant's rate at once from two processes' views (two
    runtimes on one store and Redis), the first slow to reach Redis (a pause, a slow link):
    the second (a new rate, or a reset) comes after it in the store, so Redis, what admission
    enforces, must hold the second too. It does when each change reaches Redis under the lock
    that orders it in the store; written after the commit, the slow one overwrote it."""
    tenant = unique("acme")
    slow = await Runtime.open(settings_for(backend))
    at_redis = slow_to_redis(slow, monkeypatch)

    async def after_the_slow_one(per_minute: int | None) -> None:
        await at_redis.wait()
        if per_minute is None:
            await settings.reset_tenant_rate(tenant)
        else:
            await settings.set_tenant_rate(tenant, per_minute)

    try:
        for round_ in range(20):
            at_redis.clear()
            second = None if round_ % 3 == 2 else 1000 + round_
            await asyncio.gather(
                Operations(slow).settings.set_tenant_rate(tenant, 500 + round_),
                after_the_slow_one(second),
            )
            assert await runtime.store.get_tenant_rate(tenant) == second, round_
            _, operative = await runtime.admission.rate.usage(tenant)
            assert operative == (DEFAULT_RATE if second is None else second), round_
    finally:
        await slow.close()


async def test_a_tenant_rate_change_redis_refuses_is_not_stored(
    runtime: Runtime, settings: SettingsOperations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis failing once the row is written (after the probe) rolls the change back, a
    reset as well as a new rate: the store keeps what Redis has."""
    tenant = unique("acme")
    await settings.set_tenant_rate(tenant, 7)

    async def refuse(_tenant_id: str, _limit: int | None) -> None:
        raise redis.exceptions.ConnectionError("connection reset")

    monkeypatch.setattr(runtime.admission, "set_tenant_limit", refuse)
    for change in (
        lambda: settings.set_tenant_rate(tenant, 9),
        lambda: settings.reset_tenant_rate(tenant),
    ):
        with pytest.raises(Unavailable) as unavailable:
            await change()
        assert unavailable.value.code == "coordination_unavailable"
        assert f"the rate limit of tenant {tenant} was not changed" in unavailable.value.message
        assert await runtime.store.get_tenant_rate(tenant) == 7
    monkeypatch.undo()
    assert (await runtime.admission.rate.usage(tenant))[1] == 7


BAD_TENANTS = [pytest.param("", id="empty"), pytest.param(" acme", id="spaces")]
BAD_TENANTS += [pytest.param("t" * 201, id="too-long")]


@pytest.mark.parametrize("tenant", BAD_TENANTS)
async def test_bad_tenant_ids_are_refused_by_every_tenant_operation(
    tenant: str, runtime: Runtime, settings: SettingsOperations
) -> None:
    operations: list[Callable[[], Awaitable[Any]]] = [
        lambda: settings.set_tenant_rate(tenant, 5),
        lambda: settings.reset_tenant_rate(tenant),
        lambda: settings.set_quota(tenant, 5),
        lambda: settings.reset_quota(tenant),
        lambda: settings.tenant(tenant),
    ]
    for operation in operations:
        with pytest.raises(InvalidRequest) as refused:
            await operation()
        assert refused.value.code == "invalid_tenant"
    assert await runtime.store.list_tenant_rates() == []
    assert await runtime.store.list_quotas() == []


async def test_limits_on_the_reserved_system_tenant_are_refused_and_none_is_stored(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    """`system`'s runs (deployments') make no calls and take no quota: a limit set on it was
    shown and audited, and did nothing. Refused by every write that sets one, the PUT's
    operation before anything of it is applied (its reset too); a reset alone is taken (it
    removes what an older version stored)."""
    operations: list[Callable[[], Awaitable[Any]]] = [
        lambda: settings.set_tenant_rate("system", 5, actor="key:ops"),
        lambda: settings.set_quota("system", 0, actor="key:ops"),
        lambda: settings.set_limits("system", rate_per_minute=5, actor="key:ops"),
        lambda: settings.set_limits("system", max_runs=0, actor="key:ops"),
        lambda: settings.set_limits("system", rate_per_minute=None, max_runs=3, actor="key:ops"),
    ]
    for operation in operations:
        with pytest.raises(InvalidRequest) as refused:
            await operation()
        assert refused.value.code == "invalid_tenant"
        assert refused.value.message.startswith("'system' is the tenant of the engine's own runs")
        assert "no rate limit or quota applies to it" in refused.value.message
        assert "\n" not in refused.value.message
    assert await runtime.store.list_tenant_rates() == []
    assert await runtime.store.list_quotas() == []
    audited = await Operations(runtime).audit.list()
    assert [e.action.value for e in audited.items] == [], "nothing refused is audited"
    reset = await settings.set_limits("system", rate_per_minute=None, max_runs=None)
    assert (reset.rate.configured, reset.quota) == (False, None)
    # Any other tenant takes both, through the same operation.
    other = await settings.set_limits("acme", rate_per_minute=5, max_runs=0, actor="key:ops")
    assert (other.rate.per_minute, other.quota and other.quota.max_runs) == (5, 0)
    # And is listed as limited, where `system` says no limit acts on it (it read "1,000/min
    # (default)" in `tenants list`, a limit it cannot have).
    assert ((await settings.tenant("system")).reserved, other.reserved) == (True, False)
    listed = {view.tenant_id: view.reserved for view in await settings.tenants()}
    assert listed["acme"] is False


@pytest.mark.parametrize("per_minute", [0, -1, True, 2**31])
async def test_rates_below_one_are_refused(
    per_minute: Any, runtime: Runtime, settings: SettingsOperations
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await settings.set_tenant_rate("acme", per_minute)
    assert refused.value.code == "invalid_rate"
    assert await runtime.store.list_tenant_rates() == []


async def test_a_quota_larger_than_the_store_holds_is_refused(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await settings.set_quota("acme", 2**31)
    assert refused.value.code == "invalid_quota" and str(2**31 - 1) in refused.value.message
    assert await runtime.store.list_quotas() == []
    assert (await settings.set_quota("acme", 2**31 - 1)).max_runs == 2**31 - 1


def fan_out(child: str) -> list[Workflow]:
    parent = {
        "name": unique("parent"),
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input }}", "workflow": child}},
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    leaf = {
        "name": child,
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:1/x"}}},
    }
    return [Workflow.model_validate(leaf), Workflow.model_validate(parent)]


async def spawn(runtime: Runtime, workflows: list[Workflow], tenant: str, n: int) -> Any:
    """Create a run of the parent for `tenant` over `n` items and execute its spawner."""
    for workflow in workflows:
        version = await runtime.store.publish(workflow)
    run, _ = await runtime.store.create_run(version, list(range(n)), tenant_id=tenant)
    claimed = await runtime.store.claim(1000, lease_s=60)
    (step,) = [s for s in claimed if s.run_id == run.id]
    result, _ = await executor.execute(step, version.workflow, runtime.executor_deps())
    return result


async def test_a_quota_bounds_fan_outs_keeps_its_count_and_resets_to_unlimited(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    tenant, workflows = unique("acme"), fan_out(unique("leaf"))
    quota = await settings.set_quota(tenant, 10)
    assert (quota.max_runs, quota.used_runs, quota.runs_left) == (10, 0, 10)
    assert isinstance(await spawn(runtime, workflows, tenant, 6), StepAwaitingChildren)
    refused = await spawn(runtime, workflows, tenant, 6)
    assert isinstance(refused, StepFailed) and refused.error["kind"] == "quota_exceeded"
    # Raising the quota keeps the runs used so far.
    quota = await settings.set_quota(tenant, 20)
    assert (quota.max_runs, quota.used_runs, quota.runs_left) == (20, 6, 14)
    shown = await settings.tenant(tenant)
    assert shown.quota == quota

    assert await settings.reset_quota(tenant) is True
    assert await runtime.store.quota_left(tenant) is None
    assert (await settings.tenant(tenant)).quota is None
    assert isinstance(await spawn(runtime, workflows, tenant, 30), StepAwaitingChildren)
    assert await settings.reset_quota(tenant) is False  # already unlimited
    with pytest.raises(InvalidRequest) as below_zero:
        await settings.set_quota(tenant, -1)
    assert below_zero.value.code == "invalid_quota"


async def test_tenants_lists_every_tenant_with_settings_or_a_rate_window(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    limited, capped, seen = unique("a-limited"), unique("b-quota"), unique("c-seen")
    await settings.set_tenant_rate(limited, 50)
    await settings.set_quota(capped, 3)
    await runtime.admission.tenant_check(seen)
    views = {t.tenant_id: t for t in await settings.tenants()}
    assert (views[limited].rate.per_minute, views[limited].quota) == (50, None)
    assert views[capped].rate.per_minute == DEFAULT_RATE and not views[capped].rate.configured
    assert views[capped].quota is not None and views[capped].quota.runs_left == 3
    assert views[seen].rate.used == 1 and views[seen].quota is None
    ids = [t.tenant_id for t in await settings.tenants()]
    assert ids == sorted(ids)
    wire = views[capped].model_dump(by_alias=True)
    assert wire["tenantId"] == capped and wire["quota"]["runsLeft"] == 3


# ── services ─────────────────────────────────────────────────────────────────────────────────


async def test_services_are_up_while_they_beat_and_down_once_stopped(
    runtime: Runtime, settings: SettingsOperations
) -> None:
    name = unique("worker")
    heartbeat = Heartbeat(name, runtime.redis, runtime.clock, pid=4242)
    assert await heartbeat.beat()
    (up,) = [s for s in await settings.services() if s.name == name]
    assert (up.up, up.pid) == (True, 4242) and up.last_seen is not None
    await heartbeat.stop()
    (down,) = [s for s in await settings.services() if s.name == name]
    assert (down.up, down.last_seen) == (False, up.last_seen)
    # Down, it still says the pid and host it beat from: where to look for its process.
    assert (down.pid, down.host) == (4242, socket.gethostname()) == (up.pid, up.host)


# ── Redis unreachable ────────────────────────────────────────────────────────────────────────


async def test_without_redis_settings_that_need_it_are_refused_with_nothing_changed(
    backend: Backend,
) -> None:
    runtime = await Runtime.open(settings_for(backend, redis_url=UNREACHABLE_REDIS_URL))
    try:
        settings = Operations(runtime).settings
        await stored_only(runtime, "kept", 2)
        refusals: list[Callable[[], Awaitable[Any]]] = [
            lambda: settings.set_caps("erp", 3),
            lambda: settings.change_caps("kept", rate_per_second=1.0),
            lambda: settings.remove_caps("kept"),
            lambda: settings.set_tenant_rate("acme", 5),
            lambda: settings.reset_tenant_rate("acme"),
            settings.destinations,
            settings.tenants,
            lambda: settings.tenant("acme"),
            settings.services,
        ]
        for refusal in refusals:
            with pytest.raises(Unavailable) as unavailable:
                await refusal()
            assert unavailable.value.code == "coordination_unavailable"
            assert "Redis cannot be reached" in unavailable.value.message
        assert await runtime.store.list_destination_caps() == [("kept", 2, None)]
        assert await runtime.store.list_tenant_rates() == []
        # Quotas live in the database alone.
        assert (await settings.set_quota("acme", 4)).runs_left == 4
        assert await settings.reset_quota("acme") is True
    finally:
        await runtime.close()


async def test_tenants_with_runs_or_keys_are_listed_without_settings(runtime: Runtime) -> None:
    """A tenant with runs or an API key but no limits row is a tenant too (`default`, `acme`
    after a tour were missing from `tenants list`)."""
    ops = Operations(runtime)
    settings = ops.settings
    ran, keyed = unique("d-ran"), unique("e-keyed")
    await ops.workflows.publish([single("tenant-list", "http://127.0.0.1:9/never")])
    await ops.runs.submit("tenant-list", {}, tenant_id=ran)
    await ops.runs.submit("tenant-list", {}, tenant_id=ran)
    await ops.keys.create(tenant=keyed)
    await ops.keys.create(admin=True)
    views = {t.tenant_id: t for t in await settings.tenants()}
    assert {ran, keyed} <= set(views)
    assert views[ran].quota is None and not views[ran].rate.configured
