"""Reading `SCHEMABRIDGE_TRUSTED_PROXIES` (`engine.settings.parse_trusted_proxies`): addresses
and CIDR networks, IPv4 and IPv6, separated by commas; every bad entry named at once; `*` and
/0 refused, since trusting every peer lets any client choose its logged address."""

from __future__ import annotations

import ipaddress
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.settings import TRUSTED_PROXIES_FORMAT, Settings, parse_trusted_proxies


def test_addresses_and_networks_of_both_families() -> None:
    parsed = parse_trusted_proxies(" 127.0.0.1, 10.0.0.0/8,fd00::/8 ,::1,, 192.0.2.0/255.255.255.0")
    assert [str(network) for network in parsed] == [
        "127.0.0.1/32",
        "10.0.0.0/8",
        "fd00::/8",
        "::1/128",
        "192.0.2.0/24",
    ]


@pytest.mark.parametrize("text", ["", " ", ","])
def test_empty_trusts_none(text: str) -> None:
    assert parse_trusted_proxies(text) == ()


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("10.0.0.0/33", "'10.0.0.0/33' has a bad prefix length ('33' is not a valid netmask)"),
        ("fd00::/129", "'fd00::/129' has a bad prefix length ('129' is not a valid netmask)"),
        ("abc", "'abc' is not an address or a CIDR network"),
        ("proxy.internal", "'proxy.internal' is not an address or a CIDR network"),
        ("10.0.0.256", "'10.0.0.256' is not an address or a CIDR network"),
        ("10.0.0.1/8", "'10.0.0.1/8' has host bits set (did you mean 10.0.0.0/8?)"),
        ("*", "'*' (every peer) is not accepted: any client could then set its own address"),
        ("0.0.0.0/0", "'0.0.0.0/0' trusts every peer: any client could then set its own address"),
        ("::/0", "'::/0' trusts every peer: any client could then set its own address"),
    ],
)
def test_a_bad_entry_is_named_with_the_fix(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match="bad entry") as refused:
        parse_trusted_proxies(f"127.0.0.1, {entry}")
    assert str(refused.value) == (
        f"the trusted-proxy list has 1 bad entry: {problem}. Each entry is an address "
        "(10.1.2.3, fd00::1) or a CIDR network (10.0.0.0/8, fd00::/8) of your proxies, "
        "separated by commas; empty trusts none."
    )


def test_every_bad_entry_is_named_at_once() -> None:
    with pytest.raises(ValueError, match=r"has 2 bad entries: 'abc' .*; '\*' "):
        parse_trusted_proxies("abc, 10.0.0.0/8, *")


def test_the_setting_is_read_and_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEMABRIDGE_TRUSTED_PROXIES", "10.0.0.0/8")
    assert Settings().trusted_proxy_networks() == (ipaddress.ip_network("10.0.0.0/8"),)
    monkeypatch.setenv("SCHEMABRIDGE_TRUSTED_PROXIES", "10.0.0.0/33")
    with pytest.raises(ValidationError, match="SCHEMABRIDGE_TRUSTED_PROXIES"):
        Settings()


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Neither spelling of the setting in the environment."""
    monkeypatch.delenv("SCHEMABRIDGE_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("TRUSTED_PROXIES", raising=False)
    return monkeypatch


@pytest.mark.parametrize("variable", ["SCHEMABRIDGE_TRUSTED_PROXIES", "TRUSTED_PROXIES"])
@pytest.mark.parametrize(
    ("value", "networks"),
    [
        ("10.20.0.0/24, fd00:20::/64,192.0.2.7", ["10.20.0.0/24", "fd00:20::/64", "192.0.2.7/32"]),
        ("", []),
        (" , ", []),
    ],
    ids=["valid", "empty", "blank"],
)
def test_the_settings_object_reads_either_spelling(
    unset: pytest.MonkeyPatch, variable: str, value: str, networks: list[str]
) -> None:
    unset.setenv(variable, value)
    assert [str(network) for network in Settings().trusted_proxy_networks()] == networks


@pytest.mark.parametrize("variable", ["SCHEMABRIDGE_TRUSTED_PROXIES", "TRUSTED_PROXIES"])
@pytest.mark.parametrize("value", ["proxy.internal", "10.0.0.0/33", "10.0.0.1;10.0.0.2", "*"])
def test_a_malformed_value_is_refused_naming_the_setting_and_valid_values(
    unset: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    unset.setenv(variable, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    (problem,) = refused.value.errors()
    # The CLI prints this as `error: invalid setting LOC: MSG` (api.cli.main), one line.
    assert problem["loc"] == ("SCHEMABRIDGE_TRUSTED_PROXIES",)
    assert "\n" not in problem["msg"]
    assert f"'{value}'" in problem["msg"] and TRUSTED_PROXIES_FORMAT in problem["msg"]
    assert "10.0.0.0/8" in TRUSTED_PROXIES_FORMAT  # an example of a valid value


def test_by_default_no_proxy_is_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEMABRIDGE_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("TRUSTED_PROXIES", raising=False)
    assert Settings().trusted_proxy_networks() == ()


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])


def test_uvicorn_is_required_and_installed_at_0_49_or_later() -> None:
    # The parsing is uvicorn's: CIDR networks match from 0.31 (before, every entry, an address
    # too as it is passed, "127.0.0.1/32", was a literal no peer matched: nothing trusted), and
    # several X-Forwarded-For headers are one list from 0.49 (0.31-0.47 read the last only,
    # 0.48 none): an install the requirement allows must behave as docs/security.md says.
    # This checks the versions only; how the header is read is
    # tests/e2e/test_trusted_proxies.py's, over real HTTP.
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (required,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("uvicorn")]
    assert _release(required.removeprefix("uvicorn>=")) >= (0, 49), required
    assert _release(metadata.version("uvicorn")) >= _release(required.removeprefix("uvicorn>="))
