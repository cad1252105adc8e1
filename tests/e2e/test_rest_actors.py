"""Every operator action over REST records which key did it, on both backends: retry,
resolve, cancel, start over, reprocess and batch retry (by ids and by filter), each sent with
a key of its own, write `{"action", "actor": "key:<that key's id>"}` to the log of every run
they change; with authentication off the actor is `demo`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from api.rest import borrowed_runtime, create_app
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.e2e.rest_harness import client, serving
from tests.integration.actions_harness import (
    action_lines,
    failed_chain,
    failed_fan_out,
    single,
    submit,
)
from tests.integration.engine_harness import running_worker, settings_for

ACTIONS = ("retry", "resolve", "cancel", "start_over", "reprocess", "batch_ids", "batch_filter")


@dataclass
class Api:
    url: str
    runtime: Runtime
    keys: dict[str, tuple[str, str]]
    """An admin key per action: (secret, id)."""


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    runtime = await Runtime.open(settings_for(backend))
    ops = Operations(runtime)
    keys = {}
    for action in ACTIONS:
        created = await ops.keys.create(admin=True, name=action)
        keys[action] = (created.key, created.id)
    app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=True)
    try:
        async with serving(app) as url:
            yield Api(url, runtime, keys)
    finally:
        await runtime.close()


async def actors(api: Api, run_id: str) -> list[tuple[str, str]]:
    return [
        (line["data"]["action"], line["data"]["actor"])
        for line in await action_lines(api.runtime, run_id)
    ]


def actor(api: Api, action: str) -> str:
    return f"key:{api.keys[action][1]}"


async def post(api: Api, action: str, path: str, body: object = None) -> dict[str, object]:
    async with client(api.url, api.keys[action][0]) as http:
        answer = await http.post(path, json=body)
    assert answer.status_code == 200, (action, answer.text)
    return dict(answer.json())


async def test_each_action_records_the_key_that_did_it(
    api: Api, downstream: RunningDownstream
) -> None:
    # Every failed run first: a worker started later runs whatever the actions released.
    retried = await failed_chain(api.runtime, downstream)
    resolved = await failed_chain(api.runtime, downstream)
    by_ids = [await failed_chain(api.runtime, downstream) for _ in range(2)]
    by_filter = await failed_chain(api.runtime, downstream, tenant_id="filtered")

    await post(api, "retry", f"/runs/{retried}/retry")
    await post(api, "resolve", f"/runs/{resolved}/steps/b/resolve", {"output": {"ok": True}})
    answer = await post(api, "batch_ids", "/runs/retry", {"ids": by_ids})
    assert answer["retried"] == by_ids
    answer = await post(api, "batch_filter", "/runs/retry", {"filter": {"tenant": "filtered"}})
    assert answer["retried"] == [by_filter]
    cancelled = await submit(api.runtime, [single(downstream.url)], {})  # no worker: running
    await post(api, "cancel", f"/runs/{cancelled}/cancel")
    started = await post(api, "start_over", f"/runs/{cancelled}/start-over")
    async with running_worker(api.runtime):
        reprocessed = await failed_fan_out(api.runtime, downstream, 2, failing={0})
    await post(api, "reprocess", f"/runs/{reprocessed}/reprocess")

    assert await actors(api, retried) == [("retry", actor(api, "retry"))]
    assert await actors(api, resolved) == [("resolve", actor(api, "resolve"))]
    for run_id in by_ids:
        assert await actors(api, run_id) == [("batch_retry", actor(api, "batch_ids"))]
    assert await actors(api, by_filter) == [("batch_retry", actor(api, "batch_filter"))]
    assert await actors(api, cancelled) == [
        ("cancel", actor(api, "cancel")),
        ("start_over", actor(api, "start_over")),
    ]
    new_run = str(started["newRunId"])
    assert await actors(api, new_run) == [("start_over", actor(api, "start_over"))]
    assert await actors(api, reprocessed) == [("reprocess", actor(api, "reprocess"))]


async def test_with_authentication_off_the_actor_is_demo(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        app = create_app(runtime.settings, runtime_factory=borrowed_runtime(runtime), auth=False)
        run_id = await failed_chain(runtime, downstream)
        async with serving(app) as url, client(url) as http:
            answer = await http.post(f"/runs/{run_id}/retry")
        assert answer.status_code == 200, answer.text
        lines = await action_lines(runtime, run_id)
        assert [line["data"] for line in lines] == [{"action": "retry", "actor": "demo"}]
    finally:
        await runtime.close()
