"""Turning a GATEWAY config into one concrete HTTP request (no I/O).

`{{ }}` expressions in `url`, `headers`, `query`, `body` and `destination` are evaluated
against the run context; an evaluation error fails the step with `expression_error` naming the
field and the expression. Values that cannot make a valid request fail it with
`invalid_config`: a URL that is not absolute, a header name or value that is not a legal
header (values come from run input, so a CR/LF must never let it inject a header). A URL with
another scheme than http(s) fails it with `egress_denied`.

Encoding rules:
* url: where each expression sits is read from the template's literal text
  (`schemas.url_template`). A value in the path, query, fragment or `user:password@` is
  percent-encoded as one component, `/ ? # & = @ :` included, so run input cannot change
  which path is called, add query parameters or end the userinfo early; a value that would
  make a path segment `.` or `..`, a null path value, and an empty one that leaves its
  segment empty (the collection instead of the item), fail the step with `invalid_config`. A
  value in the host or port that could move the call to another host (`/ ? # @`, a
  backslash, whitespace; a port that is not digits) fails it with `invalid_config`; so does
  a value beside literal host text that is not one DNS label (a dot, `%`, a unicode dot
  form: it would add labels to the domain the author wrote), and a literal host must still
  be the host after rendering (`_render_url`). A url that is exactly one expression (a whole
  URL, e.g. a pagination link), an expression that starts it (a base URL) and a host that is
  expressions alone are where the author lets a value choose the host;
* header and query values: strings as they are, numbers as written, booleans `true`/`false`,
  objects and lists as compact JSON; a null drops the entry; a query list repeats the name;
* body: null sends no body; a string sent with a non-JSON `Content-Type` the user set goes
  out verbatim; anything else is JSON (`Content-Type: application/json` unless set);
* `Idempotency-Key`: the step's stable key, unless the config sets that header itself.

Credentials: a URL's `user:password@` is sent as HTTP Basic authentication (aiohttp does it);
the URL the log and errors show has neither it nor the query string (`url_for_log`), and the
password and its Basic credential join the step's redactor, so an answer echoing them is
redacted too. The call's admission key (`destination`) must not contain a secret: it is shown
in metrics, in the destinations API and in Redis keys.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import yarl

from schemas import expressions, url_template
from schemas.definitions import GatewayConfig
from schemas.errors import FailureKind, StepFailure
from schemas.redaction import Redactor
from schemas.url_template import Place
from vertices.contract import StepContext
from vertices.egress import EgressDenied, parse_ip_host

IDEMPOTENCY_HEADER = "Idempotency-Key"
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""RFC 9110 `token`: the legal characters of a header name."""
_BAD_VALUE_CHARS = re.compile(r"[\r\n\x00]")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_DOT_SEGMENTS = frozenset({".", ".."})


@dataclass(frozen=True)
class GatewayRequest:
    """A rendered, validated request, the same for every attempt of the step."""

    method: str
    url: str
    """Absolute http(s) URL; its own query string is kept and `params` are appended."""
    params: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    content: bytes | None
    destination: str
    """The admission key (see `destination_key`)."""

    @property
    def url_for_log(self) -> str:
        """The URL without what may carry credentials: its `user:password@`, its query string
        (and its fragment)."""
        return url_for_log(self.url)


def url_for_log(url: str) -> str:
    """`url` without its userinfo, query string and fragment (see `GatewayRequest`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        # Unparseable (a malformed IPv6 host): show the scheme alone rather than guess where
        # the credentials end.
        scheme = url.split(":", 1)[0] if ":" in url else ""
        return f"{scheme}://…" if scheme.isalpha() else "…"
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _redact_userinfo(url: str, redactor: Redactor) -> None:
    """Add a URL's password, and the Basic credential a client makes of it, to `redactor`;
    refuse credentials HTTP Basic authentication cannot carry (aiohttp raises on them)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return  # refused as not a valid URL when its admission key is made
    if "@" not in parts.netloc:
        return
    user, _, password = parts.netloc.rsplit("@", 1)[0].partition(":")
    if password:
        redactor.add(unquote(password))
        redactor.add(password)
    _check_basic(unquote(user), unquote(password))
    for credential in _sent_credentials(url) if password else ():
        redactor.add(credential)


def _sent_credentials(url: str) -> set[str]:
    """The Basic credential the HTTP client sends for `url`'s `user:password@`: the user and
    password as yarl (aiohttp's URL) decodes them, encoded by aiohttp's own function in the
    Latin-1 aiohttp sends them in, and in UTF-8, its other encoding, should a release of it
    change which one it uses for a URL's credentials."""
    # Here, not at the top: validation and the CLI import this module and never call out
    # (vertices/http_client.py imports aiohttp the same way).
    import aiohttp

    try:
        parsed = yarl.URL(url)
    except ValueError:
        return set()  # the client cannot send it either: the call fails on its URL
    user, password = parsed.user or "", parsed.password or ""
    sent = set()
    for encoding in ("latin-1", "utf-8"):
        try:
            credential = aiohttp.encode_basic_auth(user, password, encoding=encoding)
        except (ValueError, UnicodeEncodeError):
            continue  # not sendable so (`_check_basic` has refused what none can send)
        sent.add(credential.removeprefix("Basic "))
    return sent


def _check_basic(user: str, password: str) -> None:
    # Neither value is shown: the message would be recorded, and either may be a secret.
    if ":" in user:
        raise _config_error(
            "url: the user name in user:password@ holds ':', which HTTP Basic authentication "
            "cannot send (RFC 7617); check the value that makes the user name"
        )
    try:
        (user + password).encode("latin-1")  # what aiohttp encodes Basic credentials in
    except UnicodeEncodeError as exc:
        raise _config_error(
            "url: the user:password@ holds a character beyond Latin-1, which the HTTP client "
            "cannot send in Basic authentication; send such credentials in an Authorization "
            "header instead"
        ) from exc


def _config_error(message: str) -> StepFailure:
    return StepFailure(FailureKind.INVALID_CONFIG, message)


def _invalid_url(url: str, exc: ValueError) -> StepFailure:
    """`invalid_config` for a URL urlsplit cannot read, showing its scheme and nothing else.

    Where such a URL's userinfo ends is unknown (a literal password holding `#` or `/` ends
    the authority early and makes the rest of it the port), so neither the URL nor Python's
    message, which quotes the port or the host, is shown: either may hold the password."""
    scheme = url.strip().split(":", 1)[0] if ":" in url else ""
    shown = f"{scheme}://…" if scheme.isalpha() else "…"
    if str(exc).startswith("Port"):
        reason = "its port is not a number from 0 to 65535"
    elif "IPv6" in str(exc):
        reason = "an IPv6 host must be written whole between [ and ]"
    else:
        reason = "its host is malformed"
    return _config_error(
        f"url {shown} is not a valid URL: {reason} (a literal user:password@ must "
        "percent-encode '#', '?', '/' and '@', e.g. '#' as %23)"
    )


def _expression_failure(exc: expressions.ExpressionError, where: str) -> StepFailure:
    return StepFailure(
        FailureKind.EXPRESSION_ERROR,
        f"{where}: expression {{{{ {exc.expression} }}}} failed: {exc.reason}",
    )


def _render(value: Any, context: dict[str, Any], where: str) -> Any:
    """`expressions.render`, walked here so that a failure names the JSON pointer of the
    string that failed (`/config/body/total`), not only the field it is under."""
    if isinstance(value, dict):
        return {k: _render(v, context, f"{where}/{_escaped(k)}") for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, context, f"{where}/{i}") for i, v in enumerate(value)]
    try:
        return expressions.render(value, context)
    except expressions.ExpressionError as exc:
        raise _expression_failure(exc, where) from exc


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def destination_key(config_url_rendered: str, config_destination: str | None) -> str:
    """The admission key of a call: `destination` when set, else `scheme://host:port`.

    The default key names the server the call goes to in one spelling per server, so a
    submitter who chooses the host (`https://{{ input.host }}/`) cannot split one server
    across several AIMD limits, caps and breakers by spelling it differently: the host as the
    HTTP client sends it (IDNA for a non-ASCII name, `_idna_host`), normalised by
    `_normal_host`, and always a port (80/443 when the URL omits it):
    `http://API.example.com/a` and `http://api.example.com:80/b` share one key. Raises
    StepFailure (`invalid_config`) when the URL has no scheme or host, or a percent-encoded
    host (`_normal_host`).
    """
    if config_destination is not None and config_destination.strip():
        return config_destination.strip()
    try:
        parts = urlsplit(config_url_rendered.strip())
        port = parts.port
    except ValueError as exc:
        raise _invalid_url(config_url_rendered, exc) from exc
    scheme, host = parts.scheme.lower(), parts.hostname
    if not scheme or not host:
        raise _config_error(f"url {url_for_log(config_url_rendered)!r} needs a scheme and a host")
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
    if not host.isascii():
        host = _idna_host(config_url_rendered, host)
    sent = _normal_host(host)
    if sent is None:
        raise _config_error(
            f"url {url_for_log(config_url_rendered)!r}: its host is percent-encoded ('%'), "
            "which the HTTP client sends as written and no resolver finds; write the host's "
            "characters themselves"
        )
    return f"{scheme}://{sent}:{port}" if port is not None else f"{scheme}://{sent}"


def _idna_host(url: str, host: str) -> str:
    """A non-ASCII host as the call is sent: yarl (aiohttp's URL type) writes it in IDNA, so
    `evil。com` (an ideographic full stop) calls evil.com and must share its key, limits and
    breakers rather than start with an allowance of its own."""
    try:
        sent = yarl.URL(url.strip()).raw_host
    except ValueError as exc:
        raise _invalid_url(url, exc) from exc
    return sent if sent else host


@functools.lru_cache(maxsize=1024)
def _normal_host(host: str) -> str | None:
    """One spelling per server of an ASCII host as yarl sends it (urlsplit's lower-case
    reading of an ASCII host is yarl's), as a key writes it; None for a percent-encoded host.

    * An IPv6 address is compressed (`[0:0:0:0:0:0:0:1]` is `[::1]`, as yarl sends it), and
      an IPv4-mapped one (`[::ffff:127.0.0.1]`) is its IPv4 address, where the socket
      connects;
    * an IPv4 address in any spelling the resolver takes (`0x7f000001` and `0x7f.1` connect
      to 127.0.0.1; aiohttp refuses the all-digit ones, `2130706433` or `127.1`, before
      sending) is its address, read by `vertices.egress.parse_ip_host` as the egress policy
      reads it;
    * a trailing dot is dropped: `evil.com.` is evil.com fully qualified and resolves to its
      addresses. The Host header keeps the dot, and a server may answer it differently, but
      its capacity is the same, and so is its key. With a trailing dot an IPv4 spelling is a
      name to the resolver (`0x7f000001.` is looked up in DNS), so no address is read;
    * a percent-encoded host (`ev%69l.com`) is refused: yarl neither decodes nor refuses it,
      aiohttp asks the resolver for that literal name and no resolver has one, so the call
      would reach no server and only mint a key (counting DNS failures) of its own.

    Cached, because a fan-out's children call one host: reading an address costs 2 to 6 µs
    (`str` of an IPv6 address alone 3.7), a hit about 0.05. Bounded, so hosts a submitter
    chooses only evict one another."""
    if ":" in host:  # IPv6 (urlsplit has checked the brackets)
        address = parse_ip_host(host)
        if not isinstance(address, ipaddress.IPv6Address):
            return f"[{host}]"  # an IPvFuture literal: sent as written
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        zone = f"%25{address.scope_id}" if address.scope_id else ""
        return f"[{str(address).split('%', 1)[0]}{zone}]"
    if "%" in host:
        return None
    if _PLAIN_HOST.fullmatch(host):
        return host  # most hosts: 0.2 µs, where reading an address takes 2 to 6
    if host.endswith("."):
        return host[:-1] or host
    address = parse_ip_host(host)
    return host if address is None else str(address)


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_PLAIN_HOST = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}|(?:[a-z0-9_-]*+\.)*+[a-z][a-z0-9_-]*+")
"""A host `_normal_host` leaves as it is (an ASCII host without `%` or `:`): a dotted-quad
IPv4 address without leading zeros, or a name whose last label starts with a letter (every
part of an IPv4 spelling starts with a digit) and that has no trailing dot. Possessive, so a
miss (`127.1`) fails without backtracking."""


def _render_url(text: str, context: dict[str, Any], vertex: str = "") -> Any:
    """The url's template rendered, each value written as the part of the URL it sits in
    requires, that part read from the template's literal text (`schemas.url_template`):

    * path, query, fragment and `user:password@`: percent-encoded as one component
      (`quote(value, safe="")`). Without it, `/customers/{{ input.id }}/orders` with the id
      `../../admin?x=1#` calls `/admin?x=1` with the vertex's headers and secrets, a secret
      holding `?` is cut in pieces the redactor cannot recognise, and a password holding `#`
      or `/` ends the authority early. yarl, which aiohttp sends the URL through, keeps
      `%2F`, `%3F` and `%23` encoded in the path and query (hence `_refuse_dot_segments` for
      the `%2E` it does decode) and decodes the userinfo back for Basic authentication;
    * host and port: a value that could end the host (`/ ? # @`, a backslash, whitespace)
      or a port that is not digits is refused (`_check_head_value`):
      `https://api.example.com:{{ p }}` with `443@evil.example/` would send the call, and its
      secrets, to evil.example;
    * a host label (a value beside literal host text): one DNS label or part of one, never
      a dot or anything IDNA could turn into one (`_check_head_value`, `_check_host_label`):
      `https://api.example.{{ tld }}/` with `com.evil.net` would call api.example.com.evil.net;
    * a whole-URL expression, and a base URL that starts the template: as they are.

    When the template writes the host literally, the rendered URL must still have that host
    (`_check_literal_host`): a backstop should a rule above miss a way to move it.

    A path value that is null, or empty where it leaves its segment empty, is refused
    (`_empty_in_path`): it would call another path than the author meant, silently —
    `DELETE /items/{{ input.id }}` without an id deletes `/items/`, the whole collection, and
    a typo in an expression gives null. An empty string beside literal text or another value
    that fills the segment (`/{{ prefix }}{{ id }}`) is an optional part and is sent.
    """
    if "{{" not in text:
        return text  # nothing to place: the common case pays one substring test
    try:
        template = expressions.compile_template(text)
        if template.exact:
            return template.render(context)  # a whole URL: its path is the author's to build
        layout = url_template.url_layout(text)
        places = iter(layout.places)  # render_placed calls `place` once per expression, in order
        sources = iter(p.expression for p in template.parts if not isinstance(p, str))
        in_path: list[tuple[int, int]] = []
        empty: list[tuple[int, str]] = []  # where a path value was null or empty, its source
        in_label: list[tuple[int, int, str]] = []

        def place(before: str, value: str, null: bool) -> str:
            where, source = next(places), next(sources)
            if where in _AS_IS:
                return value
            if where in _CHECKED:
                _check_head_value(where, source, value)
                if where is Place.HOST_LABEL:
                    in_label.append((len(before), len(before) + len(value), source))
                return value
            encoded = quote(value, safe="")
            if where is Place.PATH:
                if null:
                    raise _empty_in_path(source, vertex)  # a misspelt name, most likely
                if not encoded:
                    empty.append((len(before), source))
                in_path.append((len(before), len(before) + len(encoded)))
            return encoded

        url = template.render_placed(context, place)
    except expressions.ExpressionError as exc:
        raise _expression_failure(exc, "/config/url") from exc
    _refuse_empty_segments(url, empty, vertex)
    _refuse_dot_segments(url, in_path)
    for start, end, source in in_label:
        _check_host_label(url, start, end, source)
    _check_literal_host(url, layout)
    return url


_AS_IS = frozenset({Place.WHOLE, Place.BASE})
_CHECKED = frozenset({Place.SCHEME, Place.HOST, Place.HOST_LABEL, Place.PORT})
_LABEL_RULE = "one DNS label, 1 to 63 ASCII letters, digits and '-'"
_NOT_IN = {
    Place.SCHEME: (re.compile(r"[^A-Za-z0-9+.\-]"), "letters, digits, '+', '-' and '.'"),
    Place.HOST: (re.compile(r"[\s/?#@\\]"), "no '/', '?', '#', '@', '\\' or whitespace"),
    # ASCII only: IDNA maps U+3002, U+FF0E and U+FF61 to '.' and U+2488 to '1.', so a
    # unicode label could still add labels once the client encodes the host.
    Place.HOST_LABEL: (re.compile(r"[^A-Za-z0-9\-]"), _LABEL_RULE),
    Place.PORT: (re.compile(r"[^0-9]"), "digits only"),
}
"""What a value in the scheme, host or port may not hold: a character that would end that
part and begin another, so that the run's input would choose the host called."""

_MAX_LABEL = 63
"""RFC 1035's longest DNS label; IDNA refuses a longer one."""


def _check_head_value(where: Place, source: str, value: str) -> None:
    pattern, allowed = _NOT_IN[where]
    found = pattern.search(value)
    if found is not None:
        # The value is not shown, nor a character of it that is no delimiter: it may be a
        # secret (validation refuses them here, but a version stored before it did still runs).
        char = found.group()
        if char in _SHOWN or char.isspace():
            shown = repr(char)
        else:
            shown = "a character" if char.isascii() else "a character beyond ASCII"
        what = f"holds {shown} that would change where the call goes"
        raise _head_error(where, source, what, allowed)
    if where is Place.HOST_LABEL and not value:
        raise _head_error(where, source, "is empty, which no host label can be", allowed)
    if where is Place.PORT and not value:
        # `https://h:/x` is the default port: a null would silently call another service.
        raise _head_error(
            where, source, "is empty (null), which would call the default port", allowed
        )


def _head_error(where: Place, source: str, what: str, allowed: str) -> StepFailure:
    hint = _HINTS.get(where, "")
    return _config_error(
        f"url: the value of {{{{ {source} }}}} is in the url's {where.value} and {what} "
        f"({where.value}: {allowed}); check the run's input{hint}"
    )


def _check_host_label(url: str, start: int, end: int, source: str) -> None:
    """Fail when the label a host-label value sits in, with the literal text around it, is
    longer than a DNS label may be or starts or ends with '-' (no resolver would take it;
    IDNA refuses it when the client encodes the host)."""
    first = max(url.rfind(c, 0, start) for c in "./@[") + 1
    last = min((i for i in (url.find(c, end) for c in ".:/?#]") if i >= 0), default=len(url))
    label = url[first:last].rstrip()
    if len(label) > _MAX_LABEL:
        what = f"makes a label of {len(label)} characters, over {_MAX_LABEL}"
    elif label.startswith("-") or label.endswith("-"):
        what = "makes a label that starts or ends with '-'"
    else:
        return
    raise _head_error(Place.HOST_LABEL, source, what, _LABEL_RULE)


_DELIMITERS = frozenset("/?#@\\:[]")
_SHOWN = _DELIMITERS | frozenset(".%\u3002\uff0e\uff61")
"""The characters a refusal names: delimiters and dot forms say what went wrong and give
nothing of a secret away; any other character is "a character"."""

_FOR_THE_PATH = ", or write a literal '/' before the expression if it is meant for the path"
_HINTS = {
    Place.HOST: _FOR_THE_PATH,
    Place.HOST_LABEL: ", make the whole host one expression (https://{{ input.host }}/…) if "
    f"the input is meant to choose the host{_FOR_THE_PATH}",
}


def _refuse_empty_segments(url: str, empty: list[tuple[int, str]], vertex: str) -> None:
    """Fail when an empty path value (at a place, from a source) left its segment empty."""
    for at, source in empty:
        if _segment_at(url, at) == "":
            raise _empty_in_path(source, vertex)


def _segment_at(url: str, at: int) -> str:
    """The path segment of `url` that holds the position `at` (a path value's place)."""
    start = url.rfind("/", 0, at) + 1
    ends = [i for i in (url.find(c, at) for c in "/?#") if i != -1]
    return url[start : min(ends, default=len(url))]


def _empty_in_path(source: str, vertex: str) -> StepFailure:
    """`invalid_config` for a path value that is null or empty, before anything is sent."""
    who = f"vertex {vertex!r}: " if vertex else ""
    return _config_error(
        f"{who}url: {{{{ {source} }}}} gave null or an empty string in the url path, which "
        "would call another path (an empty segment) than the one meant; check the expression "
        "(a misspelt name after `.output` or `input.` gives null) and the run's input, and "
        "list an input field it reads in the inputSchema's `required` so that a run without "
        "it is refused at submission"
    )


def _check_literal_host(url: str, layout: url_template.UrlLayout) -> None:
    """Fail when the template wrote its host literally and the rendered URL has another."""
    if layout.literal_host is None:
        return
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        host = None
    if host != layout.literal_host:
        raise _config_error(
            f"url: an expression's value changed the url's host from {layout.literal_host!r}; "
            "check the run's input (a value in the path, query or user:password@ is encoded, "
            "one in the port must be digits)"
        )


def _refuse_dot_segments(url: str, spans: list[tuple[int, int]]) -> None:
    """Fail when a path segment an expression wrote into is `.` or `..` (`%2E` counts as a
    dot: yarl decodes it): the call would go to another directory than the author wrote."""
    url = url.rstrip()  # as it is sent (an encoded value holds no whitespace: spans stay)
    for start, end in spans:
        first = url.rfind("/", 0, start) + 1
        last = min((i for i in (url.find(c, end) for c in "/?#") if i >= 0), default=len(url))
        segment = url[first:last]
        if unquote(segment) in _DOT_SEGMENTS:
            raise _config_error(
                f"url {url_for_log(url)!r}: an expression made the path segment {segment!r}, "
                "which would change the path called; a value in a URL path cannot be '.' or "
                "'..' (check the run's input)"
            )


def _url(config: GatewayConfig, context: dict[str, Any], vertex: str = "") -> str:
    url = _render_url(config.url, context, vertex)
    if not isinstance(url, str):
        raise _config_error(f"url must evaluate to a string, got {type(url).__name__}")
    url = url.strip()
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise _invalid_url(url, exc) from exc
    if scheme and scheme not in _DEFAULT_PORTS:
        # Whatever the egress policy admits, a GATEWAY speaks HTTP only (file://, gopher://
        # and friends are classic request-forgery tools).
        raise EgressDenied(
            f"egress denied: url {url_for_log(url)!r} has the scheme {scheme}://; a GATEWAY calls "
            "http:// and https:// URLs only"
        )
    if scheme not in _DEFAULT_PORTS:
        raise _config_error(f"url {url_for_log(url)!r} must be an absolute http:// or https:// URL")
    return url


def _headers(config: GatewayConfig, context: dict[str, Any]) -> dict[str, str]:
    rendered = _render(config.headers, context, "/config/headers")
    headers: dict[str, str] = {}
    for name, value in rendered.items():
        if value is None:
            continue
        if not _TOKEN.match(name):
            raise _config_error(f"header name {name!r} is not a valid HTTP header name")
        text = _scalar_text(value)
        if _BAD_VALUE_CHARS.search(text):
            raise _config_error(f"header {name!r}: value contains a line break or NUL")
        headers[name] = text
    return headers


def _params(config: GatewayConfig, context: dict[str, Any]) -> list[tuple[str, str]]:
    rendered = _render(config.query, context, "/config/query")
    params: list[tuple[str, str]] = []
    for name, value in rendered.items():
        values = value if isinstance(value, list) else [value]
        params.extend((name, _scalar_text(v)) for v in values if v is not None)
    return params


def _header(headers: dict[str, str], name: str) -> str | None:
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


def is_json_media_type(content_type: str | None) -> bool:
    """`application/json`, `text/json` and any `+json` type (e.g. application/problem+json)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in {"application/json", "text/json"} or media.endswith("+json")


def _content(
    config: GatewayConfig, context: dict[str, Any], headers: dict[str, str]
) -> bytes | None:
    body = _render(config.body, context, "/config/body")
    if body is None:
        return None
    content_type = _header(headers, "Content-Type")
    if isinstance(body, str) and content_type is not None and not is_json_media_type(content_type):
        return body.encode()
    if content_type is None:
        headers["Content-Type"] = "application/json"
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def build_request(config: GatewayConfig, ctx: StepContext) -> GatewayRequest:
    """Render and validate the call; raise StepFailure (`expression_error`/`invalid_config`)."""
    context = ctx.context
    url = _url(config, context, ctx.vertex_id)
    headers = _headers(config, context)
    if _header(headers, IDEMPOTENCY_HEADER) is None:
        # The engine derives the key from run and vertex ids; the fallback keeps the same
        # promise (stable across attempts) for callers that left it empty.
        headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key or f"{ctx.run_id}:{ctx.vertex_id}"
    destination = _render(config.destination, context, "destination")
    if destination is not None and not isinstance(destination, str):
        raise _config_error("destination must evaluate to a string")
    key = destination_key(url, destination)
    # Before the URL's own password joins the redactor: only the step's secrets count here.
    if ctx.redactor and ctx.redactor.text(key) != key:
        # The key is the destination when one is set (`destination_key`): name that field.
        where = "destination" if destination is not None and destination.strip() else "url's host"
        raise _config_error(
            f"the {where} would hold a secret, and it is the call's admission key "
            "(shown in metrics and to operators): put secrets in the path, the query, the "
            "headers or the body"
        )
    _redact_userinfo(url, ctx.redactor)
    return GatewayRequest(
        method=config.method,
        url=url,
        params=tuple(_params(config, context)),
        headers=headers,
        content=_content(config, context, headers),
        destination=key,
    )
