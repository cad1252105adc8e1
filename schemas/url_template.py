"""Where each `{{ }}` expression of a GATEWAY `url` template sits: scheme, userinfo, host,
port, path, query or fragment, read from the template's LITERAL text once and cached.

Three readers need the answer and must agree: the gateway when it renders a URL (a value is
written differently in each part, and a value in the host or port must not be able to move
the call to another host, vertices/gateway_request.py), validation (a secret in the scheme,
host or port would make the admission key, engine/validation/url_head.py) and the breaker
warnings of a retry (a templated host is not known before the call,
engine/operations/breaker_warnings.py). Reading the rendered text instead would let a value
decide where the next one lands: `https://api.example.com:{{ input.port }}/v1` with the port
`443@evil.example/x?` rendered text says "userinfo, then host evil.example".

Two shapes are not parts of a URL: a template that is exactly one expression is a whole URL
(`WHOLE`, a pagination link), and an expression that starts the template before any literal
`://` is a base URL (`BASE`, `{{ input.baseUrl }}/items`); what follows a base is its path,
query or fragment, by the literal `?` and `#` that follow.

The host has two places, by whether the author wrote any of it:

* `HOST_LABEL`: the host's literal text is not empty (`https://{{ region }}.api.example.com`,
  `https://api.example.{{ tld }}`, `https://api-{{ env }}.example.com`). The author wrote the
  domain, so a value may fill (part of) ONE DNS label and never add labels: the gateway
  refuses a value that is not 1 to 63 ASCII letters, digits and '-', or that makes a label
  starting or ending with '-' (`vertices.gateway_request._check_host_label`). Dots, `%2e`,
  the characters IDNA maps to '.' (U+3002, U+FF0E, U+FF61; U+2488 becomes `1.`), an
  empty value and anything else are refused, so `com.evil.net` cannot make
  `api.example.com.evil.net`. IPv6 brackets are not literal host text.
* `HOST`: the host is expressions alone (`https://{{ input.host }}:8443/x`, `http://[{{ ip }}]/`):
  the author let the value choose the host, like a base URL; it only may not leave the host
  (no `/ ? # @`, backslash or whitespace).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from schemas.expressions import expression_spans


class Place(enum.Enum):
    WHOLE = "whole URL"
    BASE = "base URL"
    SCHEME = "scheme"
    USERINFO = "user:password@"
    HOST = "host"
    HOST_LABEL = "host label"
    PORT = "port"
    PATH = "path"
    QUERY = "query"
    FRAGMENT = "fragment"


HEAD = frozenset({Place.WHOLE, Place.BASE, Place.SCHEME, Place.HOST, Place.HOST_LABEL, Place.PORT})
"""The places that make the call's scheme, host or port (its default admission key)."""


@dataclass(frozen=True)
class UrlLayout:
    places: tuple[Place, ...]
    """One per expression, in the order they appear."""
    literal_host: str | None
    """The host as `urlsplit(...).hostname` gives it (lower case, no brackets) when the
    template writes it without expressions, else None."""
    literal_origin: str | None
    """`scheme://host[:port]` as written, when no expression is in any of the three."""
    literal_scheme_host: str | None = None
    """`scheme://host` as written (the port left out), when neither the scheme nor the host
    holds an expression, whatever the port, path or query hold: where the call goes, for
    publication's egress check (a port does not change which address is called)."""


_STATE_FOR = {"/": Place.PATH, "?": Place.QUERY, "#": Place.FRAGMENT}


@lru_cache(maxsize=4096)
def url_layout(text: str) -> UrlLayout:
    """The layout of the url template `text` (cached: the gateway asks on every step)."""
    spans = expression_spans(text)
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(text):
        return UrlLayout((Place.WHOLE,), None, None)
    return _Scanner(text, spans).layout()


class _Scanner:
    """One pass over the literal stretches; expressions in the scheme or the authority wait
    (`pending`) until a literal says which part they were in: `://` (scheme), `@` (userinfo),
    or the end of the authority (host, or port after a literal `:`)."""

    def __init__(self, text: str, spans: list[tuple[int, int, str]]) -> None:
        self.text, self.spans = text, spans
        self.places: list[Place | None] = [None] * len(spans)
        self.state: Place = Place.SCHEME
        self.pending: list[tuple[int, bool]] = []  # (expression index, after a port colon)
        self.scheme_text = ""
        self.hostport = ""  # literal text of the authority after its last `@`
        self.host_text = ""  # the part of it before the port, brackets left out
        self.colon = False
        self.brackets = False  # inside an IPv6 literal, whose `:` are not the port's
        self.host_templated = False
        self.authority = False  # a literal `://` began one

    def layout(self) -> UrlLayout:
        position = 0
        for index, (start, end, _source) in enumerate(self.spans):
            self._literal(self.text[position:start])
            self._expression(index, at_start=not self.text[:start].strip())
            position = end
        self._literal(self.text[position:])
        self._end_head(None)
        places = tuple(p if p is not None else Place.PATH for p in self.places)
        return UrlLayout(
            places,
            self._literal_host(),
            self._literal_origin(places),
            self._literal_scheme_host(places),
        )

    def _expression(self, index: int, at_start: bool) -> None:
        if self.state is Place.SCHEME:
            self.pending.append((index, at_start))
        elif self.state is Place.HOST:
            self.pending.append((index, self.colon))
        else:
            self.places[index] = self.state

    def _literal(self, literal: str) -> None:
        index = 0
        while index < len(literal):
            char = literal[index]
            if self.state is Place.SCHEME:
                if literal.startswith("://", index):
                    for pending, _ in self.pending:
                        self.places[pending] = Place.SCHEME
                    self.pending = []
                    self.state = Place.HOST  # the authority: userinfo, host and port
                    self.authority = True
                    index += 3
                    continue
                if char in _STATE_FOR:
                    self._end_head(_STATE_FOR[char])
                else:
                    self.scheme_text += char
            elif self.state is Place.HOST:
                if char in _STATE_FOR:
                    self._end_head(_STATE_FOR[char])
                else:
                    self._authority_char(char)
            elif self.state is Place.PATH and char in "?#":
                self.state = _STATE_FOR[char]
            elif self.state is Place.QUERY and char == "#":
                self.state = Place.FRAGMENT
            index += 1

    def _authority_char(self, char: str) -> None:
        if char == "@":  # what came before was userinfo
            for pending, _ in self.pending:
                self.places[pending] = Place.USERINFO
            self.pending, self.hostport, self.host_text, self.colon = [], "", "", False
            return
        self.brackets = (self.brackets or char == "[") and char != "]"
        self.colon = self.colon or (char == ":" and not self.brackets)
        self.hostport += char
        if not self.colon and char not in "[]":
            self.host_text += char

    def _end_head(self, then: Place | None) -> None:
        """The scheme or authority ends (at `then`'s delimiter, or the end of the text)."""
        if self.state is Place.SCHEME:
            # No `://`: a leading expression is a base URL; anything else is not in a head
            # (the URL is refused when it is not absolute), and is encoded as a path value.
            for pending, at_start in self.pending:
                self.places[pending] = Place.BASE if at_start else Place.PATH
        elif self.state is Place.HOST:
            host = Place.HOST_LABEL if self.host_text else Place.HOST
            for pending, after_colon in self.pending:
                self.places[pending] = Place.PORT if after_colon else host
                self.host_templated = self.host_templated or not after_colon
        else:
            return
        self.pending = []
        self.state = then or Place.PATH

    def _literal_host(self) -> str | None:
        if self.host_templated or not self.authority:
            return None
        try:
            return urlsplit("//" + self.hostport).hostname
        except ValueError:
            return None

    def _literal_origin(self, places: tuple[Place, ...]) -> str | None:
        if not self.authority or any(p in HEAD for p in places):
            return None
        return f"{self.scheme_text.strip()}://{self.hostport}"

    def _literal_scheme_host(self, places: tuple[Place, ...]) -> str | None:
        if not self.authority or any(p in HEAD - {Place.PORT} for p in places):
            return None
        host = self.hostport
        if self.colon:  # a port colon (outside IPv6 brackets): the port, or its start
            host = host[: host.rindex(":")]
        return f"{self.scheme_text.strip()}://{host}"
