"""Deployments and serving versions over real HTTP, on both backends: admin-only routes, the
409 of a second deployment, refusals with their codes, the candidate's runs behind the
exposure link, the system run in the run list, and the deployment series of `/metrics`. No
worker: the deployment stays in its first stage, which is all routing and the routes need
(the stages' own progress is tests/integration/test_deployments.py's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Backend
from tests.e2e.rest_runs_harness import Api, api_on, assert_error
from tests.integration.operations_harness import single, spawner_of

UNREACHABLE = "http://127.0.0.1:9/never"
STAGES = [
    {"weight": 50, "minRuns": 1000, "minDurationSeconds": 60},
    {"weight": 100, "minRuns": 10, "minDurationSeconds": 60},
]


@pytest.fixture
async def api(backend: Backend) -> AsyncIterator[Api]:
    async with api_on(backend, worker=False) as served:
        async with served.http(served.admin) as http:
            for note in ("v1", "v2", "v3"):
                answer = await http.post(
                    "/workflows", json=single("orders", UNREACHABLE, description=note)
                )
                assert answer.status_code == 201, answer.text
        yield served


async def start(api: Api, **body: Any) -> dict[str, Any]:
    async with api.http(api.admin) as http:
        answer = await http.post(
            "/workflows/orders/deployments", json={"version": 2, "stages": STAGES, **body}
        )
    assert answer.status_code == 201, answer.text
    deployment: dict[str, Any] = answer.json()
    assert answer.headers["Location"] == f"/deployments/{deployment['id']}"
    return deployment


async def submit(api: Api, count: int) -> list[dict[str, Any]]:
    async with api.http(api.acme) as http:
        return [
            (await http.post("/workflows/orders/runs", json={"input": {}})).json()["run"]
            for _ in range(count)
        ]


def samples(metrics: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }


async def test_a_deployment_routes_runs_and_shows_its_exposure(api: Api) -> None:
    deployment = await start(api, rollback={"maxFailureRatio": 0.1, "minFinishedRuns": 5})
    assert (deployment["status"], deployment["stage"], deployment["weight"]) == ("RUNNING", 1, 50)
    assert (deployment["candidateVersion"], deployment["servingVersion"]) == (2, 1)
    assert deployment["rollback"] == {
        "maxFailureRatio": 0.1,
        "marginOverServing": None,
        "minFinishedRuns": 5,
    }
    assert [s["weight"] for s in deployment["stages"]] == [50, 100]
    assert deployment["checkIntervalSeconds"] == 5
    submitted = await submit(api, 30)
    async with api.http(api.acme) as http:
        pinned = await http.post("/workflows/orders/runs", json={"input": {}, "version": 3})
        hidden = (await http.get("/runs", params={"workflow": "gradual_deploy"})).json()
    assert pinned.json()["run"]["route"] == "pinned"
    assert hidden["items"] == [], "a tenant key does not see the engine's own runs"
    on_candidate = {r["id"] for r in submitted if r["version"] == 2}
    assert {r["route"] for r in submitted if r["version"] == 2} <= {"candidate"}
    assert {r["route"] for r in submitted if r["version"] == 1} <= {"serving"}
    assert 0 < len(on_candidate) < 30

    async with api.http(api.admin) as http:
        shown = (await http.get(f"/deployments/{deployment['id']}")).json()
        listed = (await http.get("/workflows/orders/deployments")).json()["items"]
        everywhere = (await http.get("/deployments", params={"limit": 5})).json()["items"]
        one = (await http.get("/deployments", params={"limit": 1})).json()
        tampered = await http.get("/deployments", params={"cursor": "eyJ2IjoxfQ"})
        exposed = (await http.get(shown["candidate"]["runsUrl"])).json()["items"]
        system_runs = (await http.get("/runs", params={"workflow": "gradual_deploy"})).json()
        serving = (await http.get("/workflows/orders/serving")).json()
    assert shown["exposure"] == len(on_candidate) == shown["candidate"]["runs"]
    assert shown["candidate"]["running"] == len(on_candidate)
    assert shown["serving"]["runs"] == 30 - len(on_candidate)
    assert {r["id"] for r in exposed} == on_candidate
    assert [d["id"] for d in listed] == [deployment["id"]]
    assert everywhere == listed, "GET /deployments: every workflow's, the same views"
    assert (one["items"], one["next"]) == (listed, None), "the last page says so"
    assert tampered.status_code == 422 and tampered.json()["code"] == "invalid_cursor"
    assert [r["id"] for r in system_runs["items"]] == [deployment["runId"]]
    assert system_runs["items"][0]["tenantId"] == "system"
    assert (serving["servingVersion"], serving["candidateVersion"]) == (1, 2)
    assert (serving["candidateWeight"], serving["deploymentId"]) == (50, deployment["id"])


async def test_a_second_deployment_is_refused_and_an_abort_stops_the_first(api: Api) -> None:
    deployment = await start(api)
    on_candidate = sum(r["version"] == 2 for r in await submit(api, 20))
    async with api.http(api.admin) as http:
        second = await http.post("/workflows/orders/deployments", json={"version": 3})
        body = assert_error(second, 409, "deployment_running")
        assert body["details"]["deploymentId"] == deployment["id"]
        switch = await http.post("/workflows/orders/serving", json={"version": 3})
        assert_error(switch, 409, "deployment_running")
        metrics = samples((await http.get("/metrics")).text)
        aborted = await http.post(f"/deployments/{deployment['id']}/abort")
        again = await http.post(f"/deployments/{deployment['id']}/abort")
        late = await http.post(f"/deployments/{deployment['id']}/rollback")
        run = (await http.get(f"/runs/{deployment['runId']}")).json()
        after_metrics = samples((await http.get("/metrics")).text)
        listed = (await http.get("/deployments")).json()["items"]
        document = (await http.get("/openapi.json")).json()
    ids = (("deployment", deployment["id"]), ("workflow", "orders"))
    assert metrics[("schemabridge_deployments", (("status", "RUNNING"),))] == 1
    assert metrics[("schemabridge_deployment_stage", ids)] == 1
    weight = tuple(sorted((*ids, ("candidate_version", "2"))))
    assert metrics[("schemabridge_deployment_candidate_weight", weight)] == 50
    running = tuple(sorted((*ids, ("version", "2"), ("role", "candidate"), ("outcome", "running"))))
    assert metrics[("schemabridge_deployment_runs", running)] == on_candidate
    assert after_metrics[("schemabridge_deployments", (("status", "ABORTED"),))] == 1
    assert ("schemabridge_deployment_stage", ids) not in after_metrics
    assert aborted.status_code == 200 and aborted.json()["changed"] is True
    assert aborted.json()["deployment"]["status"] == "ABORTED"
    # An ended deployment routes nothing: no weight (not 0, which read as "the candidate gets
    # none" even for a promoted candidate that serves every run); the stage it reached stays.
    assert aborted.json()["deployment"]["weight"] is None
    assert [(d["weight"], d["stage"]) for d in listed if d["id"] == deployment["id"]] == [(None, 1)]
    weight_schema = document["components"]["schemas"]["DeploymentView"]["properties"]["weight"]
    assert {"type": "null"} in weight_schema["anyOf"], weight_schema
    assert "null once the deployment has ended" in weight_schema["description"]
    assert again.json()["changed"] is False
    assert assert_error(late, 409, "deployment_ended")["details"] == {
        "state": "ABORTED",
        "deploymentId": deployment["id"],
    }
    for action in ("abort", "rollback"):
        stop = document["paths"][f"/deployments/{{deployment_id}}/{action}"]["post"]
        assert "`details.deploymentId`" in stop["responses"]["409"]["description"], action
    assert run["status"] == "CANCELLED"
    assert {(r["version"], r["route"]) for r in await submit(api, 10)} == {(1, "serving")}


async def test_deployments_and_switches_need_an_admin_key(api: Api) -> None:
    deployment = await start(api)
    async with api.http(api.acme) as http:
        refused = [
            await http.post("/workflows/orders/deployments", json={"version": 3}),
            await http.get("/workflows/orders/deployments"),
            await http.get("/deployments"),
            await http.get(f"/deployments/{deployment['id']}"),
            await http.get("/deployment-ids", params={"prefix": deployment["id"][:8]}),
            await http.post(f"/deployments/{deployment['id']}/abort"),
            await http.post(f"/deployments/{deployment['id']}/rollback"),
            await http.post("/workflows/orders/serving", json={"version": 3}),
        ]
        readable = await http.get("/workflows/orders/serving")
    for answer in refused:
        assert_error(answer, 403, "forbidden")
    assert readable.status_code == 200 and readable.json()["servingVersion"] == 1
    async with api.http(None) as http:
        assert_error(await http.get(f"/deployments/{deployment['id']}"), 401, "unauthorized")
        assert_error(
            await http.get("/deployment-ids", params={"prefix": deployment["id"][:8]}),
            401,
            "unauthorized",
        )
    async with api.http(api.admin) as http:
        found = await http.get("/deployment-ids", params={"prefix": deployment["id"][:8]})
        assert found.status_code == 200, found.text
        assert found.json() == {
            "prefix": deployment["id"][:8],
            "ids": [deployment["id"]],
            "more": False,
        }
        short = await http.get("/deployment-ids", params={"prefix": deployment["id"][:7]})
        assert_error(short, 422, "invalid_request")
        rolled = await http.post(f"/deployments/{deployment['id']}/rollback")
        switched = await http.post("/workflows/orders/serving", json={"version": 3})
        workflows = (await http.get("/workflows")).json()["items"]
    assert rolled.json()["deployment"]["status"] == "ROLLED_BACK"
    assert switched.status_code == 200
    admin_id = next(k.id for k in (await api.ops.keys.list()).items if k.name == "admin")
    assert switched.json()["updatedBy"] == f"key:{admin_id}"
    # A tenant key reads the serving version but not which admin key set it.
    async with api.http(api.acme) as http:
        seen = (await http.get("/workflows/orders/serving")).json()
    assert (seen["servingVersion"], seen["updatedBy"]) == (3, None)
    orders = next(w for w in workflows if w["name"] == "orders")
    assert (orders["latestVersion"], orders["servingVersion"]) == (3, 3)


REFUSALS: list[tuple[dict[str, Any], int, str]] = [
    ({"version": 9}, 404, "workflow_not_found"),
    ({"version": 1}, 409, "candidate_is_serving"),
    ({"version": 2, "stages": [{"weight": 150}]}, 422, "invalid_request"),
    ({"version": 2, "stages": [{"weight": 50}]}, 422, "invalid_deployment"),
    ({"version": 2, "stages": []}, 422, "invalid_request"),
    ({"version": 2, "rollback": {"maxFailureRatio": 2}}, 422, "invalid_request"),
    ({"version": 2, "stages": STAGES, "surprise": 1}, 422, "invalid_request"),
    ({"version": 2, "checkIntervalSeconds": 0}, 422, "invalid_request"),
    # A version is a JSON integer: "2" was read as 2 and started a deployment.
    ({"version": "2"}, 422, "invalid_request"),
    ({"version": True}, 422, "invalid_request"),
    ({"version": 2.5}, 422, "invalid_request"),
]


async def test_deployment_refusals_create_nothing(api: Api) -> None:
    async with api.http(api.admin) as http:
        for body, status, code in REFUSALS:
            answer = await http.post("/workflows/orders/deployments", json=body)
            assert_error(answer, status, code)
            # The preview refuses alike, so a confirm step never offers a start that fails.
            preview = await http.post("/workflows/orders/deployments/preview", json=body)
            assert_error(preview, status, code)
        assert (await http.get("/workflows/orders/deployments")).json()["items"] == []
        assert (await http.get("/runs", params={"workflow": "gradual_deploy"})).json() == {
            "items": [],
            "next": None,
        }
        # Not even the system workflow's version: a refused start leaves the store as it was.
        system = await http.get("/workflows/gradual_deploy/versions")
        assert_error(system, 404, "workflow_not_found")
        missing = await http.get("/deployments/00000000-0000-0000-0000-000000000000")
        assert_error(missing, 404, "deployment_not_found")
        assert_error(await http.get("/workflows/ghost/deployments"), 404, "workflow_not_found")
        assert_error(await http.get("/workflows/ghost/serving"), 404, "workflow_not_found")
        assert_error(
            await http.post("/workflows/orders/serving", json={"version": 7}),
            404,
            "workflow_not_found",
        )
        assert_error(
            await http.post("/workflows/orders/serving", json={"version": "2"}),
            422,
            "invalid_request",
        )
        assert (await http.get("/workflows/orders/serving")).json()["servingVersion"] == 1


async def test_the_system_workflow_is_the_engines_own(api: Api) -> None:
    deployment = await start(api)
    async with api.http(api.admin) as http:
        submitted = await http.post("/workflows/gradual_deploy/runs", json={"input": {}})
        assert_error(submitted, 422, "system_workflow")
        document = single("gradual_deploy", UNREACHABLE)
        published = await http.post("/workflows", json=document)
        body = assert_error(published, 422, "invalid_workflow")
        assert {p["code"] for p in body["details"]["problems"]} == {"reserved_workflow"}
        deployed = await http.post("/workflows/gradual_deploy/deployments", json={"version": 1})
        assert_error(deployed, 422, "system_workflow")
        # Cancelling the system run (what the run monitor offers) aborts the deployment.
        cancelled = await http.post(f"/runs/{deployment['runId']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        shown = (await http.get(f"/deployments/{deployment['id']}")).json()
        # Its record is the deployment's: the run actions are refused, pointing at it.
        run = f"/runs/{deployment['runId']}"
        for path in ("start-over", "retry", "reprocess", "steps/stage-1/resolve"):
            body = {"output": {}} if path.endswith("resolve") else None
            answer = await http.post(f"{run}/{path}", json=body)
            refused = assert_error(answer, 409, "deployment_run")
            expected = {
                "state": "CANCELLED",
                "runId": deployment["runId"],
                "deploymentId": deployment["id"],
            }
            assert refused["details"] == expected, refused
        preview = (await http.get(f"{run}/retry/preview")).json()
        assert not preview["retriable"] and "engine's own run" in preview["warnings"][0]
        batch = await http.post("/runs/retry", json={"ids": [deployment["runId"]]})
        assert [s["reason"] for s in batch.json()["skipped"]] == ["deployment_run"]
    assert shown["status"] == "ABORTED" and shown["weight"] is None
    # Who stopped it is the key with its name, as for an abort by hand or its start: a bare
    # id in its outcome and timeline says nothing without `keys list`.
    assert shown["outcome"]["actor"] == deployment["createdBy"] == shown["createdBy"]
    assert shown["outcome"]["reason"].endswith(f"was cancelled by {deployment['createdBy']}")


async def test_the_system_workflow_is_not_listed_as_a_users(api: Api) -> None:
    deployment = await start(api)
    async with api.http(api.admin) as http:
        listed = (await http.get("/workflows")).json()["items"]
        everything = (await http.get("/workflows", params={"system": "true"})).json()["items"]
        # The deployment's run page links to its run and draws its graph: both still answer.
        run = await http.get(f"/runs/{deployment['runId']}")
        graph = await http.get(f"/workflows/gradual_deploy/versions/{run.json()['version']}/graph")
        document = (await http.get("/openapi.json")).json()
    assert [w["name"] for w in listed] == ["orders"]
    assert [w["name"] for w in everything] == ["gradual_deploy", "orders"]
    assert run.status_code == 200 and graph.status_code == 200, (run.text, graph.text)
    parameters = document["paths"]["/workflows"]["get"]["parameters"]
    system = next(p for p in parameters if p["name"] == "system")
    assert "gradual_deploy" in system["description"]


async def test_a_refused_start_publishes_no_system_version(api: Api) -> None:
    await start(api)  # two stages: gradual_deploy v1
    three = [{"weight": 10}, {"weight": 50}, {"weight": 100}]
    async with api.http(api.admin) as http:
        before = (await http.get("/workflows/gradual_deploy/versions")).json()["items"]
        # Each would need a new shape of gradual_deploy (three stages): none is stored.
        running = await http.post(
            "/workflows/orders/deployments", json={"version": 3, "stages": three}
        )
        assert_error(running, 409, "deployment_running")
        unknown = await http.post(
            "/workflows/orders/deployments", json={"version": 9, "stages": three}
        )
        assert_error(unknown, 404, "workflow_not_found")
        ghost = await http.post(
            "/workflows/ghost/deployments", json={"version": 1, "stages": three}
        )
        assert_error(ghost, 404, "workflow_not_found")
        after = (await http.get("/workflows/gradual_deploy/versions")).json()["items"]
        listed = (await http.get("/workflows", params={"system": "true"})).json()["items"]
    assert [v["version"] for v in before] == [v["version"] for v in after] == [1]
    assert [w["name"] for w in listed] == ["gradual_deploy", "orders"], "no ghost either"


async def test_an_ended_deployment_says_when_its_outcome_no_longer_serves(api: Api) -> None:
    first = await start(api)
    async with api.http(api.admin) as http:
        await http.post(f"/deployments/{first['id']}/abort")
        kept = (await http.get(f"/deployments/{first['id']}")).json()
        switched = (await http.post("/workflows/orders/serving", json={"version": 3})).json()
        replaced = (await http.get(f"/deployments/{first['id']}")).json()
        second = await http.post("/workflows/orders/deployments", json={"version": 2})
        during = (await http.get("/workflows/orders/serving")).json()
        await http.post(f"/deployments/{second.json()['id']}/rollback")
        after = (await http.get("/workflows/orders/serving")).json()
        listed = (await http.get("/workflows/orders/deployments")).json()["items"]
        document = (await http.get("/openapi.json")).json()
    # Aborted: new runs went back to v1, which still serves; then v3 was switched in.
    assert (kept["servingVersionNow"], kept["superseded"]) == (1, False)
    assert (replaced["servingVersionNow"], replaced["superseded"]) == (3, True)
    assert [(d["servingVersionNow"], d["superseded"]) for d in listed] == [(3, False), (3, True)]
    # v3 serves since the switch: a deployment's candidate coming and going does not move it.
    assert (during["servingVersion"], during["deploymentId"]) == (3, second.json()["id"])
    assert during["updatedAt"] == after["updatedAt"] == switched["updatedAt"]
    assert during["updatedBy"] == after["updatedBy"] == switched["updatedBy"]
    schema = document["components"]["schemas"]["DeploymentView"]["properties"]
    assert "no longer" in schema["superseded"]["description"]
    assert "serving version now" in schema["servingVersionNow"]["description"]


async def test_deploying_a_spawners_child_warns_that_parents_pin_it(api: Api) -> None:
    alone = await start(api)
    assert alone["warnings"] == []
    async with api.http(api.admin) as http:
        await http.post(f"/deployments/{alone['id']}/abort")
        for document in (spawner_of("batch", "orders"), spawner_of("nightly", "orders@1")):
            assert (await http.post("/workflows", json=document)).status_code == 201
        answer = await http.post("/workflows/orders/deployments", json={"version": 3})
        shown = (await http.get(f"/deployments/{answer.json()['id']}")).json()
        await http.post(f"/deployments/{answer.json()['id']}/abort")
        ended = (await http.get(f"/deployments/{answer.json()['id']}")).json()
    assert answer.status_code == 201, answer.text  # a warning, not a refusal
    (warning,) = answer.json()["warnings"]
    assert warning.startswith(
        "orders is a SPAWNER's child in the serving version of batch v1, nightly v1: "
    ), warning
    assert "moves only the runs submitted to orders directly" in warning
    assert "publish the parent with `orders@3` in its SPAWNER and deploy the parent" in warning
    # Said for as long as it runs: later, "waiting at stage 1 (0/20 runs…)" alone looked stuck.
    assert shown["warnings"] == [warning]
    assert ended["warnings"] == [], "once it has ended nothing keeps it waiting"


async def test_a_start_preview_says_the_starts_warnings_and_starts_nothing(api: Api) -> None:
    """`POST …/deployments/preview`: the start's share and warnings before anything starts
    (the monitor's Deploy form says them first); refused alike while a deployment runs."""
    body = {"version": 2, "stages": [{"weight": 25, "minRuns": 1000}, {"weight": 100}]}
    async with api.http(api.acme) as http:
        tenant = await http.post("/workflows/orders/deployments/preview", json=body)
    async with api.http(api.admin) as http:
        parent = await http.post("/workflows", json=spawner_of("orders-parent", "orders"))
        assert parent.status_code == 201, parent.text
        preview = await http.post("/workflows/orders/deployments/preview", json=body)
        none_yet = (await http.get("/workflows/orders/deployments")).json()["items"]
        started = (await http.post("/workflows/orders/deployments", json=body)).json()
        running = await http.post("/workflows/orders/deployments/preview", json={"version": 3})
        await http.post(f"/deployments/{started['id']}/abort")
        serving = await http.post("/workflows/orders/deployments/preview", json={"version": 1})
    assert preview.status_code == 200, preview.text
    answer = preview.json()
    assert none_yet == [], "a preview starts nothing"
    assert (answer["candidateVersion"], answer["servingVersion"], answer["firstWeight"]) == (
        2,
        1,
        25,
    )
    assert answer["summary"] == "v2 would get 25 % of new runs (v1 the rest), stages 25 % → 100 %"
    assert answer["warnings"] == started["warnings"] and len(answer["warnings"]) == 1
    assert "orders is a SPAWNER's child" in answer["warnings"][0]
    assert_error(running, 409, "deployment_running")
    assert_error(tenant, 403, "forbidden")
    assert_error(serving, 409, "candidate_is_serving")


async def test_a_publish_while_a_deployment_runs_says_what_routes_its_version(api: Api) -> None:
    deployment = await start(api, version=3)
    async with api.http(api.admin) as http:
        # v3 again (identical to the latest: kept) is the running deployment's candidate.
        candidate = (
            await http.post("/workflows", json=single("orders", UNREACHABLE, description="v3"))
        ).json()
        # v4: no switch or second deployment is allowed until this one ends.
        later = (
            await http.post("/workflows", json=single("orders", UNREACHABLE, description="v4"))
        ).json()
    assert (candidate["version"], candidate["created"], candidate["serving"]) == (3, False, False)
    assert candidate["servingVersion"] == 1
    assert candidate["hint"] == (
        f"orders v3 is not serving yet: deployment {deployment['id']} gives it 50 % of new "
        "runs (v1 gets the rest), and it serves them all once the deployment promotes it"
    )
    assert (later["version"], later["created"], later["serving"]) == (4, True, False)
    assert later["hint"].startswith(
        f"orders v4 is NOT serving yet: new runs get v1, and deployment {deployment['id']} "
        "gives v3 50 % of them. Once that deployment has ended, deploy it: "
        "`schemabridge deployments start orders --version 4`"
    )


async def test_a_stop_says_who_and_why(api: Api) -> None:
    deployment = await start(api)
    path = f"/deployments/{deployment['id']}"
    admin_id = next(k.id for k in (await api.ops.keys.list()).items if k.name == "admin")
    async with api.http(api.admin) as http:
        too_long = await http.post(f"{path}/abort", json={"reason": "x" * 501})
        unknown = await http.post(f"{path}/rollback", json={"why": "slow"})
        not_text = await http.post(f"{path}/abort", json={"reason": 5})
        aborted = await http.post(f"{path}/abort", json={"reason": "p99 doubled on EU"})
    for refused in (too_long, unknown, not_text):
        assert_error(refused, 422, "invalid_request")
    assert aborted.status_code == 200, aborted.text
    shown = aborted.json()["deployment"]
    # The key's name beside its id: "key:410577f5e3b5" alone says nothing without `keys list`.
    actor = f"key:{admin_id} (admin)"
    assert shown["createdBy"] == shown["outcome"]["actor"] == actor
    assert shown["outcome"]["reason"] == f"stopped by {actor}: p99 doubled on EU"
    assert shown["timeline"][-1]["note"] == shown["outcome"]["reason"]


async def test_a_short_deployment_id_points_to_the_route_that_finds_it(api: Api) -> None:
    deployment = await start(api)
    short = deployment["id"][:8]
    async with api.http(api.admin) as http:
        answers = [
            await http.get(f"/deployments/{short}"),
            await http.post(f"/deployments/{short}/abort"),
            await http.post(f"/deployments/{short.upper()}/rollback"),
        ]
        whole = await http.get("/deployments/00000000-0000-0000-0000-000000000000")
        found = (await http.get("/deployment-ids", params={"prefix": short})).json()
    for answer, given in zip(answers, (short, short, short.upper()), strict=True):
        body = assert_error(answer, 404, "deployment_not_found")
        assert body["message"] == (
            f"no deployment '{given}'; a deployment route needs the whole id: GET "
            f"/deployment-ids?prefix={given} lists the deployments whose id starts with it"
        )
    assert "deployment-ids" not in assert_error(whole, 404, "deployment_not_found")["message"]
    assert found["ids"] == [deployment["id"]]


async def test_a_candidate_run_names_its_deployment(api: Api) -> None:
    deployment = await start(api)
    runs = await submit(api, 30)
    candidate = next(r for r in runs if r["route"] == "candidate")
    serving = next(r for r in runs if r["route"] == "serving")
    async with api.http(api.acme) as http:
        seen = (await http.get(f"/runs/{candidate['id']}")).json()
        other = (await http.get(f"/runs/{serving['id']}")).json()
    assert (seen["route"], seen["deploymentId"]) == ("candidate", deployment["id"])
    assert other["deploymentId"] is None
    async with api.http(api.admin) as http:
        system = (await http.get(f"/runs/{deployment['runId']}")).json()
    assert system["deploymentId"] == deployment["id"]


async def test_a_promotion_is_audited_as_a_serving_switch(backend: Backend) -> None:
    """`GET /audit` answers who changed the serving version, also when a deployment's verdict
    did it (the tour found no row for a promotion): the admin switch's action, by the
    deployment, with its id and who started it; a rollback leaves the serving version, and
    writes none."""
    quick = [{"weight": 100, "minRuns": 0, "minDurationSeconds": 0}]
    async with api_on(backend, worker=True) as served, served.http(served.admin) as http:
        for note in ("v1", "v2", "v3"):
            answer = await http.post(
                "/workflows", json=single("orders", UNREACHABLE, description=note)
            )
            assert answer.status_code == 201, answer.text
        body = {
            "stages": quick,
            "rollback": {"minFinishedRuns": 0},
            "checkIntervalSeconds": 0.1,
        }
        started = await http.post("/workflows/orders/deployments", json={"version": 2, **body})
        promoted = await wait_until_ended(http, started.json()["id"])
        # A switch to the version the promotion made serve does nothing, and says so: the
        # promotion stays the record of who made v2 serve (no event over it).
        again = await http.post("/workflows/orders/serving", json={"version": 2})
        held = await http.post(
            "/workflows/orders/deployments", json={"version": 3, "stages": STAGES}
        )
        await http.post(f"/deployments/{held.json()['id']}/rollback")
        switched = await http.post("/workflows/orders/serving", json={"version": 1})
        assert switched.status_code == 200, switched.text
        page = await http.get(
            "/audit", params={"action": "workflow.serving_set", "subjectId": "orders",
                              "subjectKind": "workflow"},
        )  # fmt: skip
    assert promoted["status"] == "SUCCEEDED", promoted
    assert again.status_code == 200, again.text
    unchanged = again.json()
    assert unchanged["changed"] is False
    assert (unchanged["servingVersion"], unchanged["updatedBy"], unchanged["updatedAt"]) == (
        2,
        f"deployment:{promoted['id']}",
        promoted["endedAt"],
    )
    assert unchanged["message"].startswith("orders: v2 serves new runs already (since ")
    assert unchanged["message"].endswith(f" by deployment:{promoted['id']}): nothing to do")
    assert switched.json()["changed"] is True
    events = page.json()["items"]
    assert [(e["actor"], e["detail"]["version"]) for e in events] == [
        (switched.json()["updatedBy"], 1),
        (f"deployment:{promoted['id']}", 2),
    ], events
    assert events[1]["detail"] == {
        "version": 2,
        "was": 1,
        "deploymentId": promoted["id"],
        "startedBy": promoted["createdBy"],
    }
    assert events[1]["at"] == promoted["endedAt"]


async def wait_until_ended(http: Any, deployment_id: str) -> dict[str, Any]:
    """The deployment once it has ended (bounded: 200 reads, 0.05 s apart)."""
    for _ in range(200):
        found: dict[str, Any] = (await http.get(f"/deployments/{deployment_id}")).json()
        if found["status"] != "RUNNING":
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"deployment {deployment_id} still running")
