"""An open breaker after a downstream outage, as an operator meets it: the retry and the
reprocess warn that the steps would fail again at once (when the breaker half-opens, and the
command that closes it); closed by hand once the downstream is fixed, the reprocessed
children all succeed, none refused by the breaker."""

from __future__ import annotations

import asyncio
import re
import uuid

from api.cli.run_live_display import waiting_lines
from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.views import BreakerRef, RunFilter
from engine.runtime import Runtime
from schemas.batch_limits import DEFAULT_BATCH
from schemas.definitions import Workflow
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for, start, wait_for_run

CHILDREN = 8


def fan_out(url: str, destination: str, max_auto_retries: int = 0) -> list[Workflow]:
    """parent: a spawner over `input` → merge; child: one call to `destination`, one attempt
    per dispatch."""
    parent = {
        "name": "outage",
        "vertices": {
            "each": {"type": "SPAWNER", "config": {"items": "{{ input }}", "workflow": "hit"}},
            "join": {"type": "MERGE", "dependsOn": ["each"]},
        },
    }
    child = {
        "name": "hit",
        "vertices": {
            "call": {
                "type": "GATEWAY",
                "maxAutoRetries": max_auto_retries,
                "config": {"url": url, "destination": destination, "retry": {"maxAttempts": 1}},
            }
        },
    }
    return [Workflow.model_validate(parent), Workflow.model_validate(child)]


async def test_a_breaker_closed_by_hand_lets_the_reprocessed_children_succeed(
    backend: Backend, downstream: RunningDownstream
) -> None:
    destination = f"brk-{uuid.uuid4().hex[:8]}"  # the embedded Redis is shared
    downstream.script([500] * CHILDREN, path="/outage")  # the outage
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        run_id = await start(
            runtime, fan_out(f"{downstream.url}/outage", destination), list(range(CHILDREN))
        )
        async with running_worker(runtime):
            failed = await wait_for_run(runtime, run_id)
        assert failed.status == "FAILED"
        sent_in_outage = downstream.stats.total
        downstream.state.scripts.clear()  # the downstream is fixed

        children = await runtime.store.children(run_id)
        retried = await ops.actions.retry(children[0].id, actor="test")
        (warning,) = retried.warnings
        # What opened it is said, not only that it is open: what the destination answered.
        assert (
            f"tenant breaker of {destination!r} (tenant 'default') is open (opened by an HTTP "
            "500)" in warning
        )
        (view,) = [d for d in await ops.settings.destinations() if d.destination == destination]
        assert view.tenant_breakers["default"].opened_by == "an HTTP 500"
        assert view.model_dump(by_alias=True)["tenantBreakers"]["default"]["openedBy"] == (
            "an HTTP 500"
        )
        assert f"`schemabridge destinations reset-breaker {destination} --tenant default`" in (
            warning
        )
        assert "half-opens in" in warning
        # The same breaker as data, for a front door's own way to reset it (the monitor's link).
        (breaker,) = retried.breakers
        assert (breaker.destination, breaker.tenant_id, breaker.message) == (
            destination,
            "default",
            warning,
        )
        assert 0 < breaker.half_open_in_s <= 30
        reprocessed = await ops.actions.reprocess(run_id, actor="test")
        # The same warning, but for its countdown: read a moment later, it may be a second less.
        countdown = re.compile(r"half-opens in \d+ s")
        assert reprocessed.revived == CHILDREN - 1
        assert [countdown.sub("…", w) for w in reprocessed.warnings] == [
            countdown.sub("…", warning)
        ]
        assert [(b.destination, b.tenant_id) for b in reprocessed.breakers] == [
            (destination, "default")
        ]
        assert [b.message for b in reprocessed.breakers] == reprocessed.warnings

        reset = await ops.settings.reset_breakers(destination)
        assert [(c.layer, c.tenant_id, c.was) for c in reset.closed] == [
            ("tenant", "default", "open")
        ]
        async with running_worker(runtime):
            run = await wait_for_run(runtime, run_id)
        children = await runtime.store.children(run_id)
        again = await ops.actions.reprocess(run_id, actor="test")
    finally:
        await runtime.close()
    assert run.status == "SUCCEEDED", run.error
    assert {c.status for c in children} == {"SUCCEEDED"}
    assert downstream.stats.total - sent_in_outage == CHILDREN  # each sent once, none refused
    assert (again.changed, again.warnings) == (False, [])


async def test_a_batch_retry_warns_once_per_open_breaker_not_per_run(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """Three tenants' fan-outs fail into one destination: each tenant's first 5 failures
    count in the global layer too (after its own layer opens, none does), 15: the three tenant
    breakers and the global one open. A batch retry of all 24 children says each open breaker
    once, as the single retry words it, and as data; a batch that retries nothing says
    nothing. Its preview, asked first with the filter, counts the runs it takes and names the
    same breakers; a tenant key's preview counts its tenant's runs and breakers only."""
    destination = f"brk-{uuid.uuid4().hex[:8]}"
    tenants = ("default", "acme", "globex")
    downstream.script([500] * (len(tenants) * CHILDREN), path="/outage")
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        workflows = fan_out(f"{downstream.url}/outage", destination)
        parents = [
            await start(runtime, workflows, list(range(CHILDREN)), tenant_id=tenant)
            for tenant in tenants
        ]
        async with running_worker(runtime):
            for run_id in parents:
                assert (await wait_for_run(runtime, run_id)).status == "FAILED"
        children = [c.id for run_id in parents for c in await runtime.store.children(run_id)]
        # The children are not roots: the filter asks for them by their workflow.
        children_of = RunFilter(workflow="hit", roots_only=False)
        preview = await ops.actions.batch_retry_preview(children_of)
        capped = await ops.actions.batch_retry_preview(children_of, limit=5)
        acme = await ops.actions.batch_retry_preview(children_of, tenant="acme")
        elsewhere = await ops.actions.batch_retry_preview(
            RunFilter(workflow="hit", roots_only=False, tenant="acme"), tenant="other"
        )
        nothing = await ops.actions.batch_retry(ids=parents[:1], actor="test", tenant="other")
        batch = await ops.actions.batch_retry(ids=children, actor="test")
    finally:
        await runtime.close()
    assert (nothing.retried, nothing.warnings) == ([], [])
    assert sorted(batch.retried) == sorted(children)
    countdown = re.compile(r"half-opens in \d+ s")
    fix = "steps that call it fail again at once, sending nothing, until it half-opens in … s"
    opened = "is open (opened by an HTTP 500)"
    assert [countdown.sub("half-opens in … s", w) for w in batch.warnings] == [
        f"the global breaker of {destination!r} {opened}: {fix}; once it is fixed, close it now "
        f"with `schemabridge destinations reset-breaker {destination}`"
    ] + [
        f"the tenant breaker of {destination!r} (tenant {tenant!r}) {opened}: {fix}; once it is "
        f"fixed, close it now with `schemabridge destinations reset-breaker {destination} --tenant "
        f"{tenant}`"
        for tenant in sorted(tenants)
    ]
    assert [(b.destination, b.tenant_id) for b in batch.breakers] == [
        (destination, None),
        (destination, "acme"),
        (destination, "default"),
        (destination, "globex"),
    ]
    assert [b.message for b in batch.breakers] == batch.warnings
    assert (preview.matching, preview.limit, preview.truncated) == (
        len(tenants) * CHILDREN,
        DEFAULT_BATCH,
        False,
    )
    assert [countdown.sub("…", w) for w in preview.warnings] == [
        countdown.sub("…", w) for w in batch.warnings
    ]
    assert [(b.destination, b.tenant_id) for b in preview.breakers] == [
        (b.destination, b.tenant_id) for b in batch.breakers
    ]
    assert (capped.matching, capped.limit, capped.truncated) == (5, 5, True)
    assert (acme.matching, acme.truncated) == (CHILDREN, False)
    assert [(b.destination, b.tenant_id) for b in acme.breakers] == [
        (destination, None),
        (destination, "acme"),
    ]
    assert (elsewhere.matching, elsewhere.warnings, elsewhere.breakers) == (0, [], [])


async def test_a_step_waiting_on_an_open_breaker_counts_down_once(
    backend: Backend, downstream: RunningDownstream
) -> None:
    """Five failures open the tenant breaker; a later run's call is refused and waits for its
    redispatch. What it waits for says what opened the breaker (a 500, at its clock time)
    but counts nothing down; the one countdown is the front doors', to `until` (the CLI's
    live display here)."""
    destination = f"brk-{uuid.uuid4().hex[:8]}"
    # The breaker hears of a failure as the call is settled, which may be after its run has
    # ended: the runs go on until one is refused, each a 500 until then.
    downstream.script([500] * 10, path="/once")
    [child] = fan_out(f"{downstream.url}/once", destination)[1:]
    document = child.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["vertices"]["call"]["maxAutoRetries"] = 1
    workflow = Workflow.model_validate(document)
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        async with running_worker(runtime):
            for _ in range(10):
                run_id = await start(runtime, [workflow], {})
                for _ in range(200):  # 10 s at most: a 500 ends it, a refusal makes it wait
                    progress = await ops.runs.progress(run_id)
                    # Only the breaker's wait: on a loaded host a call may first wait over a
                    # second for its admission slot, which shows too, and then fail.
                    waiting = progress.steps[0].waiting
                    if progress.ended or (waiting is not None and waiting.reason == "breaker_open"):
                        break
                    await asyncio.sleep(0.05)
                if not progress.ended:
                    break
            await ops.actions.cancel(run_id, actor="test")
    finally:
        await runtime.close()
    waiting = progress.steps[0].waiting
    assert waiting is not None and waiting.until is not None
    assert waiting.reason == "breaker_open"
    expected = (
        "redispatch 1/1 after circuit open (opened by an HTTP 500 at HH:MM:SS UTC): the tenant "
        f"breaker of {destination!r} (tenant 'default') is open: it refuses every call until "
        "it half-opens (once the destination is fixed, close it with "
        f"`schemabridge destinations reset-breaker {destination} --tenant default`)"
    )
    pattern = re.escape(expected).replace("HH:MM:SS", r"\d\d:\d\d:\d\d")
    assert re.fullmatch(pattern, waiting.message), waiting.message
    assert waiting.breaker == BreakerRef(destination=destination, tenant_id="default")
    [line] = waiting_lines(progress, now=waiting.until - 20.4)
    assert line == f"call: {waiting.message}; next in 21 s"
