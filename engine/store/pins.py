"""The child-workflow versions a run tree uses, fixed once when its root run is created.

A SPAWNER whose `workflow` names no `@version` starts the version pinned on its run, not the
serving one at the time it executes: a spawner executed again after a crash, with the serving
version changed in between, must not start half its children on one version and half on
another. The root run resolves the serving version of every child workflow reachable through
spawners, transitively (a child that spawns grandchildren too) — the serving version, not the
latest, so a version published but not deployed gets no traffic through its parents either
(docs/architecture.md, 'Versions and deployments') — and every descendant copies its parent's
map, so a whole run tree uses one set of versions. `name@version` needs no pin (the workflows
it reaches are still walked, for their own unversioned spawners). A child workflow not
published yet has no pin; its spawner uses the serving version when it runs (or fails asking
for it to be published). Part of `engine.store` (called only from there and from
`engine.execution.fanout`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection

from schemas.definitions import SpawnerConfig, SpawnerVertex, Workflow

logger = logging.getLogger(__name__)

MAX_PINNED_WORKFLOWS = 256
"""Distinct workflow versions walked for one root run; past that the rest stay unpinned."""

ServingVersions = Callable[[Collection[str]], Awaitable[dict[str, int]]]
"""The version of each name to pin: its serving version (names never published are left
out)."""
LoadVersion = Callable[[str, int], Awaitable[Workflow | None]]
"""A published version's workflow (None: not published)."""


def child_reference(config: SpawnerConfig) -> tuple[str, int | None]:
    """(name, version) of a spawner's child workflow; version None = not pinned explicitly.

    The schema restricts `workflow` to `name` or `name@<positive integer>`."""
    name, _, version = config.workflow.partition("@")
    return name, int(version) if version else None


def spawned(workflow: Workflow) -> list[tuple[str, int | None]]:
    """The child workflow reference of each spawner of `workflow`, in document order."""
    return [
        child_reference(vertex.config)
        for vertex in workflow.vertices.values()
        if isinstance(vertex, SpawnerVertex)
    ]


async def resolve(root: Workflow, serving: ServingVersions, load: LoadVersion) -> dict[str, int]:
    """{workflow name: version} for every unversioned child reference reachable from `root`.

    Walks one level of the spawner tree at a time (one `serving` call per level for the names
    not resolved yet) and visits each (name, version) once, so recursion through workflows
    cannot loop; at most `MAX_PINNED_WORKFLOWS` versions are walked."""
    pins: dict[str, int] = {}
    visited: set[tuple[str, int]] = set()
    level = spawned(root)
    for _ in range(MAX_PINNED_WORKFLOWS + 1):  # each pass visits at least one new version
        unresolved = {name for name, version in level if version is None and name not in pins}
        if unresolved:
            pins.update(await serving(unresolved))
        reached = {(name, pins.get(name) if v is None else v) for name, v in level}
        todo = sorted((n, v) for n, v in reached if v is not None and (n, v) not in visited)
        if not todo:
            break
        if len(visited) + len(todo) > MAX_PINNED_WORKFLOWS:
            logger.warning(
                "workflow %s reaches more than %d child workflow versions; the rest are not "
                "pinned (their spawners use the serving version)",
                root.name,
                MAX_PINNED_WORKFLOWS,
            )
            todo = todo[: MAX_PINNED_WORKFLOWS - len(visited)]
        visited.update(todo)
        level = []
        for name, version in todo:
            workflow = await load(name, version)
            if workflow is not None:
                level += spawned(workflow)
    return pins


def pinned_version(config: SpawnerConfig, pins: dict[str, int] | None) -> tuple[str, int | None]:
    """(name, version) a spawner starts: `name@version` as written, else the run's pin; None
    = the serving one (a run created before pins existed, or a child unpublished at its root's
    creation)."""
    name, version = child_reference(config)
    if version is None and pins is not None:
        version = pins.get(name)
    return name, version
