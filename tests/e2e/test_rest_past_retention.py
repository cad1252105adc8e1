"""A run whose tree run retention is deleting, over real HTTP (uvicorn on loopback), on both
backends: its retry is a 409 `run_past_retention` naming the setting and the fix, its
preview says so, a batch retry skips it, `schemabridge runs retry` says it in one line
(exit 1), and its start over still makes a new run."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from api.rest import borrowed_runtime, create_app
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from schemas.clock import FakeClock
from tests import cli_forks
from tests.conftest import Backend
from tests.e2e.cli_harness import assert_refused
from tests.e2e.rest_harness import ROOT, SCHEMABRIDGE, client, serving
from tests.integration.actions_harness import failed_fan_out
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.tree_harness import take_tree

RETENTION_S = 30 * 86400.0


@dataclass
class Api:
    url: str
    runtime: Runtime
    clock: FakeClock
    admin_key: str


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    clock = FakeClock()
    settings = settings_for(
        backend, payload_retention_s=RETENTION_S, run_retention_s=RETENTION_S, lease_s=60.0
    )
    runtime = await Runtime.open(settings, clock=clock)
    admin = await Operations(runtime).keys.create(admin=True)
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, runtime, clock, admin.key)
    finally:
        await runtime.close()


async def test_a_retry_of_a_run_being_deleted_is_a_409(
    api: Api, downstream: RunningDownstream
) -> None:
    async with running_worker(api.runtime):
        run_id = await failed_fan_out(api.runtime, downstream, 2, failing={0})
    api.clock.advance(RETENTION_S + 86400)
    marked = await take_tree(
        api.runtime, run_id, ended_before=api.clock.now(), retention_s=RETENTION_S
    )
    assert marked  # a pass's first batch on its tree has committed
    async with client(api.url, api.admin_key) as http:
        retry = await http.post(f"/runs/{run_id}/retry")
        assert retry.status_code == 409, retry.text
        body = retry.json()
        assert body["code"] == "run_past_retention"
        assert body["details"]["state"] == "FAILED"
        assert body["details"]["rootRunId"] == run_id
        assert body["message"].startswith(
            f"run {run_id} ended 31 d ago, past SCHEMABRIDGE_RUN_RETENTION_S (30 d)"
        )

        preview = (await http.get(f"/runs/{run_id}/retry/preview")).json()
        assert (preview["retriable"], preview["warnings"]) == (False, [body["message"]])
        batch = (await http.post("/runs/retry", json={"ids": [run_id]})).json()
        assert batch["retried"] == []
        assert [(s["runId"], s["reason"]) for s in batch["skipped"]] == [
            (run_id, "run_past_retention")
        ]
        env = dict(os.environ, SCHEMABRIDGE_API_URL=api.url, SCHEMABRIDGE_API_KEY=api.admin_key)
        said = await asyncio.to_thread(
            cli_forks.run, [SCHEMABRIDGE, "runs", "retry", run_id], env=env, cwd=ROOT, timeout=60
        )
        refused = assert_refused(said, 1, body["message"])
        assert len(refused.splitlines()) == 1, refused

        started = await http.post(f"/runs/{run_id}/start-over")
        assert started.status_code == 200, started.text
        assert started.json()["newRunId"] != run_id
