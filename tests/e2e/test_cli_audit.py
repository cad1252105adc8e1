"""Who did what, from the command line against `schemabridge serve` (authentication on): `runs
show` names the key that submitted a run, `audit list` shows administrative changes with
their actor (a key over the API, `cli:<user>@<host>` for the commands on the database), and a
tenant key is refused the audit (exit 4, as every 403)."""

from __future__ import annotations

import json
import socket
import uuid

from tests.e2e.cli_harness import Stack, assert_refused, write_examples


def admin_id(stack: Stack) -> str:
    keys = json.loads(stack.ok("keys", "list", "--json").stdout)
    return str(next(k["id"] for k in keys if k["name"] == "e2e"))


def test_runs_show_names_who_submitted(serve_api: Stack) -> None:
    stack = serve_api
    files = write_examples(stack.tmp / "audit-examples", stack.downstream)
    stack.ok("workflows", "publish", *map(str, files))
    ticket = '{"customerId": "c-1", "subject": "who submitted this?"}'
    submitted = stack.json("runs", "submit", "support-ticket", "--input", ticket)
    shown = stack.ok("runs", "show", submitted["id"]).stdout
    assert f"by key:{admin_id(stack)}" in shown, shown
    as_json = stack.json("runs", "show", submitted["id"])
    assert as_json["createdBy"] == f"key:{admin_id(stack)}"


def test_audit_list_shows_changes_and_their_actor(serve_api: Stack) -> None:
    stack = serve_api
    tenant = f"audit-{uuid.uuid4().hex[:8]}"
    stack.ok("tenants", "set-quota", tenant, "12")
    user = f"ana-{uuid.uuid4().hex[:6]}"  # as the operating system names who runs it
    made = stack.ok("keys", "create", "--tenant", tenant, "--name", "audit", env={"LOGNAME": user})

    events = stack.json("audit", "list", "--subject-kind", "tenant", "--subject", tenant)
    assert [(e["action"], e["actor"], e["detail"]) for e in events["items"]] == [
        ("tenant.quota_set", f"key:{admin_id(stack)}", {"maxRuns": 12})
    ]
    # A command on the database names the account and the machine that ran it; `cli` alone
    # takes every such actor, the whole name one.
    by_user = f"cli:{user}@{socket.gethostname()}"
    created = stack.json("audit", "list", "--action", "key.created", "--actor", "cli")["items"]
    assert [e["actor"] for e in created if e["detail"]["tenantId"] == tenant] == [by_user]
    theirs = stack.json("audit", "list", "--actor", by_user)["items"]
    assert [(e["action"], e["detail"]["tenantId"]) for e in theirs] == [("key.created", tenant)]
    assert stack.json("audit", "list", "--actor", "cli:")["items"] == []

    table = stack.ok("audit", "list", "--subject-kind", "tenant", "--subject", tenant).stdout
    header, row = table.splitlines()
    assert header.split() == ["WHEN", "ACTOR", "ACTION", "SUBJECT", "DETAIL"]
    assert f"tenant.quota_set  tenant {tenant}" in row and '{"maxRuns": 12}' in row

    tenant_key = made.stdout.strip()
    assert_refused(stack.cli("audit", "list", key=tenant_key), 4, "admin key")
    # The API's rule, said with the options the user typed, not the query's parameter names.
    assert_refused(
        stack.cli("audit", "list", "--subject", tenant), 2, "--subject needs --subject-kind"
    )
    assert_refused(
        stack.cli("audit", "list", "--action", "key.revokd"),
        2,
        "--action 'key.revokd' is not an audit action; did you mean 'key.revoked'",
    )
    assert_refused(
        stack.cli("audit", "list", "--subject-kind", "secrets"),
        2,
        "--subject-kind 'secrets' is not a kind of subject; did you mean 'secret'?",
    )
