"""The egress policy: which addresses a GATEWAY call may reach (docs/security.md, 'Egress
policy').

A workflow engine makes HTTP calls its users write, so without a policy anyone who can publish
a workflow can make the worker fetch the cloud metadata service, an admin port on loopback or a
database on the private network (server-side request forgery). By default a call may only reach
globally routable addresses: loopback, RFC 1918, link-local (169.254.0.0/16, where the cloud
metadata service lives), carrier-grade NAT, unique-local and link-local IPv6, IPv4-mapped and
IPv4-compatible IPv6, the unspecified address, multicast, reserved and every other
special-purpose range are refused, and so is any scheme but http and https. An allow-list
(`SCHEMABRIDGE_EGRESS_ALLOW`: CIDRs and host patterns) admits internal destinations.

The policy judges the address a connection is actually made to: `vertices/http_client.py`
filters every DNS answer through `allowed_address` (so a name that resolves to a public address
today and to a private one tomorrow is refused tomorrow) and checks an IP literal in the URL
with `check_url` before anything is sent. IP literals are read the way the C library's
`inet_aton` reads them (the resolver accepts those spellings too): `2130706433`, `0x7f.1`,
`0177.0.0.1` and `127.1` are all 127.0.0.1. Publication uses `check_url` on URLs whose scheme
and host are written literally, so an obvious internal URL is refused before it is stored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

import yarl

from schemas.errors import FailureKind, StepFailure

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = frozenset({"http", "https"})
ALLOW_ENV = "SCHEMABRIDGE_EGRESS_ALLOW"
LOOPBACK_ALLOW = "127.0.0.0/8,::1/128,localhost"
"""The allow-list entries that admit this machine (the demo downstream, the test suite)."""

_LABELLED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), label)
    for cidr, label in (
        ("0.0.0.0/8", "the unspecified network 0.0.0.0/8"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "a private network (RFC 1918)"),
        ("172.16.0.0/12", "a private network (RFC 1918)"),
        ("192.168.0.0/16", "a private network (RFC 1918)"),
        ("169.254.0.0/16", "link-local, where the cloud metadata service lives"),
        ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
        # Python before 3.11.10 / 3.12.4 calls most of these two global (CVE-2024-4032), so
        # they are named here rather than left to `is_global`: Oracle Cloud's metadata
        # service answers at 192.0.0.192, and a local NAT64 prefix reaches internal IPv4.
        ("192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24, Oracle Cloud's metadata)"),
        ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation (64:ff9b:1::/48)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "the unspecified address"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"),
        ("::/96", "an IPv4-compatible IPv6 address"),
        ("fc00::/7", "unique-local IPv6"),
        ("fe80::/10", "link-local IPv6"),
        ("fec0::/10", "site-local IPv6"),
        ("ff00::/8", "multicast"),
    )
)
"""Ranges refused by default, with the words an error uses for them (first match wins)."""

_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_INET_PART = re.compile(r"^(0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)$")


class EgressConfigError(ValueError):
    """`SCHEMABRIDGE_EGRESS_ALLOW` holds entries that are neither CIDRs nor host patterns."""


class EgressDenied(StepFailure):
    """A GATEWAY call refused by the egress policy: terminal (never retried or redispatched)
    and never counted against the destination's breakers, since nothing was sent.

    `message` becomes the step's error, which the run's tenant reads; `operator_detail`, when
    set, is what only the worker's log may say (the addresses a host name resolved to, which
    would otherwise let a submitter map internal DNS)."""

    def __init__(self, message: str, *, operator_detail: str | None = None) -> None:
        super().__init__(FailureKind.EGRESS_DENIED, message)
        self.operator_detail = operator_detail


def refusal_reason(address: IPAddress) -> str | None:
    """Why the default policy refuses `address`, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    for network, label in _LABELLED:
        if address.version == network.version and address in network:
            return label
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = refusal_reason(embedded)
            if inner is not None:
                return f"an IPv6 address carrying the IPv4 address {embedded} ({inner})"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:
        return "a special-purpose range that is not globally routable"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a 6to4 or NAT64 address leads to (a translator would connect there)."""
    if address in _SIXTOFOUR:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def parse_ip_host(host: str) -> IPAddress | None:
    """The address an IP-literal host names, in every spelling a resolver accepts; None for a
    host name.

    IPv6 may come bracketed and with a zone (`[fe80::1%25eth0]`); IPv4 as `inet_aton` reads it:
    one to four parts, each decimal, hex (`0x`) or octal (leading `0`), the last filling the
    remaining bytes (`127.1`, `2130706433`, `0x7f000001`, `017700000001`). A trailing dot is
    ignored.
    """
    text = unquote(host).strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    text = text.removesuffix(".")
    return _inet_aton(text)


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_PART.match(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part.startswith("0x"):
            values.append(int(part[2:] or "0", 16))
        elif part.startswith("0") and len(part) > 1:
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    number = number << (8 * (4 - len(head))) | last
    return ipaddress.IPv4Address(number)


def _normal_name(host: str) -> str:
    return host.strip().lower().removesuffix(".")


def _is_localhost(name: str) -> bool:
    # RFC 6761: "localhost" and every name under it resolve to loopback.
    return name == "localhost" or name.endswith(".localhost")


@dataclass(frozen=True)
class HostPattern:
    """`billing.internal` (that name) or `*.internal` (every name below `internal`)."""

    pattern: str

    def matches(self, host: str) -> bool:
        name = _normal_name(host)
        if self.pattern.startswith("*."):
            return name.endswith(self.pattern[1:])
        return name == self.pattern


@dataclass(frozen=True)
class EgressPolicy:
    """The default refusals, minus what the allow-list admits.

    `networks` admit addresses (a call whose resolved or literal address is inside one is
    allowed); `hosts` admit names (a call to a matching name is allowed wherever it resolves,
    so the name's DNS is trusted). The empty policy (`EgressPolicy()`) is the default.
    """

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[HostPattern, ...] = ()
    _refusals: dict[str, str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    """`check_host`'s answer by host, as written: the policy never changes, and a fan-out asks
    it of one host per child (parsing an IP literal's spellings was ~2 % of a worker's CPU)."""

    @classmethod
    def parse(cls, text: str) -> EgressPolicy:
        """Read an allow-list: entries separated by commas or whitespace, each a CIDR
        (`10.0.0.0/8`, `fd00::/8`), an address (`10.1.2.3`) or a host pattern
        (`billing.internal`, `*.internal`). Every bad entry is named in one
        `EgressConfigError`."""
        networks: list[IPNetwork] = []
        hosts: list[HostPattern] = []
        problems: list[str] = []
        for entry in (e for e in re.split(r"[,\s]+", text) if e):
            parsed = _parse_entry(entry)
            if isinstance(parsed, str):
                problems.append(parsed)
            elif isinstance(parsed, HostPattern):
                hosts.append(parsed)
            else:
                networks.append(parsed)
        if problems:
            raise EgressConfigError(
                f"the egress allow-list has {len(problems)} bad "
                f"entr{'y' if len(problems) == 1 else 'ies'}: {'; '.join(problems)}. Each entry "
                "is a CIDR (10.0.0.0/8, fd00::/8), an address (10.1.2.3) or a host pattern "
                "(billing.internal, *.internal), separated by commas."
            )
        return cls(tuple(networks), tuple(hosts))

    def extended(self, text: str) -> EgressPolicy:
        """This policy with the entries of `text` admitted too (e.g. `LOOPBACK_ALLOW`)."""
        more = EgressPolicy.parse(text)
        return EgressPolicy(self.networks + more.networks, self.hosts + more.hosts)

    @property
    def entries(self) -> list[str]:
        """The allow-list as written back (for logs and messages)."""
        return [str(n) for n in self.networks] + [h.pattern for h in self.hosts]

    def allows_host_name(self, host: str) -> bool:
        """Whether `host` (a name) is admitted by a host pattern, whatever it resolves to."""
        return any(pattern.matches(host) for pattern in self.hosts)

    def address_refusal(self, address: IPAddress) -> str | None:
        """Why `address` is refused, or None when it may be connected to."""
        if any(address.version == n.version and address in n for n in self.networks):
            return None
        return refusal_reason(address)

    def allowed_addresses(self, host: str, addresses: Iterable[str]) -> list[str]:
        """The resolved `addresses` of `host` a call may connect to (all of them when a host
        pattern admits `host`). Raises `EgressDenied` when none is left."""
        candidates = list(addresses)
        if self.allows_host_name(host):
            return candidates
        allowed: list[str] = []
        refused: list[str] = []
        for text in candidates:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            reason = self.address_refusal(address)
            if reason is None:
                allowed.append(text)
            else:
                refused.append(f"{address} ({reason})")
        if not allowed:
            # The step's error names the host (its author wrote it, or the submitter gave
            # it) but not the addresses: those would answer "what is runsc's address?" for
            # anyone who may submit a run. The worker's log carries them for operators.
            raise EgressDenied(
                f"egress denied: {host} resolves only to addresses the egress policy "
                f"refuses; {_HOW_TO_ALLOW}",
                operator_detail=(
                    f"egress denied: {host} resolves only to refused addresses: "
                    f"{', '.join(refused) or 'none at all'}"
                ),
            )
        return allowed

    def check_url(self, url: str | yarl.URL) -> None:
        """Refuse a URL whose scheme is not http(s) or whose host is an IP literal (any
        spelling) or a `localhost` name the policy refuses. Host names are left to the
        resolver (`allowed_addresses`), and a text that is not a URL to the HTTP client, which
        refuses to send it. Raises `EgressDenied`."""
        try:
            parsed = url if isinstance(url, yarl.URL) else yarl.URL(url)
        except ValueError:
            return  # not a URL: nothing can be connected to, and the client says why
        scheme = parsed.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise EgressDenied(
                f"egress denied: the scheme {scheme or '(none)'}:// is not allowed; "
                "a GATEWAY calls http:// and https:// URLs only"
            )
        self.check_host(parsed.raw_host or "")

    def check_host(self, host: str) -> None:
        """Refuse `host` when it is an IP literal the policy refuses, or a `localhost` name
        no host pattern admits. Raises `EgressDenied`."""
        try:
            refusal = self._refusals[host]
        except KeyError:
            refusal = self._host_refusal(host)
            # Bounded in count and size: hosts a submitter makes up come and go, and one
            # longer than any DNS name (a run's input may give a 250 KB one) is not kept.
            if len(host) <= _HOST_CHARS_KEPT:
                if len(self._refusals) >= _REFUSALS_KEPT:
                    self._refusals.clear()
                self._refusals[host] = refusal
        if refusal is not None:
            raise EgressDenied(refusal)

    def _host_refusal(self, host: str) -> str | None:
        """Why `check_host` refuses `host`, or None."""
        address = parse_ip_host(host)
        if address is not None:
            reason = self.address_refusal(address)
            if reason is None:
                return None
            what = reason if str(address) == host.strip("[]") else f"{address}, {reason}"
            return f"egress denied: {host} is {what}; {_HOW_TO_ALLOW}"
        if _is_localhost(_normal_name(host)) and not self.allows_host_name(host):
            return f"egress denied: {host} is loopback; {_HOW_TO_ALLOW}"
        return None


_REFUSALS_KEPT = 4096
"""Hosts whose `check_host` answer a policy keeps; past it the answers are forgotten at once."""
_HOST_CHARS_KEPT = 253
"""The longest host a policy keeps an answer for: the longest DNS name."""


_HOW_TO_ALLOW = (
    "to call an internal destination on purpose, add its address range or host name to "
    f"{ALLOW_ENV} where the service runs (serve, or its api and worker processes; restart them)"
)
"""Where the setting goes is said: a user who exported it in the shell of the CLI that
published (or submitted) was still refused, the check being the server's."""


def _parse_entry(entry: str) -> IPNetwork | HostPattern | str:
    """A network, a host pattern, or the words saying what is wrong with `entry`."""
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=True)
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.ip_network(entry.strip("[]"), strict=False)
            return f"{entry!r} has host bits set (did you mean {loose}?)"
        if "/" in entry or ":" in entry:
            return f"{entry!r} is not a CIDR or an address"
    short = _inet_aton(entry.removesuffix("."))
    if short is not None:
        return f"{entry!r} is a short or numeric IPv4 spelling; write it as {short}"
    name = _normal_name(entry)
    labels = name.removeprefix("*.").split(".")
    if (
        name in ("", "*")
        or not all(_HOST_LABEL.match(label) for label in labels)
        or labels[-1].isdigit()
    ):
        return f"{entry!r} is not a host pattern"
    if len(labels) == 4 and sum(label.isdigit() for label in labels) == 3:
        # `127.0.0.l`: three numbers and a name, an address mistyped rather than a host's name
        # (`10.0.0.internal` is refused too). Taken as a host pattern it would admit nothing
        # the operator meant, silently.
        return f"{entry!r} is an IPv4 address with a typo, or a host name nobody would give"
    return HostPattern(name)
