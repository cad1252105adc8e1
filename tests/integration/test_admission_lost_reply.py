"""A reply lost after Redis ran the exchange script: nothing may be applied twice, and a slot
it granted must come back.

The exchange script is not idempotent (a settlement counts its outcome in the breakers, the
retry budget and AIMD; an admit takes a slot). A client that resends a command after its
connection failed would run it again, so admission's client never resends
(`open_redis(..., retries=False)`), and the batcher gives back the slots of admits whose
exchange failed. A TCP proxy on loopback in front of the real Redis forwards the script call
and drops the connection instead of forwarding its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from admission import Admission, DestinationCaps
from engine import coordination
from engine.settings import Settings
from schemas.clock import FakeClock

DEST = "https://billing.example.com:443"


class ReplyDroppingProxy:
    """Forwards Redis traffic; when armed, lets the next EVALSHA run on the server and closes
    the client's connection instead of passing on the reply."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self.armed = False
        self.dropped = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        script_sent = asyncio.Event()

        async def upstream() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await client_r.read(65536):
                    if self.armed and b"EVALSHA" in data.upper():
                        script_sent.set()
                    up_w.write(data)
                    await up_w.drain()
            up_w.close()

        async def downstream() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await up_r.read(65536):
                    if script_sent.is_set():  # the script ran on the server: lose its reply
                        self.armed = False
                        self.dropped += 1
                        break
                    client_w.write(data)
                    await client_w.drain()
            client_w.close()
            up_w.close()

        await asyncio.gather(upstream(), downstream())


@pytest.fixture
async def through_proxy(redis_url: str) -> AsyncIterator[tuple[Admission, ReplyDroppingProxy]]:
    upstream = urlsplit(redis_url)
    proxy = ReplyDroppingProxy(upstream.port or 6379)
    port = await proxy.start()
    settings = Settings(redis_url=f"redis://127.0.0.1:{port}{upstream.path}")
    # The client the runtime gives admission (engine.runtime): one that never resends.
    client = await coordination.open_redis(settings, retries=False)
    yield Admission(client, FakeClock()), proxy
    await coordination.close_redis(client)
    await proxy.stop()


@pytest.mark.redis
async def test_a_settlement_whose_reply_is_lost_counts_once(
    through_proxy: tuple[Admission, ReplyDroppingProxy],
) -> None:
    admission, proxy = through_proxy
    ticket = await admission.admit(DEST, "acme", wait_timeout_s=0)
    proxy.armed = True
    with pytest.raises(RedisConnectionError):
        await ticket.failure()  # one failed call; Redis applied it, its reply was lost
    assert proxy.dropped == 1
    state = await admission.backend.read_destination(DEST, admission._clock.now())
    assert state.tenant_layers["acme"].failures == 1
    assert state.global_layer.failures == 1
    assert state.in_flight == 0


@pytest.mark.redis
async def test_a_slot_granted_in_an_exchange_whose_reply_is_lost_comes_back(
    through_proxy: tuple[Admission, ReplyDroppingProxy],
) -> None:
    admission, proxy = through_proxy
    await admission.set_caps(DEST, DestinationCaps(max_concurrency=1))
    await (await admission.admit(DEST, "acme", wait_timeout_s=0)).ignore()  # scripts loaded
    proxy.armed = True
    with pytest.raises(RedisConnectionError):
        await admission.admit(DEST, "acme", wait_timeout_s=0)  # granted in Redis, reply lost
    assert proxy.dropped == 1
    async with asyncio.timeout(5):  # given back in the next exchange, not after its lease
        while (await admission.backend.read_destination(DEST, 0.0)).in_flight:
            await asyncio.sleep(0.01)
    await (await admission.admit(DEST, "acme", wait_timeout_s=0)).success()
