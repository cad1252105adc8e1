"""`GET /metrics` over real HTTP, parsed with prometheus_client's own text parser: request
latency by route template and status, runs by status and the ready queue (database), admission
limit, in-flight calls, cap and breaker states per destination (Redis) — after real runs
through a real worker — on both backends; a failing source is reported, not fatal; an admin
key is needed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from api.rest import borrowed_runtime, create_app
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.metrics import WorkerMetrics
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run


@dataclass
class Served:
    url: str
    runtime: Runtime
    key: str


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    # The figures, not the sources' timeout (a test of its own below), are these tests'
    # subject: a loaded CI machine once took more than the default 2 s to count the runs,
    # and the scrape rightly left them out.
    runtime = await Runtime.open(settings_for(backend, health_timeout_s=30.0))
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime))
    key = (await Operations(runtime).keys.create(admin=True)).key
    try:
        async with serving(app) as url:
            yield Served(url, runtime, key)
    finally:
        await runtime.close()


def _samples(text: str) -> dict[str, list[Sample]]:
    found: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def _value(samples: list[Sample], **labels: str) -> float:
    matching = [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (labels, samples)
    return matching[0]


def _lookup(base: str) -> Workflow:
    return Workflow.model_validate(
        {"name": "lookup", "vertices": {"get": {"type": "GATEWAY", "config": {"url": base}}}}
    )


async def test_metrics_report_http_runs_queue_and_admission(
    served: Served, downstream: RunningDownstream
) -> None:
    runtime = served.runtime
    workflow = _lookup(f"{downstream.url}/customers/1")
    async with running_worker(runtime):
        for _ in range(2):
            run_id = await start(runtime, [workflow], {})
            assert (await wait_for_run(runtime, run_id)).status == "SUCCEEDED"
    queued = await start(runtime, [workflow], {})  # no worker now: it stays RUNNING, READY

    async with client(served.url) as anonymous:
        # Refused by the key gate before routing: counted under its route all the same.
        refused = await anonymous.post("/workflows/lookup/runs", json={"input": {}})
        assert refused.status_code == 401
    async with client(served.url, served.key) as http:
        await http.get("/health")
        await http.delete("/keys/0123456789ab")  # a 404 on a templated route
        await http.get("/no/such/path")
        # A second new user's tour: an uptime monitor's HEAD and the monitor's files were
        # counted as `<unmatched>`, beside the 404 scans.
        await http.head("/health")
        await http.get("/ui/style.css")
        answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples = _samples(answer.text)

    latency = samples["schemabridge_http_request_duration_seconds_count"]
    assert _value(latency, method="GET", route="/health", status="200") == 1
    assert _value(latency, method="DELETE", route="/keys/{key_id}", status="404") == 1
    assert _value(latency, method="GET", route="<unmatched>", status="404") == 1
    assert _value(latency, method="HEAD", route="/health", status="200") == 1
    assert _value(latency, method="POST", route="/workflows/{name}/runs", status="401") == 1
    assert _value(latency, method="GET", route="/ui/{path}", status="200") == 1
    assert not [s for s in latency if s.labels["route"] == "/no/such/path"]
    buckets = samples["schemabridge_http_request_duration_seconds_bucket"]
    assert _value(buckets, method="GET", route="/health", le="+Inf") == 1

    runs = samples["schemabridge_runs"]
    assert _value(runs, status="SUCCEEDED") == 2
    assert _value(runs, status="RUNNING") == 1
    assert _value(runs, status="FAILED") == 0
    # Only the statuses a run can be in (PENDING is a step's, never a run's).
    assert {s.labels["status"] for s in runs} == {"RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}
    assert _value(samples["schemabridge_ready_steps"]) == 1
    assert queued

    destination = downstream.url
    assert _value(samples["schemabridge_admission_limit"], destination=destination) >= 1
    assert _value(samples["schemabridge_admission_in_flight"], destination=destination) == 0
    cap = runtime.settings.default_max_concurrency
    assert _value(samples["schemabridge_admission_cap"], destination=destination) == cap
    breaker = samples["schemabridge_breaker_state"]
    for state, expected in (("closed", 1), ("open", 0), ("half_open", 0)):
        labels = {"destination": destination, "layer": "global", "tenant": "", "state": state}
        assert _value(breaker, **labels) == expected
    up = samples["schemabridge_dependency_up"]
    assert _value(up, dependency="database") == _value(up, dependency="redis") == 1


async def test_metrics_need_an_admin_key(served: Served) -> None:
    tenant_key = (await Operations(served.runtime).keys.create(tenant="acme")).key
    async with client(served.url) as http:
        anonymous = await http.get("/metrics")
    async with client(served.url, tenant_key) as http:
        tenant = await http.get("/metrics")
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthorized")
    assert (tenant.status_code, tenant.json()["code"]) == (403, "forbidden")


async def test_openmetrics_is_served_when_asked_for(served: Served) -> None:
    async with client(served.url, served.key) as http:
        answer = await http.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.rstrip().endswith("# EOF")


async def test_a_failing_source_is_reported_and_the_rest_still_answers(
    backend: Backend,
) -> None:
    # The database answers; Redis is down: no admission series, dependency_up says why.
    settings = settings_for(backend).model_copy(
        update={"redis_url": "redis://127.0.0.1:1/0", "health_timeout_s": 1.0}
    )
    runtime = await Runtime.open(settings)
    try:
        app = create_app(settings, runtime_factory=borrowed_runtime(runtime), auth=False)
        async with serving(app) as url, client(url) as http:
            answer = await http.get("/metrics")
    finally:
        await runtime.close()
    assert answer.status_code == 200
    samples = _samples(answer.text)
    up = samples["schemabridge_dependency_up"]
    assert _value(up, dependency="redis") == 0
    assert _value(up, dependency="database") == 1
    assert "schemabridge_admission_limit" not in samples
    assert _value(samples["schemabridge_runs"], status="RUNNING") == 0


def test_each_app_has_its_own_registry() -> None:
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:")
    first, second = create_app(settings), create_app(settings)
    first.state.schemabridge.metrics.observe("GET", "/health", 200, 0.01)
    name = "schemabridge_http_request_duration_seconds_count"
    labels = {"method": "GET", "route": "/health", "status": "200"}
    assert first.state.schemabridge.metrics.registry.get_sample_value(name, labels) == 1
    assert second.state.schemabridge.metrics.registry.get_sample_value(name, labels) is None
    assert REGISTRY.get_sample_value(name, labels) is None, "never the process-global registry"


def test_serve_adds_its_workers_series_to_the_apis() -> None:
    """`serve` runs a worker in the API's process: its one `/metrics` has the worker's too."""
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:")
    worker = WorkerMetrics()
    app = create_app(settings, worker_metrics=worker)
    worker.attempt("https://a.example:443", 200, None, 0.01)
    registry = app.state.schemabridge.metrics.registry
    labels = {"destination": "https://a.example:443", "outcome": "2xx"}
    assert registry.get_sample_value("schemabridge_gateway_attempts_total", labels) == 1
    plain = create_app(settings)  # `api`: no worker, no worker series
    names = {m.name for m in plain.state.schemabridge.metrics.registry.collect()}
    assert "schemabridge_gateway_attempts" not in names
