"""The Redis keys of service coordination: heartbeats, wake-ups, run events and
cancellations.

Admission keeps its own keys in `admission.keys`. `heartbeat:<service>` keeps the exact name
the design gives it; everything else is prefixed `sb:`. Functions,
not string concatenation at call sites, so a key's shape is defined once.
"""

from __future__ import annotations

from typing import Any


def heartbeat(service: str) -> str:
    """`heartbeat:<service>`: `{pid, uptime, timestamp, started, host, instance, lease}` JSON,
    refreshed every 10 s, TTL 30 s."""
    return f"heartbeat:{service}"


def last_beat(service: str) -> str:
    """`sb:last-beat:<service>`: the same JSON as the latest `heartbeat:<service>`, written by
    the same beat but kept as long as `sb:services` remembers the service (7 days), so a
    service that went down still shows the pid and host it beat from."""
    return f"sb:last-beat:{service}"


SERVICES_SET = "sb:services"
"""Sorted set of every service that has ever sent a heartbeat (member = service name, score =
epoch seconds of its latest beat), so a service whose `heartbeat:<service>` key expired or was
deleted is still listed, as down, with when it was last seen."""

WAKEUP_CHANNEL = "sb:wakeup"
"""Pub/sub channel: a message means "ready steps may exist; claim now"."""

RUN_EVENTS_CHANNEL = "sb:run-events"
"""Pub/sub channel: a message names runs whose status or progress changed ("*": any run)."""

CANCELLATIONS_CHANNEL = "sb:cancellations"
"""Pub/sub channel: a message names cancelled runs whose steps must send nothing more."""


def database_channel(channel: str, client: Any) -> str:
    """`channel` in the Redis database `client` uses, `sb:wakeup:db3`: Redis's pub/sub is one
    namespace for the whole server, not one per database, so two deployments on one server (a
    database each, as `engine.coordination.store_binding` requires) heard each other's hints —
    a `*` run event of one woke every watch of the other, and its wake-ups the other's
    workers: reads for nothing."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    database = kwargs.get("db", 0) if isinstance(kwargs, dict) else 0
    return f"{channel}:db{database or 0}"


ROWS_EPOCH_PREFIX = "sb:rows-epoch:"
"""`sb:rows-epoch:<topic>`: a random token replaced on every committed change of the rows of
`topic` ("api-keys", "serving") that processes keep copies of (see
`engine.coordination.invalidations`)."""

STORE_ID = "sb:store-id"
"""The id of the database whose processes coordinate through this Redis (`store_identity`),
written by the first process to start: a process of another database is refused (see
`engine.coordination.store_binding`)."""
