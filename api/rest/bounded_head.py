"""uvicorn's HTTP/1.1 protocol (httptools) with each request's head bounded in size and time,
its body in time, and every refusal of its own a JSON error.

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

A body is bounded in time too: a client that sent its head and then one byte of a 10 MB body
every few seconds held a connection and the app's request task for as long as it liked. No
byte for `BODY_IDLE_S`, or the whole body not arrived within `BODY_TIMEOUT_S` of the head's
end, is a 408; if the app has begun its answer by then, the connection is only closed. Neither
counts the time the server holds the body back (`_held_back`).

uvicorn answers a request the parser cannot read (not HTTP/1.1) with a plain-text 400; here it
is the same JSON error as every other (`invalid_http`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

MAX_HEAD_BYTES = 64 * 1024
"""The longest request head served: nginx's default allows 4 buffers of 8 KiB for headers;
64 KiB leaves room for long cookies and tokens, and none for a body sent as headers."""
HEAD_TIMEOUT_S = 10.0
"""How long a request's head may take to arrive, from its first byte."""
READ_BYTES = 256 * 1024
"""The most one read of asyncio's socket transport returns."""
BODY_IDLE_S = 10.0
"""How long a request's body may go without a byte while it is being read."""
BODY_TIMEOUT_S = 120.0
"""How long a whole body may take after its head: the 10 MiB `MAX_BODY_BYTES` at 85 KB/s."""

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
}


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
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_began = 0.0
        self._body_seen = 0.0
        self._body_checked = 0.0

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
        # Armed for every request; a request without a body completes in the same read and
        # cancels it at once (`on_message_complete`).
        self._body_began = self._body_seen = self._body_checked = self.loop.time()
        self._cancel_body_timer()
        self._body_timer = self.loop.call_later(BODY_IDLE_S, self._body_check)

    def on_body(self, body: bytes) -> None:
        self._body_seen = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel_body_timer()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # A callback's exception reaches uvicorn as a parser error, answered 400: ours is 431.
        if self._too_large:
            self._refuse_too_large()
        else:
            message = "the request is not valid HTTP/1.1: check its request line and headers"
            self._refuse(400, "invalid_http", message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
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
        if self.flow.read_paused and self._reading_head:
            # uvicorn reads no more until the request before is answered (this one begun in
            # the read that held a pipelined request, queued behind a slow one): the rest of
            # the head is the server's to read. Its 408 went out as the slow one's answer.
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)
            return
        if self._reading_head and not self.transport.is_closing():
            message = f"the request's headers did not arrive within {HEAD_TIMEOUT_S:g} s"
            self._refuse(408, "request_timeout", message)

    def _body_check(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._held_back(cycle):
            # The wait is the server's, not the client's: for neither bound. The whole time
            # since the last check is counted as held back (in the client's favour): a
            # request queued behind a pipelined one that took longer than the whole bound
            # was refused 408, that 408 written as the answer to the request before it.
            self._body_began += now - self._body_checked
            self._body_seen = now
        self._body_checked = now
        late = now - self._body_began >= BODY_TIMEOUT_S
        idle = now - self._body_seen
        if not late and idle < BODY_IDLE_S:
            wait = min(BODY_IDLE_S - idle, BODY_TIMEOUT_S - (now - self._body_began))
            self._body_timer = self.loop.call_later(wait, self._body_check)
            return
        if cycle.response_started:  # a status line is out: nothing more can be said
            self.transport.close()
            return
        message = (
            f"the request's body did not arrive within {BODY_TIMEOUT_S:g} s"
            if late
            else f"the request's body stopped arriving: no byte for {BODY_IDLE_S:g} s"
        )
        self._refuse(408, "request_timeout", message)

    def _held_back(self, cycle: RequestResponseCycle) -> bool:
        """Whether the server, not the client, holds `cycle`'s body back: it is queued behind
        a pipelined request (its app not started, reading paused), uvicorn stopped reading
        because the app has not taken what came, or it owes the 100 Continue a client that
        sent `Expect: 100-continue` waits for."""
        queued = any(waiting is cycle for waiting, _ in self.pipeline)
        return queued or self.flow.read_paused or cycle.waiting_for_100_continue

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._reading_head = False
        self._cancel_head_timer()
        self._cancel_body_timer()
        body = json.dumps({"code": code, "message": message, "details": {}}).encode()
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
