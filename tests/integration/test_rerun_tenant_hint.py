"""The way out a retry's or a start over's warning gives for a run of a version that no longer
serves ("submit it anew without a version") names the run's tenant: with an admin key,
`runs submit` without `--tenant` runs under `default`, not the run's tenant. Through the
operations layer on both backends, with a real worker and the demo downstream."""

from __future__ import annotations

from demo.downstream import RunningDownstream
from engine.operations.views import RunFilter
from tests.integration.deploy_harness import Deploying, version_doc


def hint(tenant: str = "") -> str:
    option = f" --tenant {tenant}" if tenant else ""
    return f"(`schemabridge runs submit orders{option} --input JSON`)"


async def test_the_hint_to_submit_anew_names_the_runs_tenant(
    env: Deploying, downstream: RunningDownstream
) -> None:
    await env.publish(
        version_doc("orders", downstream.url, fails=True), version_doc("orders", downstream.url)
    )
    runs = {
        tenant: (await env.ops.runs.submit("orders", {}, tenant_id=tenant)).run.id
        for tenant in ("acme", "globex", "default")
    }
    for run_id in runs.values():
        assert (await env.ops.runs.wait(run_id, 15)).status == "FAILED"
    await env.ops.deployments.set_serving("orders", 2, actor="key:ops")

    preview = await env.ops.actions.retry_preview(runs["acme"])
    assert preview.warnings[0].endswith(hint("acme")), preview.warnings
    own = await env.ops.actions.retry_preview(runs["default"])
    assert own.warnings[0].endswith(hint()), own.warnings
    one_tenant = await env.ops.actions.batch_retry_preview(RunFilter(tenant="acme"))
    assert one_tenant.warnings[0].endswith(hint("acme")), one_tenant.warnings
    # Runs of several tenants: the operator names each run's own.
    several = await env.ops.actions.batch_retry_preview(RunFilter(workflow="orders"))
    assert several.warnings[0].endswith(hint("TENANT")), several.warnings
    batch = await env.ops.actions.batch_retry([runs["globex"]], actor="key:ops")
    assert batch.warnings[0].endswith(hint("globex")), batch.warnings
    await env.ops.runs.wait(runs["acme"], 15)
    restarted = await env.ops.actions.start_over(runs["acme"], actor="key:ops")
    assert restarted.warnings[0].endswith(hint("acme")), restarted.warnings
