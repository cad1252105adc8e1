"""What `runs show` and `runs retry` tell an operator about a fan-out whose join failed because
children FAILED, and how a step refused with a non-retryable status reads: real subprocesses
against `schemabridge serve`, children failing on the demo downstream's real 422."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.cli_harness import Stack, assert_refused

PARENT = "cli-hints-fanout"
TOLERANT = "cli-hints-tolerant"
CHILD = "cli-hints-item"
SHOW_WAIT_S = 30.0
"""How long `runs show` is read again for a fan-out's waiting line (see its test)."""


@pytest.fixture(scope="module")
def workflows(serve_api: Stack) -> None:
    """A SPAWNER whose children call the downstream with the status their item names, joined
    by a MERGE that tolerates no failed child."""
    path = serve_api.tmp / "cli-hints.json"
    child_url = serve_api.downstream + "/cli-hints/item?status={{ input.code }}"
    path.write_text(
        json.dumps(
            [
                {
                    "name": PARENT,
                    "vertices": {
                        "each": {
                            "type": "SPAWNER",
                            "config": {
                                "items": "{{ input.codes }}",
                                "workflow": CHILD,
                                "input": {"code": "{{ item }}"},
                            },
                        },
                        "joined": {"type": "MERGE", "dependsOn": ["each"]},
                    },
                },
                {
                    "name": TOLERANT,
                    "vertices": {
                        "each": {
                            "type": "SPAWNER",
                            "config": {
                                "items": "{{ input.codes }}",
                                "workflow": CHILD,
                                "input": {"code": "{{ item }}"},
                            },
                        },
                        "join": {
                            "type": "MERGE",
                            "dependsOn": ["each"],
                            "config": {
                                "tolerateChildFailures": ["FAILED"],
                                "failureTolerance": {"maxFailures": 1},
                            },
                        },
                    },
                },
                {
                    "name": CHILD,
                    "vertices": {"call": {"type": "GATEWAY", "config": {"url": child_url}}},
                },
            ]
        )
    )
    serve_api.ok("workflows", "publish", str(path))


def failed_fanout(stack: Stack) -> dict[str, object]:
    """A fan-out of two children, one answered 422: the join fails (`submit --wait`, JSON)."""
    run_input = json.dumps({"codes": ["200", "422"]})
    waited = stack.cli("runs", "submit", PARENT, "--input", run_input, "--wait", "-o", "json")
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    run: dict[str, object] = json.loads(waited.stdout)
    assert run["status"] == "FAILED"
    assert run["fanout"]["failed"] == 1  # type: ignore[index]
    return run


def stuck_warning(run: str) -> str:
    """The server's one sentence for a retried run whose join fails again, as the CLI prints
    it for a single retry and a batch alike."""
    return (
        f"warning: run {run}: its join 'joined' fails again at once: 1 child is still FAILED; "
        f"reprocess run {run} (`schemabridge runs reprocess {run}`) to run it again and reopen "
        "the join"
    )


def next_lines(shown: str) -> list[str]:
    """The commands `runs show` suggests, in order (the `next` field and its lines)."""
    found = re.search(r"^next\s+(.*(?:\n\s+schemabridge .*)*)", shown, re.M)
    assert found, shown
    return [line.strip() for line in found.group(1).splitlines()]


def test_a_join_failed_by_its_children_leads_with_reprocess(
    serve_api: Stack, workflows: None
) -> None:
    run = str(failed_fanout(serve_api)["id"])
    shown = serve_api.ok("runs", "show", run).stdout
    assert "failed step joined: child_failures" in shown, shown
    hints = next_lines(shown)
    assert hints[0] == f"schemabridge runs reprocess {run}", hints
    assert f"schemabridge runs retry {run}" not in hints, "a retry fails the join again at once"


def test_a_join_that_tolerated_a_failed_child_says_so_beside_succeeded(
    serve_api: Stack, workflows: None
) -> None:
    """A fan-out whose MERGE tolerated a failed child SUCCEEDED: `runs show` says beside its
    status that a child failed, tolerated (the status alone read as if all went well), and
    leads its commands with listing those children; a run whose children all succeeded
    says nothing more."""
    run_input = json.dumps({"codes": ["200", "422", "200"]})
    run = str(serve_api.json("runs", "submit", TOLERANT, "--input", run_input, "--wait")["id"])
    shown = serve_api.ok("runs", "show", run).stdout
    assert re.search(r"^status\s+SUCCEEDED — 1 of 3 children failed \(tolerated\)$", shown, re.M), (
        shown
    )
    assert next_lines(shown) == [
        f"schemabridge runs children {run} --status FAILED",
        f"schemabridge runs reprocess {run}",
    ]
    clean = json.dumps({"codes": ["200", "200"]})
    whole = str(serve_api.json("runs", "submit", TOLERANT, "--input", clean, "--wait")["id"])
    said = serve_api.ok("runs", "show", whole).stdout
    assert re.search(r"^status\s+SUCCEEDED$", said, re.M), said


def test_retrying_such_a_join_says_to_reprocess(serve_api: Stack, workflows: None) -> None:
    run = str(failed_fanout(serve_api)["id"])
    retried = serve_api.ok("runs", "retry", run)
    assert f"run {run}: 1 failed step run again" in retried.stdout, retried.stdout
    assert retried.stderr.splitlines() == [stuck_warning(run)], retried.stderr
    # What the note says: the retried join ends FAILED again, its child still FAILED.
    assert serve_api.cli("runs", "watch", run, "--timeout", "60").returncode == 1
    again = serve_api.json("runs", "show", run)
    assert again["status"] == "FAILED" and again["fanout"]["failed"] == 1
    assert again["error"]["kind"] == "child_failures"

    revived = serve_api.ok("runs", "reprocess", run)
    assert f"run {run}: 1 dead-lettered child runs again" in revived.stdout


def test_retrying_several_such_runs_says_it_for_each(serve_api: Stack, workflows: None) -> None:
    first, second = (str(failed_fanout(serve_api)["id"]) for _ in range(2))
    retried = serve_api.ok("runs", "retry", first, second)
    assert "retried 2 runs" in retried.stdout, retried.stdout
    for run in (first, second):
        assert stuck_warning(run) in retried.stderr.splitlines(), retried.stderr
    # Then all of them in one command, which does it.
    all_at_once = f"schemabridge runs reprocess {first} {second}"
    assert retried.stderr.splitlines()[-1] == f"to reprocess them all at once: {all_at_once}"
    done = serve_api.ok(*all_at_once.split()[1:])
    assert done.stdout.splitlines()[0] == "reprocessed 2 runs: 2 dead-lettered children run again"


def test_in_json_the_warnings_are_the_answers_only(serve_api: Stack, workflows: None) -> None:
    """`-o json` is for scripts: the warnings are in the answer, nothing more on stderr."""
    alone, first, second = (str(failed_fanout(serve_api)["id"]) for _ in range(3))
    single = serve_api.ok("runs", "retry", alone, "-o", "json")
    assert single.stderr == "", single.stderr
    assert json.loads(single.stdout)["warnings"] == [stuck_warning(alone).removeprefix("warning: ")]
    batch = serve_api.ok("runs", "retry", first, second, "-o", "json")
    assert batch.stderr == "", batch.stderr
    assert [s["runId"] for s in json.loads(batch.stdout)["stuck"]] == [first, second]


def test_a_batch_by_filter_retries_what_runs_list_shows(serve_api: Stack, workflows: None) -> None:
    """The tour: `runs retry --status FAILED --limit 1` retried a fan-out's tolerated child,
    which `runs list --status FAILED` did not show, and its SUCCEEDED parent ran again."""
    tenant = "hints-scope"  # the filter's runs are this test's only
    run_input = json.dumps({"codes": ["200", "422"]})
    submitted = serve_api.json(
        "runs", "submit", TOLERANT, "--input", run_input, "--tenant", tenant, "--wait"
    )
    parent = str(submitted["id"])
    assert submitted["status"] == "SUCCEEDED"
    (child,) = [
        c["id"]
        for c in serve_api.json("runs", "children", parent)["items"]
        if c["status"] == "FAILED"
    ]
    shown = serve_api.ok("runs", "list", "--status", "FAILED", "--tenant", tenant)
    assert "no runs (child runs are shown with --all)" in shown.stdout + shown.stderr, shown
    batch = serve_api.ok("runs", "retry", "--status", "FAILED", "--tenant", tenant, "--limit", "1")
    assert batch.stdout.splitlines() == [
        f"nothing to retry: no run matched (status FAILED, tenant {tenant})",
        "(child runs are retried with --all)",
    ]
    # `--roots`, the default now, still works for scripts written before (and is a filter).
    old_script = serve_api.ok("runs", "retry", "--roots", "--tenant", tenant)
    assert old_script.stdout == batch.stdout, old_script
    both = assert_refused(serve_api.cli("runs", "retry", "--roots", "--all"), 2)
    assert "give --all (child runs too) or --roots (the default), not both" in both
    assert "--roots" not in serve_api.ok("runs", "retry", "--help").stdout
    # The dry run counts what the batch takes: the child is skipped, not "would retry 1 run".
    dry = serve_api.ok(
        "runs", "retry", "--status", "FAILED", "--tenant", tenant, "--all", "--dry-run"
    )
    assert dry.stdout == (
        f"would retry 0 runs (status FAILED, tenant {tenant}, child runs too); 1 matched is "
        "skipped: under a SUCCEEDED run (its retry would reopen a finished run's join; name "
        f"it alone to retry it): run {child}; nothing retried\n"
    ), dry.stdout
    counted = serve_api.json(
        "runs", "retry", "--status", "FAILED", "--tenant", tenant, "--all", "--dry-run"
    )
    assert counted["matching"] == 0
    assert [(s["reason"], s["count"]) for s in counted["skipped"]] == [("parent_succeeded", 1)]
    wider = serve_api.ok("runs", "retry", "--status", "FAILED", "--tenant", tenant, "--all")
    assert f"  {child}  run {parent} above it has SUCCEEDED" in wider.stdout
    assert f"start over run {parent}" in wider.stdout, wider.stdout
    named = serve_api.cli("runs", "retry", child, parent)
    assert named.returncode == 1, (named.stdout, named.stderr)
    assert f"{child}  run {parent} above it has SUCCEEDED" in named.stdout
    assert serve_api.json("runs", "show", parent)["status"] == "SUCCEEDED"
    alone = serve_api.ok("runs", "retry", child)
    assert (
        f"warning: run {parent} above it had SUCCEEDED and runs again from its join 'join': "
        "the steps after that join run a second time"
    ) in alone.stderr, alone.stderr


def test_resolving_a_finished_runs_dead_letter_warns_that_the_run_reopens(
    serve_api: Stack, workflows: None
) -> None:
    """`runs resolve` of the tolerated FAILED child of a SUCCEEDED fan-out: the parent runs
    again from its join, which the CLI says on stderr as `runs retry` of that child does (in
    JSON, the answer's `warnings` and `reopenedRun` only)."""
    tenant = "hints-resolve"
    run_input = json.dumps({"codes": ["200", "422"]})
    parents = [
        serve_api.json(
            "runs", "submit", TOLERANT, "--input", run_input, "--tenant", tenant, "--wait"
        )
        for _ in range(2)
    ]
    children = []
    for parent in parents:
        assert parent["status"] == "SUCCEEDED", parent
        listed = serve_api.json("runs", "children", parent["id"], "--status", "FAILED")
        children.append(str(listed["items"][0]["id"]))
    said = serve_api.ok("runs", "resolve", children[0], "call", "--output", '{"status": 200}')
    assert f"run {children[0]}: step call resolved; the run is SUCCEEDED" in said.stdout
    assert (
        f"warning: run {parents[0]['id']} above it had SUCCEEDED and runs again from its join "
        "'join': the steps after that join run a second time"
    ) in said.stderr.splitlines(), said.stderr
    scripted = serve_api.ok(
        "runs", "resolve", children[1], "call", "--output", "{}", "--format", "json"
    )
    assert scripted.stderr == "", scripted.stderr
    as_json = json.loads(scripted.stdout)
    assert (as_json["reopenedRun"], as_json["reopenedJoin"]) == (parents[1]["id"], "join")
    assert len(as_json["warnings"]) == 1, as_json


def test_a_step_refused_with_a_non_retryable_status_was_not_retried(
    serve_api: Stack, workflows: None
) -> None:
    parent = str(failed_fanout(serve_api)["id"])
    children = serve_api.json("runs", "children", parent, "--status", "FAILED")
    child = str(children["items"][0]["id"])
    shown = serve_api.ok("runs", "show", child).stdout
    assert re.search(r"^HTTP\s+status 422 after 1 attempt$", shown, re.M), shown
    assert "(attempt 1, not retried: 422 is not retryable)" in shown, shown
    assert "attempt 1/4" not in shown


def test_starting_over_a_child_says_what_to_do_instead(serve_api: Stack, workflows: None) -> None:
    """A refusal (exit 1, one line, no traceback), not a usage error: the run is a child."""
    parent = str(failed_fanout(serve_api)["id"])
    children = serve_api.json("runs", "children", parent, "--status", "FAILED")
    child = str(children["items"][0]["id"])
    refused = serve_api.cli("runs", "start-over", child)
    assert_refused(
        refused,
        1,
        f"run {child} is a child run, which cannot be started over alone; retry it, or start "
        f"over its parent {parent} (it is FAILED)",
    )
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert f"schemabridge runs start-over {child}" not in serve_api.ok("runs", "show", child).stdout


def test_a_fanout_over_its_tenant_quota_leads_with_raising_it(
    serve_api: Stack, workflows: None
) -> None:
    """A retry alone would fail the same way (the quota counts runs created): `runs show`
    names the quota the fan-out needs first, then the retry; both, run as shown, work."""
    tenant = "hints-quota"
    serve_api.ok("tenants", "set-quota", tenant, "2")  # the parent is one of the two
    run_input = json.dumps({"codes": ["200", "200"]})
    waited = serve_api.cli(
        "runs", "submit", PARENT, "--input", run_input, "--tenant", tenant, "--wait", "-o", "json"
    )
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    run = str(json.loads(waited.stdout)["id"])
    shown = serve_api.ok("runs", "show", run).stdout
    assert "failed step each: quota_exceeded" in shown, shown
    assert (
        f"the fan-out needs 2 runs but tenant {tenant} has 1 left in its quota (1 of 2 used); "
        f"raise the quota to 3 or more (`schemabridge tenants set-quota {tenant} 3`) and retry "
        "the run, or split the input"
    ) in re.sub(r"\s*\n\s*", " ", shown), shown
    hints = next_lines(shown)
    assert hints[:2] == [
        f"schemabridge tenants set-quota {tenant} 3",
        f"schemabridge runs retry {run}",
    ], hints

    # Retried without raising the quota, it fails the same way.
    serve_api.ok("runs", "retry", run)
    assert serve_api.cli("runs", "watch", run, "--timeout", "60").returncode == 1
    assert serve_api.json("runs", "show", run)["error"]["kind"] == "quota_exceeded"

    # Done as the hints say, it succeeds.
    for hint in hints[:2]:
        serve_api.ok(*hint.split()[1:])
    assert serve_api.cli("runs", "watch", run, "--timeout", "60").returncode == 0
    done = serve_api.json("runs", "show", run)
    assert done["status"] == "SUCCEEDED" and done["fanout"]["succeeded"] == 2, done


def test_following_a_fanout_says_why_its_children_wait(serve_api: Stack, workflows: None) -> None:
    """A fan-out held by its tenant's rate limit: `submit --wait`, `watch` and `show` say so,
    with the fix, instead of a children count that does not move (the reason was only in a
    child's `runs logs`). Piped, so one line per change at most every 2 s."""
    tenant = "hints-rate"
    serve_api.ok("tenants", "set-rate", tenant, "2")  # two GATEWAY steps a minute
    run_input = json.dumps({"codes": ["200"] * 6})
    submitted = serve_api.cli(
        "runs", "submit", PARENT, "--input", run_input, "--tenant", tenant, "--wait",
        "--timeout", "20",
    )  # fmt: skip
    assert submitted.returncode == 3, (submitted.stdout, submitted.stderr)
    found = re.search(r"run (\S+) is still", submitted.stderr)
    assert found, submitted.stderr
    run = found.group(1)
    said = f"children waiting: tenant {tenant} is at its rate limit ("
    fix = f"an admin raises it with `schemabridge tenants set-rate {tenant} N`"
    # `submit --wait` follows on stderr (stdout is the output, for scripts); `watch` on stdout.
    waiting = [line for line in submitted.stderr.splitlines() if said in line]
    assert waiting and fix in waiting[-1], submitted.stderr
    watched = serve_api.cli("runs", "watch", run, "--timeout", "8")
    assert watched.returncode == 3, (watched.stdout, watched.stderr)
    assert said in watched.stdout and fix in watched.stdout, watched.stdout
    # `runs show` says it too, under the fan-out's counts (the terminal folds it; a pipe not).
    # Read until it does: between a parked child's time coming and a worker claiming it
    # again, the child is due (it waits for a worker) and its old reason is rightly not said;
    # on a loaded machine that gap can be the moment of one read.
    deadline = time.monotonic() + SHOW_WAIT_S
    shown = serve_api.ok("runs", "show", run).stdout
    while said not in shown and time.monotonic() < deadline:
        time.sleep(0.5)
        shown = serve_api.ok("runs", "show", run).stdout
    assert said in shown and fix in shown, shown
    serve_api.ok("runs", "cancel", run)
    serve_api.ok("tenants", "set-rate", tenant, "--reset")


TYPED = "cli-hints-typed"
TYPED_CHILD = "cli-hints-typed-item"
NULL_ITEMS = "cli-hints-null-items"


@pytest.fixture(scope="module")
def author_mistakes(serve_api: Stack) -> None:
    """Two authors' mistakes no run can get past: a SPAWNER input mixing text into a number
    the child's inputSchema types (every child `invalid_input`), and `items` read from a
    misspelt input name (null: the spawner's `invalid_config`)."""
    path = serve_api.tmp / "cli-hints-mistakes.json"
    url = serve_api.downstream + "/cli-hints/typed/{{ input.sku }}"
    path.write_text(
        json.dumps(
            [
                {
                    "name": TYPED,
                    "vertices": {
                        "each": {
                            "type": "SPAWNER",
                            "config": {
                                "items": "{{ input.lines }}",
                                "workflow": TYPED_CHILD,
                                "input": {"sku": "{{ item.sku }}", "qty": "qty={{ item.qty }}"},
                            },
                        },
                        "join": {"type": "MERGE", "dependsOn": ["each"]},
                    },
                },
                {
                    "name": TYPED_CHILD,
                    "inputSchema": {
                        "type": "object",
                        "required": ["sku", "qty"],
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                    },
                    "vertices": {"ship": {"type": "GATEWAY", "config": {"url": url}}},
                },
                {
                    "name": NULL_ITEMS,
                    "vertices": {
                        "each": {
                            "type": "SPAWNER",
                            "config": {"items": "{{ input.line }}", "workflow": TYPED_CHILD},
                        },
                        "join": {"type": "MERGE", "dependsOn": ["each"]},
                    },
                },
            ]
        )
    )
    serve_api.ok("workflows", "publish", str(path))


def failed_run(stack: Stack, workflow: str, run_input: object) -> str:
    waited = stack.cli(
        "runs", "submit", workflow, "--input", json.dumps(run_input), "--wait", "-o", "json"
    )
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    run = json.loads(waited.stdout)
    assert run["status"] == "FAILED", run
    return str(run["id"])


def fix_hints(run: str, workflow: str, what: str) -> list[str]:
    return [
        f"{what}, which comes from the workflow or the run's input: retrying, reprocessing "
        "or starting over runs v1 with the same input and fails the same way. Fix the workflow "
        "(or the input) first, publish it, then submit a new run (`schemabridge runs submit "
        f"{workflow}@VERSION --input JSON`)",
        "schemabridge workflows publish FILE",
        f"schemabridge runs submit {workflow}@VERSION --input JSON",
    ]


def test_children_that_all_failed_invalid_input_lead_with_fixing_the_workflow(
    serve_api: Stack, author_mistakes: None
) -> None:
    lines = [{"sku": f"s-{i}", "qty": i + 1} for i in range(4)]
    run = failed_run(serve_api, TYPED, {"lines": lines})
    shown = serve_api.json("runs", "show", run)
    error = shown["error"]
    assert error["kind"] == "child_failures"
    assert error["childCause"] == {"kind": "invalid_input", "count": 4, "read": 4}
    assert error["message"].startswith(
        "4 of 4 children ended with a status not tolerated (4 invalid_input, e.g. "
    ), error["message"]
    assert error["message"].endswith(f"; see `schemabridge runs children {run} --status FAILED`")
    hints = next_lines(serve_api.ok("runs", "show", run).stdout)
    what = "4 children of step join failed with invalid_input"
    assert hints[:3] == fix_hints(run, TYPED, what), hints
    assert f"schemabridge runs reprocess {run}" not in hints
    assert f"schemabridge runs retry {run}" not in hints
    # The retry's warning says the same instead of "reprocess".
    retried = serve_api.ok("runs", "retry", run)
    assert "most with invalid_input, which a reprocess repeats too" in retried.stderr, retried
    assert "`schemabridge runs reprocess" not in retried.stderr


def test_items_that_evaluate_to_null_lead_with_fixing_the_workflow(
    serve_api: Stack, author_mistakes: None
) -> None:
    run = failed_run(serve_api, NULL_ITEMS, {"lines": []})
    shown = serve_api.ok("runs", "show", run).stdout
    assert "failed step each: invalid_config" in shown, shown
    hints = next_lines(shown)
    assert hints[:3] == fix_hints(run, NULL_ITEMS, "step each failed with invalid_config"), hints
    assert f"schemabridge runs retry {run}" not in hints
    assert f"schemabridge runs start-over {run}" not in hints
    # The retry's dry run leads with the same sentence: the retry would fail the same way.
    dry = serve_api.ok("runs", "retry", run, "--dry-run")
    assert dry.stderr.splitlines()[0] == f"warning: {hints[0]}", dry.stderr
