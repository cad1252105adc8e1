"""Operator settings: destination caps, tenant rate limits and quotas, admission state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from engine.settings import Settings

if TYPE_CHECKING:
    from engine.runtime import Runtime

console = Console()
destinations_app = typer.Typer(help="Destination caps and admission state.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenant rate limits and run quotas.", no_args_is_help=True)

T = TypeVar("T")


def _with_runtime(action: Callable[[Runtime], Awaitable[T]]) -> T:
    from engine.runtime import Runtime

    async def run() -> T:
        runtime = await Runtime.open(Settings())
        try:
            return await action(runtime)
        finally:
            await runtime.close()

    return asyncio.run(run())


@destinations_app.command("set-cap")
def set_cap(
    destination: Annotated[str, typer.Argument(help="Destination key (e.g. http://host:port).")],
    max_concurrency: Annotated[int, typer.Option(min=1, help="Concurrent calls at most.")],
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="Calls per second at most (optional).")
    ] = None,
) -> None:
    """Cap a destination for every worker: stored in the database, applied at once."""

    async def action(runtime: Runtime) -> None:
        await runtime.set_destination_caps(destination, max_concurrency, rate)

    _with_runtime(action)
    console.print(f"{destination}: maxConcurrency {max_concurrency}, ratePerSecond {rate}")


@destinations_app.command("show")
def show() -> None:
    """Print the admission state as JSON.

    Each destination's AIMD limit, in-flight calls, caps, breakers and retry budget, and each
    tenant's rate-window usage."""

    async def action(runtime: Runtime) -> dict[str, Any]:
        snapshot = await runtime.admission.snapshot()
        data = snapshot.as_dict()
        data["configuredCaps"] = [
            {"destination": d, "maxConcurrency": c, "ratePerSecond": r}
            for d, c, r in await runtime.store.list_destination_caps()
        ]
        data["configuredTenantRates"] = [
            {"tenantId": t, "perMinute": n} for t, n in await runtime.store.list_tenant_rates()
        ]
        return data

    console.print_json(json.dumps(_with_runtime(action), default=str))


@tenants_app.command("set-rate")
def set_rate(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    per_minute: Annotated[
        int | None, typer.Argument(min=1, help="GATEWAY calls per minute (omit with --reset).")
    ] = None,
    reset: Annotated[bool, typer.Option(help="Remove the override: the default applies.")] = False,
) -> None:
    """Override one tenant's rate limit (items per minute).

    The default is TENANT_RATE_PER_MINUTE (1,000). Stored in the database, applied to every
    worker at once."""
    if (per_minute is None) == (not reset):
        raise typer.BadParameter("give a rate per minute, or --reset (not both)")

    async def action(runtime: Runtime) -> None:
        await runtime.set_tenant_rate(tenant, None if reset else per_minute)

    _with_runtime(action)
    if reset:
        console.print(f"tenant {tenant}: default rate limit")
    else:
        console.print(f"tenant {tenant}: {per_minute} calls per minute")


@tenants_app.command("set-quota")
def set_quota(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    max_runs: Annotated[int, typer.Argument(min=0, help="Runs the tenant may create.")],
) -> None:
    """Set a tenant's run quota (checked by spawners before a fan-out)."""

    async def action(runtime: Runtime) -> None:
        await runtime.store.set_quota(tenant, max_runs)

    _with_runtime(action)
    console.print(f"tenant {tenant}: quota {max_runs} runs")
