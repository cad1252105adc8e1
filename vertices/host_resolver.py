"""`HostResolver`: the one place name resolution can be replaced, used by the HTTP client
(`vertices.http_client`) and the resolver it gives aiohttp (`vertices.policy_resolver`).
"""

from __future__ import annotations

from typing import Protocol


class HostResolver(Protocol):
    """Turns a host name into addresses: the one place name resolution can be replaced (a
    test's resolver, for DNS rebinding)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses (IPv4 or IPv6 text) `host` resolves to; OSError when it does not."""
        ...
