"""Operator settings on the REST API: destination caps and admission state, tenant rate limits
and run quotas (admin key).

`destinations list` and `tenants list` are tables (`--output json`: the API's answer);
`show` gives one destination or tenant in full. Changes apply to every worker at once.
Exit codes as every API command: 0 done, 1 refused (Redis or the database unreachable behind
the API), 2 usage error or a value the API refuses (a destination key no call can have, a
rate below 1), 4 the API unreachable or the key refused.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from api.cli.client_errors import ApiFailure
from api.cli.exit_codes import ExitCode
from api.cli.remote import (
    EXIT_CODES_HELP,
    ApiKeyOption,
    ApiUrlOption,
    DebugOption,
    OutputFormat,
    OutputOption,
    Remote,
    call,
    dump,
    fail,
    print_json,
    print_page,
    render,
    say,
    stdout,
    table,
)
from api.cli.target import DEFAULT_API_URL
from api.cli.text import MISSING, exact, relative
from schemas.close_names import close_names, did_you_mean
from schemas.counts import plural
from schemas.durations import duration

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.wire import (
        BreakersReset,
        BreakerView,
        CapsView,
        DestinationView,
        ServiceView,
        TenantView,
    )

destinations_app = typer.Typer(
    help="Destination caps and admission state (AIMD limit, in flight, breakers).",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
)
tenants_app = typer.Typer(
    help="Tenant rate limits and run quotas.", no_args_is_help=True, epilog=EXIT_CODES_HELP
)

DestinationArgument = Annotated[
    str,
    typer.Argument(
        help="Destination key: a GATEWAY URL's scheme://host:port, or a vertex's destination.",
        metavar="DESTINATION",
    ),
]
TenantArgument = Annotated[str, typer.Argument(help="Tenant id.", metavar="TENANT")]


# ── destinations ─────────────────────────────────────────────────────────────────────────────


def _cap(view: DestinationView) -> str:
    return f"{view.cap:,} ({'set' if view.cap_configured else 'default'})"


def _rate(view: DestinationView) -> str:
    return MISSING if view.rate_per_second is None else f"{view.rate_per_second:g}/s"


def _breaker(breaker: BreakerView) -> str:
    """A breaker layer in a few words: closed, closed (2 failures), open (half-open in 12 s),
    and what opened it and when, as the API says (open after an HTTP 500 at 21:54:20 UTC,
    half-open in 12 s): the words of a step's refusal (`runs show`), so an operator matches
    the two, and can tell since when a destination fails."""
    # The time of day with its zone, as `runs show` gives its times ("21:54:20 UTC").
    at = exact(breaker.opened_at)[11:] if breaker.opened_at else None
    if breaker.opened_by:
        after = f" after {breaker.opened_by}" + (f" at {at}" if at else "")
    else:
        after = f" since {at}" if at else ""
    if breaker.state == "open":
        return f"open{after} (half-open in {duration(breaker.seconds_until_half_open)})"
    if breaker.state == "half_open":
        return f"half-open{after} ({plural(breaker.probes, 'probe')} out)"
    return f"closed ({plural(breaker.failures, 'failure')})" if breaker.failures else "closed"


def _breakers(view: DestinationView) -> str:
    parts = [f"global {_breaker(view.global_breaker)}"]
    parts += [f"{tenant} {_breaker(b)}" for tenant, b in sorted(view.tenant_breakers.items())]
    return "; ".join(parts)


def _budget(view: DestinationView) -> str:
    tokens = plural(round(view.retry_tokens), "token")
    return tokens if view.retry_allowed else f"{tokens}, retries held"


def _limit(view: DestinationView) -> str:
    return f"{view.limit:.1f} ({plural(view.slots, 'slot')})"


def destinations_table(views: list[DestinationView]) -> Table:
    rows = [
        [
            view.destination,
            _cap(view),
            _rate(view),
            _limit(view),
            f"{view.in_flight:,}",
            _breakers(view),
            _budget(view),
        ]
        for view in views
    ]
    headers = ["DESTINATION", "CAP", "RATE", "AIMD LIMIT", "IN FLIGHT", "BREAKERS", "RETRY BUDGET"]
    return table(headers, rows)


def destination_detail(view: DestinationView) -> Group:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows = [
        ("cap", f"{_cap(view)}: at most {plural(view.cap, 'call')} in flight on all workers"),
        ("rate", "unlimited" if view.rate_per_second is None else f"{_rate(view)} at most"),
        ("AIMD limit", f"{_limit(view)}, cut {plural(view.cuts, 'time')} so far"),
        ("in flight", f"{view.in_flight:,}"),
        ("growth held", duration(view.growth_held_s) if view.growth_held_s else "no"),
        ("global breaker", _breaker(view.global_breaker)),
    ]
    rows += [(f"breaker {t}", _breaker(b)) for t, b in sorted(view.tenant_breakers.items())]
    rows.append(("retry budget", _budget(view)))
    for name, value in rows:
        grid.add_row(name, value)
    return Group(Text(view.destination, style="bold"), grid)


@destinations_app.command("list", epilog=EXIT_CODES_HELP)
def list_destinations(
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Every destination admission has seen or that has a cap: cap, rate, AIMD limit, calls
    in flight, breakers per layer, retry budget."""
    remote = Remote(api_url, api_key, output, debug)
    views = call(remote, lambda api: api.settings.destinations())
    empty = "no destinations yet: admission lists one once a GATEWAY calls it or it has a cap"
    print_page(remote, views, destinations_table, empty)


@destinations_app.command("show", epilog=EXIT_CODES_HELP)
def show_destination(
    destination: Annotated[
        str | None,
        typer.Argument(
            help="One destination key (default: every destination).", metavar="DESTINATION"
        ),
    ] = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """A destination's admission state in full (every one without DESTINATION)."""
    remote = Remote(api_url, api_key, output, debug)
    views = call(remote, lambda api: api.settings.destinations()).items
    if destination is not None:
        known = [view.destination for view in views]
        views = [view for view in views if view.destination == destination]
        if not views:
            meant = did_you_mean(close_names(destination, known))
            fail(
                f"no destination {destination!r}: admission has not seen it and it has no cap"
                f"{f'; {meant}' if meant else ''} (`schemabridge destinations list` names the "
                "known ones)",
                ExitCode.FAILED,
            )
    if remote.json:
        print_json(dump(views[0]) if destination is not None else {"items": dump(views)})
        return
    console = stdout()
    for view in views:
        render(console, destination_detail(view))


def _caps_line(caps: CapsView) -> str:
    per_second = "unlimited" if caps.rate_per_second is None else f"{caps.rate_per_second:g}"
    return f"{caps.destination}: maxConcurrency {caps.max_concurrency}, ratePerSecond {per_second}"


async def _changed_caps(
    api: ApiClient,
    destination: str,
    max_concurrency: int | None,
    rate: float | None,
    no_rate: bool,
) -> CapsView:
    """The caps with what was given changed and the rest as the destination has them: the
    API's PATCH merges the change into the stored caps in one step, so a change made at the
    same time by someone else is kept."""
    changes: dict[str, Any] = {}
    if max_concurrency is not None:
        changes["max_concurrency"] = max_concurrency
    if rate is not None or no_rate:
        changes["rate_per_second"] = rate
    try:
        return await api.settings.change_caps(destination, **changes)
    except ApiFailure as failure:
        if failure.code != "caps_not_set":
            raise
        views = (await api.settings.destinations()).items
        current = next((v for v in views if v.destination == destination), None)
        default = "" if current is None else f" (the default cap, {current.cap:,}, applies)"
        raise ApiFailure(
            f"{destination} has no caps of its own yet{default}: give --max-concurrency N "
            "with --rate",
            ExitCode.USAGE,
            status=failure.status,
            code=failure.code,
        ) from None


@destinations_app.command("set-cap", epilog=EXIT_CODES_HELP)
def set_cap(
    destination: DestinationArgument,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Calls in flight at most, on all workers (left out: the current cap stays).",
            metavar="N",
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            # The API's name for it (ratePerSecond), which a user reading GET /destinations
            # types (a new user's tour; click's typo guess does not reach it).
            "--rate-per-second",
            min=0.001,
            help="Calls started per second at most (left out: the current rate stays).",
            metavar="PER_SECOND",
        ),
    ] = None,
    no_rate: Annotated[
        bool, typer.Option("--no-rate", help="Remove the rate: calls start as the cap allows.")
    ] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Change a destination's caps for every worker: stored in the database, applied at once.

    Only what is given changes (--max-concurrency, --rate or --no-rate; at least one): the
    other cap is kept, even when someone changes it at the same time (PATCH
    /destinations/{key}/caps). Prints the caps that result. The key is a GATEWAY url's
    scheme://host:port (lower-case, with its port) or a vertex's explicit destination name;
    any other key is refused (exit 2)."""
    if rate is not None and no_rate:
        fail("give --rate PER_SECOND or --no-rate, not both", ExitCode.USAGE)
    if max_concurrency is None and rate is None and not no_rate:
        fail(
            "give what to change: --max-concurrency N, --rate PER_SECOND or --no-rate "
            "(the caps now: `schemabridge destinations show DESTINATION`)",
            ExitCode.USAGE,
        )
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> tuple[CapsView, list[str]]:
        known = [view.destination for view in (await api.settings.destinations()).items]
        return await _changed_caps(api, destination, max_concurrency, rate, no_rate), known

    caps, known = call(remote, action)
    if destination not in known:  # a typo is stored too: say so while it can be undone
        say(_unseen_note(destination, known))
    if remote.json:
        print_json(dump(caps))
        return
    stdout().print(_caps_line(caps), markup=False)


def _unseen_note(destination: str, known: list[str]) -> str:
    close = close_names(destination, known)
    meant = f"; {did_you_mean(close)}" if close else ""
    return (
        f"note: no call has reached {destination} yet and it had no caps: they apply once a "
        f"GATEWAY call does{meant} (`schemabridge destinations list` shows the known ones)"
    )


@destinations_app.command("remove-cap", epilog=EXIT_CODES_HELP)
def remove_cap(
    destination: DestinationArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Remove a destination's cap for every worker: the default cap applies again."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> tuple[bool, int | None]:
        removed = (await api.settings.remove_caps(destination)).removed
        # The server's default cap, as admission now reports it (when it knows the key).
        views = (await api.settings.destinations()).items
        caps = [view.cap for view in views if view.destination == destination]
        return removed, caps[0] if caps else None

    removed, cap = call(remote, action)
    if remote.json:
        print_json({"destination": destination, "removed": removed})
        return
    what = "cap removed" if removed else "had no cap"
    default = "the default cap" + ("" if cap is None else f" ({cap:,})")
    stdout().print(f"{destination}: {what}; {default} applies", markup=False)


@destinations_app.command("reset-breaker", epilog=EXIT_CODES_HELP)
def reset_breaker(
    destination: DestinationArgument,
    tenant: Annotated[
        str | None,
        typer.Option(help="Close only this tenant's breaker (left out: every breaker of it)."),
    ] = None,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Close a destination's open breakers for every worker, once it is fixed: calls go at
    once instead of after the breaker's reset timeout (then `runs retry` / `runs reprocess`
    the steps it failed). Prints what was closed."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> BreakersReset:
        return await api.settings.reset_breakers(destination, tenant)

    reset = call(remote, action)
    if remote.json:
        print_json(dump(reset))
        return
    if not reset.closed:
        which = f"the tenant breaker of {tenant}" if tenant else "every breaker"
        stdout().print(f"{destination}: {which} was closed already", markup=False)
    for closed in reset.closed:
        layer = f"tenant breaker ({closed.tenant_id})" if closed.tenant_id else "global breaker"
        was = closed.was.replace("_", "-")
        stdout().print(f"{destination}: {layer} closed (was {was})", markup=False)
    if reset.steps_released:
        waiting = plural(reset.steps_released, "step")
        stdout().print(
            f"{destination}: {waiting} waiting behind its breakers released: they run now",
            markup=False,
        )


# ── tenants ──────────────────────────────────────────────────────────────────────────────────


RESERVED_WORDS = "none (the engine's own runs make no calls)"
"""What the reserved `system` tenant's rate limit and quota read: none acts on it."""


def _tenant_rate(view: TenantView) -> str:
    rate = view.rate
    if view.reserved:
        return RESERVED_WORDS
    return f"{rate.per_minute:,}/min ({'set' if rate.configured else 'default'})"


def _quota(view: TenantView) -> str:
    quota = view.quota
    if view.reserved:
        return "none"
    if quota is None:
        return "unlimited"
    return f"{plural(quota.max_runs, 'run')}, {quota.runs_left:,} left"


def tenants_table(views: list[TenantView]) -> Table:
    rows = [
        [
            view.tenant_id,
            _tenant_rate(view),
            f"{view.rate.used:,} in {duration(view.rate.window_s)}",
            _quota(view),
        ]
        for view in views
    ]
    return table(["TENANT", "RATE LIMIT", "USED", "RUN QUOTA"], rows)


@tenants_app.command("list", epilog=EXIT_CODES_HELP)
def list_tenants(
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Every tenant with runs, API keys, a rate limit or a quota, or seen by the rate limiter."""
    remote = Remote(api_url, api_key, output, debug)
    views = call(remote, lambda api: api.settings.tenants())
    empty = "no tenants yet: one is listed once it has runs, an API key or settings"
    print_page(remote, views, tenants_table, empty)


async def _tenant_and_note(api: ApiClient, tenant: str) -> tuple[TenantView, str | None]:
    """The tenant's settings, and when it has none of its own, a line saying the defaults
    shown apply (the API answers any id with the defaults, so a typo would look like a
    tenant; its runs tell a tenant that exists from one that does not)."""
    from api.cli.wire import RunQuery

    view = await api.settings.tenant(tenant)
    if view.rate.configured or view.quota is not None or view.reserved:
        return view, None
    runs = await api.runs.list(RunQuery(tenant=tenant), limit=1)
    if runs.items:
        return view, f"tenant {tenant} has no settings of its own: the defaults shown apply"
    try:  # a typo's tenant is named, as `tenants set-rate`'s note names it (admin keys)
        known = [seen.tenant_id for seen in (await api.settings.tenants()).items]
    except ApiFailure:
        known = []
    meant = did_you_mean(close_names(tenant, [t for t in known if t != tenant]))
    return view, (
        f"tenant {tenant} has no runs and no settings yet: the defaults shown apply"
        f"{f'; {meant}' if meant else ''} (`schemabridge tenants list` names the tenants seen)"
    )


@tenants_app.command("show", epilog=EXIT_CODES_HELP)
def show_tenant(
    tenant: TenantArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """One tenant's rate limit, its use in the current window, and its run quota."""
    remote = Remote(api_url, api_key, output, debug)
    if remote.json:
        print_json(dump(call(remote, lambda api: api.settings.tenant(tenant))))
        return
    view, note = call(remote, lambda api: _tenant_and_note(api, tenant))
    if note is not None:
        say(note)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if view.reserved:
        grid.add_row("rate limit", RESERVED_WORDS)
    else:
        grid.add_row("rate limit", f"{_tenant_rate(view)}: {RATE_UNIT}")
        grid.add_row("this window", f"{view.rate.used:,} used of {view.rate.per_minute:,}")
    grid.add_row("run quota", _quota(view))
    if view.quota is not None:
        # The quota counts from `set-quota` on: runs from before it are not in the count.
        grid.add_row("runs used", f"{view.quota.used_runs:,} since the quota was set")
    render(stdout(), Group(Text(f"tenant {view.tenant_id}", style="bold"), grid))


NUMBERS = {"ignore_unknown_options": True}
"""Context settings of a command whose argument is a number: "-5" reaches the command as the
value it is (to be refused with what the value must be), not as an option click lacks."""


def refuse_options(command: str, options: Sequence[str], *values: str | None) -> None:
    """An argument of a `NUMBERS` command that is a misspelt option (`--rest` for `--reset`)
    is refused as click refuses one elsewhere, with the `options` of the command meant: it
    would otherwise be taken as the tenant (a rate set for a tenant named "--rest") or as
    the number. A negative number ("-5") is left to the check that says what it must be."""
    for value in values:
        if value is None or not value.startswith("-") or _NUMBER.fullmatch(value):
            continue
        meant = did_you_mean(close_names(value, [*options, *_CLIENT_OPTIONS]))
        fail(
            f"No such option: {value}{f'. {meant[:1].upper()}{meant[1:]}' if meant else ''} "
            f"(see `schemabridge tenants {command} --help`)",
            ExitCode.USAGE,
        )


_CLIENT_OPTIONS = ("--api-url", "--api-key", "--output", "--debug", "--help")


_NUMBER = re.compile(r"-?\d+(\.\d*)?")


def whole_number(value: str, least: int, what: str) -> int:
    """`value` as a whole number of at least `least`, else a usage error saying `what` it is."""
    text = value.strip().replace(",", "")  # "1,000", as the commands print it
    number = int(text) if re.fullmatch(r"[+-]?\d+", text) else None
    if number is None or number < least:
        fail(f"{what}; got {value!r}", ExitCode.USAGE)
    return number


RATE_UNIT = "GATEWAY steps a minute"
"""A tenant's rate, in the README's words: each GATEWAY step is counted once, however many
attempts and redispatches it takes."""
RATE_RULE = f"a rate is a positive whole number of {RATE_UNIT}, such as 600"
QUOTA_RULE = "a quota is a whole number of runs, 0 or more, such as 500"


@tenants_app.command("set-rate", epilog=EXIT_CODES_HELP, context_settings=NUMBERS)
def set_rate(
    tenant: TenantArgument,
    per_minute: Annotated[
        str | None,
        typer.Argument(
            help="GATEWAY steps a minute, a positive whole number (omit with --reset).",
            metavar="PER_MINUTE",
            show_default=False,
        ),
    ] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Back to the default rate.")] = False,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Override one tenant's rate limit (GATEWAY steps a minute), for every worker at once.

    The default is TENANT_RATE_PER_MINUTE (1,000)."""
    refuse_options("set-rate", ["--reset"], tenant, per_minute)
    if per_minute is not None and reset:
        raise typer.BadParameter(f"give a rate ({RATE_UNIT}), or --reset, not both")
    if per_minute is None and not reset:
        raise typer.BadParameter(
            f"give the rate: {RATE_UNIT} (e.g. 600), or --reset for the default"
        )
    rate = None if per_minute is None else whole_number(per_minute, 1, RATE_RULE)
    remote = Remote(api_url, api_key, output, debug)
    # A reset sets nothing there is to undo.
    undo = None if reset else f"schemabridge tenants set-rate {shlex.quote(tenant)} --reset"
    view = call(remote, lambda api: _set_limits(api, tenant, undo, rate_per_minute=rate))
    if remote.json:
        print_json(dump(view))
    elif reset:
        stdout().print(
            f"tenant {tenant}: default rate limit ({view.rate.per_minute:,} {RATE_UNIT})",
            markup=False,
        )
    else:
        stdout().print(f"tenant {tenant}: {view.rate.per_minute:,} {RATE_UNIT}", markup=False)


async def _set_limits(
    api: ApiClient, tenant: str, undo: str | None, **limits: int | None
) -> TenantView:
    """`PUT /tenants/{id}/limits`, with a note on stderr when `tenant` was not known before
    (no runs, API keys or settings, not seen by the rate limiter: what `tenants list`
    lists): a typo would otherwise make a tenant silently. Not refused: a limit may well be
    set before a tenant's first run. `undo` is the command that removes the limit set."""
    known = [view.tenant_id for view in (await api.settings.tenants()).items]
    view = await api.settings.set_limits(tenant, **limits)
    if tenant not in known:
        say(new_tenant_note(tenant, known, undo))
    return view


def new_tenant_note(tenant: str, known: list[str], undo: str | None) -> str:
    """The line saying `tenant` is new, with the known tenants it may have been meant to be
    and the command that undoes the change (the limit is applied all the same)."""
    close = close_names(tenant, known)
    meant = f"; {did_you_mean(close)}" if close else ""
    then = f"; the limit is set: `{undo}` undoes it" if undo else ""
    return (
        f"note: {tenant} is a new tenant: it had no runs, API keys or settings before this"
        f"{meant} (`schemabridge tenants list` shows the known ones){then}"
    )


@tenants_app.command("set-quota", epilog=EXIT_CODES_HELP, context_settings=NUMBERS)
def set_quota(
    tenant: TenantArgument,
    max_runs: Annotated[
        str,
        typer.Argument(
            help="Runs the tenant may create, 0 or more (a count, not a rate).",
            metavar="MAX_RUNS",
            show_default=False,
        ),
    ],
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Set a tenant's run quota (checked at submission and by spawners before a fan-out)."""
    refuse_options("set-quota", [], tenant, max_runs)
    quota = whole_number(max_runs, 0, QUOTA_RULE)
    remote = Remote(api_url, api_key, output, debug)
    undo = f"schemabridge tenants reset-quota {shlex.quote(tenant)}"
    view = call(remote, lambda api: _set_limits(api, tenant, undo, max_runs=quota))
    if remote.json:
        print_json(dump(view))
    else:
        stdout().print(f"tenant {tenant}: quota {plural(quota, 'run')}", markup=False)


@tenants_app.command("reset-quota", epilog=EXIT_CODES_HELP)
def reset_quota(
    tenant: TenantArgument,
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Remove a tenant's run quota: it may create runs without limit again."""
    remote = Remote(api_url, api_key, output, debug)

    async def action(api: ApiClient) -> tuple[bool, TenantView]:
        had = (await api.settings.tenant(tenant)).quota is not None
        return had, await api.settings.set_limits(tenant, max_runs=None)

    had_quota, view = call(remote, action)
    if remote.json:
        print_json(dump(view))
        return
    what = "quota removed" if had_quota else "had no quota"
    stdout().print(f"tenant {tenant}: {what}; runs are unlimited", markup=False)


# ── services ───────────────────────────────────────────────────────────────────────────────


UNKNOWN_ROLE = "unknown"
"""The role of a service whose heartbeat does not say it (written before beats did)."""


def services_table(views: list[ServiceView], now: float) -> Table:
    rows: list[list[str | Text]] = [
        [
            view.name,
            Text("up", style="green") if view.up else Text("down", style="red"),
            view.role or UNKNOWN_ROLE,
            MISSING if view.host is None else view.host,
            MISSING if view.pid is None else str(view.pid),
            MISSING if view.uptime_s is None else duration(view.uptime_s),
            MISSING if view.last_seen is None else relative(view.last_seen, now),
        ]
        for view in views
    ]
    return table(["SERVICE", "STATE", "ROLE", "HOST", "PID", "UPTIME", "LAST HEARTBEAT"], rows)


def services(
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """Every service (api, worker, serve) that sent a heartbeat: up while its heartbeat is
    fresh, its role (the kind of process), its host and process id (a service down: those it
    last beat from), uptime and when it was last heard from."""
    remote = Remote(api_url, api_key, output, debug)
    views = call(remote, lambda api: api.settings.services())
    empty = "no services yet: each `serve`, `api` and `worker` process sends a heartbeat"
    print_page(remote, views, lambda items: services_table(items, time.time()), empty)


# ── whoami ──────────────────────────────────────────────────────────────────────────────────


def whoami(
    api_url: ApiUrlOption = DEFAULT_API_URL,
    api_key: ApiKeyOption = None,
    output: OutputOption = OutputFormat.TEXT,
    debug: DebugOption = False,
) -> None:
    """The API key this command sends (--api-key, SCHEMABRIDGE_API_KEY) as the API knows it:
    its id and name, and whether it is an admin key or acts for one tenant."""
    remote = Remote(api_url, api_key, output, debug)
    key = call(remote, lambda api: api.settings.current_key())
    if remote.json:
        print_json(dump(key))
        return
    named = f" ({key.name})" if key.name else ""
    if not key.authentication:
        line = f"authentication is off at {remote.url}: every request acts as the admin demo"
        if remote.key:
            line += " (the key given is not checked)"
    elif key.opens_admin_routes:
        line = f"admin key {key.id}{named} at {remote.url}: every tenant, and the admin commands"
    else:
        line = (
            f"key {key.id}{named} for tenant {key.tenant_id} at {remote.url}: that tenant's "
            "runs only (destinations, services and deployments need an admin key)"
        )
    stdout().print(line, highlight=False, soft_wrap=True)
