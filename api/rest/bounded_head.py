"""uvicorn's HTTP/1.1 protocol (httptools) with each request's head bounded in size and time.

httptools sets no limit of its own: one `X-Big` header of 100 MB was read whole into memory
(and answered 200 after 44 s), and a client that sent one header line every 10 s kept its
connection, and a slot of the open-files limit, for as long as it liked. Before the app sees
anything, a head (request line and headers) longer than `MAX_HEAD_BYTES` is answered 431 and
one not finished within `HEAD_TIMEOUT_S` of its first byte 408, each with the JSON error body
every other error has, and the connection closed.

The size is counted twice. Exactly, from what the parser reports (the URL and each header as
it completes), which stops the request at the first header past the bound. And by the bytes
that arrive while a head is being read, which catches one header that never completes (the
parser keeps it in memory meanwhile); a read may hold the end of a head and a body's start,
so that count is only trusted past the bound plus one read (`READ_BYTES`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
"""The longest request head served: nginx's default allows 4 buffers of 8 KiB for headers;
64 KiB leaves room for long cookies and tokens, and none for a body sent as headers."""
HEAD_TIMEOUT_S = 10.0
"""How long a request's head may take to arrive, from its first byte."""
READ_BYTES = 256 * 1024
"""The most one read of asyncio's socket transport returns."""

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop the parse (httptools raises it on wrapped)."""


class BoundedHead(HttpToolsProtocol):
    """`HttpToolsProtocol` refusing a request head over `MAX_HEAD_BYTES` (431) or slower than
    `HEAD_TIMEOUT_S` (408), before the app is called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = False
        self._head_bytes = 0
        self._arrived = 0
        self._too_large = False
        self._head_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            self._arrived += len(data)
            if self._arrived > MAX_HEAD_BYTES + READ_BYTES:
                self._refuse_too_large()
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        self._head_bytes = self._arrived = 0
        self._too_large = False
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        # A callback's exception reaches uvicorn as a parser error, answered 400: ours is 431.
        if self._too_large:
            self._refuse_too_large()
        else:
            super().send_400_response(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_large = True
            raise _HeadTooLarge

    def _refuse_too_large(self) -> None:
        limit = f"{MAX_HEAD_BYTES // 1024} KiB"
        message = f"the request's headers are longer than {limit}"
        self._refuse(431, "headers_too_large", message)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._reading_head and not self.transport.is_closing():
            message = f"the request's headers did not arrive within {HEAD_TIMEOUT_S:g} s"
            self._refuse(408, "request_timeout", message)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._reading_head = False
        self._cancel_head_timer()
        body = json.dumps({"code": code, "message": message, "details": {}}).encode()
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
