"""Pinned child versions: a SPAWNER's `workflow: "name@N"` must name a version that exists.

The graph phase checks a child workflow's name against the documents validated together and
the published names; which versions exist is known only to a store, so this check is run by
whoever has one (`engine.operations`, for validate and publish), on workflows that passed every
other check. `versions` gives, per child name, the versions that will exist once the documents
are published: those already stored, plus the one this publish creates for a child published
with its parent (none when the child is identical to its latest version, which publishing
keeps).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from engine.store.pins import child_reference
from engine.validation.common import Code, join
from schemas.definitions import SpawnerVertex, Workflow
from schemas.errors import Problem


def pinned_children(workflows: Sequence[Workflow]) -> set[str]:
    """The names of the child workflows some SPAWNER pins to a version (`name@N`)."""
    return {name for wf in workflows for _, name, version in _pins(wf) if version is not None}


def version_problems(
    workflows: Sequence[tuple[str, Workflow]], versions: Mapping[str, Collection[int]]
) -> list[Problem]:
    """A problem for each SPAWNER pinned to a version not in `versions` (the workflows are
    given with their pointers, "" or "/<index>"); a name missing from `versions` is not
    checked."""
    problems = []
    for base, wf in workflows:
        for vertex_id, name, version in _pins(wf):
            if version is None or name not in versions or version in versions[name]:
                continue
            problems.append(
                Problem(
                    join(base, "vertices", vertex_id, "config", "workflow"),
                    f'SPAWNER "{vertex_id}" starts {name}@{version}, but {name} has no version '
                    f"{version}: {_existing(versions[name])}; pin one of those, or write "
                    f'"{name}" to start its serving version.',
                    Code.UNKNOWN_WORKFLOW_VERSION,
                )
            )
    return problems


def _pins(wf: Workflow) -> Iterator[tuple[str, str, int | None]]:
    """(vertex id, child name, pinned version or None) of each SPAWNER."""
    for vertex_id, vertex in wf.vertices.items():
        if isinstance(vertex, SpawnerVertex):
            name, version = child_reference(vertex.config)
            yield vertex_id, name, version


def _existing(versions: Collection[int]) -> str:
    """The versions, as few words as possible (versions are numbered from 1 without gaps)."""
    ordered = sorted(versions)
    if not ordered:
        return "it has none"
    if len(ordered) == 1:
        return f"its only version is {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"its versions are {ordered[0]} to {ordered[-1]}"
    return f"its versions are {', '.join(map(str, ordered))}"
