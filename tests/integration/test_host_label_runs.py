"""Run input that makes one label of a GATEWAY's host, beside host text the author wrote
(`http://api.partner.{{ input.tld }}:…`), must not move the call to another domain: a real
worker on both backends, the test's DNS answering loopback for the intended name and for the
names a hostile value would make, and two loopback listeners, the intended one and the one
the hostile values aim at. The hostile runs end FAILED with `invalid_config` on that step,
and the other listener counts zero connections (its names are never even looked up)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.egress_harness import Canary, ControlledResolver, canary
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, gateway
from vertices.egress import LOOPBACK_ALLOW

TEMPLATE = "http://api.partner.{{ input.tld }}:{{ input.port }}/v1/orders"
ELSEWHERE = "api.partner.test.evil.test"
"""Where a value with dots, or with a dot form IDNA turns into one, would send the call."""


@dataclass
class Setup:
    ops: Operations
    runtime: Runtime
    partner: Canary
    elsewhere: Canary
    dns: ControlledResolver


@pytest.fixture
async def setup(backend: Backend) -> AsyncIterator[Setup]:
    dns = ControlledResolver({"api.partner.test": ["127.0.0.1"], ELSEWHERE: ["127.0.0.1"]})
    settings = settings_for(backend, egress_allow=LOOPBACK_ALLOW)
    async with canary("127.0.0.1") as partner, canary("127.0.0.1") as elsewhere:
        runtime = await Runtime.open(settings, resolver=dns)
        try:
            ops = Operations(runtime)
            await ops.workflows.publish({"name": "orders", "vertices": {"call": gateway(TEMPLATE)}})
            yield Setup(ops, runtime, partner, elsewhere, dns)
        finally:
            await runtime.close()


HOSTILE = {
    "dots": "test.evil.test",
    "trailing dot": "test.evil.test.",
    "upper case": "TEST.EVIL.TEST",
    "ideographic full stop": "test\u3002evil\u3002test",
    "fullwidth full stop": "test\uff0eevil\uff0etest",
    "halfwidth ideographic full stop": "test\uff61evil\uff61test",
}


async def test_a_value_cannot_add_labels_to_the_host_the_author_wrote(setup: Setup) -> None:
    submitted = {
        name: (await setup.ops.runs.submit("orders", {"tld": tld, "port": setup.elsewhere.port}))
        for name, tld in HOSTILE.items()
    }
    control = await setup.ops.runs.submit("orders", {"tld": "test", "port": setup.partner.port})
    async with running_worker(setup.runtime):
        runs = {name: await ended(setup.ops, s.run.id) for name, s in submitted.items()}
        allowed = await ended(setup.ops, control.run.id)

    # The control: the same workflow, worker and DNS reach the intended host.
    assert allowed.status == "SUCCEEDED"
    assert setup.partner.connections == 1
    for name, run in runs.items():
        assert run.status == "FAILED", name
        assert run.error is not None
        assert (run.error.kind, run.error.vertex_id) == ("invalid_config", "call"), name
        message = run.error.message
        assert message.startswith("url: the value of {{ input.tld }} is in the url's host label")
        assert "check the run's input" in message and "\n" not in message
        [step] = run.steps
        assert step.status == "FAILED" and step.error is not None
        assert step.error.kind == "invalid_config"
    assert "holds '.'" in runs["dots"].error.message  # type: ignore[union-attr]
    assert "holds '\u3002'" in runs["ideographic full stop"].error.message  # type: ignore[union-attr]
    assert setup.elsewhere.connections == 0
    assert ELSEWHERE not in setup.dns.lookups
