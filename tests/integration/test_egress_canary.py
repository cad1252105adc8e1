"""The egress canary: hostile workflows run by a real worker, under the default policy plus one
admitted address (the stand-in public service on 127.0.0.2), must never reach the canary
listening on loopback, whatever spelling of the address they use, through DNS answers that
change between calls, or through redirects. Every run ends FAILED with `egress_denied` (or,
for a redirect, with the unfollowed 3xx), and the canaries count zero connections.

Only loopback is ever a target here: the internal ranges off this machine (RFC 1918, the
metadata address) are covered by the pure tests in tests/unit/test_egress_policy.py, which
connect to nothing, and by the redirect test, whose `Location` is never fetched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from engine.operations import Operations
from engine.runtime import Runtime
from schemas.errors import DefinitionError
from tests.conftest import Backend
from tests.integration.egress_harness import (
    STAND_IN_HOST,
    Canary,
    ControlledResolver,
    StandIn,
    canary,
    stand_in,
)
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, gateway

ALLOW = f"{STAND_IN_HOST}/32"
"""The test's whole allow-list: loopback is NOT allowed (the session-wide setting is
overridden), only the stand-in public service."""


@dataclass
class Setup:
    ops: Operations
    runtime: Runtime
    v4: Canary
    v6: Canary
    public: StandIn
    dns: ControlledResolver


@pytest.fixture
async def setup(backend: Backend) -> AsyncIterator[Setup]:
    dns = ControlledResolver()
    settings = settings_for(backend, egress_allow=ALLOW)
    async with canary("127.0.0.1") as v4, canary("::1") as v6, stand_in() as public:
        runtime = await Runtime.open(settings, resolver=dns)
        try:
            ops = Operations(runtime)
            hostile = {"name": "hostile", "vertices": {"call": gateway("{{ input.url }}")}}
            await ops.workflows.publish(hostile)
            yield Setup(ops, runtime, v4, v6, public, dns)
        finally:
            await runtime.close()


def hostile_urls(v4: int, v6: int) -> dict[str, str]:
    """Every spelling of "this machine" an attacker might try, each aimed at a canary."""
    return {
        "dotted": f"http://127.0.0.1:{v4}/",
        "decimal": f"http://2130706433:{v4}/",
        "hex": f"http://0x7f000001:{v4}/",
        "dotted hex": f"http://0x7f.0x0.0x0.0x1:{v4}/",
        "octal": f"http://017700000001:{v4}/",
        "dotted octal": f"http://0177.0.0.01:{v4}/",
        "short": f"http://127.1:{v4}/",
        "other loopback": f"http://127.10.20.30:{v4}/",
        "trailing dot": f"http://127.0.0.1.:{v4}/",
        "credentials": f"http://user:pw@127.0.0.1:{v4}/",
        "unspecified": f"http://0.0.0.0:{v4}/",
        "zero": f"http://0:{v4}/",
        "https": f"https://127.0.0.1:{v4}/",
        "localhost": f"http://localhost:{v4}/",
        "localhost upper-case dot": f"http://LocalHost.:{v4}/",
        "below localhost": f"http://canary.localhost:{v4}/",
        "ipv6 loopback": f"http://[::1]:{v6}/",
        "ipv6 unspecified": f"http://[::]:{v6}/",
        "ipv4-mapped": f"http://[::ffff:127.0.0.1]:{v4}/",
        "ipv4-mapped hex": f"http://[::ffff:7f00:1]:{v4}/",
        "ipv4-mapped long": f"http://[0:0:0:0:0:ffff:7f00:1]:{v4}/",
        "name to loopback": f"http://internal.example:{v4}/",
        "name to mapped": f"http://mapped.example:{v4}/",
        "name to ipv6 loopback": f"http://six.example:{v6}/",
        "name to several": f"http://several.example:{v4}/",
        "gopher": f"gopher://127.0.0.1:{v4}/_GET%20/",
        "file": "file:///etc/passwd",
    }


DNS = {
    "internal.example": ["127.0.0.1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "six.example": ["::1"],
    "several.example": ["127.0.0.1", "::1", "10.0.0.1"],
    "canary.localhost": ["127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
}


async def _run_all(setup: Setup, urls: dict[str, str]) -> dict[str, Any]:
    submitted = {
        name: (await setup.ops.runs.submit("hostile", {"url": url})).run.id
        for name, url in urls.items()
    }
    async with running_worker(setup.runtime):
        return {name: await ended(setup.ops, run_id) for name, run_id in submitted.items()}


async def test_no_spelling_of_this_machine_reaches_the_canary(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    setup.dns.answers.update(DNS)
    urls = hostile_urls(setup.v4.port, setup.v6.port)
    with caplog.at_level(logging.WARNING, logger="vertices.gateway"):
        runs = await _run_all(setup, urls)
    outcomes = {name: (run.status, run.error and run.error.kind) for name, run in runs.items()}
    assert outcomes == {name: ("FAILED", "egress_denied") for name in urls}
    assert (setup.v4.connections, setup.v6.connections) == (0, 0)
    # Names were asked of the resolver and refused on its answers; literals never were.
    asked = set(setup.dns.lookups)
    assert {"internal.example", "mapped.example", "six.example", "several.example"} <= asked
    assert not asked & {"127.0.0.1", "2130706433", "0x7f000001", "127.1", "::1"}
    # The step's error, which the tenant reads, does not say where an internal name points;
    # the worker's log, which operators read, does.
    message = runs["name to loopback"].error.message
    assert "internal.example resolves only to addresses the egress policy refuses" in message
    assert "127.0.0.1" not in message
    assert "SCHEMABRIDGE_EGRESS_ALLOW" in message
    run_id = runs["name to loopback"].id
    logged = [r.getMessage() for r in caplog.records if r.name == "vertices.gateway"]
    assert any(
        line.startswith(f"step {run_id}/")
        and "internal.example resolves only to refused addresses: 127.0.0.1 (loopback)" in line
        for line in logged
    ), logged
    # Nor does the run's own log.
    lines = [line.message for line in (await setup.ops.runs.logs(run_id)).items]
    assert not [line for line in lines if "127.0.0.1 (loopback)" in line]
    assert "2130706433 is 127.0.0.1, loopback" in runs["decimal"].error.message


async def test_the_admitted_address_is_reachable(setup: Setup) -> None:
    # The control: the same worker, policy and workflow do reach an admitted destination, so
    # the refusals above are the policy's, not a broken client.
    setup.dns.answers["public.example"] = [STAND_IN_HOST]
    runs = await _run_all(
        setup,
        {
            "literal": f"{setup.public.url}/ok",
            "name": f"http://public.example:{setup.public.port}/ok",
        },
    )
    assert {name: run.status for name, run in runs.items()} == {
        "literal": "SUCCEEDED",
        "name": "SUCCEEDED",
    }
    assert setup.public.paths == ["/ok", "/ok"]


async def test_dns_rebinding_is_refused_at_call_time(setup: Setup) -> None:
    # First the name answers the admitted (public) address, and the call goes through...
    setup.dns.answers["rebind.example"] = [STAND_IN_HOST]
    first = await _run_all(setup, {"first": f"http://rebind.example:{setup.public.port}/ok"})
    assert first["first"].status == "SUCCEEDED"
    # ... then it answers loopback. The address checked is the one connected to, so the new
    # answer is refused. (Another port: a connection pooled for the first call, whose address
    # was checked, must not be what the second one uses.)
    setup.dns.answers["rebind.example"] = ["127.0.0.1"]
    second = await _run_all(setup, {"second": f"http://rebind.example:{setup.v4.port}/"})
    assert (second["second"].status, second["second"].error.kind) == ("FAILED", "egress_denied")
    assert setup.dns.lookups.count("rebind.example") == 2
    assert setup.v4.connections == 0
    assert setup.public.paths == ["/ok"]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_inward_is_never_followed(setup: Setup, status: int) -> None:
    targets = {
        "metadata": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "canary": f"{setup.v4.url}/admin",
        "mapped canary": f"http://[::ffff:127.0.0.1]:{setup.v4.port}/",
    }
    urls = {
        name: f"{setup.public.url}/redirect?status={status}&to={target}"
        for name, target in targets.items()
    }
    runs = await _run_all(setup, urls)
    for run in runs.values():
        assert run.status == "FAILED"
        assert (run.error.kind, run.error.http_status) == ("http_error", status)
    assert len(setup.public.paths) == len(targets)  # one request each, nothing followed
    assert setup.v4.connections == 0


async def test_literal_internal_urls_are_refused_at_publication(setup: Setup) -> None:
    document = {
        "name": "literal-hostile",
        "vertices": {
            "metadata": gateway("http://169.254.169.254/latest/meta-data/"),
            "octal": gateway(f"http://0177.0.0.1:{setup.v4.port}/x/{{{{ input.id }}}}"),
            "mapped": gateway("http://[::ffff:10.0.0.1]/"),
            "local": gateway("http://localhost/"),
            # Templated userinfo, literal host: judged like any literal host.
            "userinfo": gateway("http://svc:{{ input.pw }}@10.0.0.1/"),
            # Templated port, literal scheme and host: the port never moves the address.
            "port": gateway("http://127.0.0.1:{{ input.port }}/x"),
            "port-v6": gateway("http://[::1]:{{ input.port }}/x?q={{ input.q }}"),
            "fine": gateway("https://api.example.com/{{ input.id }}"),
            "fine-port": gateway("https://api.example.com:{{ input.port }}/x"),
            "templated": gateway("http://{{ input.host }}/"),
        },
    }
    with pytest.raises(DefinitionError) as caught:
        await setup.ops.workflows.publish(document)
    problems = {p.pointer: p for p in caught.value.problems}
    assert set(problems) == {
        f"/vertices/{v}/config/url"
        for v in ("metadata", "octal", "mapped", "local", "userinfo", "port", "port-v6")
    }
    assert {p.code for p in problems.values()} == {"egress_denied"}
    assert "link-local" in problems["/vertices/metadata/config/url"].message
    assert "refused at run time" in problems["/vertices/octal/config/url"].message
    assert "loopback" in problems["/vertices/port/config/url"].message
    # `validate` says the same without publishing.
    assert [p.pointer for p in await setup.ops.workflows.validate(document)] == sorted(problems)
