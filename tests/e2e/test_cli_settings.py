"""`schemabridge destinations …` and `tenants …` as an operator runs them: real subprocesses
against `schemabridge serve` over the REST API (an admin key), tables for people, JSON with
`--output json`, and the API's refusals as one line and an exit code."""

from __future__ import annotations

import json
import re
import uuid

from tests.e2e.cli_harness import Stack, assert_refused


def test_a_cap_is_set_listed_and_removed(serve_api: Stack) -> None:
    stack = serve_api
    set_cap = stack.ok("destinations", "set-cap", "erp", "--max-concurrency", "3")
    assert set_cap.stdout.strip() == "erp: maxConcurrency 3, ratePerSecond unlimited"
    table = stack.ok("destinations", "list").stdout
    assert table.splitlines()[0].split() == [
        "DESTINATION",
        "CAP",
        "RATE",
        "AIMD",
        "LIMIT",
        "IN",
        "FLIGHT",
        "BREAKERS",
        "RETRY",
        "BUDGET",
    ]
    assert re.search(
        r"^erp\s+3 \(set\)\s+-\s+3\.0 \(3 slots\)\s+0\s+global closed\s+100 tokens$", table, re.M
    ), table
    assert "global breaker  closed" in stack.ok("destinations", "show", "erp").stdout

    removed = stack.ok("destinations", "remove-cap", "erp")
    assert removed.stdout.strip() == "erp: cap removed; the default cap (100) applies"
    again = stack.ok("destinations", "remove-cap", "erp", "-o", "json")
    assert json.loads(again.stdout) == {"destination": "erp", "removed": False}
    listed = stack.json("destinations", "list")["items"]
    erp = next(d for d in listed if d["destination"] == "erp")
    assert (erp["cap"], erp["capConfigured"]) == (100, False)


def test_a_key_no_call_can_have_is_refused(serve_api: Stack) -> None:
    bad = serve_api.cli("destinations", "set-cap", "127.0.0.1:8765/", "--max-concurrency", "3")
    assert_refused(bad, 2, "can never match a call", "'http://127.0.0.1:8765'")
    unknown = serve_api.cli("destinations", "show", "nowhere")
    assert_refused(unknown, 1, "no destination 'nowhere'")
    # A typo of a known one is named (the tour's http://127.0.0.1:4861 for …:48611).
    serve_api.ok("destinations", "set-cap", "billing-eu", "--max-concurrency", "3")
    typo = serve_api.cli("destinations", "show", "biling-eu")
    # (Another test of this module's stack may have made a destination as close, named after.)
    assert_refused(typo, 1, "no destination 'biling-eu'", "did you mean 'billing-eu'")
    serve_api.ok("destinations", "remove-cap", "billing-eu")


def test_a_quota_and_a_rate_are_set_shown_and_reset(serve_api: Stack) -> None:
    stack = serve_api
    assert (
        stack.ok("tenants", "set-quota", "acme", "10").stdout.strip()
        == "tenant acme: quota 10 runs"
    )
    assert stack.ok("tenants", "set-rate", "acme", "120").stdout.strip() == (
        "tenant acme: 120 GATEWAY steps a minute"
    )
    shown = stack.json("tenants", "show", "acme")
    assert shown["quota"] == {"maxRuns": 10, "usedRuns": 0, "runsLeft": 10}
    assert (shown["rate"]["perMinute"], shown["rate"]["configured"]) == (120, True)
    assert re.search(
        r"^acme\s+120/min \(set\)\s+0 in 1 min\s+10 runs, 10 left$",
        stack.ok("tenants", "list").stdout,
        re.M,
    )

    reset = stack.ok("tenants", "reset-quota", "acme")
    assert reset.stdout.strip() == "tenant acme: quota removed; runs are unlimited"
    default = stack.ok("tenants", "set-rate", "acme", "--reset")
    assert default.stdout.strip() == (
        "tenant acme: default rate limit (1,000 GATEWAY steps a minute)"
    )
    text = stack.ok("tenants", "show", "acme").stdout
    assert re.search(r"^rate limit\s+1,000/min \(default\): GATEWAY steps a minute$", text, re.M)
    assert re.search(r"^run quota\s+unlimited$", text, re.M), text


def test_a_rate_for_a_tenant_not_known_says_new_tenant_and_the_name_meant(
    serve_api: Stack,
) -> None:
    """A typo of a known tenant is not refused (a limit may come before a tenant's first
    run), but it is said: "new tenant", with the known name it is close to."""
    stack = serve_api
    stack.ok("tenants", "set-quota", "globex", "10")
    typo = stack.ok("tenants", "set-rate", "globx", "5000")
    assert typo.stdout.strip() == "tenant globx: 5,000 GATEWAY steps a minute"
    assert "globx is a new tenant" in typo.stderr, typo.stderr
    assert "did you mean 'globex'?" in typo.stderr, typo.stderr
    again = stack.ok("tenants", "set-rate", "globx", "600")
    assert "new tenant" not in again.stderr, again.stderr
    single = stack.ok("tenants", "set-quota", "globex", "1")
    assert single.stdout.strip() == "tenant globex: quota 1 run"
    assert "new tenant" not in single.stderr, single.stderr


def test_a_limit_for_a_new_tenant_names_the_command_that_undoes_it(serve_api: Stack) -> None:
    """The limit of a typo is applied all the same: the note names the exact command that
    removes it, and that command leaves the typo unknown again."""
    stack = serve_api

    def known() -> list[str]:
        return [tenant["tenantId"] for tenant in stack.json("tenants", "list")["items"]]

    stack.ok("tenants", "set-quota", "initech", "10")
    for command, undo in [
        (["set-rate", "initek", "5000"], "schemabridge tenants set-rate initek --reset"),
        (["set-quota", "initek", "5"], "schemabridge tenants reset-quota initek"),
    ]:
        typo = stack.ok("tenants", *command)
        assert "did you mean 'initech'?" in typo.stderr, typo.stderr
        assert typo.stderr.rstrip().endswith(f"the limit is set: `{undo}` undoes it"), typo.stderr
        assert "initek" in known()
        stack.ok(*undo.split()[1:])
        assert "initek" not in known()
    reset = stack.ok("tenants", "set-rate", "initeck", "--reset")
    assert "undoes" not in reset.stderr, reset.stderr


def test_values_the_api_refuses_are_usage_errors(serve_api: Stack) -> None:
    assert_refused(serve_api.cli("tenants", "set-quota", " ", "5"), 2, "tenant id")
    both = serve_api.cli("tenants", "set-rate", "acme", "5", "--reset")
    assert both.returncode == 2
    assert "give a rate (GATEWAY steps a minute), or --reset" in both.stderr
    assert "Traceback" not in both.stderr


def open_tenant_breaker(stack: Stack, destination: str, tenant: str) -> None:
    """A run of `tenant` whose call to `destination` is answered 500 five times (its in-process
    retries): the tenant breaker of `destination` opens, as a failing downstream opens it."""
    name = f"brk-{uuid.uuid4().hex[:8]}"
    path = stack.tmp / f"{name}.json"
    call = {
        "url": stack.downstream + "/brk?status=500",
        "destination": destination,
        "retry": {"maxAttempts": 5, "baseDelayMs": 10},
    }
    workflow = {
        "name": name,
        "vertices": {"call": {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}},
    }
    path.write_text(json.dumps(workflow))
    stack.ok("workflows", "publish", str(path))
    run = stack.cli("runs", "submit", name, "--tenant", tenant, "--wait", "-o", "json")
    assert json.loads(run.stdout)["status"] == "FAILED", (run.stdout, run.stderr)


def test_an_open_breaker_is_closed_by_hand(serve_api: Stack) -> None:
    destination = f"brk-{uuid.uuid4().hex[:8]}"
    unknown = serve_api.cli("destinations", "reset-breaker", destination)
    assert_refused(unknown, 1, f"no call has reached {destination}")
    open_tenant_breaker(serve_api, destination, "acme")
    open_tenant_breaker(serve_api, destination, "globex")
    one = serve_api.ok("destinations", "reset-breaker", destination, "--tenant", "acme")
    assert one.stdout.strip() == f"{destination}: tenant breaker (acme) closed (was open)"
    rest = serve_api.json("destinations", "reset-breaker", destination)
    assert rest["closed"] == [{"layer": "tenant", "tenantId": "globex", "was": "open"}]
    again = serve_api.ok("destinations", "reset-breaker", destination)
    assert again.stdout.strip() == f"{destination}: every breaker was closed already"
    tenant_key = serve_api.cli("destinations", "reset-breaker", destination, key="")
    assert tenant_key.returncode == 4 and "Traceback" not in tenant_key.stderr


def test_the_reserved_system_tenant_reads_no_limit(serve_api: Stack) -> None:
    """`system` (deployments' own runs) was shown with the default "1,000/min" and "the
    defaults shown apply", a limit no setting can give it and none acts on."""
    shown = serve_api.ok("tenants", "show", "system")
    text = shown.stdout
    assert re.search(r"^rate limit\s+none \(the engine's own runs make no calls\)$", text, re.M)
    assert re.search(r"^run quota\s+none$", text, re.M), text
    assert "1,000" not in text and "defaults shown apply" not in shown.stderr
    assert serve_api.json("tenants", "show", "system")["reserved"] is True
