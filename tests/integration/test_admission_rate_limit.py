"""Tenant sliding-window rate limiter on fakeredis and on a real Redis, with a FakeClock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from admission import Admission, AdmissionConfig, RateDecision, TenantRateConfig
from schemas.clock import FakeClock

Connect = Callable[[], Redis]


def make(connect: Connect, clock: FakeClock, **rate: Any) -> Admission:
    config = AdmissionConfig(tenant_rate=TenantRateConfig(**rate))
    return Admission(connect(), clock, config)


async def take(admission: Admission, tenant: str, n: int) -> list[RateDecision]:
    return [await admission.tenant_check(tenant) for _ in range(n)]


async def test_at_the_limit_the_item_is_delayed_five_seconds(connect: Connect) -> None:
    admission = make(connect, FakeClock(), limit=3)
    assert [d.allowed for d in await take(admission, "acme", 3)] == [True] * 3
    refused = await admission.tenant_check("acme")
    assert refused == RateDecision(
        allowed=False, delay_s=5.0, used=3, limit=3, retry_after_s=pytest.approx(60.0)
    )


async def test_window_edges(connect: Connect) -> None:
    clock = FakeClock()
    admission = make(connect, clock, limit=2, window_s=60.0)
    await take(admission, "acme", 1)  # t = 0
    clock.advance(30)
    await take(admission, "acme", 1)  # t = 30
    clock.advance(29.999)
    decision = await admission.tenant_check("acme")  # t = 59.999: both still count
    assert not decision.allowed
    assert decision.retry_after_s == pytest.approx(0.001, abs=1e-6)
    clock.advance(0.001)  # t = 60: the first item leaves the window exactly now
    assert (await admission.tenant_check("acme")).allowed
    assert not (await admission.tenant_check("acme")).allowed
    clock.advance(30)  # t = 90: the item taken at 30 leaves
    decision = await admission.tenant_check("acme")
    assert (decision.allowed, decision.used) == (True, 2)


async def test_items_at_the_same_timestamp_do_not_collide(connect: Connect) -> None:
    admission = make(connect, FakeClock(), limit=5)  # the clock never moves
    decisions = await take(admission, "acme", 6)
    assert [d.used for d in decisions] == [1, 2, 3, 4, 5, 5]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]


async def test_one_tenant_at_its_limit_does_not_slow_another(connect: Connect) -> None:
    admission = make(connect, FakeClock(), limit=2)
    await take(admission, "flood", 2)
    assert not (await admission.tenant_check("flood")).allowed
    assert (await admission.tenant_check("quiet")).allowed


async def test_per_tenant_limits_static_and_shared(connect: Connect) -> None:
    clock = FakeClock()
    admission = make(connect, clock, limit=2, overrides={"big": 4})
    assert [d.allowed for d in await take(admission, "big", 5)] == [True] * 4 + [False]
    other_worker = make(connect, clock, limit=2)
    await other_worker.set_tenant_limit("small", 3)  # written in Redis: every worker sees it
    assert [d.allowed for d in await take(admission, "small", 4)] == [True] * 3 + [False]
    await admission.set_tenant_limit("small", None)
    assert (await admission.tenant_check("small")).limit == 2
    with pytest.raises(ValueError):
        await admission.set_tenant_limit("small", 0)


async def test_the_default_is_a_thousand_items_per_minute(connect: Connect) -> None:
    clock = FakeClock()
    admission = Admission(connect(), clock)
    decisions = await take(admission, "acme", 1_001)
    assert sum(d.allowed for d in decisions) == 1_000
    assert decisions[-1].delay_s == 5.0
    clock.advance(60)
    assert (await admission.tenant_check("acme")).allowed
    (usage,) = (await admission.snapshot()).tenants
    assert (usage.tenant_id, usage.used, usage.limit, usage.window_s) == ("acme", 1, 1000, 60.0)


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"window_s": 0}, {"overrides": {"a": 0}}])
def test_invalid_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TenantRateConfig(**kwargs)
