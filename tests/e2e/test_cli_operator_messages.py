"""What `tenants …`, `destinations set-cap` and a submission over its tenant's quota tell an
operator: real subprocesses against `schemabridge serve` (an admin key). Each message is one
line that says what a value must be or what to do next; each test keeps to its own tenants
and destinations."""

from __future__ import annotations

import json

import pytest

from tests.e2e.cli_harness import Stack, assert_refused

WORKFLOW = "cli-messages-ping"


@pytest.fixture(scope="module")
def workflow(serve_api: Stack) -> str:
    """A one-step workflow on the demo downstream, published for this module."""
    path = serve_api.tmp / "cli-messages-ping.json"
    url = serve_api.downstream + "/cli-messages/ping"
    document = {"name": WORKFLOW, "vertices": {"ping": {"type": "GATEWAY", "config": {"url": url}}}}
    path.write_text(json.dumps(document))
    serve_api.ok("workflows", "publish", str(path))
    return WORKFLOW


# ── the run quota ─────────────────────────────────────────────────────────────────────────────


def test_a_used_up_quota_says_how_to_raise_it(serve_api: Stack, workflow: str) -> None:
    tenant = "quota-used"
    serve_api.ok("tenants", "set-quota", tenant, "2")
    for _ in range(2):
        serve_api.ok("runs", "submit", workflow, "--tenant", tenant)
    refused = serve_api.cli("runs", "submit", workflow, "--tenant", tenant)
    assert_refused(refused, 1)
    assert refused.stderr == (
        f"error: tenant {tenant} used its quota of 2 runs; raise it with "
        f"`schemabridge tenants set-quota {tenant} N` or remove it with "
        f"`schemabridge tenants reset-quota {tenant}`\n"
    )

    serve_api.ok("tenants", "set-quota", tenant, "3")
    serve_api.ok("runs", "submit", workflow, "--tenant", tenant)


# ── tenant ids ──────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "command",
    [
        ["tenants", "set-rate", " padded", "10"],
        ["tenants", "set-quota", "padded ", "10"],
        ["tenants", "set-rate", "t" * 201, "10"],
        ["tenants", "show", " padded"],
    ],
)
def test_an_id_no_tenant_can_have_is_one_line_with_the_rule(
    serve_api: Stack, command: list[str]
) -> None:
    refused = assert_refused(serve_api.cli(*command), 2)
    assert len(refused.splitlines()) == 1, refused
    assert "is not a tenant id: a tenant id is 1 to 200 characters" in refused
    assert "without spaces at either end" in refused
    listed = serve_api.json("tenants", "list")["items"]
    assert not [t for t in listed if t["tenantId"].strip() == "padded"], "nothing was stored"


def test_a_tenant_never_seen_says_the_defaults_apply(serve_api: Stack, workflow: str) -> None:
    shown = serve_api.ok("tenants", "show", "never-seen")
    assert shown.stderr == (
        "tenant never-seen has no runs and no settings yet: the defaults shown apply "
        "(`schemabridge tenants list` names the tenants seen)\n"
    )
    assert "rate limit" in shown.stdout
    assert serve_api.json("tenants", "show", "never-seen")["quota"] is None

    serve_api.ok("runs", "submit", workflow, "--tenant", "runs-only")
    ran = serve_api.ok("tenants", "show", "runs-only")
    assert ran.stderr == "tenant runs-only has no settings of its own: the defaults shown apply\n"
    serve_api.ok("tenants", "set-rate", "runs-only", "50")
    assert serve_api.ok("tenants", "show", "runs-only").stderr == ""
