"""Operator settings: destination caps, tenant rate limits and quotas, admission state.

Every command goes through the operations layer (`Operations(runtime).settings`). Exit codes:
0 done, 1 refused for another reason (Redis unreachable, ...), 2 usage error or a value the
operation refuses (a destination key no call can have, a rate below 1)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from api.cli.direct import with_operations
from engine.settings import Settings

if TYPE_CHECKING:
    from engine.operations import SettingsOperations
    from engine.operations.settings_views import DestinationView, TenantView
    from engine.operations.views import View

console = Console()
destinations_app = typer.Typer(help="Destination caps and admission state.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenant rate limits and run quotas.", no_args_is_help=True)

T = TypeVar("T")


def _with_settings(action: Callable[[SettingsOperations], Awaitable[T]]) -> T:
    """Run `action` on a runtime of this process's settings; a refusal is printed to stderr
    and ends the command (exit 2 for an invalid value, else 1)."""
    return with_operations(lambda ops: action(ops.settings))


def _print_views(views: Sequence[View] | View) -> None:
    data: Any = (
        [v.model_dump(mode="json", by_alias=True) for v in views]
        if isinstance(views, Sequence)
        else views.model_dump(mode="json", by_alias=True)
    )
    console.print_json(json.dumps(data))


# ── destinations ─────────────────────────────────────────────────────────────────────────────


@destinations_app.command("set-cap")
def set_cap(
    destination: Annotated[str, typer.Argument(help="Destination key (e.g. http://host:port).")],
    max_concurrency: Annotated[int, typer.Option(min=1, help="Concurrent calls at most.")],
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="Calls per second at most (optional).")
    ] = None,
) -> None:
    """Cap a destination for every worker: stored in the database, applied at once.

    The key is a GATEWAY url's scheme://host:port (lower-case, with its port) or a vertex's
    explicit destination name; any other key is refused."""

    async def action(settings: SettingsOperations) -> None:
        await settings.set_caps(destination, max_concurrency, rate)

    _with_settings(action)
    console.print(f"{destination}: maxConcurrency {max_concurrency}, ratePerSecond {rate}")


@destinations_app.command("remove-cap")
def remove_cap(
    destination: Annotated[str, typer.Argument(help="Destination key, as given to set-cap.")],
) -> None:
    """Remove a destination's cap for every worker: the default cap applies again."""

    async def action(settings: SettingsOperations) -> bool:
        return await settings.remove_caps(destination)

    removed = _with_settings(action)
    default = Settings().default_max_concurrency
    what = "cap removed" if removed else "had no cap"
    console.print(f"{destination}: {what}; the default cap ({default}) applies")


@destinations_app.command("show")
def show() -> None:
    """Print the admission state as JSON.

    Each destination's AIMD limit, in-flight calls, caps, breakers and retry budget, and each
    tenant's rate-window usage."""

    async def action(settings: SettingsOperations) -> dict[str, Any]:
        return await settings.admission_state()

    console.print_json(json.dumps(_with_settings(action), default=str))


@destinations_app.command("list")
def list_destinations() -> None:
    """Print every destination (seen by admission or capped) as JSON: cap, AIMD limit, calls
    in flight, breakers per layer, retry budget."""

    async def action(settings: SettingsOperations) -> list[DestinationView]:
        return await settings.destinations()

    _print_views(_with_settings(action))


# ── tenants ──────────────────────────────────────────────────────────────────────────────────


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

    async def action(settings: SettingsOperations) -> None:
        if per_minute is None:
            await settings.reset_tenant_rate(tenant)
        else:
            await settings.set_tenant_rate(tenant, per_minute)

    _with_settings(action)
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

    async def action(settings: SettingsOperations) -> None:
        await settings.set_quota(tenant, max_runs)

    _with_settings(action)
    console.print(f"tenant {tenant}: quota {max_runs} runs")


@tenants_app.command("reset-quota")
def reset_quota(tenant: Annotated[str, typer.Argument(help="Tenant id.")]) -> None:
    """Remove a tenant's run quota: it may create runs without limit again."""

    async def action(settings: SettingsOperations) -> bool:
        return await settings.reset_quota(tenant)

    removed = _with_settings(action)
    what = "quota removed" if removed else "had no quota"
    console.print(f"tenant {tenant}: {what}; runs are unlimited")


@tenants_app.command("list")
def list_tenants() -> None:
    """Print every tenant (seen by the rate limiter, or with a rate limit or quota) as JSON."""

    async def action(settings: SettingsOperations) -> list[TenantView]:
        return await settings.tenants()

    _print_views(_with_settings(action))


@tenants_app.command("show")
def show_tenant(tenant: Annotated[str, typer.Argument(help="Tenant id.")]) -> None:
    """Print one tenant's rate limit, its use in the current window, and its quota (JSON)."""

    async def action(settings: SettingsOperations) -> TenantView:
        return await settings.tenant(tenant)

    _print_views(_with_settings(action))
