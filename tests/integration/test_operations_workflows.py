"""Workflow operations (publish, validate, list, get, versions, graph) through the operations
layer, on both backends."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.operations import Operations
from engine.operations.views import GraphView
from engine.runtime import Runtime
from engine.settings import Settings
from schemas.errors import DefinitionError, NotFound, Unavailable
from tests.conftest import Backend
from tests.integration.engine_harness import settings_for

URL = "http://127.0.0.1:1"


def gateway(*depends_on: str, path: str = "/x") -> dict[str, Any]:
    vertex: dict[str, Any] = {"type": "GATEWAY", "config": {"url": URL + path}}
    if depends_on:
        vertex["dependsOn"] = list(depends_on)
    return vertex


def chain(name: str = "chain", description: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": name,
        "vertices": {"a": gateway(), "b": gateway("a"), "c": gateway("a"), "d": gateway("b", "c")},
    }
    if description is not None:
        document["description"] = description
    return document


def child(name: str = "child") -> dict[str, Any]:
    return {"name": name, "vertices": {"charge": gateway(path="/charge")}}


def parent(child_name: str = "child") -> dict[str, Any]:
    return {
        "name": "parent",
        "vertices": {
            "collect": gateway(path="/items"),
            "each": {
                "type": "SPAWNER",
                "dependsOn": ["collect"],
                "config": {
                    "items": "{{ vertices.collect.output.body.items }}",
                    "workflow": child_name,
                },
            },
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }


@pytest.fixture
async def ops(backend: Backend) -> AsyncIterator[Operations]:
    runtime = await Runtime.open(settings_for(backend))
    yield Operations(runtime)
    await runtime.close()


# ── publish and validate ────────────────────────────────────────────────────────────────────


async def test_publish_identical_content_returns_the_same_version(ops: Operations) -> None:
    (first,) = await ops.workflows.publish(chain())
    (again,) = await ops.workflows.publish(chain())
    (changed,) = await ops.workflows.publish(chain(description="changed"))
    assert (first.name, first.version, first.created) == ("chain", 1, True)
    assert (again.version, again.created) == (1, False)
    assert (changed.version, changed.created) == (2, True)
    assert [v.version for v in await ops.workflows.versions("chain")] == [2, 1]


async def test_publish_a_parent_with_its_child_in_one_list(ops: Operations) -> None:
    results = await ops.workflows.publish([parent(), child()])
    assert [(r.name, r.version, r.created) for r in results] == [
        ("parent", 1, True),
        ("child", 1, True),
    ]


async def test_a_parent_is_published_after_its_child(ops: Operations) -> None:
    with pytest.raises(DefinitionError) as refused:
        await ops.workflows.publish(parent())
    (problem,) = refused.value.problems
    assert (problem.pointer, problem.code) == ("/vertices/each/config/workflow", "unknown_workflow")
    assert await ops.workflows.list() == []  # nothing stored
    await ops.workflows.publish(child())
    (published,) = await ops.workflows.publish(parent())
    assert (published.name, published.version, published.created) == ("parent", 1, True)


async def test_a_spawner_pinned_to_a_missing_version_is_refused(ops: Operations) -> None:
    await ops.workflows.publish(child())
    with pytest.raises(DefinitionError) as refused:
        await ops.workflows.publish(parent("child@5"))
    (problem,) = refused.value.problems
    assert (problem.source, problem.pointer, problem.code) == (
        "request",
        "/vertices/each/config/workflow",
        "unknown_workflow_version",
    )
    assert problem.message == (
        'SPAWNER "each" starts child@5, but child has no version 5: its only version is 1; '
        'pin one of those, or write "child" to start its serving version.'
    )
    assert [w.name for w in await ops.workflows.list()] == ["child"]  # the parent not stored
    assert await ops.workflows.validate(parent("child@5")) == [problem]
    (published,) = await ops.workflows.publish(parent("child@1"))
    assert (published.name, published.version) == ("parent", 1)


async def test_a_child_published_with_its_parent_counts_the_version_it_gets(
    ops: Operations,
) -> None:
    # Identical to its latest version: publishing keeps v1, so v2 will not exist.
    await ops.workflows.publish(child())
    problems = await ops.workflows.validate([parent("child@2"), child()])
    assert [(p.pointer, p.code) for p in problems] == [
        ("/0/vertices/each/config/workflow", "unknown_workflow_version")
    ]
    # Changed: this publish creates v2.
    changed = child()
    changed["description"] = "v2"
    results = await ops.workflows.publish([parent("child@2"), changed])
    assert [(r.name, r.version) for r in results] == [("parent", 1), ("child", 2)]
    problems = await ops.workflows.validate([parent("child@4"), changed])
    assert "its versions are 1 to 2" in problems[0].message


async def test_an_invalid_document_reports_every_problem_and_stores_nothing(
    ops: Operations,
) -> None:
    document = {
        "name": "broken",
        "vertices": {
            "a": {"type": "GATEWAY", "dependsOn": ["ghost"], "config": {"url": URL}},
            "b": {"type": "GATEWAY", "config": {"url": URL, "colour": "red"}},
            "c": {"type": "MERGE", "dependsOn": ["a"]},
        },
    }
    with pytest.raises(DefinitionError) as refused:
        await ops.workflows.publish(document)
    found = {(p.pointer, p.code) for p in refused.value.problems}
    assert ("/vertices/a/dependsOn/0", "unknown_dependency") in found
    assert ("/vertices/b/config/colour", "unknown_field") in found
    assert any(code == "merge_needs_one_spawner" for _, code in found)
    assert all(p.message for p in refused.value.problems)
    assert await ops.workflows.list() == []
    assert await ops.workflows.validate(document) == refused.value.problems


async def test_problems_in_a_list_point_into_the_list(ops: Operations) -> None:
    broken = chain("second")
    broken["vertices"]["b"]["dependsOn"] = ["b"]
    problems = await ops.workflows.validate([chain(), broken])
    assert [(p.pointer, p.code) for p in problems] == [
        ("/1/vertices/b/dependsOn/0", "self_dependency")
    ]


async def test_validate_stores_nothing_and_knows_published_children(ops: Operations) -> None:
    assert await ops.workflows.validate(chain()) == []
    assert await ops.workflows.list() == []
    assert [p.code for p in await ops.workflows.validate(parent())] == ["unknown_workflow"]
    await ops.workflows.publish(child())
    assert await ops.workflows.validate(parent()) == []


async def test_a_document_that_is_not_json_is_a_problem(ops: Operations) -> None:
    document: Any = {"name": "odd", "vertices": {"a": {"type": "GATEWAY", "config": object()}}}
    (problem,) = await ops.workflows.validate(document)
    assert (problem.pointer, problem.code) == ("", "json_syntax")
    with pytest.raises(DefinitionError):
        await ops.workflows.publish(document)


async def test_concurrent_publishes_of_new_content_store_one_version(ops: Operations) -> None:
    results = await asyncio.gather(*(ops.workflows.publish(chain()) for _ in range(8)))
    assert {r.version for (r,) in results} == {1}
    assert sum(r.created for (r,) in results) == 1
    assert len(await ops.workflows.versions("chain")) == 1


# ── reads ───────────────────────────────────────────────────────────────────────────────────


async def test_list_get_and_versions(ops: Operations) -> None:
    await ops.workflows.publish(chain())
    await ops.workflows.publish(chain(description="v2"))
    await ops.workflows.publish(child())
    listed = {w.name: w for w in await ops.workflows.list()}
    assert sorted(listed) == ["chain", "child"]
    assert (listed["chain"].latest_version, listed["chain"].versions) == (2, 2)
    assert listed["chain"].created_at <= listed["chain"].updated_at
    assert (listed["child"].latest_version, listed["child"].versions) == (1, 1)

    latest = await ops.workflows.get("chain")
    assert latest.version == 2 and latest.document["description"] == "v2"
    first = await ops.workflows.get("chain", 1)
    assert first.version == 1 and "description" not in first.document
    assert first.document["vertices"]["d"]["dependsOn"] == ["b", "c"]
    assert first.definition_hash != latest.definition_hash
    versions = await ops.workflows.versions("chain")
    assert [(v.version, v.definition_hash) for v in versions] == [
        (2, latest.definition_hash),
        (1, first.definition_hash),
    ]
    dumped = latest.model_dump(by_alias=True)
    assert {"definitionHash", "createdAt", "document"} <= set(dumped)


@pytest.mark.parametrize("version", [None, 1, 0, -1, 7])
async def test_unknown_workflows_and_versions_are_not_found(
    ops: Operations, version: int | None
) -> None:
    await ops.workflows.publish(child())
    name = "ghost" if version in (None, 1) else "child"
    for read in (ops.workflows.get, ops.workflows.graph):
        with pytest.raises(NotFound) as missing:
            await read(name, version)
        assert missing.value.code == "workflow_not_found"
    with pytest.raises(NotFound) as missing:
        await ops.workflows.versions("ghost")
    assert missing.value.code == "workflow_not_found"


# ── graph ───────────────────────────────────────────────────────────────────────────────────


def crossings(graph: GraphView) -> int:
    nodes = {n.id: n for n in graph.nodes}
    adjacent = [
        (nodes[e.source], nodes[e.target])
        for e in graph.edges
        if nodes[e.target].layer == nodes[e.source].layer + 1
    ]
    return sum(
        1
        for (a, b), (c, d) in itertools.combinations(adjacent, 2)
        if a.layer == c.layer and (a.x - c.x) * (b.x - d.x) < 0
    )


def check_layout(graph: GraphView) -> None:
    nodes = {n.id: n for n in graph.nodes}
    assert len({(n.x, n.y) for n in graph.nodes}) == len(graph.nodes)  # no two at one point
    for edge in graph.edges:
        source, target = nodes[edge.source], nodes[edge.target]
        assert source.layer < target.layer and source.y < target.y  # edges go down
        assert edge.source in target.depends_on
    for node in graph.nodes:
        assert graph.node_width / 2 < node.x < graph.width - graph.node_width / 2
        assert graph.node_height / 2 < node.y < graph.height - graph.node_height / 2
    for layer in range(graph.layers):
        row = sorted((n for n in graph.nodes if n.layer == layer), key=lambda n: n.order)
        assert [n.order for n in row] == list(range(len(row)))
        assert all(a.x + graph.node_width <= b.x for a, b in itertools.pairwise(row))
        assert len({n.y for n in row}) == 1


async def test_graph_lays_out_layers_top_to_bottom(ops: Operations) -> None:
    await ops.workflows.publish([parent(), child()])
    graph = await ops.workflows.graph("parent", 1)
    check_layout(graph)
    nodes = {n.id: n for n in graph.nodes}
    assert [nodes[v].layer for v in ("collect", "each", "join")] == [0, 1, 2]
    assert (nodes["each"].type, nodes["each"].workflow) == ("SPAWNER", "child")
    assert nodes["collect"].workflow is None and nodes["join"].depends_on == ["each"]
    assert {(e.source, e.target) for e in graph.edges} == {("collect", "each"), ("each", "join")}

    await ops.workflows.publish(chain())
    diamond = await ops.workflows.graph("chain")
    check_layout(diamond)
    assert diamond.layers == 3 and len(diamond.edges) == 4
    assert "nodeWidth" in diamond.model_dump(by_alias=True)


async def test_graph_orders_layers_to_remove_crossings(ops: Operations) -> None:
    # In document order the second layer crosses the first twice; barycenter sweeps untangle it.
    document = {
        "name": "tangled",
        "vertices": {
            "a": gateway(),
            "b": gateway(),
            "c": gateway(),
            "x": gateway("c"),
            "y": gateway("b"),
            "z": gateway("a"),
            "sink": gateway("x", "y", "z"),
            "late": gateway("a", "sink"),
        },
    }
    await ops.workflows.publish(document)
    graph = await ops.workflows.graph("tangled")
    check_layout(graph)
    assert crossings(graph) == 0
    nodes = {n.id: n for n in graph.nodes}
    assert nodes["late"].layer == 3  # below its deepest dependency, not next to `a`


async def test_graph_of_a_wide_fan_in(ops: Operations) -> None:
    vertices: dict[str, Any] = {f"v{i}": gateway() for i in range(12)}
    vertices["join"] = gateway(*vertices)
    vertices["after"] = gateway("join", "v3")
    await ops.workflows.publish({"name": "wide", "vertices": vertices})
    graph = await ops.workflows.graph("wide")
    check_layout(graph)
    assert graph.layers == 3 and graph.width > 12 * graph.node_width


# ── an unreachable database ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "database_url",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:9/nowhere",
        "sqlite+aiosqlite:///{tmp}/missing/dir/sb.db",
    ],
)
async def test_an_unreachable_database_is_unavailable(database_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=database_url.format(tmp=tmp_path))
    runtime = await Runtime.open(settings, migrate=False)
    try:
        ops = Operations(runtime)
        for call in (ops.workflows.list(), ops.workflows.publish(chain())):
            with pytest.raises(Unavailable) as down:
                await call
            assert down.value.code == "store_unavailable"
    finally:
        await runtime.close()


async def loop_turns_while(work: Any) -> tuple[Any, int]:
    """`await work`, and how many times the event loop served another task meanwhile (a task
    that sleeps 1 ms at a time until `work` is done)."""
    task = asyncio.ensure_future(work)
    turns = 0
    while not task.done() and turns < 100_000:
        await asyncio.sleep(0.001)
        turns += 1
    return await task, turns


async def test_a_costly_document_is_checked_beside_the_event_loop(ops: Operations) -> None:
    # 999 sub-schemas (the limit is 1,000) cost the meta-schema check about 0.3 s here. On the
    # event loop, no other task of the process ran meanwhile but in the 2-5 turns the
    # operation's own database reads give (measured); on a check thread the loop kept going
    # (43-51 turns of 1 ms sleeps, each about a GIL switch interval).
    heavy = {**chain("heavy"), "inputSchema": {"anyOf": [{"pattern": "^a$"}] * 999}}
    problems, turns = await loop_turns_while(ops.workflows.validate(heavy))
    assert problems == []
    assert turns >= 20, turns
