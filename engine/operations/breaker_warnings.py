"""Warnings for a retry or a reprocess whose steps call a destination with an open breaker.

An open breaker refuses every call to its destination until it half-opens: steps run again
while it is open fail again at once (`external_overload`, no request sent), and an operator
who just fixed the destination would see the whole retry wasted. So `runs retry` and `runs
reprocess` say so, naming when the breaker half-opens and the command that closes it now
(`schemabridge destinations reset-breaker`), and give the layer as data (`breakers`: the
destination and the tenant) for front doors that offer their own way to reset it (the web
monitor's link to the destination's Reset).

The destinations are those of the GATEWAY vertices of the workflows the retried steps belong
to: a vertex's `destination`, else its url's `scheme://host:port` when that part holds no
template (`schemas.url_template`; a templated host is not known before the call, and is left
out). A warning is
advice: when Redis cannot be read, there is none, and the action stands.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from admission import BreakerConfig, BreakerState, LayerView
from admission.breaker import cause_words
from engine.coordination.redis_client import COORDINATION_ERRORS
from engine.operations.action_views import BreakerWarning
from schemas.definitions import GatewayConfig, GatewayVertex, Workflow
from schemas.errors import StepFailure
from schemas.url_template import url_layout
from vertices.gateway import destination_key

if TYPE_CHECKING:
    from engine.runtime import Runtime

logger = logging.getLogger(__name__)


def destinations_of(workflow: Workflow, vertex_ids: Iterable[str] | None = None) -> set[str]:
    """The destination keys the GATEWAY vertices of `workflow` (only `vertex_ids`, if given)
    call, as far as they are known before the call."""
    wanted = None if vertex_ids is None else set(vertex_ids)
    found: set[str] = set()
    for vertex_id, vertex in workflow.vertices.items():
        if isinstance(vertex, GatewayVertex) and (wanted is None or vertex_id in wanted):
            key = _known_key(vertex.config)
            if key is not None:
                found.add(key)
    return found


def _known_key(config: GatewayConfig) -> str | None:
    if config.destination is not None and "{{" in config.destination:
        return None
    url = config.url
    if config.destination is None and "{{" in url:
        # Only the scheme, host and port make the key: read them as the gateway does.
        origin = url_layout(url).literal_origin
        if origin is None:  # a templated scheme, host or port: known only at the call
            return None
        url = origin
    try:
        return destination_key(url, config.destination)
    except (StepFailure, ValueError):  # a literal url that is no URL
        return None


async def open_breaker_warnings(
    runtime: Runtime, destinations: Iterable[str], tenant_id: str
) -> list[BreakerWarning]:
    """One warning per open breaker layer (the global one, or `tenant_id`'s) of
    `destinations`."""
    return await breakers_called(
        runtime, {destination: {tenant_id} for destination in destinations}
    )


async def breakers_called(
    runtime: Runtime, called: Mapping[str, Collection[str]]
) -> list[BreakerWarning]:
    """One warning per open breaker layer of each destination of `called` (destination → the
    tenants whose steps call it): its global layer once, then each tenant's. A batch retrying
    500 runs into one destination reads it once and warns once, not once per run."""
    config = runtime.admission.config
    now = runtime.clock.now()
    lines: list[BreakerWarning] = []
    try:
        for destination in sorted(called):
            record = await runtime.admission.backend.read_destination(destination, now)
            layers: list[tuple[str | None, LayerView, BreakerConfig]] = [
                (None, record.global_layer, config.global_breaker)
            ]
            for tenant_id in sorted(called[destination]):
                if tenant_id in record.tenant_layers:
                    view = record.tenant_layers[tenant_id]
                    layers.append((tenant_id, view, config.tenant_breaker))
            for tenant, view, breaker in layers:
                line = _warning(destination, tenant, view, now, breaker)
                if line is not None:
                    lines.append(line)
    except COORDINATION_ERRORS:
        logger.warning("could not read the breakers of the retried steps' destinations")
        return []
    return lines


def _warning(
    destination: str, tenant: str | None, view: LayerView, now: float, breaker: BreakerConfig
) -> BreakerWarning | None:
    """The warning for one layer, if it is open (half-open lets probes through already): its
    sentence, which names the CLI command (what the CLI prints), and the layer as data, which
    the web monitor links to the destination's Reset with."""
    if view.effective(now, breaker) is not BreakerState.OPEN:
        return None
    wait_s = view.seconds_until_half_open(now, breaker)
    which = (
        f"tenant breaker of {destination!r} (tenant {tenant!r})"
        if tenant
        else (f"global breaker of {destination!r}")
    )
    option = f" --tenant {tenant}" if tenant else ""
    # What opened it, when the layer kept it: what the destination had been answering.
    cause = f" (opened by {cause_words(view.cause)})" if view.cause else ""
    message = (
        f"the {which} is open{cause}: steps that call it fail again at once, sending nothing, "
        f"until it half-opens in {wait_s:.0f} s; once it is fixed, close it now with "
        f"`schemabridge destinations reset-breaker {destination}{option}`"
    )
    return BreakerWarning(
        destination=destination, tenant_id=tenant, half_open_in_s=wait_s, message=message
    )
