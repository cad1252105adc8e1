"""`schemabridge deployments …`, `workflows serving` and what `workflows publish` says about a
later version, with the real binary against `schemabridge serve` (its worker drives the
deployments): a healthy candidate promoted to serving, a failing one rolled back by itself
with its exposure and the command that lists it, abort and manual rollback, the 409 of a
second deployment, and the refusals in one line with their exit codes."""

from __future__ import annotations

import re
import shlex
from typing import Any

import httpx
import pytest

from api.cli.text import exact
from tests.e2e.cli_harness import (
    HOLDING,
    Stack,
    assert_refused,
    started_id,
    wait_for_deployment,
)
from tests.integration.operations_harness import single, spawner_of, two_versions

QUICK = ["--min-runs", "0", "--min-duration", "0", "--min-finished", "0"]


@pytest.fixture(scope="module")
def stack(serve_api: Stack) -> Stack:
    return serve_api


def publish(stack: Stack, name: str, url: str, note: str) -> tuple[str, str]:
    """`workflows publish` of a one-call workflow; its stdout and stderr."""
    published = stack.publish(single(name, url, description=note), note)
    return published.stdout, published.stderr


def published_versions(stack: Stack, name: str, *, failing: bool = False) -> None:
    """`two_versions` of `name` on the demo downstream, published through the CLI."""
    for document in two_versions(name, f"{stack.downstream}/orders", failing=failing):
        stack.publish(document, document["description"])


def submit(stack: Stack, name: str, count: int, key: str | None = None) -> list[dict[str, Any]]:
    """`count` runs of `name` submitted with the admin key, or `key`."""
    headers = {"Authorization": f"Bearer {key or stack.admin_key}"}
    with httpx.Client(base_url=stack.url, headers=headers, trust_env=False, timeout=30) as http:
        answers = [http.post(f"/workflows/{name}/runs", json={"input": {}}) for _ in range(count)]
    assert all(a.status_code == 201 for a in answers), [a.text for a in answers]
    return [a.json()["run"] for a in answers]


def test_publishing_a_later_version_says_it_does_not_serve_yet(stack: Stack) -> None:
    out, err = publish(stack, "dep-publish", f"{stack.downstream}/orders", "v1")
    assert re.search(r"^dep-publish\s+v1\s+published\s+yes$", out, re.M), out
    assert "NOT serving" not in err
    out, err = publish(stack, "dep-publish", f"{stack.downstream}/orders", "v2")
    assert re.search(r"^dep-publish\s+v2\s+published\s+no \(v1 serves\)$", out, re.M), out
    # The API's hint, printed as it is: the sentence a REST client gets.
    assert (
        "dep-publish v2 is NOT serving yet: new runs get v1. Deploy it: "
        "`schemabridge deployments start dep-publish --version 2`"
    ) in err
    assert "`schemabridge workflows serving dep-publish 2`" in err
    shown = stack.ok("workflows", "serving", "dep-publish").stdout
    assert shown.startswith("dep-publish: v1 serves new runs (since "), shown
    listed = stack.ok("workflows", "list").stdout
    assert re.search(r"^dep-publish\s+v2\s+v1\s+2\s", listed, re.M), listed
    switched = stack.ok("workflows", "serving", "dep-publish", "2").stdout
    assert switched.startswith("dep-publish: v2 serves new runs from now on (set by key:")
    # The same switch again: nothing to do, said as such (exit 0), not a switch anew.
    again = stack.ok("workflows", "serving", "dep-publish", "2").stdout
    assert again.startswith("dep-publish: v2 serves new runs already (since "), again
    assert again.rstrip().endswith("): nothing to do"), again
    assert stack.json("workflows", "serving", "dep-publish")["servingVersion"] == 2
    assert {r["version"] for r in submit(stack, "dep-publish", 3)} == {2}


def test_a_healthy_candidate_is_promoted_and_serves(stack: Stack) -> None:
    published_versions(stack, "dep-healthy")
    started = stack.ok(
        "deployments", "start", "dep-healthy", "--version", "2", "--stages", "100",
        *QUICK, "--check-interval", "0.2",
    )  # fmt: skip
    deployment_id = started_id(started.stdout)
    # At 100 % there is no rest for v1 (the tour: "(v1 the rest)").
    assert (
        "dep-healthy v2 gets 100 % of new runs (all of them: v1 gets none while it runs); "
        "stages 100 %"
    ) in started.stdout, started.stdout
    assert "the rest" not in started.stdout
    assert f"follow it: schemabridge deployments show {deployment_id}" in started.stderr
    done = wait_for_deployment(stack, deployment_id, "SUCCEEDED")
    assert done["weight"] is None and done["outcome"]["actor"] == "engine"
    assert [e["event"] for e in done["timeline"]] == ["started", "succeeded"]
    assert stack.json("workflows", "serving", "dep-healthy")["servingVersion"] == 2
    shown = stack.ok("deployments", "show", deployment_id).stdout
    assert re.search(
        r"^deployment \S+  dep-healthy v2 \(candidate\) over v1 \(serving\)  SUCCEEDED$",
        shown,
        re.M,
    ), shown
    # In the monitor's words ("Promoted at stage 1"), not the status's.
    assert re.search(r"^promoted at stage 1 \(engine\): stage 1 passed: ", shown, re.M), shown
    assert re.search(r"UTC  promoted +1 ", shown), shown
    assert "stage 1 of 1 (100 %); the candidate v2 now serves: it gets every new run" in shown
    assert "None" not in shown
    # The process log says it started and that v2 now serves, as its run's log does.
    log = (stack.tmp / "serve.log").read_text(encoding="utf-8")
    started_line = (
        rf"INFO +serve\S*: deployment {deployment_id} of dep-healthy started by key:\w+ \(e2e\): "
    )
    assert re.search(started_line, log), log
    promoted = re.search(
        rf"INFO +serve\S*: deployment {deployment_id} of dep-healthy: .*$", log, re.M
    )
    assert promoted and "promoted: dep-healthy v2 now serves every new run (was v1)" in (
        promoted.group(0)
    ), log
    assert f"deployment_id={deployment_id}" in promoted.group(0)
    assert "actor=engine" in promoted.group(0) and "threshold=0.05" in promoted.group(0)
    said = stack.ok("runs", "logs", done["runId"]).stdout
    assert (
        f"run created: deployment {deployment_id} of dep-healthy v2 (over the serving v1)" in said
    )
    assert "promoted: dep-healthy v2 now serves every new run (was v1)" in said, said
    table = stack.ok("deployments", "list", "dep-healthy").stdout
    # v1 is the version it started from, not one serving beside the promoted v2.
    assert re.search(r"^DEPLOYMENT\s+WORKFLOW\s+CANDIDATE\s+FROM\s+STATUS\s", table, re.M), table
    assert re.search(
        rf"^{deployment_id}\s+dep-healthy\s+v2\s+v1\s+SUCCEEDED\s+stage 1 of 1 \(100 %\)\s+"
        r"100 % \(serving\)\s",
        table,
        re.M,
    ), table


def promote(stack: Stack, name: str, version: int) -> str:
    """Deploy `version` of `name` in one quick stage and wait until it serves; its id."""
    started = stack.ok(
        "deployments", "start", name, "--version", str(version), "--stages", "100",
        *QUICK, "--check-interval", "0.2",
    )  # fmt: skip
    deployment_id = started_id(started.stdout)
    wait_for_deployment(stack, deployment_id, "SUCCEEDED")
    return deployment_id


def test_an_old_deployment_says_its_outcome_was_superseded(stack: Stack) -> None:
    published_versions(stack, "dep-history")
    publish(stack, "dep-history", f"{stack.downstream}/orders", "v3")
    publish(stack, "dep-history", f"{stack.downstream}/orders", "v4")
    first = promote(stack, "dep-history", 2)
    ended_at = stack.json("deployments", "show", first)["endedAt"]
    second = promote(stack, "dep-history", 3)
    held = stack.ok(
        "deployments", "start", "dep-history", "--version", "4", "--stages", "100", *HOLDING
    )
    third = started_id(held.stdout)
    # v3 serves since the second deployment promoted it, not since the third one began.
    promoted_at = stack.json("deployments", "show", second)["endedAt"]
    serving = stack.ok("workflows", "serving", "dep-history").stdout
    assert serving.startswith(f"dep-history: v3 serves new runs (since {exact(promoted_at)} ")
    assert f" by deployment:{second}); deployment {third} gives v4 100 % of them" in serving
    stack.ok("deployments", "abort", third)
    kept = stack.ok("deployments", "show", third).stdout
    assert "the candidate gets 0 % of new runs: they go back to v3" in kept, kept
    stack.ok("workflows", "serving", "dep-history", "4")

    old = stack.ok("deployments", "show", first).stdout
    assert "now serves" not in old, old
    assert f"the candidate v2 served from {exact(ended_at)}; superseded: v4 serves now" in old, old
    aborted = stack.ok("deployments", "show", third).stdout
    assert "new runs went back to v3; superseded: v4 serves now" in aborted, aborted
    table = stack.ok("deployments", "list", "dep-history").stdout
    for deployment_id in (first, second, third):
        assert re.search(rf"^{deployment_id}\s.*\ssuperseded \(v4 serves\)\s", table, re.M), table
    assert "(serving)" not in table, table
    # Two at a time, newest first: the last line gives the cursor that continues.
    two = stack.ok("deployments", "list", "dep-history", "--limit", "2")
    assert [line.split()[0] for line in two.stdout.splitlines()[1:]] == [third, second]
    more = re.fullmatch(r"more: add --cursor (\S+)", two.stderr.strip())
    assert more is not None, two.stderr
    rest = stack.json("deployments", "list", "dep-history", "--cursor", more[1])
    assert ([d["id"] for d in rest["items"]], rest["next"]) == ([first], None)


def test_deploying_a_spawners_child_warns_that_its_parent_pins_it(stack: Stack) -> None:
    published_versions(stack, "dep-child")
    stack.publish(spawner_of("dep-parent", "dep-child"), "v1")
    # --dry-run says the start and its warnings first, and starts nothing.
    dry = stack.ok(
        "deployments", "start", "dep-child", "--version", "2", "--stages", "100", "--dry-run"
    )
    assert dry.stdout.startswith(
        "dry run, nothing started: v2 would get 100 % of new runs (all of them"
    ), dry.stdout
    assert "warning: dep-child is a SPAWNER's child" in dry.stderr, dry.stderr
    none_yet = stack.ok("deployments", "list", "dep-child").stderr
    assert "no deployments of dep-child" in none_yet, none_yet
    assert "start one: schemabridge deployments start dep-child --version V" in none_yet
    started = stack.ok(
        "deployments", "start", "dep-child", "--version", "2", "--stages", "100", *HOLDING
    )
    deployment_id = started_id(started.stdout)
    assert (
        "warning: dep-child is a SPAWNER's child in the serving version of dep-parent v1: "
    ) in started.stderr, started.stderr
    assert "publish the parent with `dep-child@2` in its SPAWNER and deploy the parent" in (
        started.stderr
    )
    assert "warning" not in started.stdout
    # Said again by `show` while it waits: later, "waiting at stage 1: 0/1,000 runs" looked stuck.
    shown = stack.ok("deployments", "show", deployment_id).stdout
    assert "warning: dep-child is a SPAWNER's child in the serving version of dep-parent v1" in (
        shown
    ), shown
    stack.ok("deployments", "abort", deployment_id)
    assert "warning" not in stack.ok("deployments", "show", deployment_id).stdout


def test_a_stage_that_waits_for_finished_runs_says_so(stack: Stack) -> None:
    """The tour: `--min-runs 10` with the default `--min-finished` 20, shown as "25 % (10
    runs, 10 s)" while its check said "19/20 finished runs", warned of nothing at --dry-run
    or start; stage 1 passed after some 90 submissions."""
    published_versions(stack, "dep-finished")
    given = ["--version", "2", "--stages", "25,50,100", "--min-runs", "10", "--min-duration", "10s"]
    said = (
        "warning: stage 1 waits for 20 finished runs of v2 (--min-finished, minFinishedRuns) "
        "before it can pass, more than its 10 runs (--min-runs, minRuns): at 25 % of new runs, "
        "about 80 submissions\n"
    )
    dry = stack.ok("deployments", "start", "dep-finished", *given, "--dry-run")
    assert said in dry.stderr, dry.stderr
    started = stack.ok("deployments", "start", "dep-finished", *given)
    assert said in started.stderr, started.stderr
    deployment_id = started_id(started.stdout)
    shown = stack.ok("deployments", "show", deployment_id).stdout
    # What each stage waits for, in the check's terms ("waiting at stage 1: …, 0/20 finished
    # runs"): the runs, the time and the finished runs, never the runs alone; stage 1 only,
    # as the later stages begin with them.
    first, each = "(10 runs, 10 s, 20 finished runs)", "(10 runs, 10 s)"
    assert f"stages: 25 % {first} → 50 % {each} → 100 % {each}\n" in shown, shown
    assert "judged from 20 finished runs since the deployment began; " in shown, shown
    stack.ok("deployments", "abort", deployment_id)


def test_a_failing_candidate_is_rolled_back_with_its_exposure(stack: Stack) -> None:
    published_versions(stack, "dep-broken", failing=True)
    started = stack.ok(
        "deployments", "start", "dep-broken", "--version", "2", "--stages", "50,100",
        *HOLDING, "--max-failure-ratio", "0.1", "--min-finished", "3", "--check-interval", "0.2",
    )  # fmt: skip
    deployment_id = started_id(started.stdout)
    runs = submit(stack, "dep-broken", 24)
    on_candidate = {r["id"] for r in runs if r["version"] == 2}
    assert len(on_candidate) >= 3, "the 50 % stage sent some runs to the candidate"
    ended = wait_for_deployment(stack, deployment_id, "ROLLED_BACK")
    assert ended["weight"] is None and ended["outcome"]["actor"] == "engine"
    assert ended["exposure"] == len(on_candidate) == ended["candidate"]["runs"]
    assert {r["version"] for r in submit(stack, "dep-broken", 5)} == {1}

    shown = stack.ok("deployments", "show", deployment_id).stdout
    assert "ROLLED_BACK" in shown.splitlines()[0]
    assert "stage 1 of 2 (50 %); the candidate gets 0 % of new runs: they go back to v1" in shown
    assert f"exposure: {len(on_candidate)} runs went to the candidate v2" in shown
    assert re.search(r"^v2\s+candidate\s+\d+\s+0\s+\d+\s+0\s+\d+\s+1\.000$", shown, re.M), shown
    figures = ended["outcome"]["figures"]["candidate"]
    assert (
        f"candidate v2: {figures['failed']} failed of {figures['finished']} finished "
        f"(ratio 1.000; {figures['runs']} runs in all when it decided)"
    ) in shown
    assert "threshold 0.100" in shown
    assert (
        "rollback when the candidate's failure ratio exceeds 0.1, judged from 3 finished runs "
        "since the deployment began; checked every "
    ) in shown
    assert re.search(
        r"^rolled back at stage 1 \(engine\): the candidate failed \d+ of", shown, re.M
    )
    # Times labelled with their zone, as everywhere else the CLI prints one.
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [A-Z][A-Za-z0-9+-]*"
    assert re.search(rf"^\s*{stamp}\s+started\s+1\s+50 %\s", shown, re.M), shown
    # The event in the monitor's words ("rolled back"), not the API's enum.
    assert re.search(rf"^\s*{stamp}\s+rolled back\s+1\s", shown, re.M), shown
    rolled = re.search(
        rf"WARNING serve\S*: deployment {deployment_id} of dep-broken v2 .*$",
        (stack.tmp / "serve.log").read_text(encoding="utf-8"),
        re.M,
    )
    assert rolled and " rolled back at stage 1: the candidate failed " in rolled.group(0)
    assert "actor=engine" in rolled.group(0) and "failure_ratio=1.0" in rolled.group(0)
    assert "None" not in shown
    command = re.search(r"list them: (schemabridge runs list .*)$", shown, re.M)
    assert command, shown
    assert "--workflow dep-broken --version 2 --route candidate --since " in command.group(1)
    listed = stack.json(*shlex.split(command.group(1))[1:], "--limit", "100")
    assert {r["id"] for r in listed["items"]} == on_candidate
    one = stack.ok("runs", "show", sorted(on_candidate)[0]).stdout
    assert re.search(r"^workflow\s+dep-broken v2 \(a deployment's candidate\)$", one, re.M), one
    assert re.search(
        rf"^deployment\s+{deployment_id}: schemabridge deployments show {deployment_id}$", one, re.M
    ), one
    table = stack.ok("deployments", "list", "dep-broken").stdout
    assert re.search(
        rf"^{deployment_id}\s+dep-broken\s+v2\s+v1\s+ROLLED_BACK\s+stage 1 of 2 \(50 %\)\s+0 %\s",
        table,
        re.M,
    ), table


def test_abort_and_manual_rollback(stack: Stack) -> None:
    published_versions(stack, "dep-abort")
    first = started_id(
        stack.ok(
            "deployments", "start", "dep-abort", "--version", "2", *HOLDING, "--margin", "0.02"
        ).stdout
    )
    # The 8 characters the monitor shows name the deployment in show, abort and rollback.
    shown = stack.ok("deployments", "show", first[:8]).stdout
    assert shown.startswith(f"deployment {first}  dep-abort v2"), shown
    assert (
        "rollback when the candidate's failure ratio exceeds 0.05 or serving's ratio + 0.02, "
        "whichever is higher (threshold now 0.050), judged from 20 finished runs"
    ) in shown
    listed = stack.json("deployments", "list")["items"]
    assert first in [d["id"] for d in listed]
    mine = next(d for d in listed if d["id"] == first)
    assert [s["weight"] for s in mine["stages"]] == [10, 25, 50, 100]
    assert {s["minRuns"] for s in mine["stages"]} == {1000}
    assert {s["minDurationSeconds"] for s in mine["stages"]} == {3600}
    table = stack.ok("deployments", "list").stdout
    assert re.search(
        rf"^{first}\s+dep-abort\s+v2\s+v1\s+RUNNING\s+stage 1 of 4 \(10 %\)\s+10 %\s", table, re.M
    ), table

    aborted = stack.ok("deployments", "abort", first[:8], "--reason", "p99 doubled on EU")
    assert aborted.stdout == f"deployment {first} aborted: dep-abort v2 gets no new runs\n"
    said = stack.ok("deployments", "show", first).stdout
    # Who and why, once ("aborted at stage 1 (key:X): aborted by key:X" said nothing more).
    assert re.search(
        r"^aborted at stage 1: stopped by key:(\w+) \(e2e\): p99 doubled on EU$", said, re.M
    ), said
    assert "when it was stopped" in said and "when it decided" not in said
    assert re.search(r"\saborted\s+1\s+-\s+stopped by key:\w+ \(e2e\): p99 doubled", said)
    assert (
        f"exposure: 0 runs went to the candidate v2; details: schemabridge deployments show {first}"
        in (aborted.stderr)
    )
    again = stack.ok("deployments", "abort", first)
    assert again.stdout == f"deployment {first} was already aborted\n"
    late = stack.cli("deployments", "rollback", first)
    assert_refused(late, 1, "has already ended (ABORTED); it cannot be rolled back")

    second = started_id(
        stack.ok(
            "deployments", "start", "dep-abort", "--version", "2", "--stages", "100", *HOLDING
        ).stdout
    )
    assert [r["version"] for r in submit(stack, "dep-abort", 1)] == [2]
    rolled_back = stack.ok("deployments", "rollback", second[:13].upper())
    assert (
        f"exposure: 1 run went to the candidate v2; details: schemabridge deployments show {second}"
        in (rolled_back.stderr)
    )
    rolled = stack.json("deployments", "show", second)
    assert rolled["status"] == "ROLLED_BACK"
    assert rolled["outcome"]["reason"].startswith("stopped by key:")
    assert rolled["createdBy"].endswith(" (e2e)")
    assert stack.json("workflows", "serving", "dep-abort")["servingVersion"] == 1


def test_a_second_deployment_is_refused(stack: Stack) -> None:
    published_versions(stack, "dep-twice")
    first = started_id(
        stack.ok("deployments", "start", "dep-twice", "--version", "2", *HOLDING).stdout
    )
    second = stack.cli("deployments", "start", "dep-twice", "--version", "2")
    assert_refused(
        second,
        1,
        f"`schemabridge deployments show {first}`",
        f"`schemabridge deployments abort {first}`",
    )
    assert len(second.stderr.splitlines()) == 1
    switch = stack.cli("workflows", "serving", "dep-twice", "2")
    # The same refusal, the same way out: the running deployment's commands.
    assert_refused(
        switch,
        1,
        f"`schemabridge deployments show {first}`",
        f"`schemabridge deployments abort {first}`",
    )
    assert len(switch.stderr.splitlines()) == 1
    assert len(stack.json("deployments", "list", "dep-twice")["items"]) == 1
    stack.ok("deployments", "abort", first)


def test_the_system_workflow_is_not_offered_as_a_users(stack: Stack) -> None:
    published_versions(stack, "dep-system")
    started = stack.ok("deployments", "start", "dep-system", "--version", "2", *HOLDING)
    deployment = started_id(started.stdout)
    listed = (
        stack.ok("workflows", "list").stdout + stack.ok("workflows", "list", "-o", "json").stdout
    )
    assert "dep-system" in listed and "gradual_deploy" not in listed, listed
    # A typo's fix names the user's workflows only, never the engine's own.
    # Its own deployments list is empty, and offers no start (it would be refused).
    engines = stack.ok("deployments", "list", "gradual_deploy").stderr
    assert "the engine's own workflow is never deployed" in engines, engines
    assert "start one" not in engines, engines
    refused = stack.cli("deployments", "list", "gradual_deplyo")
    assert_refused(refused, 1, "no published workflow 'gradual_deplyo'")
    assert not re.search(r"\bgradual_deploy\b", refused.stderr), refused.stderr
    # ... but the commands that read runs, which it has, may name it.
    typo = stack.cli("runs", "list", "--workflow", "gradual_deplyo")
    assert_refused(typo, 1, "did you mean 'gradual_deploy'?")
    # Its runs stay where they were: the run list shows the system run.
    runs = stack.json("runs", "list", "--workflow", "gradual_deploy")
    shown = stack.json("deployments", "show", deployment)
    assert shown["runId"] in {r["id"] for r in runs["items"]}, runs
    stack.ok("deployments", "abort", deployment)
    # Its run refuses a start over (a refusal, exit 1, not a usage error) and says instead.
    refused = stack.cli("runs", "start-over", shown["runId"])
    assert_refused(refused, 1, "start a new deployment (", deployment, "(it is CANCELLED)")
    assert len(refused.stderr.splitlines()) == 1, refused.stderr


def test_cancelling_a_deployments_run_names_the_deployment_it_aborts(stack: Stack) -> None:
    """The run monitor and `runs cancel` offer to cancel the `gradual_deploy` run: the answer
    says which deployment ended with it, and what now serves."""
    published_versions(stack, "dep-cancel")
    started = stack.ok("deployments", "start", "dep-cancel", "--version", "2", *HOLDING)
    deployment = started_id(started.stdout)
    run = stack.json("deployments", "show", deployment)["runId"]
    cancelled = stack.ok("runs", "cancel", run)
    assert cancelled.stdout == (
        f"run {run} cancelled; deployment {deployment} (dep-cancel v2), which it drove, is "
        "aborted: v2 gets no new runs, v1 serves\n"
    )
    assert wait_for_deployment(stack, deployment, "ABORTED")["weight"] is None
    again = stack.json("runs", "cancel", run)
    assert (again["changed"], again["abortedDeployment"]) == (False, None)
    log = stack.ok("runs", "logs", run).stdout
    assert f"deployment {deployment} (dep-cancel v2), which it drove, is aborted" in log, log


@pytest.fixture(scope="module")
def refusing(stack: Stack) -> Stack:
    """The stack with dep-refusals v1 and v2 published."""
    published_versions(stack, "dep-refusals")
    return stack


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (
            ["deployments", "show", "no-such-deployment"],
            1,
            "no deployment 'no-such-deployment'; `schemabridge deployments list` shows the "
            "deployments",
        ),
        (["deployments", "abort", "00000000-0000-0000-0000-000000000000"], 1, "no deployment"),
        (
            ["deployments", "rollback", "nope"],
            1,
            "no deployment 'nope'; `schemabridge deployments list`",
        ),
        (
            ["deployments", "show", "0123abcd"],
            1,
            "no deployment '0123abcd' (no deployment id starts with it); "
            "`schemabridge deployments list` shows the deployments",
        ),
        (
            ["deployments", "abort", "0123abc"],
            1,
            "no deployment '0123abc' (a short id needs at least 8 characters, as the monitor "
            "shows); `schemabridge deployments list`",
        ),
        (["deployments", "list", "ghost"], 1, "ghost"),
        (["deployments", "list", "dep-refusls"], 1, "did you mean 'dep-refusals'"),
        (["deployments", "start", "ghost", "--version", "1"], 1, "ghost"),
        (
            ["deployments", "start", "dep-refusls", "--version", "2"],
            1,
            "no published workflow 'dep-refusls' version 2; did you mean 'dep-refusals'",
        ),
        (
            ["deployments", "start", "dep-refusals", "--version", "9"],
            1,
            "workflow 'dep-refusals' has no version 9; its versions are 1 to 2",
        ),
        (["deployments", "start", "dep-refusals", "--version", "1"], 1, "serving"),
        (
            ["deployments", "start", "dep-refusals", "--version", "2", "--stages", "50,10,100"],
            2,
            "--stages 50,10,100: the deployment's stages cannot work: stage 2's weight (10) "
            "must be above stage 1's (50)",
        ),
        (
            ["deployments", "start", "dep-refusals", "--version", "2", "--stages", "10,50"],
            2,
            "--stages 10,50: the deployment's stages cannot work: the last stage's weight is "
            "50 %, and it must be 100 % (the share of new runs the candidate gets: all of them "
            "before it becomes the serving version); end with a stage of weight 100",
        ),
        (
            ["deployments", "start", "dep-refusals", "--version", "2", "--stages", "10,x,100"],
            2,
            "--stages '10,x,100': 'x' is not a number",
        ),
        (
            ["deployments", "start", "dep-refusals", "--version", "2", "--stages", "150"],
            2,
            "150 is not a weight",
        ),
        (
            ["deployments", "start", "dep-refusals", "--version", "2", "--min-duration", "soon"],
            2,
            "--min-duration 'soon' is not a duration",
        ),
        (["workflows", "serving", "ghost"], 1, "ghost"),
        (
            ["workflows", "serving", "dep-refusals", "9"],
            1,
            "workflow 'dep-refusals' has no version 9; its versions are 1 to 2",
        ),
        (
            ["workflows", "serving", "dep-refusls"],
            1,
            "did you mean 'dep-refusals'",
        ),
        (["runs", "list", "--version", "2"], 2, "--version needs --workflow"),
        (
            ["runs", "list", "--since", "2026-12-06T05:00", "--until", "2026-12-06T04:00"],
            2,
            "--since 2026-12-06T05:00 is later than --until 2026-12-06T04:00",
        ),
        (["runs", "list", "--workflow", "w@1", "--version", "2"], 2, "disagree"),
        (["runs", "list", "--workflow", "w", "--route", "sideways"], 2, "unknown route"),
    ],
)
def test_refusals_are_one_line(refusing: Stack, args: list[str], code: int, needle: str) -> None:
    stack = refusing
    refused = stack.cli(*args)
    assert_refused(refused, code, needle)
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert stack.json("deployments", "list", "dep-refusals")["items"] == []


def test_deployments_need_an_admin_key(stack: Stack) -> None:
    created = stack.cli("keys", "create", "--tenant", "acme", "--name", "dep-tenant")
    assert created.returncode == 0, created.stderr
    refused = stack.cli("deployments", "list", key=created.stdout.strip())
    assert_refused(refused, 4, "the API refused the request")
    # A prefix is resolved by an admin-only route too: a tenant key learns no deployment id.
    refused = stack.cli("deployments", "show", "0123abcd", key=created.stdout.strip())
    assert_refused(refused, 4, "the API refused the request")


def test_a_tenant_key_is_shown_its_runs_deployment_without_the_admin_command(
    stack: Stack,
) -> None:
    """A run a deployment routed names it to every key that reads the run; `deployments
    show`, which would answer a tenant key 403, only to an admin key."""
    published_versions(stack, "dep-tenant-run")
    started = stack.ok(
        "deployments", "start", "dep-tenant-run", "--version", "2", "--stages", "100", *HOLDING
    )
    deployment_id = started_id(started.stdout)
    created = stack.ok("keys", "create", "--tenant", "acme", "--name", "dep-tenant-run")
    tenant_key = created.stdout.strip()
    (run,) = submit(stack, "dep-tenant-run", 1, key=tenant_key)
    assert run["version"] == 2, run
    line = rf"^deployment\s+{deployment_id}"
    shown = stack.ok("runs", "show", run["id"], key=tenant_key).stdout
    assert re.search(rf"{line}$", shown, re.M), shown
    assert "schemabridge deployments" not in shown, shown
    shown = stack.ok("runs", "show", run["id"]).stdout
    assert re.search(rf"{line}: schemabridge deployments show {deployment_id}$", shown, re.M)
    stack.ok("deployments", "abort", deployment_id)


def test_the_help_says_what_a_span_is(stack: Stack) -> None:
    """`--min-duration 10` is 10 s: the help says so beside the spans it takes."""
    shown = stack.ok("deployments", "start", "--help").stdout
    words = " ".join(shown.replace("│", " ").split())
    assert "60s, 5m, 1h; a bare number is seconds (60s)" in words, shown
    shown = stack.ok("deployments", "abort", "--help").stdout
    assert "--reason" in shown, shown
