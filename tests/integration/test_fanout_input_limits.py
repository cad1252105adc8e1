"""What one fan-out may write (docs/security.md, 'Input limits'), on both backends through the
operations layer and a real worker: a child's rendered input is held to a submitted run's
limit (`MAX_INPUT_BYTES`), and a fan-out's child inputs together to `MAX_FANOUT_INPUT_BYTES`.
Crossing either fails the SPAWNER with `invalid_config` before the batch that would cross it
is written: the children of earlier batches exist whole and run on, none after them does.

The shape is the one a tenant used to fill the shared database: a small input whose one large
value the spawner copies into every child (`{"pad": "{{ input.pad }}", "i": "{{ item }}"}`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.runtime import Runtime
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, gateway

PAD = "p" * 1_000
CHILD_BYTES = len('{"pad":"","i":0}') + len(PAD)
"""The compact JSON of one child's input (its `i` one digit): 1,016 bytes."""
LIMITS = {
    "max_input_bytes": 2_048,
    "max_fanout_input_bytes": 4 * CHILD_BYTES + 500,  # room for 4 children, not 5
    "spawn_batch": 2,
}


@pytest.fixture
async def runtime(backend: Backend) -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(settings_for(backend, **LIMITS))
    yield runtime
    await runtime.close()


@pytest.fixture
def ops(runtime: Runtime) -> Operations:
    return Operations(runtime)


def copying(base: str, child_input: dict[str, Any]) -> list[dict[str, Any]]:
    """child: one GET; parent: a SPAWNER over `input.items` giving each child `child_input`."""
    each = {
        "type": "SPAWNER",
        "config": {"items": "{{ input.items }}", "workflow": "child", "input": child_input},
    }
    parent = {"name": "parent", "vertices": {"each": each}}
    child = {"name": "child", "vertices": {"call": gateway(f"{base}/c/{{{{ input.i }}}}")}}
    return [child, parent]  # published in this order: the child first


async def test_a_fan_out_stops_before_the_batch_that_would_cross_its_limit(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    for document in copying(downstream.url, {"pad": "{{ input.pad }}", "i": "{{ item }}"}):
        await ops.workflows.publish(document)
    submitted = await ops.runs.submit("parent", {"pad": PAD, "items": list(range(5))})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
        children = (await ops.runs.children(submitted.run.id)).items
        finished = [await ended(ops, child.id) for child in children]
    assert run.status == "FAILED" and run.error is not None
    assert (run.error.kind, run.error.vertex_id) == ("invalid_config", "each")
    limit = LIMITS["max_fanout_input_bytes"]
    assert run.error.message == (
        f"/config/input: the children's inputs reach {5 * CHILD_BYTES:,} bytes as compact JSON "
        f"at item 4 of 5, over the limit of {limit:,} per fan-out "
        "(SCHEMABRIDGE_MAX_FANOUT_INPUT_BYTES); children 0 to 3 exist and run on. Copy less "
        "into each child's input (pass large values by reference), split the items across "
        "several runs, or raise SCHEMABRIDGE_MAX_FANOUT_INPUT_BYTES"
    )
    # The two batches within the limit were written whole, and their children ran; the third
    # was not written at all.
    assert len(children) == 4 and {child.item_index for child in children} == {0, 1, 2, 3}
    assert {child.status for child in finished} == {"SUCCEEDED"}
    assert all(child.input == {"pad": PAD, "i": child.item_index} for child in finished)
    assert downstream.stats.total == 4
    # Delivered again (a retry), the fan-out fails at the same item: it counts the children it
    # re-attaches too, and creates none past the limit.
    await ops.actions.retry(submitted.run.id, actor="test")
    async with running_worker(runtime):
        again = await ended(ops, submitted.run.id)
    assert again.error is not None and again.error.message == run.error.message
    assert len((await ops.runs.children(submitted.run.id)).items) == 4


async def test_a_child_input_over_the_run_input_limit_fails_the_spawner(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    # Each child gets the pad twice: over 2,048 bytes, from a parent input of about 1,100.
    pad = "q" * 1_100
    twice = {"pad": "{{ input.pad }}", "again": "{{ input.pad }}", "i": "{{ item }}"}
    for document in copying(downstream.url, twice):
        await ops.workflows.publish(document)
    submitted = await ops.runs.submit("parent", {"pad": pad, "items": [0, 1]})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "FAILED" and run.error is not None
    assert (run.error.kind, run.error.vertex_id) == ("invalid_config", "each")
    size = len('{"pad":"","again":"","i":0}') + 2 * len(pad)
    assert run.error.message == (
        f"/config/input: the input of item 0 is {size:,} bytes as compact JSON, over the limit "
        "of 2,048 a run's input has (SCHEMABRIDGE_MAX_INPUT_BYTES); pass large values to "
        "children by reference (a URL or an id they fetch) rather than copying them into every "
        "child's input, or raise SCHEMABRIDGE_MAX_INPUT_BYTES"
    )
    assert (await ops.runs.children(submitted.run.id)).items == []
    assert run.fanout.total == 0
    assert downstream.stats.total == 0


async def test_an_item_given_whole_as_input_is_held_to_the_same_limit(
    ops: Operations, runtime: Runtime, downstream: RunningDownstream
) -> None:
    """Without `input`, each child's input is its item: one item larger than a run's input may
    be (here from a step's output, which may hold up to `MAX_RESPONSE_BYTES`) is refused."""
    large = {"items": [{"i": 0}, {"i": 1, "blob": "b" * 3_000}]}
    downstream.script([{"body": large}], path="/list")
    parent = {
        "name": "parent",
        "vertices": {
            "list": gateway(f"{downstream.url}/list"),
            "each": {
                "type": "SPAWNER",
                "dependsOn": ["list"],
                "config": {"items": "{{ vertices.list.output.body.items }}", "workflow": "child"},
            },
        },
    }
    child = {
        "name": "child",
        "vertices": {"call": gateway(f"{downstream.url}/c/{{{{ input.i }}}}")},
    }
    await ops.workflows.publish(child)
    await ops.workflows.publish(parent)
    submitted = await ops.runs.submit("parent", {})
    async with running_worker(runtime):
        run = await ended(ops, submitted.run.id)
    assert run.status == "FAILED" and run.error is not None
    assert run.error.kind == "invalid_config"
    assert run.error.message.startswith("/config/items: the input of item 1 is 3,")
    assert (await ops.runs.children(submitted.run.id)).items == []
