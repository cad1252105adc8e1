"""The operator's tour with the CLI alone, against `schemabridge serve` and against
`schemabridge api` + two `schemabridge worker` processes on PostgreSQL + Redis: publish the
examples, submit and watch a 2,000-item fan-out, see a run fail, read its error and log, retry
it, resolve a step, start it over, batch-retry failed runs, cancel one, reprocess dead
letters. Every command is the real binary in a subprocess.

The tour's steps run on both; checks of how things are printed and paged, which do not depend
on the backend, run on `serve` only (`detailed`), to keep the cluster's part short."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.e2e.cli_harness import Stack, assert_refused, cluster_stack, write_examples

FAILING = '{"customerId": "c-9?status=404", "subject": "broken"}'
"""support-ticket input whose lookup the demo downstream answers 404 (final: http_error)."""
SLOW = '{"customerId": "c-1?sleep_ms=20000", "subject": "slow"}'
"""support-ticket input whose lookup takes 20 s."""
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture(scope="module", params=["serve", "cluster"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    if request.param == "serve":
        yield request.getfixturevalue("serve_api")
        return
    with cluster_stack(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def published(stack: Stack) -> str:
    """The examples, published with `workflows publish` (its table, as printed)."""
    files = write_examples(stack.tmp / "examples", stack.downstream)
    return stack.ok("workflows", "publish", *map(str, files)).stdout


def submit(stack: Stack, workflow: str, run_input: str, *args: str) -> str:
    """`runs submit`, answering the new run's id."""
    answer = stack.json("runs", "submit", workflow, "--input", run_input, *args)
    return str(answer["run"]["id"])


def failed_run(stack: Stack, *args: str) -> str:
    """A support-ticket run that FAILED (`submit --wait`: exit 1, the run as JSON)."""
    waited = stack.cli(
        "runs", "submit", "support-ticket", "--input", FAILING, *args, "--wait", "-o", "json"
    )
    assert waited.returncode == 1, waited.stderr
    run = json.loads(waited.stdout)
    assert run["status"] == "FAILED"
    return str(run["id"])


def detailed(stack: Stack) -> bool:
    """Whether to check what does not depend on the backend (on `serve` only)."""
    return stack.name == "serve"


def test_workflows_are_published_and_read(stack: Stack, published: str) -> None:
    assert re.search(r"nightly-subscription-renewals\s+v1\s+published", published), published
    names = {w["name"] for w in stack.json("workflows", "list")["items"]}
    assert {"support-ticket", "nightly-subscription-renewals", "renew-subscription"} <= names
    shown = stack.ok("workflows", "show", "nightly-subscription-renewals").stdout
    assert re.search(r"^2\s+renew\s+SPAWNER\s+collect\s+renew-subscription$", shown, re.M), shown
    document = json.loads(shown.split("document:\n", 1)[1])
    assert document["name"] == "nightly-subscription-renewals"
    if not detailed(stack):
        return
    again = stack.ok("workflows", "publish", *map(str, sorted((stack.tmp / "examples").iterdir())))
    assert "unchanged" in again.stdout and "published" not in again.stdout

    assert re.search(
        r"^v1\s+serving\s+[0-9a-f]{12}\s",
        stack.ok("workflows", "versions", "support-ticket").stdout,
        re.M,
    )

    pinned = stack.json("workflows", "show", "support-ticket@1")
    assert (pinned["version"], pinned["document"]["name"]) == (1, "support-ticket")


def test_a_2000_item_fan_out_is_watched_to_its_end(stack: Stack, published: str) -> None:
    # The default tenant rate (1,000 GATEWAY steps a minute) would hold 4,000 calls for minutes.
    raised = stack.ok("tenants", "set-rate", "default", "1000000")
    assert "tenant default: 1,000,000 GATEWAY steps a minute" in raised.stdout
    run_input = '{"batchSize": 2000, "renewalDate": "2026-12-01"}'
    run_id = submit(stack, "nightly-subscription-renewals", run_input)

    watched = stack.cli("runs", "watch", run_id, "--timeout", "600")
    assert watched.returncode == 0, watched.stderr
    assert "Traceback" not in watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[-1] == f"run {run_id} SUCCEEDED"
    assert "children 2,000/2,000 (0 failed, 0 running)" in lines[-2]

    shown = stack.ok("runs", "show", run_id).stdout
    assert "2,000 of 2,000 children ended: 2,000 succeeded, 0 failed" in shown
    assert re.search(r"renew\s+SPAWNER\s+SUCCEEDED\s+1 attempt\s", shown), shown
    assert "None" not in shown
    destinations = stack.ok("destinations", "list").stdout
    assert re.search(r"^billing-api\s+100 \(default\)\s", destinations, re.M), destinations
    if not detailed(stack):
        return

    first = stack.json("runs", "children", run_id, "--limit", "3")
    assert [c["itemIndex"] for c in first["items"]] == [0, 1, 2] and first["next"]
    more = stack.json("runs", "children", run_id, "--limit", "2", "--cursor", first["next"])
    assert [c["itemIndex"] for c in more["items"]] == [3, 4]
    table = stack.ok("runs", "children", run_id, "--limit", "3")
    assert "more: add --cursor" in table.stderr
    assert re.search(rf"^renew\[0\]\s+{UUID}\s+SUCCEEDED", table.stdout, re.M), table.stdout

    roots = stack.json("runs", "list", "--workflow", "nightly-subscription-renewals")
    assert run_id in [r["id"] for r in roots["items"]]
    children = stack.json(
        "runs", "list", "--all", "--workflow", "renew-subscription", "--limit", "5"
    )
    assert len(children["items"]) == 5 and children["next"]

    billing = stack.json("destinations", "show", "billing-api")
    assert billing["destination"] == "billing-api" and billing["inFlight"] == 0
    assert "1,000,000/min (set)" in stack.ok("tenants", "show", "default").stdout


def test_a_failed_run_is_read_retried_resolved_and_started_over(
    stack: Stack, published: str
) -> None:
    waited = stack.cli("runs", "submit", "support-ticket", "--input", FAILING, "--wait")
    assert waited.returncode == 1, waited.stderr
    run_id = re.search(rf"run ({UUID}) FAILED: http_error at lookup", waited.stderr)
    assert run_id, waited.stderr
    run = run_id.group(1)
    assert f"next: schemabridge runs retry {run}" in waited.stderr

    shown = stack.ok("runs", "show", run).stdout
    assert "failed step lookup: http_error" in shown
    assert re.search(r"^HTTP\s+status 404 after 1 attempt$", shown, re.M), shown
    assert re.search(r'^body\s+\{"error":"demo answer 404"\}$', shown, re.M), shown
    # The worker that made the attempt (`serve`'s own, or one of the cluster's) is named.
    assert re.search(
        r"^attempts\s+1\.1\s+\S+\s+worker (serve-\S+|w1|w2)\s+"
        r"GET \S+/customers/c-9%3Fstatus%3D404 → 404",
        shown,
        re.M,
    ), shown
    assert "None" not in shown

    log = stack.ok("runs", "logs", run).stdout
    assert re.search(r"error\s+lookup\s+run failed at lookup", log), log
    if detailed(stack):
        lines = stack.ok("runs", "logs", run, "-o", "json").stdout.splitlines()
        entries = [json.loads(line) for line in lines]
        assert entries[0]["message"].startswith("run created") and entries[-1]["level"] == "error"

    retried = stack.ok("runs", "retry", run)
    assert f"run {run}: 1 failed step run again; it is RUNNING" in retried.stdout
    assert stack.cli("runs", "watch", run, "--timeout", "60").returncode == 1, "404 again"

    customer = '{"status": 200, "body": {"id": "c-9", "name": "Ada"}}'
    resolved = stack.ok("runs", "resolve", run, "lookup", "--output", customer)
    assert f"run {run}: step lookup resolved" in resolved.stdout
    assert stack.cli("runs", "watch", run, "--timeout", "60").returncode == 0
    detail = stack.json("runs", "show", run)
    assert detail["status"] == "SUCCEEDED"
    assert [s["status"] for s in detail["steps"]] == ["RESOLVED", "SUCCEEDED"]
    if detailed(stack):
        same = stack.ok("runs", "resolve", run, "lookup", "--output", customer)
        assert "already resolved with this output" in same.stdout
        other = stack.cli("runs", "resolve", run, "lookup", "--output", "{}")
        assert_refused(other, 1, "already resolved")

    started = stack.ok("runs", "start-over", run)
    new_run = re.search(rf"started over as run ({UUID})", started.stdout)
    assert new_run, started.stdout
    assert f"schemabridge runs watch {new_run.group(1)}" in started.stderr
    assert stack.cli("runs", "watch", new_run.group(1), "--timeout", "60").returncode == 1


def test_batch_retry_prints_retried_and_skipped(stack: Stack, published: str) -> None:
    tenant = f"batch-{stack.name}"
    failed = {failed_run(stack, "--tenant", tenant) for _ in range(2)}
    listed = stack.json("runs", "list", "--status", "FAILED", "--tenant", tenant)
    assert {r["id"] for r in listed["items"]} == failed

    batch = stack.ok(
        "runs", "retry", "--status", "FAILED", "--workflow", "support-ticket", "--tenant", tenant
    )
    assert batch.stdout.splitlines()[0] == "retried 2 runs"
    assert set(re.findall(UUID, batch.stdout)) == failed

    ok = submit(
        stack, "support-ticket", '{"customerId": "c-1", "subject": "fine"}', "--tenant", tenant
    )
    assert stack.cli("runs", "watch", ok, "--timeout", "60").returncode == 0
    skipped = stack.cli("runs", "retry", ok, "no-such-run")
    assert skipped.returncode == 1, skipped.stderr
    assert skipped.stdout.splitlines()[0] == (
        "nothing to retry: the 2 runs given were skipped: 1 not FAILED (1 SUCCEEDED), 1 not found"
    )
    assert f"{ok}  not FAILED (it is SUCCEEDED), not retried" in skipped.stdout
    assert "no-such-run  not found" in skipped.stdout

    # A filter with nothing to retry says what it looked for (it printed `retried 0 runs`).
    none = stack.ok(
        "runs", "retry", "--status", "FAILED", "--workflow", "support-ticket",
        "--tenant", f"{tenant}-none",
    )  # fmt: skip
    assert none.stdout.splitlines() == [
        "nothing to retry: no run matched (status FAILED, workflow support-ticket, "
        f"tenant {tenant}-none)",
        "(child runs are retried with --all)",
    ]
    only_skipped = stack.ok(
        "runs", "retry", "--status", "SUCCEEDED", "--workflow", "support-ticket",
        "--tenant", tenant,
    )  # fmt: skip
    assert only_skipped.stdout.splitlines() == [
        "nothing to retry: 1 run matched (status SUCCEEDED, workflow support-ticket, "
        f"tenant {tenant}), all skipped: 1 not FAILED (1 SUCCEEDED)",
        f"  {ok}  not FAILED (it is SUCCEEDED), not retried",
    ]


def test_a_run_is_cancelled_and_a_wait_times_out(stack: Stack, published: str) -> None:
    timed_out = stack.cli(
        "runs", "submit", "support-ticket", "--input", SLOW, "--wait", "--timeout", "1"
    )
    assert timed_out.returncode == 3, timed_out.stderr
    found = re.search(
        rf"run ({UUID}) is still RUNNING after --timeout 1.0 s; it goes on", timed_out.stderr
    )
    assert found, timed_out.stderr
    run = found.group(1)
    assert "Traceback" not in timed_out.stderr
    # With --output json a script reads the run from stdout whatever the outcome.
    as_json = stack.cli(
        "runs", "submit", "support-ticket", "--input", SLOW, "--wait", "--timeout", "1",
        "--output", "json",
    )  # fmt: skip
    assert as_json.returncode == 3, as_json.stderr
    still = json.loads(as_json.stdout)
    assert (still["status"], still["workflow"]) == ("RUNNING", "support-ticket")
    stack.ok("runs", "cancel", still["id"])

    cancelled = stack.ok("runs", "cancel", run)
    assert cancelled.stdout.strip() == f"run {run} cancelled"
    assert stack.ok("runs", "cancel", run).stdout.strip() == f"run {run} was already cancelled"
    watched = stack.cli("runs", "watch", run)
    assert watched.returncode == 1 and watched.stdout.splitlines()[-1] == f"run {run} CANCELLED"

    ended = failed_run(stack)
    assert_refused(stack.cli("runs", "cancel", ended), 1, "has already ended (FAILED)")

    if not detailed(stack):
        return
    key = f"key-{stack.name}"
    first = stack.json(
        "runs", "submit", "support-ticket", "--input", SLOW, "--idempotency-key", key
    )
    second = stack.ok("runs", "submit", "support-ticket", "--input", SLOW, "--idempotency-key", key)
    assert first["created"] is True
    assert (
        f"run {first['run']['id']} was submitted before with this idempotency key" in second.stdout
    )
    stack.ok("runs", "cancel", first["run"]["id"])


def test_reprocess_runs_dead_letters_again(stack: Stack, published: str) -> None:
    # Child 3's charge is refused once; the join tolerates it (1 of 40 is under 5 %).
    stack.downstream_script("/billing/subscriptions/3/charges", [404])
    run_input = '{"batchSize": 40, "renewalDate": "2026-11-30"}'
    waited = stack.cli(
        "runs", "submit", "nightly-subscription-renewals", "--input", run_input, "--wait"
    )
    assert waited.returncode == 0, waited.stderr
    run = re.search(rf"run ({UUID}) SUCCEEDED", waited.stderr)
    assert run, waited.stderr
    parent = run.group(1)

    dead = stack.ok("runs", "children", parent, "--status", "FAILED").stdout
    assert re.search(
        rf"^renew\[3\]\s+{UUID}\s+FAILED\s+\S+ \S+\s+yes\s+http_error at charge", dead, re.M
    ), dead
    # The run SUCCEEDED: its report, after the join, would be sent again. Without a terminal
    # to ask on, the command says so and acts only with --yes.
    refused = stack.cli("runs", "reprocess", parent)
    assert_refused(refused, 1, f"run {parent} was not reprocessed", "add --yes", "report (calls")
    revived = stack.ok("runs", "reprocess", parent, "--yes")
    assert f"run {parent}: 1 dead-lettered child runs again" in revived.stdout
    assert stack.cli("runs", "watch", parent, "--timeout", "120").returncode == 0
    none_left = stack.ok("runs", "children", parent, "--status", "FAILED")
    assert f"run {parent} has no children in status FAILED" in none_left.stderr
    if detailed(stack):
        again = stack.ok("runs", "reprocess", parent)
        assert "no dead-lettered children to run again" in again.stdout


def test_logs_follow_a_run_until_it_ends(serve_api: Stack) -> None:
    # How a log is followed does not depend on the backend: on `serve` only.
    stack = serve_api
    stack.ok(
        "workflows", "publish", *map(str, write_examples(stack.tmp / "examples", stack.downstream))
    )
    # Four attempts 1 s, 2 s and 4 s apart: the log grows while the command follows it.
    run = submit(stack, "support-ticket", '{"customerId": "c-2?status=500", "subject": "flaky"}')
    followed = stack.ok("runs", "logs", run, "--follow", timeout=120)
    lines = followed.stdout.splitlines()
    # Each attempt line ends with the worker that made it (an admin key sees it).
    attempt = r"error\s+lookup\s+GET \S+ → 500 .*\(attempt 4/4\)  \(worker \S+\)$"
    assert re.search(attempt, followed.stdout, re.M)
    assert "run failed at lookup" in lines[-1], lines
    assert len([line for line in lines if "(attempt " in line]) == 4, "each line once"
