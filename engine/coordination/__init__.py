"""Coordination through Redis: the client factory, its keys, wake-ups and service heartbeats."""

from engine.coordination.redis_client import (
    COORDINATION_ERRORS,
    close_redis,
    embedded_server,
    open_redis,
    redis_ok,
)

__all__ = [
    "COORDINATION_ERRORS",
    "close_redis",
    "embedded_server",
    "open_redis",
    "redis_ok",
]
