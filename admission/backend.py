"""The atomic coordination backend: the only module of admission/ that talks to Redis.

Every change to shared state is one Lua script (files in `admission/lua/`, registered once
per client with redis-py's `register_script`, so each call is one EVALSHA round trip).
Redis cannot `require` between scripts, so a script's source is its `lib_*.lua` helpers
followed by its body, concatenated here.

Time is always an argument (`now`, epoch seconds from the injected `Clock`); scripts never
call Redis `TIME`, so tests move time by advancing a `FakeClock`. Real-time key expiry is
used only to garbage-collect idle keys, never for a decision.

Works with `redis.asyncio.Redis` and `fakeredis.FakeAsyncRedis` alike, with or without
`decode_responses`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from importlib import resources
from typing import Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from admission import keys
from admission.breaker import (
    PROBE_HUNG,
    BreakerConfig,
    BreakerState,
    LayerView,
    scoped_tenant,
)
from admission.config import AdmissionConfig, RetryBudgetConfig, TenantRateConfig
from admission.ticket import CallOutcome

_SCRIPT_PARTS: dict[str, tuple[str, ...]] = {
    "exchange": ("lib_common", "lib_window", "lib_aimd", "lib_breaker", "lib_budget", "exchange"),
    "renew": ("lib_common", "renew"),
    "budget": ("lib_common", "lib_budget", "budget"),
    "reset": ("lib_common", "lib_breaker", "reset"),
    "seed": ("seed",),
}

BudgetOp = Literal["success", "failure", "peek"]
Arg = str | int | float


@functools.cache
def script_source(name: str) -> str:
    """The full source of script `name` (its libraries, then its body)."""
    folder = resources.files("admission") / "lua"
    return "\n".join((folder / f"{part}.lua").read_text("utf-8") for part in _SCRIPT_PARTS[name])


class AdmitCode(IntEnum):
    """What the admission script decided."""

    GRANTED = 1
    BREAKER_BLOCKED = 2
    NO_SLOT = 3
    RATE_LIMITED = 4
    """The destination's `ratePerSecond` is reached."""
    RETRY_BUDGET = 5
    """A retry, and the destination's retry budget is at or under half."""
    TENANT_LIMITED = 6
    """The tenant's rate window is full (only when the admit takes a tenant item)."""


# ── operations of one exchange (lua/exchange.lua) ─────────────────────────────────────────


@dataclass(frozen=True)
class AdmitOp:
    """Admit one call. `take_item`: also take one item from the tenant's rate window (only
    if everything else lets the call through); `retry`: refuse it unless the destination's
    retry budget allows a retry."""

    destination: str
    tenant_id: str
    token: str
    lease_s: float
    take_item: bool = False
    retry: bool = False
    tenant_default_limit: int = 0
    """Items per window of the tenant when it has no override (with `take_item`)."""
    handover: bool = False
    """Record a call that already started on a slot handed over in this process (see
    `admission.handover`): no checks, the slot and the tenant item are taken as they are."""
    breaker_scope: str = ""
    """The calls of a deployment's candidate (`workflow@vN`): their tenant breaker layer is
    their own (`scoped_tenant`); "" for every other call."""

    @property
    def breaker_tenant(self) -> str:
        """The id of the tenant breaker layer this call goes through."""
        return scoped_tenant(self.tenant_id, self.breaker_scope)


@dataclass(frozen=True)
class SettleOp:
    destination: str
    tenant_id: str
    token: str
    outcome: CallOutcome
    slot_epoch: int
    retry_after_s: float = 0.0
    """The answer's Retry-After (0: none): a cut holds AIMD growth until then."""
    cause: str = ""
    """What a failure was (`breaker_cause`: "HTTP 500", "timeout"): a breaker layer it opens
    keeps it, so its refusals can say what the destination had been answering."""
    breaker_scope: str = ""
    """As `AdmitOp.breaker_scope`: the tenant layer the call was admitted through."""

    @property
    def breaker_tenant(self) -> str:
        return scoped_tenant(self.tenant_id, self.breaker_scope)


@dataclass(frozen=True)
class TakeOp:
    """Take one item from a tenant's rate window."""

    tenant_id: str
    member: str
    default_limit: int


Op = AdmitOp | SettleOp | TakeOp


@dataclass(frozen=True)
class AdmitReply:
    code: AdmitCode
    epoch: int
    """Cut epoch the slot is tagged with (GRANTED)."""
    in_flight: int
    limit: float
    hint_s: float
    """BREAKER_BLOCKED: until it may pass; NO_SLOT: until the earliest lease expires;
    RATE_LIMITED: until the destination's window has room."""
    blocking_layer: str
    """BREAKER_BLOCKED: `layer:state` of the blocking layer, e.g. `global:open`."""
    tenant_probe: bool
    global_probe: bool
    events: tuple[str, ...]
    """Breaker transitions, `layer:from:to`."""
    tenant_used: int = 0
    """GRANTED or TENANT_LIMITED with a tenant item: items in the tenant's window."""
    tenant_limit: int = 0
    """The tenant's items per window (when an item was asked for)."""
    free_slots: int = 0
    """Slots the destination's limit left unused after this admit (negative: over it)."""
    rate_capped: bool = False
    """The destination has a `ratePerSecond`."""
    cap: int = 0
    """The destination's `maxConcurrency` (its configured cap, else the default cap)."""
    rate_per_second: float = 0.0
    """The destination's `ratePerSecond` (0: none)."""
    at_cap: bool = False
    """The AIMD limit has reached the cap: the cap, not a limit cut by overload, bounds the
    destination's slots (a NO_SLOT then is the operator's pacing, not a struggling
    destination)."""
    opened_at: float = 0.0
    """BREAKER_BLOCKED: the blocking layer's stored `opened_at`, which names its current
    opening (unchanged from open through half-open, new at every reopen)."""
    cause: str = ""
    """BREAKER_BLOCKED: the failure that opened the blocking layer ("HTTP 500", "timeout",
    `PROBE_HUNG`; "" if unknown: it opened before causes were kept)."""


@dataclass(frozen=True)
class SettleReply:
    old_limit: float
    new_limit: float
    epoch: int
    cut: bool
    lease_held: bool
    """False if the lease had expired (and was reclaimed) before the call settled."""
    budget_tokens: float
    events: tuple[str, ...]
    free_slots: int = 0
    """Slots the destination's limit leaves unused after this settlement (it may have grown;
    negative: over it, after a cut)."""
    global_state: str = "closed"
    tenant_state: str = "closed"
    """The breaker layers' states after this settlement (`BreakerState` values)."""


@dataclass(frozen=True)
class TakeReply:
    allowed: bool
    used: int
    limit: int
    wait_s: float


Reply = AdmitReply | SettleReply | TakeReply


@dataclass(frozen=True)
class DestinationRecord:
    """Raw shared state of one destination, for visibility."""

    limit: float | None
    """None = never adjusted (the initial limit applies)."""
    epoch: int
    hold_until: float
    """No AIMD growth before this time (the last cut's Retry-After)."""
    in_flight: int
    max_concurrency: int | None
    rate_per_second: float | None
    budget_tokens: float | None
    budget_at: float | None
    """When `budget_tokens` was stored (the bucket refills with time since)."""
    global_layer: LayerView
    tenant_layers: dict[str, LayerView]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _opt_float(value: object) -> float | None:
    return None if value is None else float(_text(value))


def _breaker_args(config: BreakerConfig) -> list[str | float | int]:
    return [config.threshold, config.reset_s, config.successes_to_close, config.max_probes]


def _layer_view(fields: list[object], probes: int, hung: list[tuple[bytes, float]]) -> LayerView:
    """`hung`: the earliest probe permit whose lease has ended, if any (ZRANGEBYSCORE)."""
    state, failures, opened_at, successes, cause = fields
    if state is None:
        return LayerView.closed()
    view = LayerView(
        BreakerState(_text(state)),
        int(float(_text(failures or 0))),
        float(_text(opened_at or 0)),
        int(float(_text(successes or 0))),
        probes,
        _text(cause or ""),
    )
    if view.state is BreakerState.HALF_OPEN and hung:
        # A hung probe is a failure: the layer reopened when its lease ended, and reopening
        # gives back every permit and ends the trial (`bk_reopen`).
        opened = float(hung[0][1])
        return replace(
            view, state=BreakerState.OPEN, opened_at=opened, successes=0, probes=0, cause=PROBE_HUNG
        )
    return view


def _earliest_hung(pipe: Pipeline, probes_key: str, now: float) -> None:
    """Queue a read of the earliest probe permit whose lease ended by `now` (as the script's
    `bk_refresh` looks for one)."""
    pipe.zrangebyscore(probes_key, "-inf", repr(now), start=0, num=1, withscores=True)


_GLOBAL_KEYS = (
    keys.DESTINATIONS_SET,
    keys.TENANTS_SET,
    keys.TENANT_RATE_LIMITS,
    keys.SETTINGS_SEEDED,
)


class _KeyTable:
    """The deduplicated KEYS of one exchange: each group is passed once however many
    operations use it, and operations refer to a group by the 1-based index of its first key."""

    def __init__(self) -> None:
        self.keys: list[str] = list(_GLOBAL_KEYS)
        self._groups: dict[tuple[str, ...], int] = {}

    def _group(self, group: tuple[str, ...]) -> int:
        index = self._groups.get(group)
        if index is None:
            index = len(self.keys) + 1
            self._groups[group] = index
            self.keys.extend(group)
        return index

    def destination(self, destination: str) -> int:
        return self._group(_destination_keys(destination))

    def tenant_breaker(self, destination: str, tenant_id: str) -> int:
        return self._group(_tenant_breaker_keys(destination, tenant_id))

    def window(self, tenant_id: str) -> int:
        return self._group((keys.tenant_rate(tenant_id),))


# Key names are pure functions of the names; a worker calls few destinations and tenants.
@functools.lru_cache(maxsize=4096)
def _destination_keys(destination: str) -> tuple[str, ...]:
    glob = keys.breaker_global(destination)
    return (
        keys.slots(destination),
        keys.aimd(destination),
        keys.destination_caps(destination),
        keys.destination_rate(destination),
        keys.breaker_state(glob),
        keys.breaker_probes(glob),
        keys.retry_budget(destination),
        keys.breaker_tenants(destination),
    )


@functools.lru_cache(maxsize=4096)
def _tenant_breaker_keys(destination: str, tenant_id: str) -> tuple[str, str]:
    prefix = keys.breaker_tenant(destination, tenant_id)
    return keys.breaker_state(prefix), keys.breaker_probes(prefix)


_OP_WIDTH = 10


def _encode(
    ops: Sequence[Op], now: float, config: AdmissionConfig, *, require_seeded: bool
) -> tuple[list[str], list[Arg]]:
    table = _KeyTable()
    aimd = config.aimd
    args: list[Arg] = [
        repr(now),
        aimd.initial_limit,
        aimd.min_limit,
        config.default_max_concurrency,
        aimd.backoff_ratio,
        aimd.min_utilization,
        *_breaker_args(config.tenant_breaker),
        *_breaker_args(config.global_breaker),
        int(config.state_ttl_s * 1000),
        config.retry_budget.max_tokens,
        config.retry_budget.token_ratio,
        repr(config.tenant_rate.window_s),
        repr(aimd.max_hold_s),
        repr(config.retry_budget.refill_per_s),
        "1" if aimd.slow_start else "0",
        "1" if require_seeded else "0",
    ]
    for op in ops:
        if isinstance(op, AdmitOp):
            row: list[Arg] = [
                "A",
                table.destination(op.destination),
                table.tenant_breaker(op.destination, op.breaker_tenant),
                op.token,
                repr(op.lease_s),
                op.destination,
                op.tenant_id,
                table.window(op.tenant_id) if op.take_item else 0,
                ("r" if op.retry else "-") + ("h" if op.handover else ""),
                op.tenant_default_limit,
            ]
        elif isinstance(op, SettleOp):
            row = [
                "S",
                table.destination(op.destination),
                table.tenant_breaker(op.destination, op.breaker_tenant),
                op.token,
                op.outcome.value,
                op.slot_epoch,
                # (the script names the layer's tenant in the destination's visibility set)
                op.breaker_tenant,
                repr(float(op.retry_after_s)),
                op.cause,
                0,
            ]
        else:
            row = ["T", table.window(op.tenant_id), op.member, op.tenant_id, op.default_limit]
            row += [0] * (_OP_WIDTH - len(row))
        args.extend(row)
    return table.keys, args


def _events(value: object) -> tuple[str, ...]:
    return tuple(_text(e) for e in value) if isinstance(value, list) else ()


def _decode(op: Op, reply: list[object]) -> Reply:
    if isinstance(op, AdmitOp):
        return AdmitReply(
            code=AdmitCode(int(_text(reply[0]))),
            epoch=int(_text(reply[1])),
            in_flight=int(_text(reply[2])),
            limit=float(_text(reply[3])),
            hint_s=float(_text(reply[4])),
            blocking_layer=_text(reply[5]),
            tenant_probe=bool(reply[6]),
            global_probe=bool(reply[7]),
            tenant_used=int(_text(reply[8])),
            tenant_limit=int(_text(reply[9])),
            free_slots=int(_text(reply[10])),
            rate_capped=bool(reply[11]),
            events=_events(reply[12]),
            cap=int(_text(reply[13])),
            rate_per_second=float(_text(reply[14])),
            at_cap=bool(reply[15]),
            opened_at=float(_text(reply[16])),
            cause=_text(reply[17]) if len(reply) > 17 else "",
        )
    if isinstance(op, SettleOp):
        return SettleReply(
            old_limit=float(_text(reply[0])),
            new_limit=float(_text(reply[1])),
            epoch=int(_text(reply[2])),
            cut=bool(reply[3]),
            lease_held=bool(reply[4]),
            budget_tokens=float(_text(reply[5])),
            free_slots=int(_text(reply[6])),
            global_state=_text(reply[7]),
            tenant_state=_text(reply[8]),
            events=_events(reply[9]),
        )
    return TakeReply(
        allowed=bool(reply[0]),
        used=int(_text(reply[1])),
        limit=int(_text(reply[2])),
        wait_s=float(_text(reply[3])),
    )


class CoordinationBackend:
    """Typed calls over the admission scripts and keys of one Redis."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        # register_script does no I/O; the script is loaded on its first EVALSHA miss.
        self._scripts = {name: redis.register_script(script_source(name)) for name in _SCRIPT_PARTS}
        self.reseed: Callable[[], Awaitable[None]] | None = None
        """Copies the operator settings back into a Redis that lost them (`Admission` sets
        it when it has a database to copy from). While None, exchanges do not ask whether
        Redis holds them: the configured defaults and what Redis holds decide."""

    async def admit(
        self,
        destination: str,
        tenant_id: str,
        token: str,
        *,
        now: float,
        lease_s: float,
        config: AdmissionConfig,
    ) -> AdmitReply:
        """Try to admit one call: breakers, AIMD slot, destination rate, all or nothing."""
        (reply,) = await self.exchange(
            [AdmitOp(destination, tenant_id, token, lease_s)], now, config
        )
        if not isinstance(reply, AdmitReply):
            raise TypeError(f"admit answered {reply!r}")
        return reply

    async def settle(
        self,
        destination: str,
        tenant_id: str,
        token: str,
        outcome: CallOutcome,
        *,
        slot_epoch: int,
        now: float,
        config: AdmissionConfig,
        retry_after_s: float = 0.0,
    ) -> SettleReply:
        """Release a slot and apply its outcome to breakers, AIMD and the retry budget."""
        op = SettleOp(destination, tenant_id, token, outcome, slot_epoch, retry_after_s)
        (reply,) = await self.exchange([op], now, config)
        if not isinstance(reply, SettleReply):
            raise TypeError(f"settle answered {reply!r}")
        return reply

    async def exchange(self, ops: Sequence[Op], now: float, config: AdmissionConfig) -> list[Reply]:
        """Apply `ops` in order, atomically, in one script call (see `lua/exchange.lua`)."""
        if not ops:
            return []
        reseed = self.reseed
        keys, args = _encode(ops, now, config, require_seeded=reseed is not None)
        replies = await self._scripts["exchange"](keys=keys, args=args)
        if reseed is not None and isinstance(replies, bytes | str):
            # 'unseeded': the script did nothing. Copy the settings back, then send the batch
            # again without the check (if the copy failed, `reseed` said so; defaults apply).
            await reseed()
            keys, args = _encode(ops, now, config, require_seeded=False)
            replies = await self._scripts["exchange"](keys=keys, args=args)
        return [_decode(op, reply) for op, reply in zip(ops, replies, strict=True)]

    async def seed(
        self,
        tenant_limits: Mapping[str, int],
        caps: Mapping[str, tuple[int, float | None]],
    ) -> tuple[int, int]:
        """Write the settings Redis lacks (tenant limits, destination caps as
        `(max_concurrency, rate_per_second)`) and mark them seeded, atomically; answers how
        many tenant limits and caps were written (see `lua/seed.lua`)."""
        args: list[Arg] = [len(tenant_limits)]
        for tenant_id, limit in tenant_limits.items():
            args += [tenant_id, limit]
        for destination, (cap, rate) in caps.items():
            args += [destination, cap, "" if rate is None else repr(rate)]
        seed_keys = [keys.SETTINGS_SEEDED, keys.TENANT_RATE_LIMITS, keys.DESTINATIONS_SET]
        seed_keys += [keys.destination_caps(destination) for destination in caps]
        written = await self._scripts["seed"](keys=seed_keys, args=args)
        return int(_text(written[0])), int(_text(written[1]))

    async def renew(
        self, leases: Sequence[tuple[str, str, str]], *, now: float, lease_s: float
    ) -> list[bool]:
        """Extend live slot leases and their probe permits, each `(destination, tenant id,
        token)`, in one script call; per lease, False if it was lost."""
        if not leases:
            return []
        lease_keys: list[str] = []
        for destination, tenant_id, _ in leases:
            tenant = keys.breaker_tenant(destination, tenant_id)
            lease_keys += [
                keys.slots(destination),
                keys.breaker_probes(tenant),
                keys.breaker_probes(keys.breaker_global(destination)),
            ]
        renewed = await self._scripts["renew"](
            keys=lease_keys, args=[repr(now), repr(lease_s), *(token for *_, token in leases)]
        )
        return [bool(reply) for reply in renewed]

    async def tenant_take(
        self, tenant_id: str, *, member: str, now: float, window_s: float, default_limit: int
    ) -> tuple[bool, int, int, float]:
        """Take one item from a tenant's window: (allowed, used, limit, wait_s)."""
        config = AdmissionConfig(tenant_rate=TenantRateConfig(window_s=window_s))
        (reply,) = await self.exchange([TakeOp(tenant_id, member, default_limit)], now, config)
        if not isinstance(reply, TakeReply):
            raise TypeError(f"tenant take answered {reply!r}")
        return reply.allowed, reply.used, reply.limit, reply.wait_s

    async def write_tenant_limit(self, tenant_id: str, limit: int | None) -> None:
        if limit is None:
            await self._redis.hdel(keys.TENANT_RATE_LIMITS, tenant_id)
        else:
            await self._redis.hset(keys.TENANT_RATE_LIMITS, tenant_id, limit)

    async def read_tenant_usage(
        self, tenant_id: str, now: float, window_s: float
    ) -> tuple[int, int | None]:
        """(items in the window now, the tenant's Redis override or None)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcount(keys.tenant_rate(tenant_id), f"({now - window_s!r}", "+inf")
            pipe.hget(keys.TENANT_RATE_LIMITS, tenant_id)
            used, override = await pipe.execute()
        return int(used), None if override is None else int(_text(override))

    async def budget(
        self,
        destination: str,
        op: BudgetOp,
        config: RetryBudgetConfig,
        *,
        now: float,
        ttl_s: float = 86_400.0,
    ) -> float:
        """Apply `op` to a destination's retry budget at `now`; returns the tokens after it.

        `ttl_s` only garbage-collects an idle bucket (a missing bucket is full). Default 1 day.
        """
        tokens = await self._scripts["budget"](
            keys=[keys.retry_budget(destination)],
            args=[
                op,
                config.max_tokens,
                config.token_ratio,
                int(ttl_s * 1000),
                repr(now),
                repr(config.refill_per_s),
            ],
        )
        return float(_text(tokens))

    async def write_caps(
        self, destination: str, max_concurrency: int, rate_per_second: float | None
    ) -> None:
        key = keys.destination_caps(destination)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, "max_concurrency", str(max_concurrency))
            if rate_per_second is not None:
                pipe.hset(key, "rate_per_second", repr(rate_per_second))
            pipe.sadd(keys.DESTINATIONS_SET, destination)
            await pipe.execute()

    async def read_caps(self, destination: str) -> tuple[int, float | None] | None:
        cap, rate = await self._redis.hmget(
            keys.destination_caps(destination), ["max_concurrency", "rate_per_second"]
        )
        if cap is None:
            return None
        return int(_text(cap)), _opt_float(rate)

    async def delete_caps(self, destination: str) -> None:
        await self._redis.delete(keys.destination_caps(destination))

    async def destinations(self) -> list[str]:
        """Every destination ever admitted or given caps, sorted."""
        members = await self._redis.smembers(keys.DESTINATIONS_SET)
        return sorted(_text(m) for m in members)

    async def tenants(self) -> list[str]:
        """Every tenant the rate limiter has seen, sorted."""
        members = await self._redis.smembers(keys.TENANTS_SET)
        return sorted(_text(m) for m in members)

    async def known_destination(self, destination: str) -> bool:
        """Whether admission has seen a call to `destination` (or caps for it)."""
        return bool(await self._redis.sismember(keys.DESTINATIONS_SET, destination))

    async def breaker_tenants(self, destination: str) -> list[str]:
        """The tenants with a breaker layer of `destination`, sorted."""
        members = await self._redis.smembers(keys.breaker_tenants(destination))
        return sorted(_text(m) for m in members)

    async def refill_budget(self, destination: str) -> None:
        """Fill `destination`'s retry budget: a missing bucket is a full one (lib_budget.lua)."""
        await self._redis.delete(keys.retry_budget(destination))

    async def close_breakers(
        self, layers: Sequence[tuple[str, str]], ttl_s: float
    ) -> list[BreakerState]:
        """Close the breaker layers named by `(layer, key prefix)` (`global`/`tenant`, the
        prefix from `keys.breaker_global`/`breaker_tenant`) in one script run; per layer, the
        state it had (`CLOSED`: it was left as it was)."""
        if not layers:
            return []
        layer_keys: list[str] = []
        for _, prefix in layers:
            layer_keys += [keys.breaker_state(prefix), keys.breaker_probes(prefix)]
        args: list[Arg] = [int(ttl_s * 1000), *(name for name, _ in layers)]
        was = await self._scripts["reset"](keys=layer_keys, args=args)
        return [BreakerState(_text(state)) for state in was]

    async def read_destination(self, destination: str, now: float) -> DestinationRecord:
        """A consistent-enough read of one destination's state (two pipelined round trips)."""
        live = f"({now!r}"
        glob = keys.breaker_global(destination)
        fields = ["state", "failures", "opened_at", "successes", "cause"]
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.aimd(destination), ["limit", "epoch", "hold_until"])
            pipe.zcount(keys.slots(destination), live, "+inf")
            pipe.hmget(keys.destination_caps(destination), ["max_concurrency", "rate_per_second"])
            pipe.hmget(keys.retry_budget(destination), ["tokens", "at"])
            pipe.hmget(keys.breaker_state(glob), fields)
            pipe.zcount(keys.breaker_probes(glob), live, "+inf")
            _earliest_hung(pipe, keys.breaker_probes(glob), now)
            pipe.smembers(keys.breaker_tenants(destination))
            replies = await pipe.execute()
        aimd, in_flight, caps, tokens, g_fields, g_probes, g_hung, tenant_ids = replies
        tenants = sorted(_text(t) for t in tenant_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for tenant_id in tenants:
                prefix = keys.breaker_tenant(destination, tenant_id)
                pipe.hmget(keys.breaker_state(prefix), fields)
                pipe.zcount(keys.breaker_probes(prefix), live, "+inf")
                _earliest_hung(pipe, keys.breaker_probes(prefix), now)
            tenant_rows = await pipe.execute() if tenants else []
        return DestinationRecord(
            limit=_opt_float(aimd[0]),
            epoch=int(_text(aimd[1] or 0)),
            hold_until=_opt_float(aimd[2]) or 0.0,
            in_flight=int(in_flight),
            max_concurrency=None if caps[0] is None else int(_text(caps[0])),
            rate_per_second=_opt_float(caps[1]),
            budget_tokens=_opt_float(tokens[0]),
            budget_at=_opt_float(tokens[1]),
            global_layer=_layer_view(g_fields, int(g_probes), g_hung),
            tenant_layers={
                tenant_id: _layer_view(
                    tenant_rows[3 * i], int(tenant_rows[3 * i + 1]), tenant_rows[3 * i + 2]
                )
                for i, tenant_id in enumerate(tenants)
            },
        )
