"""Helpers for the operator-action tests: workflows that fail where a test needs them to, runs
driven into the states an action applies to, and probes of what the store did (its log lines,
the statements it sent)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import event

from demo.downstream import RunningDownstream
from engine.runtime import Runtime
from engine.store.records import ClaimedStep, RunRecord, StepFailed
from schemas.definitions import Workflow
from tests.integration.engine_harness import running_worker, start, wait_for_run

BAD = {"kind": "http_error", "message": "400 from the test"}
OVERLOAD = {"kind": "external_overload", "message": "503 from the test"}
CLAIMED_AT_ONCE = 500
"""Steps `failed_runs` claims per transaction (a thousand runs take two)."""


async def submit(runtime: Runtime, workflows: list[Workflow], run_input: Any, **kw: Any) -> str:
    """Publish `workflows` and submit a run of the first (through the operations layer)."""
    return await start(runtime, workflows, run_input, **kw)


async def action_lines(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    """The run's log lines written by operator actions."""
    lines = await runtime.store.run_logs(run_id, limit=10_000)
    return [line for line in lines if (line["data"] or {}).get("action")]


@contextlib.contextmanager
def statements(runtime: Runtime, *, every_task: bool = False) -> Iterator[list[str]]:
    """Collects the SQL statements the store sends for this task while the block runs (not
    those of a worker running meanwhile: SQLAlchemy runs them inside the awaiting task), or
    for every task of the process with `every_task`."""
    seen: list[str] = []
    task = asyncio.current_task()

    def record(*args: Any) -> None:
        if every_task or asyncio.current_task() is task:
            seen.append(args[2])

    engines = runtime.store._engines
    # A read engine sharing the write engine's pool is a view of it: its statements reach
    # the write engine's listeners already.
    targets = [engines.write.sync_engine]
    if not engines.shared_pool:
        targets.append(engines.read.sync_engine)
    for target in targets:
        event.listen(target, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for target in targets:
            event.remove(target, "before_cursor_execute", record)


async def wait_until(predicate: Any, timeout_s: float = 30.0) -> None:
    """Poll an async predicate until it holds; fail after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(0.05)


def requests_by_path(downstream: RunningDownstream) -> Counter[str]:
    return Counter(record.path for record in downstream.stats.recent)


# ── workflows ───────────────────────────────────────────────────────────────────────────────


def chain(base: str) -> Workflow:
    """a → b → c; c sends what b answered, so its request shows b's output."""
    return Workflow.model_validate(
        {
            "name": "chain",
            "vertices": {
                "a": {"type": "GATEWAY", "config": {"url": f"{base}/a/{{{{ input.id }}}}"}},
                "b": {
                    "type": "GATEWAY",
                    "dependsOn": ["a"],
                    "config": {
                        "url": f"{base}/b/{{{{ input.id }}}}",
                        "method": "POST",
                        "retry": {"maxAttempts": 1},
                    },
                },
                "c": {
                    "type": "GATEWAY",
                    "dependsOn": ["b"],
                    "config": {
                        "url": f"{base}/c",
                        "method": "POST",
                        "body": {"fromB": "{{ vertices.b.output.body.path }}"},
                    },
                },
            },
        }
    )


def single(base: str, name: str = "single") -> Workflow:
    return Workflow.model_validate(
        {
            "name": name,
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {"url": f"{base}/single", "retry": {"maxAttempts": 1}},
                }
            },
        }
    )


def fan_out(base: str, merge: dict[str, Any] | None = None) -> list[Workflow]:
    """parent: spawner over `input.items` → merge; child: one POST whose status and delay
    the item chooses (the demo downstream's X-Demo-Status / X-Demo-Sleep-Ms)."""
    parent = Workflow.model_validate(
        {
            "name": "parent",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "child"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"], "config": merge or {}},
            },
        }
    )
    child = Workflow.model_validate(
        {
            "name": "child",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {
                        "url": f"{base}/charge/{{{{ index }}}}",
                        "method": "POST",
                        "headers": {
                            "X-Demo-Status": "{{ item.status || `200` }}",
                            "X-Demo-Sleep-Ms": "{{ item.sleep || `0` }}",
                        },
                        "retry": {"maxAttempts": 1},
                    },
                }
            },
        }
    )
    return [parent, child]


def items(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"status": 200, **extra} for _ in range(n)]


async def failed_chain(runtime: Runtime, downstream: RunningDownstream, **kw: Any) -> str:
    """A chain run that failed at b (its first call answered 400)."""
    downstream.script([400], path="/b/1")
    run_id = await submit(runtime, [chain(downstream.url)], {"id": 1}, **kw)
    async with running_worker(runtime):
        run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED" and run.error.vertex_id == "b"
    return run_id


async def failed_fan_out(
    runtime: Runtime, downstream: RunningDownstream, n: int, failing: set[int], **kw: Any
) -> str:
    """A parent run whose join failed because the children in `failing` failed; `kw` as
    `submit`'s (`tenant_id`)."""
    for index in failing:
        downstream.script([400], path=f"/charge/{index}")
    run_id = await submit(runtime, fan_out(downstream.url), {"items": items(n)}, **kw)
    run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED" and run.error.vertex_id == "join"
    return run_id


def unaddressed_fan_out(base: str) -> list[Workflow]:
    """`fan_out`'s shape, its children's url taken from their item's `id`: an item without
    one leaves the url path empty, so its child fails `invalid_config`, a cause the workflow
    makes (a reprocess fails it the same way)."""
    parent = Workflow.model_validate(
        {
            "name": "unaddressed",
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.items }}", "workflow": "unaddressed_child"},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"]},
            },
        }
    )
    child = Workflow.model_validate(
        {
            "name": "unaddressed_child",
            "vertices": {
                "call": {
                    "type": "GATEWAY",
                    "config": {"url": f"{base}/c/{{{{ item.id }}}}", "retry": {"maxAttempts": 1}},
                }
            },
        }
    )
    return [parent, child]


async def failed_unaddressed_fan_out(
    runtime: Runtime, downstream: RunningDownstream, n: int
) -> str:
    """An `unaddressed_fan_out` run whose join failed because its `n` children failed
    `invalid_config` (its `childCause`). Needs a worker running."""
    run_id = await submit(runtime, unaddressed_fan_out(downstream.url), {"items": [{}] * n})
    run = await wait_for_run(runtime, run_id)
    assert run.status == "FAILED" and run.error.vertex_id == "join"
    assert run.error.child_cause is not None, run.error
    assert run.error.child_cause.kind == "invalid_config", run.error
    return run_id


async def failed_runs(runtime: Runtime, kinds: list[str], name: str = "kinds") -> list[str]:
    """One run of a one-step workflow `name` per kind of `kinds`, its step failed terminally
    with that error kind (driven through the store): the runs' ids, in the order of `kinds`,
    each created after the one before (the last is the newest)."""
    await runtime.store.publish(single("http://127.0.0.1:1", name=name))
    version = await runtime.store.get_version(name)
    ids: list[str] = []
    for _ in kinds:
        before = runtime.clock.now()
        while runtime.clock.now() == before:  # bounded: the clock moves on
            await asyncio.sleep(0.001)
        ids += await runtime.store.create_runs(version, [{}])
    kind_of = dict(zip(ids, kinds, strict=True))
    claimed: list[ClaimedStep] = []
    for _ in range(len(kinds) // CLAIMED_AT_ONCE + 2):  # bounded: each round claims some
        claimed += await runtime.store.claim(CLAIMED_AT_ONCE, lease_s=120)
        if len(claimed) >= len(kinds):
            break
    assert sorted(step.run_id for step in claimed) == sorted(ids)
    failures = {"kind": "", "message": "failed by the test"}
    await runtime.store.complete(
        [StepFailed(step, {**failures, "kind": kind_of[step.run_id]}) for step in claimed]
    )
    return ids


def fix_first_warning(counted: str, run_ids: Sequence[str]) -> str:
    """The batch retry preview's first warning (its `fixFirst` in words), the tests' one copy
    of that wording: `counted` says how many runs failed with what ("1 of the 2 runs failed
    with invalid_config"), `run_ids` are the runs it names, in its order."""
    one = len(run_ids) == 1
    return (
        f"{counted}, from the workflow or the runs' input: retrying runs the same workflow "
        f"version with the same input, so {'it fails' if one else 'they fail'} the same way at "
        "once. Fix the workflow (or the input), publish it, then submit new runs (`schemabridge "
        "workflows publish FILE`, then `schemabridge runs submit NAME@VERSION --input JSON`); "
        f"{'run' if one else 'runs'}: {', '.join(run_ids)}"
    )


def nested(base: str, leaf_sleep_ms: int = 0) -> list[Workflow]:
    """top spawns mids (one per `input.groups` item), each mid spawns leaves (one per item of
    its `leaves`); a leaf POSTs to /leaf, answered after `leaf_sleep_ms`."""
    top = {
        "name": "top",
        "vertices": {
            "groups": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.groups }}", "workflow": "mid"},
            },
            "join": {"type": "MERGE", "dependsOn": ["groups"], "config": {}},
        },
    }
    mid = {
        "name": "mid",
        "vertices": {
            "leaves": {
                "type": "SPAWNER",
                "config": {"items": "{{ input.leaves }}", "workflow": "leaf"},
            },
            "join": {"type": "MERGE", "dependsOn": ["leaves"], "config": {}},
        },
    }
    leaf = {
        "name": "leaf",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "config": {
                    "url": f"{base}/leaf",
                    "method": "POST",
                    "headers": {"X-Demo-Sleep-Ms": str(leaf_sleep_ms)},
                    "retry": {"maxAttempts": 1},
                },
            }
        },
    }
    return [Workflow.model_validate(w) for w in (top, leaf, mid)]


TOLERANT = {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": 1}}
"""A MERGE that lets one child fail: its parent SUCCEEDS with a dead letter under it."""


async def succeeded_over_a_dead_letter(
    runtime: Runtime, downstream: RunningDownstream, n: int = 3, failing: int = 1, **kw: Any
) -> tuple[str, str]:
    """(parent, child): a parent run that SUCCEEDED because its MERGE tolerated the FAILED
    child `failing` (a dead letter) among its `n`. Needs a worker running."""
    downstream.script([400], path=f"/charge/{failing}")
    workflows = fan_out(downstream.url, TOLERANT)
    parent_id = await submit(runtime, workflows, {"items": items(n)}, **kw)
    parent = await wait_for_run(runtime, parent_id)
    assert parent.status == "SUCCEEDED", parent.error
    (dead,) = await runtime.store.children(parent_id, status="FAILED")
    return parent_id, dead.id


def reported_fan_out(base: str, tolerate: int) -> list[Workflow]:
    """`fan_out`'s parent and child, with a MERGE that lets `tolerate` children fail and a
    GATEWAY after it, `report`: one POST to /report, the partner's call a finished run sends
    once."""
    parent, child = fan_out(
        base, {"tolerateChildFailures": ["FAILED"], "failureTolerance": {"maxFailures": tolerate}}
    )
    document = parent.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["vertices"]["report"] = {
        "type": "GATEWAY",
        "dependsOn": ["join"],
        "config": {
            "url": f"{base}/report",
            "method": "POST",
            "body": {"counts": "{{ vertices.join.output.counts }}"},
            "retry": {"maxAttempts": 1},
        },
    }
    return [Workflow.model_validate(document), child]


async def succeeded_with_a_report(
    runtime: Runtime, downstream: RunningDownstream, n: int, failing: set[int]
) -> str:
    """A `reported_fan_out` run of `n` children that SUCCEEDED, its MERGE tolerating the
    children in `failing` (dead letters: answered 400 once, they succeed when run again), and
    its report sent once. Needs a worker running."""
    for index in failing:
        downstream.script([400], path=f"/charge/{index}")
    workflows = reported_fan_out(downstream.url, len(failing))
    run_id = await submit(runtime, workflows, {"items": items(n)})
    run = await wait_for_run(runtime, run_id, timeout_s=120)
    assert run.status == "SUCCEEDED", run.error
    assert requests_by_path(downstream)["/report"] == 1
    return run_id


def tolerant_nested(base: str) -> list[Workflow]:
    """`nested`, its top MERGE letting one mid fail: a mid whose leaf failed is a dead letter
    under a top that SUCCEEDED, with a FAILED leaf of its own."""
    top, leaf, mid = nested(base)
    document = top.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["vertices"]["join"]["config"] = TOLERANT
    return [Workflow.model_validate(document), leaf, mid]


async def succeeded_over_a_failed_mid(
    runtime: Runtime, downstream: RunningDownstream
) -> tuple[str, RunRecord]:
    """(top, mid): a run of `tolerant_nested` whose first leaf call answered 400: a mid
    FAILED (its leaf failed), under a top whose MERGE tolerated it and SUCCEEDED. Needs a
    worker running."""
    downstream.script([400], path="/leaf")
    top = await submit(
        runtime,
        tolerant_nested(downstream.url),
        {"groups": [{"leaves": items(2)}, {"leaves": items(2)}]},
    )
    assert (await wait_for_run(runtime, top)).status == "SUCCEEDED"
    (mid,) = await runtime.store.children(top, status="FAILED")
    return top, mid
