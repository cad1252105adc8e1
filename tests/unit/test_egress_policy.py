"""The egress policy's pure parts: which addresses are refused and why, how IP literals are
read in every spelling a resolver accepts, and how the allow-list is parsed (every bad entry in
one error)."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.errors import FailureKind
from vertices import egress
from vertices.egress import (
    EgressConfigError,
    EgressDenied,
    EgressPolicy,
    parse_ip_host,
    refusal_reason,
)

DEFAULT = EgressPolicy()

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "10.1.2.3": "RFC 1918",
    "172.16.0.1": "RFC 1918",
    "172.31.255.255": "RFC 1918",
    "192.168.1.1": "RFC 1918",
    "169.254.169.254": "metadata",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.255": "carrier-grade NAT",
    "0.0.0.0": "unspecified",
    "224.0.0.251": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.10": "not globally routable",  # documentation range
    "198.18.0.1": "not globally routable",  # benchmarking range
    # Global to Python before 3.11.10 / 3.12.4 (CVE-2024-4032): refused whatever its version.
    "192.0.0.192": "Oracle Cloud's metadata",
    "192.0.0.8": "IETF protocol assignments",
    "64:ff9b:1::a00:1": "local-use IPv4/IPv6 translation",
    "64:ff9b:1::7f00:1": "local-use IPv4/IPv6 translation",
    "::": "unspecified",
    "::1": "loopback",
    "fc00::1": "unique-local",
    "fd12:3456::1": "unique-local",
    "fe80::1": "link-local IPv6",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "::ffff:127.0.0.1": "IPv4-mapped",
    "::ffff:8.8.8.8": "IPv4-mapped",  # never needed: a mapped address is refused outright
    "::127.0.0.1": "IPv4-compatible",
    "2002:7f00:1::": "127.0.0.1",  # 6to4 carrying loopback
    "2002:a9fe:a9fe::": "169.254.169.254",  # 6to4 carrying the metadata address
    "64:ff9b::a00:1": "10.0.0.1",  # NAT64 carrying a private address
    "2001:db8::1": "not globally routable",
    "fd00:ec2::254": "unique-local",  # the AWS metadata address over IPv6
}

PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2002:808:808::"]


@pytest.mark.parametrize(("text", "words"), sorted(REFUSED.items()))
def test_internal_addresses_are_refused_with_a_reason(text: str, words: str) -> None:
    reason = refusal_reason(ipaddress.ip_address(text))
    assert reason is not None
    assert words.lower() in reason.lower()


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses_are_allowed(text: str) -> None:
    assert refusal_reason(ipaddress.ip_address(text)) is None


_INTERNAL_V4 = [
    ipaddress.ip_network(n)
    for n in [
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
    ]
]


@st.composite
def internal_ipv4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    network = draw(st.sampled_from(_INTERNAL_V4))
    offset = draw(st.integers(0, network.num_addresses - 1))
    return ipaddress.IPv4Address(int(network.network_address) + offset)


@given(internal_ipv4())
def test_every_address_of_the_internal_ipv4_ranges_is_refused(
    address: ipaddress.IPv4Address,
) -> None:
    assert refusal_reason(address) is not None
    # ... and so is the same address hidden in IPv6 (mapped, 6to4).
    assert refusal_reason(ipaddress.IPv6Address(f"::ffff:{address}")) is not None
    assert refusal_reason(ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80))) is not None


@given(st.integers(0, 2**32 - 1))
def test_a_refused_ipv4_is_refused_in_every_spelling(number: int) -> None:
    address = ipaddress.IPv4Address(number)
    octets = [int(part) for part in str(address).split(".")]
    spellings = [
        str(number),  # one decimal number
        hex(number),  # one hex number
        "0" + oct(number)[2:],  # one octal number
        ".".join(hex(o) for o in octets),  # dotted hex
        ".".join("0" + oct(o)[2:] for o in octets),  # dotted octal
        f"{octets[0]}.{(octets[1] << 16) | (octets[2] << 8) | octets[3]}",  # a.b (24-bit tail)
        f"{octets[0]}.{octets[1]}.{(octets[2] << 8) | octets[3]}",  # a.b.c (16-bit tail)
        f"{address}.",  # trailing dot
    ]
    for spelling in spellings:
        assert parse_ip_host(spelling) == address, spelling


@pytest.mark.parametrize(
    "spelling",
    ["2130706433", "0x7f000001", "017700000001", "0x7f.1", "127.1", "0177.0.0.01"],
)
def test_the_resolver_agrees_with_our_reading_of_short_spellings(spelling: str) -> None:
    # The C library reads numeric hosts itself (no DNS): a connection would use its reading,
    # so ours must match it. (It sends "127.0.0.1." to DNS as a name; we read it as the
    # address, which can only refuse more.)
    resolved = socket.getaddrinfo(spelling, 80, socket.AF_INET, socket.SOCK_STREAM)
    assert {info[4][0] for info in resolved} == {"127.0.0.1"}
    assert parse_ip_host(spelling) == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::1]", "::1"),
        ("[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe"),
        ("[fe80::1%25eth0]", "fe80::1%eth0"),
        ("example.com", None),
        ("1password.com", None),
        ("127.0.0.1.nip.io", None),
        ("0x7g.1", None),
        ("256.1.1.1", None),
        ("1.2.3.4.5", None),
        ("", None),
    ],
)
def test_parse_ip_host(host: str, expected: str | None) -> None:
    parsed = parse_ip_host(host)
    assert (None if parsed is None else str(parsed)) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0x7f.1:8080/",
        "http://0177.0.0.1/",
        "http://[::1]:80/",
        "http://[::ffff:127.0.0.1]/",
        "http://[0:0:0:0:0:ffff:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0/",
        "http://[::]/",
        "http://localhost:8000/",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "https://10.0.0.1/",
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com/",
    ],
)
def test_check_url_refuses_internal_literals_and_other_schemes(url: str) -> None:
    with pytest.raises(EgressDenied) as caught:
        DEFAULT.check_url(url)
    assert caught.value.kind is FailureKind.EGRESS_DENIED
    assert not caught.value.redispatchable
    assert caught.value.message.startswith("egress denied:")


@pytest.mark.parametrize(
    "url", ["http://example.com/", "https://8.8.8.8/", "http://[2606:4700::1]/", "http://a.b/"]
)
def test_check_url_leaves_public_literals_and_names(url: str) -> None:
    DEFAULT.check_url(url)


def test_resolved_addresses_are_filtered_and_all_refused_is_a_denial() -> None:
    mixed = ["10.0.0.5", "93.184.216.34", "::1"]
    assert DEFAULT.allowed_addresses("mixed.example", mixed) == ["93.184.216.34"]
    with pytest.raises(EgressDenied) as caught:
        DEFAULT.allowed_addresses("rebound.example", ["127.0.0.1", "169.254.169.254"])
    # The step's error (tenants read it) names the host, never what it resolved to.
    message = caught.value.message
    assert message.startswith(
        "egress denied: rebound.example resolves only to addresses the egress policy refuses; "
    )
    assert "127.0.0.1" not in message and "169.254" not in message
    # Where the setting goes: the server's processes, not the shell of the CLI that published.
    assert "SCHEMABRIDGE_EGRESS_ALLOW where the service runs (serve, or its api and" in message
    # The worker's log (operators) gets the addresses and why each is refused.
    detail = caught.value.operator_detail
    assert detail is not None
    assert detail.startswith("egress denied: rebound.example resolves only to refused addresses")
    assert "127.0.0.1 (loopback)" in detail
    assert "169.254.169.254 (link-local, where the cloud metadata service lives)" in detail


def test_the_allow_list_admits_networks_and_names() -> None:
    policy = EgressPolicy.parse("10.20.0.0/16, fd00::/8 billing.internal,*.corp.example")
    assert policy.address_refusal(ipaddress.ip_address("10.20.3.4")) is None
    assert policy.address_refusal(ipaddress.ip_address("10.21.0.1")) is not None
    assert policy.address_refusal(ipaddress.ip_address("fd00::5")) is None
    policy.check_url("http://10.20.0.9:8080/")
    # A name admitted by a pattern may resolve anywhere: its DNS is trusted.
    assert policy.allowed_addresses("BILLING.internal.", ["10.9.9.9"]) == ["10.9.9.9"]
    assert policy.allowed_addresses("a.b.corp.example", ["192.168.0.1"]) == ["192.168.0.1"]
    with pytest.raises(EgressDenied):
        policy.allowed_addresses("corp.example", ["192.168.0.1"])  # `*.` is below, not at
    with pytest.raises(EgressDenied):
        policy.allowed_addresses("other.internal", ["10.9.9.9"])
    # A CIDR admits the address, not its IPv4-mapped twin.
    with pytest.raises(EgressDenied):
        policy.check_url("http://[::ffff:10.20.0.9]/")


def test_loopback_allowed_by_name_and_by_network() -> None:
    policy = EgressPolicy.parse("127.0.0.0/8,::1/128,localhost")
    policy.check_url("http://127.0.0.1:9/")
    policy.check_url("http://0x7f.1:9/")
    policy.check_url("http://[::1]:9/")
    policy.check_url("http://localhost:9/")
    with pytest.raises(EgressDenied):
        policy.check_url("http://169.254.169.254/")
    with pytest.raises(EgressDenied):
        policy.check_url("http://api.localhost/")  # only the name given, not those below


def test_an_empty_allow_list_is_the_default_policy() -> None:
    assert EgressPolicy.parse("") == EgressPolicy.parse(" , ,\n") == DEFAULT


def test_every_bad_entry_is_named_in_one_error() -> None:
    with pytest.raises(EgressConfigError) as caught:
        EgressPolicy.parse(
            "10.0.0.0/8, 10.1.2.3/8, under_score.com, *, 127.1, 10.0.0.0/33, a:b, 127.0.0.l"
        )
    message = str(caught.value)
    assert message.startswith("the egress allow-list has 7 bad entries:")
    assert "'10.1.2.3/8' has host bits set (did you mean 10.0.0.0/8?)" in message
    assert "'under_score.com' is not a host pattern" in message
    assert "'*' is not a host pattern" in message
    assert "'127.1' is a short or numeric IPv4 spelling; write it as 127.0.0.1" in message
    assert "'10.0.0.0/33' is not a CIDR or an address" in message
    assert "'a:b' is not a CIDR or an address" in message
    assert "'127.0.0.l' is an IPv4 address with a typo, or a host name nobody" in message
    assert "Each entry is a CIDR" in message  # how to fix it


def test_a_name_with_numbers_is_still_a_host_pattern() -> None:
    """Only an address's shape with one label mistyped is refused: names with numbers pass."""
    policy = EgressPolicy.parse("10.internal, api-2.eu-1.example, 1.2.example, 10.0.0.0.example")
    assert [h.pattern for h in policy.hosts] == [
        "10.internal",
        "api-2.eu-1.example",
        "1.2.example",
        "10.0.0.0.example",
    ]


@given(st.lists(st.sampled_from(["10.0.0.0/8", "fd00::/8", "*.internal", "db.local", "::1"])))
def test_parsing_round_trips_through_entries(entries: list[str]) -> None:
    policy = EgressPolicy.parse(",".join(entries))
    assert EgressPolicy.parse(",".join(policy.entries)) == policy


def test_a_hosts_answer_is_kept_per_policy_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`check_host` keeps its answer by host (a fan-out asks it of one host per child): the
    same refusal a second time, another policy's own answer, and at most a bound of hosts."""
    default = EgressPolicy()
    for _ in range(2):
        with pytest.raises(EgressDenied, match=r"127\.0\.0\.1 is loopback"):
            default.check_url("http://127.0.0.1:8080/x")
    admitting = default.extended("127.0.0.0/8")
    admitting.check_url("http://127.0.0.1:8080/x")  # its own answer, not the default's
    with pytest.raises(EgressDenied, match=r"127\.0\.0\.1 is loopback"):
        default.check_url("http://127.0.0.1:8080/x")
    monkeypatch.setattr(egress, "_REFUSALS_KEPT", 3)
    bounded = EgressPolicy()
    for last in range(1, 8):
        with pytest.raises(EgressDenied):
            bounded.check_host(f"10.0.0.{last}")
        assert len(bounded._refusals) <= 3
    # A host longer than any DNS name (a run's input may give one) is checked, not kept.
    long_host = "a" * 100_000
    kept = EgressPolicy()
    kept.check_host(long_host)
    assert kept._refusals == {}
