"""A worker's own `/metrics` on its health port, scraped over real HTTP from a real `schemabridge
worker` process after it ran a workflow against a loopback downstream that answers 200, then
500: GATEWAY attempts by destination and outcome class, their latency, the steps it finished by
vertex type and outcome; `/health` still answers, and the scrape needs an admin key like the
api's. On both backends."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.e2e.rest_harness import client, process_env, service
from tests.integration.engine_harness import settings_for, start, wait_for_run

SCRAPE_TIMEOUT_S = 10.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _two_calls(base: str) -> Workflow:
    """`first` then `second`, one attempt each, to the same path of the downstream."""
    call = {"url": f"{base}/orders", "retry": {"maxAttempts": 1}}
    return Workflow.model_validate(
        {
            "name": "two-calls",
            "vertices": {
                "first": {"type": "GATEWAY", "config": call},
                "second": {"type": "GATEWAY", "config": call, "dependsOn": ["first"]},
            },
        }
    )


def _parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def _scrape_until(http: httpx.AsyncClient, done: str, **labels: str) -> Samples:
    """The worker's metrics once `done{labels}` is there: a flush counts its steps just after
    its transaction commits, so a run may read as ended a moment before."""
    deadline = time.monotonic() + SCRAPE_TIMEOUT_S
    while True:
        answer = await http.get("/metrics")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        samples = _parse(answer.text)
        if _value(samples, done, **labels) is not None or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.05)


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    """The test's view of the database the worker process uses (it submits, and reads)."""
    opened = await Runtime.open(settings_for(backend))
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_worker_serves_its_attempts_latency_and_steps(
    backend: Backend, runtime: Runtime, downstream: RunningDownstream, tmp_path: Path
) -> None:
    ops = Operations(runtime)
    key = (await ops.keys.create(admin=True)).key
    tenant_key = (await ops.keys.create(tenant="acme")).key
    env = process_env(backend, tmp_path)
    args = ["worker", "--name", "wm", "--health-port", "0", "--log-level", "warning"]
    with service(args, env, tmp_path / "worker.log") as worker:
        url = await asyncio.to_thread(worker.wait_for_url)
        downstream.script([200, 500])
        run_id = await start(runtime, [_two_calls(downstream.url)], {})
        run = await wait_for_run(runtime, run_id)
        assert run.status == "FAILED", run
        async with client(url, key) as http:
            health = await http.get("/health")
            samples = await _scrape_until(
                http, "schemabridge_steps_finished_total", vertex_type="GATEWAY", outcome="failed"
            )
        async with client(url) as http:
            anonymous = await http.get("/metrics")
        async with client(url, tenant_key) as http:
            tenant = await http.get("/metrics")
        assert worker.stop(signal.SIGTERM) == 0
    assert "Traceback" not in worker.stderr()
    assert [r.outcome for r in downstream.stats.recent] == ["200", "500"]

    assert health.json() == {"status": "ok"}
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthorized")
    assert (tenant.status_code, tenant.json()["code"]) == (403, "forbidden")
    # Its access log (`changes` by default) names the refused scrapes, not the good ones: a
    # scraper with a wrong key is seen in the worker's own log.
    access = [json.loads(line) for line in worker.stderr().splitlines() if '"route"' in line]
    assert [(a["method"], a["path"], a["status"]) for a in access] == [
        ("GET", "/metrics", 401),
        ("GET", "/metrics", 403),
    ], worker.stderr()

    destination = downstream.url  # the admission key: scheme://host:port
    attempts = "schemabridge_gateway_attempts_total"
    assert _value(samples, attempts, destination=destination, outcome="2xx") == 1
    assert _value(samples, attempts, destination=destination, outcome="5xx") == 1
    assert {dict(labels)["outcome"] for name, labels in samples if name == attempts} == {
        "2xx",
        "5xx",
    }

    latency = "schemabridge_gateway_attempt_duration_seconds"
    assert _value(samples, f"{latency}_count", destination=destination) == 2
    assert _value(samples, f"{latency}_bucket", destination=destination, le="+Inf") == 2
    total_s = _value(samples, f"{latency}_sum", destination=destination)
    assert total_s is not None and 0 < total_s < 10

    steps = "schemabridge_steps_finished_total"
    assert _value(samples, steps, vertex_type="GATEWAY", outcome="succeeded") == 1
    assert _value(samples, steps, vertex_type="GATEWAY", outcome="failed") == 1
    assert not [labels for name, labels in samples if name == steps and "run" in dict(labels)]
