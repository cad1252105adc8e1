"""Layered circuit breakers (docs/architecture.md, 'Circuit breakers') on fakeredis and on a
real Redis, with a FakeClock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from admission import (
    Admission,
    AdmissionConfig,
    AimdConfig,
    BreakerState,
    CallOutcome,
    Layer,
    Ticket,
)
from schemas.clock import FakeClock
from schemas.errors import BreakerOpen, BreakerOpening, FailureKind, StepFailure

Connect = Callable[[], Redis]
DEST = "https://billing.example.com:443"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def admission(connect: Connect, clock: FakeClock) -> Admission:
    return Admission(connect(), clock)


async def admit(admission: Admission, tenant: str = "acme", lease_s: float = 30) -> Ticket:
    return await admission.admit(DEST, tenant, wait_timeout_s=0, lease_s=lease_s)


async def fail(admission: Admission, tenant: str = "acme", times: int = 1) -> None:
    for _ in range(times):
        await (await admit(admission, tenant)).failure()


async def succeed(admission: Admission, tenant: str = "acme", times: int = 1) -> None:
    for _ in range(times):
        await (await admit(admission, tenant)).success()


async def blocked(admission: Admission, tenant: str = "acme") -> BreakerOpen:
    with pytest.raises(BreakerOpen) as caught:
        await admit(admission, tenant)
    assert caught.value.kind is FailureKind.EXTERNAL_OVERLOAD
    assert caught.value.redispatchable
    return caught.value


async def layers(admission: Admission) -> tuple[BreakerState, dict[str, BreakerState]]:
    (state,) = (await admission.snapshot()).destinations
    tenants = {tenant: layer.state for tenant, layer in state.tenant_breakers.items()}
    return state.global_breaker.state, tenants


# ── tenant layer ──────────────────────────────────────────────────────────────────────────


async def test_five_consecutive_failures_open_the_tenant_layer(
    admission: Admission, clock: FakeClock
) -> None:
    await fail(admission, times=4)
    await succeed(admission)  # a success while closed resets the count
    await fail(admission, times=4)
    await succeed(admission, times=1)
    assert await layers(admission) == (BreakerState.CLOSED, {})
    await fail(admission, times=5)
    opened = clock.now()
    clock.advance(2)
    failure = await blocked(admission)
    # When: `retry_after_s`, which a redispatch counts down; the message says no time of its own
    # but names the command that closes the breaker by hand.
    assert failure.message == (
        f"circuit open: the tenant breaker of {DEST!r} (tenant 'acme') is open: it refuses every "
        "call until it half-opens (once the destination is fixed, close it with "
        f"`schemabridge destinations reset-breaker {DEST} --tenant acme`)"
    )
    assert failure.retry_after_s == 28.0
    # The opening the refusal belongs to: the engine counts one redispatch per opening.
    assert failure.opening == BreakerOpening("tenant", opened)


async def test_an_open_tenant_layer_blocks_only_its_tenant(admission: Admission) -> None:
    await fail(admission, "acme", times=5)
    await blocked(admission, "acme")
    await succeed(admission, "globex", times=3)  # the other tenant still passes
    assert await layers(admission) == (BreakerState.CLOSED, {"acme": BreakerState.OPEN})


async def test_half_open_after_reset_survives_a_process_restart(
    connect: Connect, clock: FakeClock
) -> None:
    first = Admission(connect(), clock)
    await fail(first, times=5)
    clock.advance(29.9)
    await blocked(first)
    clock.advance(0.1)
    # A new process (new client, new objects, same Redis) decides half-open from opened_at.
    restarted = Admission(connect(), clock)
    probe = await admit(restarted)
    assert probe.probe
    await probe.success()
    await (await admit(restarted)).success()  # 2 probe successes close the tenant layer
    assert await layers(restarted) == (BreakerState.CLOSED, {})
    await succeed(restarted, times=3)


async def test_half_open_admits_only_the_configured_probes(
    admission: Admission, clock: FakeClock
) -> None:
    await fail(admission, times=5)
    opened = clock.now()
    clock.advance(30)
    probes = [await admit(admission), await admit(admission)]
    failure = await blocked(admission)  # the tenant layer allows 2 probes at once
    assert "is half-open with every probe permit in use: it refuses other calls until a probe " in (
        failure.message
    )
    # Half-open is still the same opening: a step refused now was counted under it already.
    assert failure.opening == BreakerOpening("tenant", opened)
    assert failure.retry_after_s == 1.0  # soon: probes answer in a call's time, not a lease
    await probes[0].ignore()  # an ignored probe gives its permit back, no verdict
    third = await admit(admission)
    await probes[1].success()
    await third.success()
    assert await layers(admission) == (BreakerState.CLOSED, {})


async def test_a_failed_probe_reopens_for_another_reset_period(
    admission: Admission, clock: FakeClock
) -> None:
    await fail(admission, times=5)
    clock.advance(31)
    await (await admit(admission)).failure()
    reopened = await blocked(admission)
    assert reopened.retry_after_s == 30.0  # reopened now, not at 0
    assert reopened.opening == BreakerOpening("tenant", clock.now())  # a new opening
    clock.advance(30)
    await succeed(admission, times=2)


async def test_a_hung_probe_counts_as_failure_when_its_lease_ends(
    admission: Admission, clock: FakeClock
) -> None:
    await fail(admission, times=5)
    clock.advance(30)
    hung = await admit(admission, lease_s=5)  # never answers
    await admit(admission, lease_s=5)  # the second permit, also never settled
    clock.advance(4.9)
    await blocked(admission)  # both permits held: still half-open, nobody else gets through
    clock.advance(10.1)
    # The lease ended 10 s ago: that was a failure, so the layer reopened at the expiry.
    failure = await blocked(admission)
    assert failure.retry_after_s == pytest.approx(20.0)
    assert await layers(admission) == (BreakerState.CLOSED, {"acme": BreakerState.OPEN})
    await hung.success()  # the hung call finally answers: too late to count
    await blocked(admission)
    clock.advance(20)
    await succeed(admission, times=2)


async def test_a_probe_slower_than_the_default_lease_but_within_its_timeout_closes(
    admission: Admission, clock: FakeClock
) -> None:
    """The engine's guard leases a call's slot and probe permit for the call's timeout plus a
    margin: a probe of a GATEWAY with `timeoutMs` 120 s that answers after 95 s (longer than
    the default 90 s lease) is a success, not a hung probe."""
    from engine.execution.admission_guard import AdmissionGuard

    await fail(admission, times=5)
    clock.advance(30)
    probe = AdmissionGuard(admission, "acme", wait_timeout_s=0)
    await probe.before_attempt(DEST, retry=False, timeout_s=120)
    clock.advance(95)
    await probe.after_attempt(DEST, 200, None, 95.0)
    await succeed(admission)  # the second probe success: closed
    assert await layers(admission) == (BreakerState.CLOSED, {})


async def test_a_call_slower_than_the_default_lease_keeps_its_slot(
    connect: Connect, clock: FakeClock
) -> None:
    from admission import DestinationCaps
    from engine.execution.admission_guard import AdmissionGuard

    admission = Admission(connect(), clock)
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    slow = AdmissionGuard(admission, "acme", wait_timeout_s=0)
    await slow.before_attempt(DEST, retry=False, timeout_s=120)
    clock.advance(140)  # still within its timeout plus the margin
    with pytest.raises(StepFailure, match="no slot"):
        await AdmissionGuard(admission, "acme", wait_timeout_s=0).before_attempt(
            DEST, retry=False, timeout_s=30
        )
    clock.advance(11)  # 120 s + 30 s margin: a slot that outlived that is reclaimed
    await AdmissionGuard(admission, "acme", wait_timeout_s=0).before_attempt(
        DEST, retry=False, timeout_s=30
    )


async def test_visibility_shows_a_hung_probe_reopening_before_any_request_does(
    admission: Admission, clock: FakeClock
) -> None:
    """The script reopens a half-open layer whose probe's lease ended at the next request;
    `snapshot()` shows the same before any request has come (not half-open, 0 probes)."""
    await fail(admission, times=5)
    clock.advance(30)
    await admit(admission, lease_s=5)  # the probe hangs
    await admit(admission, lease_s=300)  # the second probe is still out, not hung
    clock.advance(10)  # the first's lease ended 5 s ago: open again since then
    (state,) = (await admission.snapshot()).destinations
    layer = state.tenant_breakers["acme"]
    assert layer.state is BreakerState.OPEN
    assert layer.opened_at == pytest.approx(clock.now() - 5)
    assert layer.seconds_until_half_open == pytest.approx(25.0)
    assert (layer.probes, layer.successes) == (0, 0)  # reopening gave every permit back
    failure = await blocked(admission)  # what the next request sees agrees
    assert failure.retry_after_s == pytest.approx(25.0)


async def test_late_outcomes_of_calls_admitted_before_opening_change_nothing(
    admission: Admission,
) -> None:
    early = await admit(admission)
    await fail(admission, times=5)
    await early.success()  # admitted while closed, answers while open
    await blocked(admission)


# ── global layer ──────────────────────────────────────────────────────────────────────────


async def test_global_layer_opens_for_every_tenant(connect: Connect, clock: FakeClock) -> None:
    aimd = AimdConfig(initial_limit=20, slow_start=False)
    admission = Admission(connect(), clock, AdmissionConfig(aimd=aimd))
    for tenant in ["a", "b", "c", "d", "e"]:  # 15 failures, none of them 5 in one tenant
        await fail(admission, tenant, times=3)
    for tenant in ["a", "zeta"]:
        failure = await blocked(admission, tenant)
        assert "global breaker" in failure.message and "all tenants" in failure.message
        assert failure.retry_after_s == 60.0
    (state,) = (await admission.snapshot()).destinations
    assert state.global_breaker.state is BreakerState.OPEN
    assert state.global_breaker.seconds_until_half_open == 60.0
    assert state.tenant_breakers["a"].failures == 3
    # The global layer opening is an overload signal: the limit was cut once.
    assert (state.cuts, state.limit) == (1, pytest.approx(18.0))


async def test_global_layer_needs_three_probe_successes(
    admission: Admission, clock: FakeClock
) -> None:
    for tenant in ["a", "b", "c"]:
        await fail(admission, tenant, times=4)
    await fail(admission, "d", times=3)
    await blocked(admission, "anyone")
    clock.advance(60)
    assert (await layers(admission))[0] is BreakerState.HALF_OPEN  # shown lazily, not stored
    for tenant in ["x", "y"]:
        await succeed(admission, tenant)
    assert (await layers(admission))[0] is BreakerState.HALF_OPEN
    await succeed(admission, "z")
    assert (await layers(admission))[0] is BreakerState.CLOSED


async def test_both_layers_record_every_outcome(admission: Admission, clock: FakeClock) -> None:
    await fail(admission, "a", times=4)
    (state,) = (await admission.snapshot()).destinations
    assert state.global_breaker.failures == 4
    assert state.tenant_breakers["a"].failures == 4
    await succeed(admission, "b")  # resets the global count, not tenant a's
    (state,) = (await admission.snapshot()).destinations
    assert state.global_breaker.failures == 0
    assert state.tenant_breakers["a"].failures == 4


# ── one tenant's calls in flight cannot open the global layer ────────────────────────────


def wide(connect: Connect, clock: FakeClock) -> Admission:
    """Room for many calls in flight at once (a limit of 100, not the slow start's 10)."""
    aimd = AimdConfig(initial_limit=100, slow_start=False)
    return Admission(connect(), clock, AdmissionConfig(aimd=aimd))


async def test_calls_in_flight_when_their_tenant_layer_opens_do_not_count_globally(
    connect: Connect, clock: FakeClock
) -> None:
    """Tenant a has 40 calls under way when its destination starts failing them: its layer
    opens at the 5th failure, and the 35 after it, sent before it opened, count in neither
    layer. The global layer, at 5 failures of its 15, keeps letting tenant b through."""
    admission = wide(connect, clock)
    in_flight = [await admit(admission, "a", lease_s=300) for _ in range(40)]
    for ticket in in_flight:
        await ticket.failure()
    (state,) = (await admission.snapshot()).destinations
    assert state.tenant_breakers["a"].state is BreakerState.OPEN
    assert (state.global_breaker.state, state.global_breaker.failures) == (BreakerState.CLOSED, 5)
    await succeed(admission, "b", times=3)
    await blocked(admission, "a")


async def test_a_single_tenant_failing_at_a_slow_rate_still_opens_the_global_layer(
    admission: Admission, clock: FakeClock
) -> None:
    """The destination fails everyone, but only tenant a calls it: its first 5 failures open
    its layer, and then one failed probe every half-open trial counts in the global layer
    too, until the 15th opens it for every tenant."""
    await fail(admission, "a", times=5)
    for trial in range(10):
        assert (await layers(admission))[0] is BreakerState.CLOSED, trial
        clock.advance(30)
        await fail(admission, "a")  # the half-open trial's probe fails: reopened
    assert (await layers(admission))[0] is BreakerState.OPEN
    failure = await blocked(admission, "b")
    assert "global breaker" in failure.message


async def test_several_tenants_with_calls_in_flight_still_open_the_global_layer(
    connect: Connect, clock: FakeClock
) -> None:
    """Four tenants, 8 calls each in flight, all failing: each tenant's first 5 failures count
    in the global layer before its own layer opens, so the global layer opens at the 15th and
    refuses a fifth tenant."""
    admission = wide(connect, clock)
    tickets = {t: [await admit(admission, t, lease_s=300) for _ in range(8)] for t in "abcd"}
    for i in range(8):  # the tenants' failures interleaved, as they arrive from four fan-outs
        for tenant in "abcd":
            await tickets[tenant][i].failure()
    (state,) = (await admission.snapshot()).destinations
    assert state.global_breaker.state is BreakerState.OPEN
    assert {t: layer.state for t, layer in state.tenant_breakers.items()} == dict.fromkeys(
        "abcd", BreakerState.OPEN
    )
    failure = await blocked(admission, "e")
    assert "global breaker" in failure.message and "all tenants" in failure.message


async def test_a_global_probe_of_a_tenant_whose_layer_opened_meanwhile_decides_nothing(
    connect: Connect, clock: FakeClock
) -> None:
    """The global layer is half-open; tenant a's call holds one of its 3 probe permits when a's
    own layer opens (its calls sent before the global layer opened fail). The probe's failure
    is then a's alone: its permit goes back undecided, and the other tenants' probes close the
    global layer. Counted, it would have reopened it for another 60 s."""
    admission = wide(connect, clock)
    stale = [await admit(admission, "a", lease_s=300) for _ in range(5)]
    for tenant in "cdefg":
        await fail(admission, tenant, times=3)  # 15: the global layer opens
    clock.advance(60)
    probe = await admit(admission, "a", lease_s=300)
    assert probe.probe
    for ticket in stale:
        await ticket.failure()  # a's layer opens; the global layer ignores non-probes
    assert (await layers(admission))[1]["a"] is BreakerState.OPEN
    await probe.failure()
    assert (await layers(admission))[0] is BreakerState.HALF_OPEN
    probes = [await admit(admission, "b") for _ in range(3)]  # a's permit was given back
    for ticket in probes:
        await ticket.success()
    assert (await layers(admission))[0] is BreakerState.CLOSED


async def test_transitions_are_logged_with_structured_fields(
    admission: Admission, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="admission.controller"):
        await fail(admission, times=5)
        clock.advance(30)
        await succeed(admission, times=2)
    changes = [
        tuple(getattr(r, field) for field in ("layer", "state_from", "state_to"))
        for r in caplog.records
        if getattr(r, "event", "") == "admission.breaker_changed"
    ]
    assert changes == [
        ("tenant", "closed", "open"),
        ("tenant", "open", "half_open"),
        ("tenant", "half_open", "closed"),
    ]


# ── 429: a throttle, not an outage ────────────────────────────────────────────────────────


async def test_429s_cut_the_limit_but_never_open_a_breaker(
    connect: Connect, clock: FakeClock
) -> None:
    """A destination answering 429 is healthy and at capacity: AIMD backs off, the breakers
    count nothing (neither a failure nor a success that would reset the failure count)."""
    admission = Admission(connect(), clock, AdmissionConfig(aimd=AimdConfig(initial_limit=20)))
    await fail(admission, times=4)
    for _ in range(30):  # far beyond both thresholds
        await (await admit(admission)).settle(CallOutcome.THROTTLED)
        clock.advance(1)
    (state,) = (await admission.snapshot()).destinations
    assert state.global_breaker.state is BreakerState.CLOSED
    assert state.tenant_breakers["acme"].state is BreakerState.CLOSED
    assert state.tenant_breakers["acme"].failures == 4  # the 429s did not reset the count
    assert state.limit < 20 and state.cuts >= 1
    await fail(admission)  # the fifth real failure still opens the tenant layer
    await blocked(admission)


async def test_a_429_probe_gives_its_permit_back_without_deciding(
    admission: Admission, clock: FakeClock
) -> None:
    await fail(admission, times=5)
    clock.advance(30)  # half-open: two probes at a time
    first, second = await admit(admission), await admit(admission)
    await blocked(admission)  # both permits in use
    await first.settle(CallOutcome.THROTTLED)
    assert (await layers(admission))[1]["acme"] is BreakerState.HALF_OPEN
    third = await admit(admission)  # the throttled probe's permit is free again
    await second.success()
    await third.success()  # two probe successes close it (a closed, clean layer is not listed)
    assert await layers(admission) == (BreakerState.CLOSED, {})


# ── closed by an operator ─────────────────────────────────────────────────────────────────


def at_clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at))


async def breaker_causes(admission: Admission) -> dict[str, str | None]:
    (state,) = (await admission.snapshot()).destinations
    causes = {tenant: layer.opened_by for tenant, layer in state.tenant_breakers.items()}
    return {"global": state.global_breaker.opened_by, **causes}


async def test_a_refusal_says_what_opened_its_layer(admission: Admission, clock: FakeClock) -> None:
    """Each opening keeps what its failure was, as the settlement named it: the trip's last
    failure, a failed probe's, a hung probe's; the refusals and the visibility say it, an
    operator's close forgets it."""
    for _ in range(5):
        await (await admit(admission)).settle(CallOutcome.FAILURE, cause="HTTP 500")
    opened = clock.now()
    failure = await blocked(admission)
    assert failure.message.startswith(
        f"circuit open (opened by an HTTP 500 at {at_clock(opened)} UTC): the tenant breaker "
    )
    assert await breaker_causes(admission) == {"global": None, "acme": "an HTTP 500"}
    clock.advance(31)
    await (await admit(admission)).settle(CallOutcome.OVERLOAD, cause="timeout")
    reopened = await blocked(admission)
    assert reopened.message.startswith(
        f"circuit open (opened by a timeout at {at_clock(clock.now())} UTC): "
    )
    clock.advance(30)
    await admit(admission, lease_s=5)  # probes that never answer
    await admit(admission, lease_s=5)
    clock.advance(6)
    hung = await blocked(admission)
    assert hung.message.startswith(
        "circuit open (opened by a probe that got no answer within its lease at "
    )
    await admission.reset_breakers(DEST)
    await fail(admission, times=5)  # failures that name no cause (an older worker's)
    assert (await blocked(admission)).message.startswith("circuit open: the tenant breaker")
    assert await breaker_causes(admission) == {"global": None, "acme": None}


async def test_an_operator_closes_open_breakers_at_once(
    admission: Admission, clock: FakeClock
) -> None:
    """The destination is fixed: `reset_breakers` closes its open layers for every worker, so
    calls go now instead of after the reset timeout."""
    assert await admission.reset_breakers(DEST) is None  # never seen
    await fail(admission, "acme", times=5)
    await fail(admission, "globex", times=5)
    await blocked(admission, "acme")
    assert await layers(admission) == (
        BreakerState.CLOSED,
        {"acme": BreakerState.OPEN, "globex": BreakerState.OPEN},
    )
    # One tenant's layer only: the other stays open.
    (acme,) = await admission.reset_breakers(DEST, "acme") or []
    assert (acme.layer, acme.tenant_id, acme.was) == (Layer.TENANT, "acme", BreakerState.OPEN)
    await succeed(admission, "acme")
    await blocked(admission, "globex")
    # Every layer of the destination: only those not closed are named.
    clock.advance(1)
    closed = await admission.reset_breakers(DEST) or []
    assert [(c.layer, c.tenant_id, c.was) for c in closed] == [
        (Layer.TENANT, "globex", BreakerState.OPEN)
    ]
    assert await layers(admission) == (BreakerState.CLOSED, {})  # (closed layers not listed)
    await succeed(admission, "globex", times=3)
    assert await admission.reset_breakers(DEST) == []  # nothing left to close


async def test_a_reset_fills_the_retry_budget_the_outage_emptied(admission: Admission) -> None:
    """The steps a reset releases are redispatches, admitted as retries. A tour's outage (a
    hundred calls timing out at once) had emptied the destination's retry budget: after the
    operator fixed the downstream and reset the breaker, the released children were refused by
    the budget, a redispatch spent on each refusal, until 120 of 500 failed without calling
    the destination again. The reset says the destination is fixed: the budget is full again."""
    await fail(admission, "acme", times=5)  # the tenant breaker opens
    for _ in range(60):  # and the calls in flight when it did fail too
        await admission.budget.record_failure(DEST)
    assert not await admission.budget.allowed(DEST)
    (acme,) = await admission.reset_breakers(DEST, "acme") or []
    assert acme.was is BreakerState.OPEN
    assert await admission.budget.tokens(DEST) == admission.budget.config.max_tokens
    # A released step's redispatch goes (before the fix: `RetryRefused`).
    ticket = await admission.admit(DEST, "acme", wait_timeout_s=0, lease_s=30, retry=True)
    await ticket.success()
