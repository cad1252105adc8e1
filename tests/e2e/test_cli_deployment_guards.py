"""What a release manager's tour of deployments met, with the real binary against
`schemabridge api` and one `schemabridge worker` on PostgreSQL + Redis (the worker's heartbeat
is read as `GET /services` reads it): a candidate whose inputSchema refuses what clients send
is seen refusing and rolled back; the engine's own deployment run refuses the run actions and
its hints point at the deployment; a start while no worker is alive warns, and `deployments
show` says why nothing moves."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.cli_harness import (
    HOLDING,
    Stack,
    assert_refused,
    cluster_stack,
    started_id,
    wait_for_deployment,
)
from tests.integration.operations_harness import single


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with cluster_stack(tmp_path_factory.mktemp("guards"), workers=("w1",)) as running:
        yield running


def post_runs(stack: Stack, name: str, count: int, prefix: str) -> list[httpx.Response]:
    headers = {"Authorization": f"Bearer {stack.admin_key}"}
    with httpx.Client(base_url=stack.url, headers=headers, trust_env=False, timeout=30) as http:
        return [
            http.post(
                f"/workflows/{name}/runs",
                json={"input": {}},
                headers={"Idempotency-Key": f"{prefix}-{index}"},
            )
            for index in range(count)
        ]


def test_a_candidate_refusing_the_input_is_seen_and_rolled_back(stack: Stack) -> None:
    url = f"{stack.downstream}/tickets"
    stack.publish(single("tickets", url, description="v1"), "v1")
    strict = {**single("tickets", url, description="v2"), "inputSchema": {"required": ["priority"]}}
    stack.publish(strict, "v2")
    assert all(a.status_code == 201 for a in post_runs(stack, "tickets", 3, "before"))

    started = stack.ok(
        "deployments", "start", "tickets", "--version", "2", "--stages", "25,100",
        "--min-runs", "10", "--min-duration", "30s", "--min-finished", "10",
        "--check-interval", "0.2",
    )  # fmt: skip
    deployment = started_id(started.stdout)
    # The serving version's recent inputs are what clients send: the candidate refuses them.
    assert "warning: v2's inputSchema refuses 3 of the 3 latest inputs v1 accepted" in (
        started.stderr
    )

    refused: list[dict[str, Any]] = []
    for batch in range(20):  # a quarter of the keys go to v2 (bounded: 200 at most)
        if len(refused) >= 10:
            break
        answers = post_runs(stack, "tickets", 10, f"k{batch}")
        refused += [a.json() for a in answers if a.status_code == 422]
        assert {a.status_code for a in answers} <= {201, 422}

    assert len(refused) >= 10
    message = refused[0]["message"]
    assert message.startswith("the input does not match the inputSchema of tickets v2, ")
    assert f"the candidate of deployment {deployment}" in message
    ended = wait_for_deployment(stack, deployment, "ROLLED_BACK")
    assert ended["candidate"]["refused"] >= 10 and ended["stage"] == 1
    shown = stack.ok("deployments", "show", deployment).stdout
    assert re.search(r"^\d+ refused by the candidate's inputSchema: ", shown, re.M), shown
    assert "refused by the candidate's inputSchema) (ratio 1.000 > threshold" in shown
    listed = stack.ok("deployments", "list", "tickets").stdout
    assert re.search(r"\d+ \(\d+ refused\)", listed), listed

    # The engine's own run drove the rollback: its record is not the operator's to rewrite.
    run_id = ended["runId"]
    for action in (["retry", run_id], ["start-over", run_id], ["reprocess", run_id]):
        assert_refused(stack.cli("runs", *action), 1, "engine's own run", deployment)
    resolved = stack.cli("runs", "resolve", run_id, "stage-1", "--output", "{}")
    assert_refused(resolved, 1, "engine's own run", "start a new deployment")
    hints = stack.ok("runs", "show", run_id).stdout
    assert f"schemabridge deployments show {deployment}" in hints
    assert "start-over" not in hints and "runs retry" not in hints
    assert "check" in hints  # its stage step's executions are checks, not attempts
    # It did its job: SUCCEEDED (the deployment says ROLLED_BACK), so a retry of the failed
    # runs by filter does not even take it.
    assert stack.json("runs", "show", run_id)["status"] == "SUCCEEDED"
    retried = stack.json("runs", "retry", "--workflow", "gradual_deploy")
    assert retried["retried"] == [] and run_id not in {s["runId"] for s in retried["skipped"]}


def test_a_start_while_no_worker_is_alive_warns_and_shows_why_it_holds(stack: Stack) -> None:
    url = f"{stack.downstream}/idle"
    stack.publish(single("idle", url, description="v1"), "v1")
    stack.publish(single("idle", url, description="v2"), "v2")
    alive = stack.ok("deployments", "start", "idle", "--version", "2", *HOLDING)
    assert "no worker is alive" not in alive.stderr
    stack.ok("deployments", "abort", started_id(alive.stdout))

    assert stack.services["w1"].stop() == 0  # gracefully: its heartbeat goes at once

    started = stack.ok("deployments", "start", "idle", "--version", "2", *HOLDING)
    assert "warning: no worker is alive: nothing runs" in started.stderr
    shown = stack.ok("deployments", "show", started_id(started.stdout)).stdout
    assert "no worker is alive: nothing runs" in shown
