"""What the settings operations return: destination caps and admission state, tenants' rate
limits and quotas, services. camelCase on the wire, like every `View`."""

from __future__ import annotations

from pydantic import Field

from admission import DestinationState, LayerStatus
from admission.aimd import slots
from admission.breaker import BreakerState, Layer
from engine.coordination.heartbeat import ServiceRole, ServiceStatus
from engine.operations.views import View


class CapsView(View):
    """A destination's stored caps."""

    destination: str
    max_concurrency: int
    rate_per_second: float | None = None
    """Calls started per second across all workers; None = unlimited."""


class BreakerView(View):
    """One circuit-breaker layer as the next call would see it."""

    state: BreakerState
    """An open layer past its reset timeout reads `half_open`."""
    failures: int
    """Consecutive failures while closed."""
    successes: int
    """Probe successes in the current half-open trial."""
    probes: int
    """Probe permits held now."""
    opened_at: float | None = None
    """Epoch seconds of the latest opening; None if it never opened."""
    seconds_until_half_open: float = 0.0
    opened_by: str | None = Field(
        default=None,
        description="While the layer is open or half-open, what the failure that opened it "
        "was, in words: 'an HTTP 500', 'a timeout', 'an I/O error', 'an unusable answer', 'a "
        "probe that got no answer within its lease'. None when closed, or when it opened "
        "before the engine kept it.",
    )

    @classmethod
    def of(cls, status: LayerStatus) -> BreakerView:
        return cls(
            state=status.state.value,
            failures=status.failures,
            successes=status.successes,
            probes=status.probes,
            opened_at=status.opened_at,
            seconds_until_half_open=status.seconds_until_half_open,
            opened_by=status.opened_by,
        )


class ClosedBreakerView(View):
    """A breaker layer an operator closed."""

    layer: Layer
    tenant_id: str | None = None
    """The tenant of a tenant layer; None for the global layer."""
    was: BreakerState
    """The state it was closed from: `open` or `half_open`."""


class BreakersReset(View):
    """What `POST /destinations/{key}/breakers/reset` closed (empty: every layer was closed
    already)."""

    destination: str
    tenant_id: str | None = None
    """Only this tenant's layer was asked for; None: the global layer and every tenant's."""
    closed: list[ClosedBreakerView]
    steps_released: int = 0
    """Steps that waited behind these breakers (redispatched or parked after a refusal) and
    are claimable now instead of at their own time."""


class DestinationView(View):
    """Everything admission knows about one destination, with its configured caps."""

    destination: str
    cap: int
    """Calls in flight at most (`maxConcurrency`): the stored cap, else the default cap."""
    cap_configured: bool
    """An operator set a cap (False: the default cap applies)."""
    rate_per_second: float | None = None
    limit: float
    """The AIMD limit (fractional), within [1, cap]."""
    slots: int
    """Calls the limit admits at once."""
    in_flight: int
    cuts: int
    """Multiplicative decreases so far."""
    growth_held_s: float
    """Seconds until the limit may grow again (the last cut's Retry-After); 0 if it may."""
    global_breaker: BreakerView
    tenant_breakers: dict[str, BreakerView]
    """Tenant layers that are not closed with zero failures, by tenant id."""
    retry_tokens: float
    """The destination's retry budget: tokens in the bucket."""
    retry_allowed: bool
    """Whether the budget lets a retry through now."""

    @classmethod
    def of(cls, state: DestinationState, caps: CapsView | None) -> DestinationView:
        """`state` as admission read it; `caps`, the stored copy, wins over Redis's (it is
        the one the next admission anywhere loads)."""
        cap = state.cap if caps is None else caps.max_concurrency
        limit = min(state.limit, float(cap))
        return cls(
            destination=state.destination,
            cap=cap,
            cap_configured=caps is not None or state.cap_configured,
            rate_per_second=state.rate_per_second if caps is None else caps.rate_per_second,
            limit=limit,
            slots=slots(limit, cap),
            in_flight=state.in_flight,
            cuts=state.cuts,
            growth_held_s=state.growth_held_s,
            global_breaker=BreakerView.of(state.global_breaker),
            tenant_breakers={t: BreakerView.of(s) for t, s in state.tenant_breakers.items()},
            retry_tokens=state.retry_tokens,
            retry_allowed=state.retry_allowed,
        )


class TenantRateView(View):
    """A tenant's rate limit and its current window."""

    per_minute: int
    """GATEWAY steps the tenant may start per window (each counted once)."""
    configured: bool
    """An operator set it (False: the default, `TENANT_RATE_PER_MINUTE`)."""
    used: int
    """Steps counted in the current window."""
    window_s: float


class QuotaView(View):
    """A tenant's run quota: taken by each root run submitted or started over, and checked
    by spawners before a fan-out, whose children take it too."""

    max_runs: int
    used_runs: int
    """Runs created (submitted or spawned) since the quota was set: the count starts at 0 with
    `set-quota` and is kept when the quota is changed, so runs from before it are not in it."""
    runs_left: int


class TenantView(View):
    """A tenant's operator settings and how much of them it uses now."""

    tenant_id: str
    rate: TenantRateView
    quota: QuotaView | None = None
    """None = unlimited."""
    reserved: bool = False
    """The engine's own tenant (`system`: deployments' gradual_deploy runs), on which no limit
    acts: its runs make no GATEWAY call for `rate` (the default, shown as for any id) to
    count and take no quota, and setting either is refused. Front doors say "none" for it."""


class ServiceView(View):
    """One service's heartbeat: up while its key is fresh (TTL 30 s by default)."""

    name: str
    up: bool
    role: ServiceRole | None = None
    """What kind of process it is: `api` (the REST API alone), `worker`, or `serve` (the API and
    a worker in one process); None from a heartbeat older than the field."""
    pid: int | None = None
    """Its process's id, from its latest heartbeat: a service down keeps the one it last beat
    from (None from before the engine kept it)."""
    host: str | None = None
    """The machine (a container's id in Docker) it beats from, or last beat from once down."""
    uptime_s: float | None = None
    """Seconds since its process started: to now while it is up, to its latest heartbeat once
    down."""
    last_seen: float | None = None
    """Epoch seconds of its latest heartbeat."""
    started_at: float | None = None
    """Epoch seconds its process started (None from a heartbeat older than the field)."""

    @classmethod
    def of(cls, status: ServiceStatus) -> ServiceView:
        return cls(
            name=status.name,
            up=status.up,
            role=status.role,
            pid=status.pid,
            host=status.host,
            uptime_s=status.uptime_s,
            last_seen=status.last_seen,
            started_at=status.started_at,
        )
