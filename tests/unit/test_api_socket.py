"""The API's listening socket: every connection it accepts sends small writes at once
(TCP_NODELAY). Without it, on asyncio's loop (uvloop sets it per connection itself), each
response of a kept-alive connection waited ~40 ms for the client's delayed ACK."""

from __future__ import annotations

import socket

import pytest

from api.rest.server import _bind


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_accepted_connections_do_not_wait_to_send(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listening = _bind(host, 0)
    except OSError as exc:  # a machine without IPv6 on loopback
        pytest.skip(f"cannot listen on {host}: {exc}")
    with listening:
        assert listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        port = listening.getsockname()[1]
        with socket.socket(family, socket.SOCK_STREAM) as client:
            client.connect((host, port))
            accepted, _ = listening.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
