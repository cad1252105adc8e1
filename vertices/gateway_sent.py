"""What a failed GATEWAY attempt sent, for the operator who asks "what did we send?"
(docs/architecture.md, 'What a failed call sent').

Built only once an attempt has failed, never for an attempt that succeeds: a succeeding step
does exactly the work it did before. The request is the same for every attempt of an
execution (`GatewayRequest`), so the gateway builds this once and reuses it.

Secrets are redacted with the step's redactor before anything is cut, as the answer's body
excerpt is (`vertices.gateway_response.excerpt`): a value cut across the bound would otherwise
leave a piece the redactor no longer recognises. The URL keeps its query (what the destination
received) but never its `user:password@`; header values are not kept at all, only names.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from schemas.errors import SentRequest
from schemas.redaction import Redactor
from vertices.gateway_request import GatewayRequest, url_for_log
from vertices.gateway_response import bounded_excerpt

URL_CHARS = 2000
"""Most characters of the URL kept (a whole-URL expression can make a long one)."""
CUT = "…"
"""Ends a URL cut at `URL_CHARS`."""


def url_as_sent(request: GatewayRequest) -> str:
    """The URL with the step's `query` appended as the client sends it, without userinfo or
    fragment (a fragment never leaves the client)."""
    try:
        parts = urlsplit(request.url)
    except ValueError:
        return url_for_log(request.url)  # never reached: such a URL fails before it is sent
    query = parts.query
    if request.params:
        extra = urlencode(request.params, quote_via=quote)
        query = f"{query}&{extra}" if query else extra
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def sent_request(request: GatewayRequest, redactor: Redactor) -> SentRequest:
    """What `request` sent, redacted by `redactor` and bounded: the body as the answer's
    excerpt is (`bounded_excerpt`), the URL to `URL_CHARS`."""
    url = redactor.text(url_as_sent(request))
    content = request.content or b""
    body, body_cut = bounded_excerpt(content, None, redactor)
    return SentRequest(
        method=request.method,
        url=url[:URL_CHARS] + CUT if len(url) > URL_CHARS else url,
        header_names=tuple(redactor.text(name) for name in request.headers),
        body_excerpt=body,
        body_bytes=len(content),
        body_truncated=body_cut,
    )
