"""The `secrets` root of the expression context: where a workflow may read a secret, and in
which form (engine/validation/expressions.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.validation import parse_document
from schemas.errors import DefinitionError
from schemas.expressions import compile_template, secret_references

URL = "http://127.0.0.1:8765/x"


def document(**config: Any) -> dict[str, Any]:
    return {
        "name": "wf",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": URL, **config}}},
    }


def problems(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(doc))
    return [(p.pointer, p.code, p.message) for p in caught.value.problems]


@pytest.mark.parametrize(
    "config",
    [
        {"headers": {"Authorization": "Bearer {{ secrets.CRM_TOKEN }}"}},
        {"headers": {"X-Key": "{{ secrets.CRM_TOKEN }}"}},
        {"query": {"key": "{{ secrets.CRM_TOKEN }}", "page": ["{{ secrets.OTHER_1 }}"]}},
        {"body": {"auth": {"token": "{{ secrets.CRM_TOKEN }}"}, "n": "{{ input.n }}"}},
        {"url": "https://user:{{ secrets.PASSWORD }}@api.example.com/v1?k={{ secrets._K }}"},
    ],
)
def test_a_gateway_reads_secrets_in_its_request(config: dict[str, Any]) -> None:
    [workflow] = parse_document(json.dumps(document(**config)))
    assert workflow.name == "wf"


def test_the_references_are_the_names_read_as_secrets_dot_name() -> None:
    config = {
        "url": "https://u:{{ secrets.A }}@h/{{ input.x }}",
        "headers": {"X": "{{ secrets.B }} and {{ secrets.A }}", "{{ secrets.C }}": "key"},
        "body": [{"deep": ["{{ secrets.D }}"]}, "{{ vertices.x.output }}"],
    }
    # Object keys are never templates, so C is not a reference.
    assert secret_references(config) == {"A", "B", "D"}
    assert compile_template("{{ secrets.A }}").secret_names == {"A"}
    assert compile_template("{{ input.secrets.A }}").secret_names == frozenset()


@pytest.mark.parametrize(
    ("vertex", "pointer"),
    [
        (
            {"type": "GATEWAY", "config": {"url": URL, "destination": "{{ secrets.T }}"}},
            "/vertices/v/config/destination",
        ),
        (
            {
                "type": "SPAWNER",
                "config": {"items": [1], "workflow": "child", "input": "{{ secrets.T }}"},
            },
            "/vertices/v/config/input",
        ),
    ],
)
def test_secrets_are_refused_outside_a_request(vertex: dict[str, Any], pointer: str) -> None:
    child = document()
    child["name"] = "child"
    doc = [{"name": "parent", "vertices": {"v": vertex}}, child]
    with pytest.raises(DefinitionError) as caught:
        parse_document(json.dumps(doc))
    [problem] = caught.value.problems
    assert (problem.pointer, problem.code) == (f"/0{pointer}", "secret_not_allowed")
    assert "headers, query and body" in problem.message


@pytest.mark.parametrize(
    "url",
    [
        "http://{{ secrets.HOSTX }}/x",
        "https://{{ secrets.SUB }}.example.com",
        "http://api.example.com:{{ secrets.PORT }}/x",
        "{{ secrets.BASE }}/x",
        "{{ secrets.SCHEME }}://api.example.com/x",
        "https://{{ secrets.USER }}@{{ secrets.HOST }}/x",
    ],
)
def test_a_secret_in_the_urls_scheme_host_or_port_is_refused(url: str) -> None:
    [(at, code, message)] = problems(document(url=url))
    assert (at, code) == ("/vertices/call/config/url", "secret_not_allowed")
    assert "puts a secret in the url's scheme, host or port" in message
    assert "admission key" in message and "Redis keys" in message


@pytest.mark.parametrize(
    "config",
    [
        {"url": "https://u:{{ secrets.P }}@api.example.com/{{ secrets.PATH }}#{{ secrets.F }}"},
        {"url": "https://api.example.com?k={{ secrets.K }}"},
        {"url": "{{ input.base }}/v1/{{ secrets.K }}"},
        # A destination written out is the admission key, whatever the host.
        {"url": "https://{{ secrets.HOST }}/x", "destination": "crm"},
    ],
)
def test_secrets_elsewhere_in_the_url_are_accepted(config: dict[str, Any]) -> None:
    assert parse_document(json.dumps(document(**config)))


def test_a_destination_that_is_an_expression_does_not_excuse_a_secret_host() -> None:
    doc = document(url="https://{{ secrets.HOST }}/x", destination="{{ input.d }}")
    [(at, code, _)] = problems(doc)
    assert (at, code) == ("/vertices/call/config/url", "secret_not_allowed")


def test_a_secret_in_the_destination_is_refused_saying_why() -> None:
    [(at, code, message)] = problems(document(destination="d-{{ secrets.T }}"))
    assert (at, code) == ("/vertices/call/config/destination", "secret_not_allowed")
    assert message == (
        "The expression {{ secrets.T }} reads secrets, which a destination cannot use: the "
        "destination is the call's admission key, shown in metrics, the destinations API and "
        "Redis keys; read secrets in the url (its path, query or user:password@), headers, "
        "query and body."
    )


@pytest.mark.parametrize(
    "expression",
    [
        "{{ secrets }}",
        "{{ secrets.* }}",
        "{{ keys(secrets) }}",
        "{{ secrets.A.B }}",
        "{{ @.secrets.A }}",
        "{{ join(',', [secrets.A, input.x]) }}",
        "{{ secrets.A || input.x }}",
        "{{ secrets.[A, B] }}",
    ],
)
def test_a_secret_is_read_alone(expression: str) -> None:
    [(at, code, message)] = problems(document(headers={"X": expression}))
    assert (at, code) == ("/vertices/call/config/headers/X", "invalid_secret_reference")
    assert "{{ secrets.NAME }}" in message


def test_a_secret_name_must_be_a_plain_identifier() -> None:
    [(at, code, message)] = problems(document(body={"k": '{{ secrets."crm-token" }}'}))
    assert (at, code) == ("/vertices/call/config/body/k", "invalid_secret_reference")
    assert '"crm-token"' in message and "letters, digits and underscores" in message


def test_a_misspelt_root_suggests_secrets() -> None:
    [(_, code, message)] = problems(document(headers={"X": "{{ secret.TOKEN }}"}))
    assert code == "unknown_context"
    assert 'Did you mean "secrets"?' in message
