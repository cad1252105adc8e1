"""The resolver `vertices.http_client.HttpClient` gives aiohttp: every DNS answer goes through
the egress policy before aiohttp connects (see that module's docstring). Apart from it because
it subclasses aiohttp's resolver, and the client imports aiohttp only when it opens a session.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from aiohttp.abc import AbstractResolver, ResolveResult

if TYPE_CHECKING:
    from vertices.egress import EgressPolicy
    from vertices.host_resolver import HostResolver


class PolicyResolver(AbstractResolver):
    """aiohttp's resolver seam: resolves with `HostResolver`, keeps only what the policy
    allows (raising `EgressDenied` when nothing is left), and remembers the addresses a host
    pattern admitted so the socket factory's backstop lets them through."""

    def __init__(self, resolver: HostResolver, policy: EgressPolicy) -> None:
        self._resolver = resolver
        self._policy = policy
        self.admitted_by_name: set[str] = set()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self._policy.allowed_addresses(host, await self._resolver.resolve(host, port))
        if self._policy.allows_host_name(host):
            self.admitted_by_name.update(a.split("%", 1)[0] for a in addresses)
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in addresses
        ]

    async def close(self) -> None:
        return None
