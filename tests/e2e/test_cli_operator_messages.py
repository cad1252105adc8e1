"""What `tenants …`, `destinations set-cap` and a submission over its tenant's quota tell an
operator: real subprocesses against `schemabridge serve` (an admin key). Each message is one
line that says what a value must be or what to do next; each test keeps to its own tenants
and destinations."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from schemas.batch_limits import DEFAULT_BATCH
from tests.e2e.cli_harness import Stack, assert_refused
from tests.integration.actions_harness import fix_first_warning

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


# ── tenant ids and tenant numbers ─────────────────────────────────────────────────────────────


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


def test_a_limit_on_the_reserved_system_tenant_is_one_line_that_says_why(
    serve_api: Stack,
) -> None:
    for command in (["set-quota", "system", "0"], ["set-rate", "system", "5"]):
        refused = assert_refused(serve_api.cli("tenants", *command), 2)
        assert len(refused.splitlines()) == 1, refused
        assert "'system' is the tenant of the engine's own runs" in refused
        assert "no rate limit or quota applies to it" in refused
    # Listed only when it has runs (a deployment's): never with a limit of its own.
    shown = serve_api.json("tenants", "show", "system")
    assert (shown["rate"]["configured"], shown["quota"]) == (False, None), "nothing was stored"


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["set-rate", "--rest", "5"], "No such option: --rest. Did you mean '--reset'?"),
        (["set-rate", "rest-typo", "--rest"], "No such option: --rest. Did you mean '--reset'?"),
        (["set-quota", "--rset", "5"], "No such option: --rset (see `schemabridge tenants"),
    ],
)
def test_a_misspelt_option_is_not_taken_as_a_tenant(
    serve_api: Stack, command: list[str], said: str
) -> None:
    """The tour: `tenants set-rate --rest 5` (for `--reset`) set a rate of 5 for a new
    tenant named "--rest". An argument that is a misspelt option is refused as one."""
    refused = assert_refused(serve_api.cli("tenants", *command), 2, said)
    assert len(refused.splitlines()) == 1, refused
    listed = [t["tenantId"] for t in serve_api.json("tenants", "list")["items"]]
    assert not [t for t in listed if t.startswith("-")], listed


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
    # A typo of a known tenant is named (the tour's `tenants show acm` for acme).
    typo = serve_api.ok("tenants", "show", "runs-onyl")
    assert typo.stderr == (
        "tenant runs-onyl has no runs and no settings yet: the defaults shown apply; did you "
        "mean 'runs-only'? (`schemabridge tenants list` names the tenants seen)\n"
    )


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        (["tenants", "set-rate", "numbers", "-5"], "a rate is a positive whole number"),
        (["tenants", "set-rate", "numbers", "0"], "a rate is a positive whole number"),
        (["tenants", "set-rate", "numbers", "fast"], "a rate is a positive whole number"),
        (["tenants", "set-quota", "numbers", "-1"], "a quota is a whole number of runs"),
        (["tenants", "set-quota", "numbers", "lots"], "a quota is a whole number of runs"),
    ],
)
def test_a_number_that_is_not_one_says_what_it_must_be(
    serve_api: Stack, command: list[str], rule: str
) -> None:
    refused = assert_refused(serve_api.cli(*command), 2, rule)
    assert len(refused.splitlines()) == 1, refused
    assert "No such option" not in refused and "[PER_MINUTE]" not in refused


def test_an_optional_argument_is_named_without_brackets(serve_api: Stack, workflow: str) -> None:
    refused = assert_refused(serve_api.cli("workflows", "serving", workflow, "latest"), 2)
    assert "VERSION: give a whole number" in refused and "[VERSION]" not in refused


def test_a_rate_given_as_digits_is_set(serve_api: Stack) -> None:
    assert serve_api.ok("tenants", "set-rate", "digits", "1,200").stdout.strip() == (
        "tenant digits: 1,200 GATEWAY steps a minute"
    )
    assert serve_api.ok("tenants", "set-quota", "digits", "0").stdout.strip() == (
        "tenant digits: quota 0 runs"
    )


# ── destination caps ─────────────────────────────────────────────────────────────────────────


def test_set_cap_changes_only_what_it_is_given(serve_api: Stack) -> None:
    def set_cap(*args: str) -> str:
        changed = serve_api.ok("destinations", "set-cap", "caps-kept", *args)
        # Only the first change finds a key no call has reached and no cap: it says so.
        assert ("no call has reached caps-kept yet" in changed.stderr) == (
            args[:2] == ("--max-concurrency", "3")
        )
        return changed.stdout.strip()

    assert set_cap("--max-concurrency", "3", "--rate", "5") == (
        "caps-kept: maxConcurrency 3, ratePerSecond 5"
    )
    assert set_cap("--max-concurrency", "8") == "caps-kept: maxConcurrency 8, ratePerSecond 5"
    assert set_cap("--rate", "2.5") == "caps-kept: maxConcurrency 8, ratePerSecond 2.5"
    assert set_cap("--no-rate") == "caps-kept: maxConcurrency 8, ratePerSecond unlimited"
    listed = serve_api.json("destinations", "list")["items"]
    kept = next(d for d in listed if d["destination"] == "caps-kept")
    assert (kept["cap"], kept["capConfigured"], kept["ratePerSecond"]) == (8, True, None)


def test_set_cap_on_a_key_no_call_has_says_which_were_meant(serve_api: Stack) -> None:
    # Names no other test's destination is near: `serve_api` is shared by every file of this
    # process, and a `billing-api` of another file was offered too ("… or 'billing-api'").
    serve_api.ok("destinations", "set-cap", "opmsg-ledger-sink", "--max-concurrency", "4")
    typo = serve_api.ok("destinations", "set-cap", "opmsg-ledgr-sink", "--max-concurrency", "4")
    assert typo.stdout.strip() == "opmsg-ledgr-sink: maxConcurrency 4, ratePerSecond unlimited"
    assert typo.stderr.strip() == (
        "note: no call has reached opmsg-ledgr-sink yet and it had no caps: they apply once a "
        "GATEWAY call does; did you mean 'opmsg-ledger-sink'? (`schemabridge destinations "
        "list` shows the known ones)"
    )


def test_set_cap_without_a_change_or_a_cap_to_keep_is_a_usage_error(serve_api: Stack) -> None:
    nothing = assert_refused(serve_api.cli("destinations", "set-cap", "caps-none"), 2)
    assert "give what to change: --max-concurrency N, --rate PER_SECOND or --no-rate" in nothing
    both = serve_api.cli("destinations", "set-cap", "caps-none", "--rate", "1", "--no-rate")
    assert_refused(both, 2, "give --rate PER_SECOND or --no-rate, not both")
    alone = serve_api.cli("destinations", "set-cap", "caps-none", "--rate", "1")
    assert_refused(alone, 2, "caps-none has no caps of its own yet", "give --max-concurrency N")
    listed = serve_api.json("destinations", "list")["items"]
    assert "caps-none" not in [d["destination"] for d in listed], "nothing was stored"


# ── failures a retry repeats ───────────────────────────────────────────────────────────────


def test_a_batch_retry_warns_of_runs_that_fail_the_same_way(serve_api: Stack) -> None:
    """The tour: a batch retry took a run whose SPAWNER failed with invalid_config (its
    `items` read from a misspelt input name) and one that failed on its destination; the
    first failed again at once, and nothing had said so. `--dry-run` warns of exactly that
    run, with the fix, and so does the batch (which still retries both)."""
    tenant, spawn, child, call = "fix-first", "cli-fix-spawn", "cli-fix-child", "cli-fix-http"
    url = serve_api.downstream + "/cli-messages/fix-first?status=400"
    gateway = {"type": "GATEWAY", "config": {"url": url, "retry": {"maxAttempts": 1}}}
    documents = [
        {"name": child, "vertices": {"call": gateway}},
        {"name": call, "vertices": {"call": gateway}},
        {
            "name": spawn,
            "vertices": {
                "each": {
                    "type": "SPAWNER",
                    "config": {"items": "{{ input.line }}", "workflow": child},
                },
                "join": {"type": "MERGE", "dependsOn": ["each"]},
            },
        },
    ]
    path = serve_api.tmp / "cli-fix-first.json"
    path.write_text(json.dumps(documents))
    serve_api.ok("workflows", "publish", str(path))
    for name, run_input in ((spawn, '{"lines": [1]}'), (call, "{}")):
        asked = ("runs", "submit", name, "--tenant", tenant, "--input", run_input, "--wait")
        failed = serve_api.cli(*asked)
        assert failed.returncode == 1, (failed.stdout, failed.stderr)
    listed = serve_api.json("runs", "list", "--tenant", tenant, "--status", "FAILED")["items"]
    (config,) = [run["id"] for run in listed if run["workflow"] == spawn]
    warning = "warning: " + fix_first_warning(
        "1 of the 2 runs failed with invalid_config", [config]
    )
    dry = serve_api.ok("runs", "retry", "--tenant", tenant, "--dry-run")
    said = " ".join(dry.stderr.split())  # rich may wrap the line
    assert said == warning, dry.stderr
    counted = serve_api.json("runs", "retry", "--tenant", tenant, "--dry-run")
    assert counted["fixFirst"] == [{"kind": "invalid_config", "count": 1, "runIds": [config]}]
    batch = serve_api.ok("runs", "retry", "--tenant", tenant)
    assert " ".join(batch.stderr.split()) == warning, batch.stderr
    assert batch.stdout.splitlines()[0] == "retried 2 runs", batch.stdout


# ── open breakers ────────────────────────────────────────────────────────────────────────────


def test_a_batch_retry_into_an_open_breaker_warns_once(serve_api: Stack) -> None:
    """Six runs of one tenant fail on one destination and open its tenant breaker (five
    failures): a batch retry of all six says so in one line, not six, with the command that
    closes it; in JSON the line is the answer's `warnings`. `--dry-run` first counts the six
    (the API's preview, capped by `--limit`) and says the same warning, retrying nothing."""
    tenant, destination, name = "brk-batch", "brk-batch-api", "cli-messages-brk"
    path = serve_api.tmp / "cli-messages-brk.json"
    call = {
        "url": serve_api.downstream + "/cli-messages/brk?status=500",
        "destination": destination,
        "retry": {"maxAttempts": 1},
    }
    vertex = {"type": "GATEWAY", "maxAutoRetries": 0, "config": call}
    path.write_text(json.dumps({"name": name, "vertices": {"call": vertex}}))
    serve_api.ok("workflows", "publish", str(path))
    for _ in range(6):
        failed = serve_api.cli("runs", "submit", name, "--tenant", tenant, "--wait")
        assert failed.returncode == 1, (failed.stdout, failed.stderr)

    asked = ("runs", "retry", "--workflow", name, "--tenant", tenant)
    dry = serve_api.ok(*asked, "--dry-run")
    looked = f"status FAILED, workflow {name}, tenant {tenant}"
    assert dry.stdout == f"would retry 6 runs ({looked}); nothing retried\n", dry.stdout
    capped = serve_api.ok(*asked, "--dry-run", "--limit", "4")
    assert capped.stdout.splitlines() == [
        f"would retry 4 runs ({looked}); nothing retried",
        "more runs match than --limit 4: the batch takes the newest 4; run it again for the rest",
    ], capped.stdout
    counted = serve_api.json(*asked, "--dry-run")
    assert (counted["matching"], counted["truncated"]) == (6, False)
    # Several runs named: the batch's preview of those ids, its warnings on stderr.
    listed = serve_api.json("runs", "list", "--workflow", name, "--tenant", tenant)["items"]
    ids = [run["id"] for run in listed]
    named = serve_api.ok("runs", "retry", *ids[:2], "--dry-run")
    assert named.stdout == "would retry 2 runs (of 2 named); nothing retried\n", named.stdout
    assert named.stderr.startswith("warning: the tenant breaker of "), named.stderr

    retried = serve_api.ok(*asked)
    assert retried.stdout.startswith("retried 6 runs\n"), retried.stdout
    [warning] = retried.stderr.splitlines()
    assert warning.startswith(
        f"warning: the tenant breaker of {destination!r} (tenant {tenant!r}) is open (opened by "
        "an HTTP 500): "
    ), warning
    assert warning.endswith(
        f"`schemabridge destinations reset-breaker {destination} --tenant {tenant}`"
    ), warning
    countdown = re.compile(r"half-opens in \d+ s")
    assert countdown.sub("…", dry.stderr) == countdown.sub("…", retried.stderr), dry.stderr
    # In JSON the line is the answer's `warnings`: asked of a second tenant whose breaker has
    # just opened, since the first one's 30 s reset could pass before its six retried runs had
    # failed again (CI's loaded run: the breaker half-open by then, rightly no warning).
    other = f"{tenant}-json"
    for _ in range(5):
        failed = serve_api.cli("runs", "submit", name, "--tenant", other, "--wait")
        assert failed.returncode == 1, (failed.stdout, failed.stderr)
    answer = serve_api.json("runs", "retry", "--workflow", name, "--tenant", other)
    assert len(answer["retried"]) == 5
    assert [w.split(":")[0] for w in answer["warnings"]] == [
        f"the tenant breaker of {destination!r} (tenant {other!r}) is open (opened by an HTTP 500)"
    ]


def test_a_dry_run_says_what_a_batch_would_not_retry(serve_api: Stack, workflow: str) -> None:
    """`--dry-run` is held to what the batch does: a filter on SUCCEEDED runs counts them but
    retries none (a batch skips them as not FAILED), and a misspelt `--workflow` is refused
    with the name meant, as the batch refuses it, rather than read as "0 runs"."""
    tenant = "dry-run-said"
    serve_api.ok("runs", "submit", workflow, "--tenant", tenant, "--wait")
    asked = ("runs", "retry", "--workflow", workflow, "--tenant", tenant, "--dry-run")
    succeeded = serve_api.ok(*asked, "--status", "SUCCEEDED")
    assert succeeded.stdout == (
        f"would retry no run: 1 run matches (status SUCCEEDED, workflow {workflow}, tenant "
        f"{tenant}), and a retry takes FAILED runs only (the batch would skip them as not "
        "FAILED); nothing retried\n"
    ), succeeded.stdout
    failed = serve_api.ok(*asked)
    assert failed.stdout.startswith("would retry 0 runs (status FAILED"), failed.stdout

    typo = serve_api.cli("runs", "retry", "--workflow", "cli-messages-pnig", "--dry-run")
    assert_refused(typo, 1, "no published workflow 'cli-messages-pnig'; did you mean", workflow)


def test_a_dry_run_counts_up_to_the_limit_the_batch_takes(serve_api: Stack, workflow: str) -> None:
    """Without --limit, the dry run and the batch consider the same number of runs: the one
    default the API's batch and preview take too."""
    previewed = serve_api.json("runs", "retry", "--workflow", workflow, "--dry-run")
    assert previewed["limit"] == DEFAULT_BATCH


def test_a_batch_retry_of_a_version_never_published_is_refused(
    serve_api: Stack, workflow: str
) -> None:
    """`--workflow W@99` names no version that exists: the dry run and the batch refuse it in
    one line naming the versions there are, as an unknown workflow name is refused."""
    for dry_run in (["--dry-run"], []):
        refused = serve_api.cli("runs", "retry", "--workflow", f"{workflow}@99", *dry_run)
        said = assert_refused(refused, 1)
        assert said == f"error: workflow '{workflow}' has no version 99; its only version is 1\n"


# ── services ───────────────────────────────────────────────────────────────────────────────


def test_services_lists_the_serving_process_as_up(serve_api: Stack) -> None:
    listed = serve_api.json("services")["items"]
    serving = [s for s in listed if s["up"] and s["pid"] and s["role"] == "serve"]
    assert serving, listed  # this stack's `serve` process, heard from lately
    text = serve_api.ok("services")
    header, *rows = text.stdout.splitlines()
    assert header.split() == [
        "SERVICE", "STATE", "ROLE", "HOST", "PID", "UPTIME", "LAST", "HEARTBEAT",
    ]  # fmt: skip
    said = [serving[0]["name"], "up", "serve", serving[0]["host"], str(serving[0]["pid"])]
    assert any(row.split()[:5] == said for row in rows)


# ── a batch retry by the list's filter ────────────────────────────────────────────────────────


def test_a_batch_retry_takes_the_options_runs_list_takes(serve_api: Stack) -> None:
    """The tour: `runs retry --workflow W --version 6 --dry-run` was "No such option:
    --version", and no --route or --until either, so the runs `runs list` showed for a
    deployment's exposure could not be retried alone. `runs retry` takes the same filter
    options; W@V still works."""
    name, tenant = "cli-retry-filter", "retry-filter"
    url = f"{serve_api.downstream}/retry-filter?status=400"
    call = {"type": "GATEWAY", "config": {"url": url, "retry": {"maxAttempts": 1}}}
    path = serve_api.tmp / f"{name}.json"
    path.write_text(json.dumps({"name": name, "vertices": {"call": call}}))
    serve_api.ok("workflows", "publish", str(path))
    for target in (f"{name}@1", f"{name}@1", name):  # pinned, pinned, serving
        failed = serve_api.cli("runs", "submit", target, "--tenant", tenant, "--wait")
        assert failed.returncode == 1, (failed.stdout, failed.stderr)
    listed = ("runs", "list", "--workflow", name, "--version", "1", "--route", "pinned")
    newest, older = serve_api.json(*listed)["items"]
    # Between the two (the newest's own time to the microsecond may round up past it).
    between = (newest["createdAt"] + older["createdAt"]) / 2
    until = datetime.fromtimestamp(between, UTC).isoformat()
    window = ("--workflow", name, "--version", "1", "--route", "pinned", "--until", until)
    dry = serve_api.ok("runs", "retry", *window, "--dry-run")
    asked = f"status FAILED, workflow {name}, version 1, route pinned, until {until}"
    assert dry.stdout.startswith(f"would retry 1 run ({asked})"), dry.stdout
    retried = serve_api.ok("runs", "retry", *window)
    assert retried.stdout.splitlines() == ["retried 1 run", f"  {older['id']}"], retried.stdout
    at = serve_api.ok("runs", "retry", "--workflow", f"{name}@1", "--route", "serving", "--dry-run")
    assert at.stdout.startswith(
        f"would retry 1 run (status FAILED, workflow {name}@1, route serving)"
    )
    disagree = assert_refused(
        serve_api.cli("runs", "retry", "--workflow", f"{name}@1", "--version", "2"), 2
    )
    assert f"--workflow {name}@1 and --version 2 disagree" in disagree
