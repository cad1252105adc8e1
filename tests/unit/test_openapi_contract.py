"""The OpenAPI document is precise enough to generate a client from: every closed set of
values (statuses, kinds, reasons) is an enum taken from the one set the code has, the
event stream's data has its schema, `?wait=true`'s outcomes each have their own, and no
description names a field by a spelling the wire does not use. Built without serving: the
document needs no database."""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic.alias_generators import to_camel

from admission.breaker import BreakerState, Layer
from api.rest import create_app
from api.rest.app import DEFAULT_ROUTERS
from api.rest.auth import admin_caller
from api.rest.route_errors import route_statuses
from engine.coordination.heartbeat import ServiceRole
from engine.operations.action_views import SkipReason
from engine.operations.views import EPOCH_SECONDS, UNKNOWN_KIND, View, is_time_field
from engine.settings import Settings
from engine.store.models import (
    AuditAction,
    AuditSubject,
    DeploymentStatus,
    RunRoute,
    RunStatus,
    StepStatus,
)
from engine.store.operator_actions import Action
from engine.validation import parse_document
from schemas.definitions import VertexType
from schemas.errors import FailureKind
from schemas.waiting import WaitReason
from vertices.contract import TimeoutTier

REF = "#/components/schemas/"


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path: Path = tmp_path_factory.mktemp("openapi") / "never-opened.db"
    return create_app(Settings(database_url=f"sqlite+aiosqlite:///{path}")).openapi()


def _schemas(document: dict[str, Any]) -> dict[str, Any]:
    schemas: dict[str, Any] = document["components"]["schemas"]
    return schemas


@pytest.mark.parametrize(
    "enum",
    [
        RunStatus,
        StepStatus,
        FailureKind,
        WaitReason,
        RunRoute,
        VertexType,
        SkipReason,
        Action,
        TimeoutTier,
        DeploymentStatus,
        BreakerState,
        Layer,
        AuditAction,
        AuditSubject,
        ServiceRole,
    ],
)
def test_each_enum_is_the_codes_own_set(document: dict[str, Any], enum: Any) -> None:
    assert _schemas(document)[enum.__name__]["enum"] == [member.value for member in enum]


@pytest.mark.parametrize(
    ("model", "field", "enum"),
    [
        ("RunSummary", "status", "RunStatus"),
        ("RunSummary", "route", "RunRoute"),
        ("RunDetail", "status", "RunStatus"),
        ("RunDetail", "timeoutTier", "TimeoutTier"),
        ("RunProgress", "status", "RunStatus"),
        ("StepView", "status", "StepStatus"),
        ("StepView", "type", "VertexType"),
        ("StepProgress", "status", "StepStatus"),
        ("WaitingView", "reason", "WaitReason"),
        ("WaitingChildren", "reason", "WaitReason"),
        ("SkippedRun", "reason", "SkipReason"),
        ("SkippedRun", "state", "RunStatus"),
        ("RetryResult", "status", "RunStatus"),
        ("RetryResult", "action", "Action"),
        ("DeploymentView", "status", "DeploymentStatus"),
        ("AuditEventView", "action", "AuditAction"),
        ("AuditEventView", "subjectKind", "AuditSubject"),
        ("BreakerView", "state", "BreakerState"),
        ("ClosedBreakerView", "layer", "Layer"),
        ("ErrorView", "kind", "FailureKind"),
        ("AttemptView", "refused", "FailureKind"),
        ("ServiceView", "role", "ServiceRole"),
    ],
)
def test_closed_fields_refer_to_their_enum(
    document: dict[str, Any], model: str, field: str, enum: str
) -> None:
    schema = _schemas(document)[model]["properties"][field]
    refs = [option.get("$ref") for option in schema.get("anyOf", [schema])]
    assert REF + enum in refs, schema


def test_an_error_kind_is_a_failure_kind_or_unknown(document: dict[str, Any]) -> None:
    """A stored kind no `FailureKind` names (an older release's row) is shown as `unknown`:
    the only value beside the enum."""
    kind = _schemas(document)["ErrorView"]["properties"]["kind"]
    assert kind["anyOf"] == [{"$ref": REF + "FailureKind"}, {"type": "string", "const": "unknown"}]
    assert UNKNOWN_KIND == "unknown"


def test_the_event_streams_data_has_its_schema(document: dict[str, Any]) -> None:
    progress = _schemas(document)["RunProgress"]
    assert {"id", "status", "ended", "steps", "fanout"} <= set(progress["properties"])
    operation = document["paths"]["/runs/{run_id}/events"]["get"]
    answer = operation["responses"]["200"]
    assert "text/event-stream" in answer["content"]
    assert "#/components/schemas/RunProgress" in answer["description"]
    # How to reconnect is part of the contract: the `retry:` hint, `Last-Event-ID`, and that
    # every event is the whole run (a client must not drop one by its id).
    assert "retry:" in answer["description"]
    assert "`stopping`" in answer["description"]  # a restart, told apart from a failure
    assert "Reconnecting" in operation["description"]
    assert "full current state" in operation["description"]
    [header] = [p for p in operation["parameters"] if p["in"] == "header"]
    assert header["name"] == "Last-Event-ID" and not header.get("required")


OPTIONAL_IN_ANSWERS = {
    "HealthReport": {"failing"},  # `GET /health` says `{"status": "ok"}` alone
    "MonitorConfig": {"demoDownstream"},  # the monitor's, not a client's
    "RunCancelledDetails": {"url", "created", "status"},  # only from `?wait=true`
}
"""The fields an answer may leave out, by model: every other field of every answer is sent,
null or empty when there is nothing to say."""


def _answer_models(document: dict[str, Any]) -> set[str]:
    """The component schemas an answer (a route's response, or an event's data) can hold."""
    schemas, found = _schemas(document), set()
    todo: list[Any] = [document["paths"], schemas["RunProgress"]]
    for _ in range(100_000):
        if not todo:
            break
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, dict):
            if "requestBody" in node:
                node = {k: v for k, v in node.items() if k != "requestBody"}
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF) and ref[len(REF) :] not in found:
                found.add(ref[len(REF) :])
                todo.append(schemas[ref[len(REF) :]])
            todo.extend(v for k, v in node.items() if k not in ("$ref", "parameters"))
    return found


def test_answer_models_require_every_field_they_always_send(document: dict[str, Any]) -> None:
    """A client generated from OpenAPI reads a field that is not `required` as maybe absent
    (`Unset | None | str` for a page's `next`): every field an answer always sends is
    required, nullable where it may be null."""
    schemas, models = _schemas(document), _answer_models(document)
    assert {"RunSummary", "RunDetail", "RunList", "RunOutcome", "TenantView"} <= models
    # Named as a generated client's class would be, not "Page_RunSummary_".
    assert {"LogList", "AuditList", "DeploymentList"} <= models
    assert not [name for name in models if "_" in name or "[" in name], models
    for name in sorted(models):
        schema = schemas[name]
        left_out = set(schema.get("properties", {})) - set(schema.get("required", []))
        assert left_out <= OPTIONAL_IN_ANSWERS.get(name, set()), (name, sorted(left_out))


def _submit(document: dict[str, Any]) -> dict[str, Any]:
    answers: dict[str, Any] = document["paths"]["/workflows/{name}/runs"]["post"]["responses"]
    return answers


def _refs(answer: dict[str, Any]) -> list[str]:
    schema = answer["content"]["application/json"]["schema"]
    return [option["$ref"] for option in schema.get("anyOf", [schema])]


def test_each_wait_outcome_is_documented_with_its_own_model(document: dict[str, Any]) -> None:
    answers, schemas = _submit(document), _schemas(document)
    assert _refs(answers["200"]) == [REF + "RunOutcome", REF + "SubmittedRun"]
    # A `?wait=true` that SUCCEEDED is a 200 whether or not this request created the run: a
    # 201 is only ever the run submitted without a wait.
    assert _refs(answers["201"]) == [REF + "SubmittedRun"]
    assert {"created", "status"} <= set(schemas["RunOutcome"]["required"])
    assert "output" in schemas["RunOutcome"]["properties"]
    assert "created" in schemas["SubmittedRun"]["required"]
    expected = {
        "409": ("RunCancelledError", "run_cancelled", "RunCancelledDetails", "CANCELLED"),
        "502": ("RunFailedError", "run_failed", "RunFailedDetails", "FAILED"),
        "504": ("RunStillRunningError", "run_still_running", "RunStillRunningDetails", "RUNNING"),
    }
    for status, (model, code, details, run_status) in expected.items():
        assert REF + model in _refs(answers[status]), status
        assert code in answers[status]["description"], status
        assert schemas[model]["properties"]["code"]["const"] == code
        assert schemas[model]["properties"]["details"]["$ref"] == REF + details
        fields = schemas[details]["properties"]
        assert {"runId", "url", "created", "status"} <= set(fields), details
        status_options = fields["status"].get("anyOf", [fields["status"]])
        assert run_status in [option.get("const") for option in status_options], details
    assert "proxy" in answers["502"]["description"] and "proxy" in answers["504"]["description"]
    assert "idempotency_conflict" in answers["409"]["description"]
    assert schemas["RunFailedDetails"]["properties"]["error"]["anyOf"][0]["$ref"] == (
        REF + "ErrorView"
    )


def _accepts_every_body_of(first: dict[str, Any], later: dict[str, Any]) -> bool:
    """Whether a client that parses an answer as `first` (reading its required fields, as
    openapi-python-client does, blind to fields it does not know) succeeds on every body
    `later` describes: `first` requires nothing `later` may leave out, and each `const` of
    `first` is `later`'s too."""
    fields = later.get("properties", {})
    for name in first.get("required", []):
        if name not in later.get("required", []):
            return False
        const = first["properties"][name].get("const")
        if const is not None and fields[name].get("const") != const:
            return False
    return True


def test_no_answer_union_hides_a_later_model_behind_an_earlier_one(
    document: dict[str, Any],
) -> None:
    """A generated client tries an answer's models in the order the document lists them and
    keeps the first that parses: `?wait=true`'s 200 listed `SubmittedRun` before
    `RunOutcome`, so openapi-python-client read every outcome as a `SubmittedRun`, without
    its `status` and `output`. An earlier model never parses every body of a later one."""
    schemas, hidden, unions = _schemas(document), [], 0
    for label, operation in _operations(document):
        for status, answer in operation["responses"].items():
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            names = [o["$ref"].removeprefix(REF) for o in schema.get("anyOf", []) if "$ref" in o]
            unions += len(names) > 1
            for i, first in enumerate(names):
                for later in names[i + 1 :]:
                    if _accepts_every_body_of(schemas[first], schemas[later]):
                        hidden.append((label, status, first, later))
    assert unions >= 4
    assert hidden == []


def test_no_answer_model_forbids_fields_added_later(document: dict[str, Any]) -> None:
    """`additionalProperties: false` is a request body's (an unknown key is refused): on an
    answer it promises that no release adds a field, so a client that validates answers
    against the document breaks on the next one, and openapi-python-client drops the fields
    it does not know rather than keep them in `additional_properties`."""
    schemas = _schemas(document)
    closed = sorted(
        name
        for name in _answer_models(document)
        if schemas[name].get("additionalProperties") is False
    )
    assert closed == []
    assert schemas["SubmitRequest"]["additionalProperties"] is False  # a request's stays


def test_every_submission_refusal_is_listed(document: dict[str, Any]) -> None:
    answers = _submit(document)
    said = {status: answer.get("description", "") for status, answer in answers.items()}
    assert "tenant_forbidden" in said["403"]
    assert "workflow_not_found" in said["404"]
    for code in (
        "invalid_input",
        "input_too_large",
        "input_too_deep",
        "invalid_tenant",
        "system_workflow",
        "duplicate_key",
        "input_not_wrapped",
        "unknown_query_parameter",
    ):
        assert code in said["422"], code
    assert "queue_full" in said["429"] and "quota_exceeded" in said["429"]
    assert "413" in answers and "503" in answers


def test_a_batch_retry_documents_the_refusals_of_its_preview(document: dict[str, Any]) -> None:
    """`POST /runs/retry` refuses what its preview refuses, with the same codes; and `GET
    /runs` refuses the unpublished workflow filter the batch refuses."""
    for path in ("/runs/retry", "/runs/retry/preview"):
        answers = document["paths"][path]["post"]["responses"]
        for code in ("invalid_filter", "invalid_batch", "too_many_runs", "invalid_request"):
            assert code in answers["422"]["description"], (path, code)
        assert "workflow_not_found" in answers["404"]["description"], path
    listed = document["paths"]["/runs"]["get"]["responses"]
    assert "workflow_not_found" in listed["404"]["description"]


def test_the_probed_routes_claim_no_422(document: dict[str, Any]) -> None:
    """`/health` and `/metrics` take any query string (a load balancer's, a scraper's)."""
    for path in ("/health", "/metrics"):
        assert "422" not in document["paths"][path]["get"]["responses"], path
    assert "422" in document["paths"]["/runs"]["get"]["responses"]


def test_the_quota_says_it_counts_root_runs(document: dict[str, Any]) -> None:
    description = _schemas(document)["LimitsRequest"]["properties"]["maxRuns"]["description"]
    assert "root runs submitted" in description and "child runs" in description


def _properties(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found |= set(value)
            found |= _properties(value)
    elif isinstance(node, list):
        for item in node:
            found |= _properties(item)
    return found


def _descriptions(node: Any, where: str = "") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                found.append((where, value))
            else:
                found += _descriptions(value, f"{where}/{key}")
    elif isinstance(node, list):
        for item in node:
            found += _descriptions(item, where)
    return found


def test_no_description_names_a_field_in_snake_case(document: dict[str, Any]) -> None:
    """Fields are camelCase on the wire: a description saying `vertex_id` sends a client
    looking for a key that is never there."""
    fields = _properties(document) | {
        parameter["name"]
        for path_item in document["paths"].values()
        for operation in path_item.values()
        for parameter in operation.get("parameters", [])
    }
    # A value is spelt as the wire has it: `presumed_dead` is a holder's state, not the field
    # `presumedDead`.
    values = _enum_values(document)
    wrong = [
        (where, word)
        for where, text in _descriptions(document)
        for word in re.findall(r"\b[a-z]+(?:_[a-z0-9]+)+\b", text)
        if to_camel(word) != word and to_camel(word) in fields and word not in values
    ]
    assert not wrong, wrong


def _enum_values(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum" and isinstance(value, list):
                found |= {item for item in value if isinstance(item, str)}
            elif key == "const" and isinstance(value, str):
                found.add(value)
            else:
                found |= _enum_values(value)
    elif isinstance(node, list):
        for item in node:
            found |= _enum_values(item)
    return found


BODY_REFUSALS = {
    "400": "invalid_json",
    "401": "unauthorized",
    "413": "body_too_large",
    "415": "unsupported_media_type",
    "422": "duplicate_key",
}
"""What every route that takes a body can answer about it, and a code each description names."""


def _operations(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path}", operation)
        for path, path_item in document["paths"].items()
        for method, operation in path_item.items()
    ]


def test_every_route_documents_the_refusals_it_is_built_with(document: dict[str, Any]) -> None:
    """The refusals that come from what a route is made of (a body, a key, the operations),
    not from its own code, are documented on every route that has them: each operation with
    a `requestBody` declares 400, 401, 413, 415 and 422 (`too_deep`, `duplicate_key`), each
    that needs a key 401 and 503, every one 500; each as an `ErrorBody`."""
    missing: list[tuple[str, str]] = []
    with_body = 0
    for label, operation in _operations(document):
        answers = operation["responses"]
        needed = {"500": "internal_error"}
        if "requestBody" in operation:
            with_body += 1
            needed |= BODY_REFUSALS
        if operation.get("security"):
            needed |= {"401": "unauthorized", "503": "not_ready"}
        for status, code in needed.items():
            if code not in answers.get(status, {}).get("description", ""):
                missing.append((label, status))
        if "requestBody" in operation and "too_deep" not in answers["422"]["description"]:
            missing.append((label, "422 too_deep"))
    assert not missing, missing
    assert with_body >= 12


def test_admin_routes_document_403(document: dict[str, Any]) -> None:
    """A tenant key on an admin route is a 403 `forbidden`, read from the route's own
    dependencies (`route_errors.route_statuses`), not from a list each route keeps."""
    admin_routes = [
        route
        for router in DEFAULT_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        and route.include_in_schema
        and admin_caller in {dep.call for dep in route.dependant.dependencies}
    ]
    assert len(admin_routes) >= 10
    for route in admin_routes:
        # From the dependencies alone: the routes' own `responses` still list 401 and 403,
        # so the document would show them even if route_statuses lost them.
        assert {401, 403} <= route_statuses(route), route.path_format
        for method in route.methods or ():
            answers = document["paths"][route.path_format][method.lower()]["responses"]
            assert "403" in answers, (method, route.path_format)


@pytest.mark.parametrize(
    ("path", "method", "status", "codes"),
    [
        ("/runs/{run_id}", "get", "404", ["run_not_found", "another tenant's"]),
        ("/runs/{run_id}/events", "get", "404", ["run_not_found", "another tenant's"]),
        ("/runs/{run_id}/logs", "get", "404", ["run_not_found", "another tenant's"]),
        ("/runs/{run_id}/logs", "get", "422", ["invalid_cursor"]),
        (
            "/runs/{run_id}/steps/{vertex_id}/long-tail",
            "get",
            "404",
            ["run_not_found", "step_not_found"],
        ),
        ("/runs/{run_id}/steps/{vertex_id}/long-tail", "get", "422", ["not_a_spawner"]),
        ("/tenants/{tenant_id}", "get", "403", ["tenant_forbidden"]),
        ("/tenants/{tenant_id}", "get", "422", ["invalid_tenant"]),
    ],
)
def test_the_routes_a_tenant_reads_name_their_own_codes(
    document: dict[str, Any], path: str, method: str, status: str, codes: list[str]
) -> None:
    """What a tenant's client branches on is in the route's own `responses`, not only the
    generic words of a status (which named `workflow_not_found` on a run's 404, and an
    admin route's `forbidden` on `GET /tenants/{id}`, which a tenant key may call)."""
    description = document["paths"][path][method]["responses"][status]["description"]
    for code in codes:
        assert code in description, (path, status, description)
    if status == "403":
        assert "admin route" not in description, description


def test_the_headers_a_client_acts_on_are_declared(document: dict[str, Any]) -> None:
    """A generated client reads `Retry-After` on every 503 (and a 429's, when waiting helps)
    and `Location` on a submission's answers from the document, not from the prose."""
    for path, method, operation in (
        (path, method, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ):
        answers = operation["responses"]
        if path != "/health" and "503" in answers:
            assert "Retry-After" in answers["503"].get("headers", {}), (method, path)
        if "429" in answers:
            assert "Retry-After" in answers["429"].get("headers", {}), (method, path)
    submitted = _submit(document)
    for status in ("200", "201", "502", "504"):
        assert "Location" in submitted[status].get("headers", {}), status


def test_a_header_parameter_is_never_null(document: dict[str, Any]) -> None:
    """An optional header is left out, never sent as null: `anyOf: [string, null]` gave
    openapi-python-client an `idempotency_key: None | str | Unset` argument whose `None` it
    then put in the headers, which httpx refuses with a `TypeError`."""
    headers = {
        (label, parameter["name"]): parameter["schema"]
        for label, operation in _operations(document)
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "header"
    }
    assert set(headers) >= {
        ("POST /workflows/{name}/runs", "Idempotency-Key"),
        ("GET /runs/{run_id}/events", "Last-Event-ID"),
    }
    nullable = [where for where, schema in headers.items() if "null" in str(schema)]
    assert nullable == []
    key = headers[("POST /workflows/{name}/runs", "Idempotency-Key")]
    assert (key["type"], key["minLength"], key["maxLength"]) == ("string", 1, 256)


@pytest.mark.parametrize("path", ["/runs", "/runs/{run_id}/children"])
def test_a_run_lists_filters_say_what_they_take(document: dict[str, Any], path: str) -> None:
    """A status filter is a string (any case), so its values are said in its description;
    every filter of a run list has one."""
    parameters = {p["name"]: p for p in document["paths"][path]["get"]["parameters"]}
    for name, parameter in parameters.items():
        if name != "run_id":
            assert parameter.get("description"), (path, name)
    for status in RunStatus:
        assert status.value in parameters["status"]["description"], status


def _error_models(document: dict[str, Any]) -> dict[str, set[str]]:
    """By error `code`: the `details` schemas the document gives it, over every answer of
    every operation whose model fixes its `code` (`const`)."""
    schemas = _schemas(document)
    found: dict[str, set[str]] = {}
    for _, operation in _operations(document):
        for answer in operation["responses"].values():
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            for option in schema.get("anyOf", [schema]):
                model = schemas.get(option.get("$ref", "").removeprefix(REF), {})
                code = model.get("properties", {}).get("code", {}).get("const")
                if code is not None:
                    details = model["properties"]["details"]
                    found.setdefault(code, set()).add(details.get("$ref", str(details)))
    return found


def test_one_error_code_has_one_details_shape(document: dict[str, Any]) -> None:
    """An error code is answered with one `details` model wherever it comes from: a client
    reads `run_cancelled`'s `details.runId` and `details.state` whether `?wait=true`, resolve
    or reprocess answered it."""
    found = _error_models(document)
    assert {code: refs for code, refs in found.items() if len(refs) != 1} == {}
    assert found["run_cancelled"] == {REF + "RunCancelledDetails"}
    cancelled = _schemas(document)["RunCancelledDetails"]
    assert set(cancelled["required"]) == {"runId", "state"}
    assert cancelled["properties"]["status"].get("deprecated") is True
    paths = document["paths"]
    for path in ("/runs/{run_id}/steps/{vertex_id}/resolve", "/runs/{run_id}/reprocess"):
        refs = _refs(paths[path]["post"]["responses"]["409"])
        assert REF + "RunCancelledError" in refs, path


def test_every_time_in_an_answer_says_it_is_epoch_seconds(document: dict[str, Any]) -> None:
    """Every `…At` (and `at`, `until`, `notBefore`, `lastSeen`) of every schema says what it
    is: a client generated from the document must not guess milliseconds or ISO text."""
    times = [
        (model, name, field.get("description", ""))
        for model, schema in _schemas(document).items()
        for name, field in schema.get("properties", {}).items()
        if is_time_field(name)
    ]
    assert len(times) >= 34
    unsaid = [(model, name) for model, name, said in times if EPOCH_SECONDS not in said]
    assert not unsaid, unsaid
    # What a field says of itself stays, before the unit.
    serving = _schemas(document)["ServingView"]["properties"]["updatedAt"]["description"]
    assert serving.startswith("When the serving version was last set")


def _documented_fields(model: type[View]) -> set[str]:
    """The fields `model` itself declares with a docstring under them, by their wire name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    return {
        to_camel(statement.target.id)
        for statement, following in itertools.pairwise(body)
        if isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and isinstance(following.value.value, str)
    }


def _views(model: type[View]) -> list[type[View]]:
    return [model] + [view for sub in model.__subclasses__() for view in _views(sub)]


def test_what_a_view_field_says_in_the_code_it_says_in_the_contract(
    document: dict[str, Any],
) -> None:
    """The answers' fields are documented where they are declared, by a docstring under each:
    a client generated from the document shows the same words on its attributes (`reopenedJoins`
    of a reprocess, `restarts` of a run), not a bare name."""
    schemas = _schemas(document)
    unsaid = [
        (view.__name__, name)
        for view in _views(View)
        if view.__name__ in schemas
        for name in sorted(_documented_fields(view))
        if name in schemas[view.__name__].get("properties", {})
        and not schemas[view.__name__]["properties"][name].get("description")
    ]
    assert not unsaid, unsaid


def test_a_tenant_is_tenant_id_everywhere(document: dict[str, Any]) -> None:
    """One name for one concept: a tenant is `tenantId` in every body, answer and query
    string; `tenant`, its old name, is taken only as a query parameter marked deprecated
    (and, not in the schema, in bodies)."""
    named_tenant = [
        model
        for model, schema in _schemas(document).items()
        if "tenant" in schema.get("properties", {})
    ]
    assert named_tenant == []
    old_parameters = []
    for label, operation in _operations(document):
        names = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
        if "tenant" in names:
            assert names["tenant"].get("deprecated") is True, label
            assert "tenantId" in names, label
            old_parameters.append(label)
    assert sorted(old_parameters) == [
        "DELETE /secrets/{name}",
        "GET /runs",
        "GET /secrets",
        "POST /destinations/{key}/breakers/reset",
    ]
    for model in ("KeyRequest", "SecretRequest", "BatchFilter", "ApiKeyView", "SecretView"):
        assert "tenantId" in _schemas(document)[model]["properties"], model


def test_operation_ids_are_readable_and_unique(document: dict[str, Any]) -> None:
    """A client generated from the document names its methods by operationId: `submitRun`,
    `listRuns`, not `submit_workflows__name__runs_post`."""
    ids = {label: operation["operationId"] for label, operation in _operations(document)}
    assert len(set(ids.values())) == len(ids)
    assert [i for i in ids.values() if not re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i)] == []
    assert ids["POST /workflows/{name}/runs"] == "submitRun"
    assert ids["GET /runs"] == "listRuns"
    assert ids["GET /runs/{run_id}"] == "getRun"
    # Verb first, every one: an integrator's tour found previewRetry beside
    # startOverPreview, and bare nouns (destinationsHistory).
    verbs = {"get", "list", "stream", "match", "submit", "retry", "batch", "resolve", "start"}
    verbs |= {"reprocess", "cancel", "publish", "validate", "preview", "create", "revoke"}
    verbs |= {"set", "change", "remove", "reset", "delete", "abort", "rollback"}
    first_words = {label: re.split(r"(?=[A-Z])", i)[0] for label, i in ids.items()}
    assert {label: word for label, word in first_words.items() if word not in verbs} == {}
    previews = [i for i in ids.values() if "Preview" in i or i.startswith("preview")]
    assert [i for i in previews if not i.startswith("preview")] == []


def test_attempts_and_executions_are_told_apart(document: dict[str, Any]) -> None:
    """A step's `attempts` counts executions (claims), an error's `attempts` the HTTP attempts
    of one execution, and a history entry has both numbers: each description says which."""
    schemas = _schemas(document)
    step = schemas["StepView"]["properties"]["attempts"]["description"]
    error = schemas["ErrorView"]["properties"]["attempts"]["description"]
    execution = schemas["AttemptView"]["properties"]["execution"]["description"]
    attempt = schemas["AttemptView"]["properties"]["attempt"]["description"]
    assert "Executions" in step and "not HTTP attempts" in step
    assert "HTTP attempts the failing execution made" in error and "not the step's" in error
    assert "execution" in execution and "`attempts`" in execution
    assert "HTTP attempt" in attempt and "in-process retries" in attempt
    logs = document["paths"]["/runs/{run_id}/logs"]["get"]
    assert [p["name"] for p in logs["parameters"] if p["in"] == "query"] == ["limit", "cursor"]


def test_publishing_names_the_authoring_contract_as_its_body(document: dict[str, Any]) -> None:
    """`POST /workflows` says its body is a workflow document or a list of them, as the
    contract defines one (the body was "any object"), in components a validator resolves
    within the document: the shipped examples pass, a document the contract refuses does
    not. `POST /workflows/validate` keeps the loose body: it answers 200 with the problems
    of a document that breaks the contract."""
    from jsonschema import Draft202012Validator

    def body_of(path: str) -> Any:
        return document["paths"][path]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ]

    assert body_of("/workflows") == {"$ref": f"{REF}WorkflowDocuments"}
    assert "$ref" not in str(body_of("/workflows/validate"))
    contract = {"$ref": f"{REF}WorkflowDocuments", "components": document["components"]}
    validator = Draft202012Validator(contract)
    examples = sorted(Path("examples").glob("*.json"))
    published = [path for path in examples if not path.name.endswith(".input.json")]
    assert len(published) >= 4, examples
    for path in published:
        errors = [error.message for error in validator.iter_errors(json.loads(path.read_text()))]
        assert not errors, (path, errors)
    first = json.loads(published[0].read_text())
    one = first[0] if isinstance(first, list) else first
    assert validator.is_valid([one, one])
    assert not validator.is_valid([])
    assert not validator.is_valid({**one, "vertices": {"v": {"type": "TELEPORT"}}})
    assert not validator.is_valid({key: value for key, value in one.items() if key != "name"})
    assert "json-schema.org" not in json.dumps(document), "a reader would fetch it"
    # The example /docs shows passes the whole validator, not the JSON shape alone.
    media = document["paths"]["/workflows"]["post"]["requestBody"]["content"]["application/json"]
    (workflow,) = parse_document(json.dumps(media["example"]))
    assert workflow.name == media["example"]["name"]


def test_each_component_is_titled_with_its_name(document: dict[str, Any]) -> None:
    """A generated client names a class after a schema's title: the contract's `Vertex`
    made the class of its `type` `VertexType`, the answers' own enum, and
    openapi-python-client dropped `Workflow` and `WorkflowVertex` for the clash."""
    titled = {
        name: schema["title"]
        for name, schema in _schemas(document).items()
        if schema.get("title", name) != name
    }
    assert not titled


_ONE_TYPE_KEYWORDS = {"pattern", "minLength", "maxLength", "format", "items", "minItems"}


def _type_lists(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if isinstance(node.get("type"), list):
            found.append((where, node))
        for key, value in node.items():
            found += _type_lists(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _type_lists(value, f"{where}/{index}")
    return found


def test_no_type_list_carries_a_keyword_of_one_of_its_types(document: dict[str, Any]) -> None:
    """A generator reads `"type": ["string", "array"]` as one schema a type, each with every
    keyword: the SPAWNER's `items` (a `pattern` beside an array without `items`) was refused
    and `WorkflowSpawnerConfig` left out of the client. Each type is its own `anyOf` branch,
    which keeps what the contract takes."""
    from jsonschema import Draft202012Validator

    for where, node in _type_lists(document):
        assert "array" not in node["type"], where
        assert not _ONE_TYPE_KEYWORDS & node.keys(), where
    spawner = {"$ref": f"{REF}WorkflowSpawnerConfig", "components": document["components"]}
    validator = Draft202012Validator(spawner)
    assert validator.is_valid({"items": "{{ input.ids }}", "workflow": "child"})
    assert validator.is_valid({"items": [1, "a", {}], "workflow": "child"})
    assert not validator.is_valid({"items": "input.ids", "workflow": "child"})
    assert not validator.is_valid({"items": 3, "workflow": "child"})
