"""A body whose text is not what JSON over HTTP allows is refused, with where it is, by every
REST route that takes a body, over real HTTP on both backends, before any route runs: a string
or key with an unpaired UTF-16 surrogate (`"\\ud800"`, 422 `not_utf8`), which reached the
routes and failed there as a 500 (an input's hash, the database, an answer quoting it); bytes
that are not UTF-8, an integer longer than Python reads, `NaN`, `Infinity` and `1e400` (400
`invalid_json`, with the token and its line and column, as a syntax error is said), which were
a vague 400 `bad_request` or a 422 `invalid_input` with no place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from engine.operations.views import RunFilter
from tests.conftest import Backend
from tests.e2e.rest_body_harness import JSON, Served, plain_api

_SURROGATE = "This text holds an unpaired UTF-16 surrogate (such as \\ud800)"


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    async with plain_api(backend) as api:
        yield api


def _refused(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    assert set(body) == {"code", "message", "details"}, body
    return body


def _not_unicode(answer: httpx.Response) -> list[str]:
    """The pointers of a 422 `not_utf8`, each problem said in the same words."""
    body = _refused(answer, 422, "not_utf8")
    problems = body["details"]["problems"]
    assert {(p["code"], p["in"]) for p in problems} == {("not_utf8", "body")}
    assert all(p["message"].startswith(("This text", "This key")) for p in problems), problems
    assert body["message"].startswith(f"body {problems[0]['pointer']}: ")
    return [p["pointer"] for p in problems]


@pytest.mark.parametrize(
    ("path", "body", "at"),
    [
        ("/workflows/plain/runs", rb'{"input": {"id": "x\ud800"}}', "/input/id"),
        ("/runs/r1/steps/v/resolve", rb'{"output": "a\ud800"}', "/output"),
        ("/keys", rb'{"tenantId": "t", "name": "a\ud800"}', "/name"),
        ("/runs/retry", rb'{"ids": ["a\ud800"]}', "/ids/0"),
        ("/runs/retry", rb'{"filter": {"workflow": "a\udfff"}}', "/filter/workflow"),
        ("/workflows", rb'{"name": "a\ud800", "vertices": {}}', "/name"),
    ],
)
async def test_a_lone_surrogate_is_422_not_utf8_at_its_pointer(
    served: Served, path: str, body: bytes, at: str
) -> None:
    answer = await served.http.post(path, content=body, headers=JSON)
    assert _not_unicode(answer) == [at]
    assert _SURROGATE in answer.json()["message"]
    assert (await served.ops.runs.list(RunFilter())).items == []
    assert [w.name for w in await served.ops.workflows.list()] == ["plain"]


async def test_a_key_with_a_lone_surrogate_is_pointed_at_escaped(served: Served) -> None:
    # The key and the value under it: each pointer shows the surrogate as its escape, since
    # an answer holding the surrogate itself could not be written as UTF-8.
    body = rb'{"input": {"k\ud800": "v\udc00", "pair": "\ud83d\ude00"}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert _not_unicode(answer) == ["/input/k\\ud800", "/input/k\\ud800"]
    said = [p["message"][:8] for p in answer.json()["details"]["problems"]]
    assert sorted(said) == ["This key", "This tex"]


async def test_a_surrogate_pair_or_an_escaped_backslash_is_taken(served: Served) -> None:
    body = rb'{"input": {"smile": "\ud83d\ude00", "path": "C:\\ud800"}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert answer.status_code == 201, answer.text
    run = await served.ops.runs.get(answer.json()["id"])
    assert run.input == {"smile": "\U0001f600", "path": "C:\\ud800"}


async def test_a_surrogate_is_said_before_a_key_written_twice(served: Served) -> None:
    body = rb'{"input": {"a": 1, "a": 2, "b": "\ud800"}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert _not_unicode(answer) == ["/input/b"]


_NOTJSON = "the request body is not valid JSON: "


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            b'{"input": {"name": "caf\xe9"}}',
            "byte 0xe9 at byte offset 23 is not UTF-8; JSON text must be UTF-8 "
            "(line 1, column 24).",
        ),
        (
            b"\xef\xbb\xbf" + b'{"input":\n {"name": "\xe9"}}',
            "byte 0xe9 at byte offset 24 is not UTF-8; JSON text must be UTF-8 "
            "(line 2, column 12).",
        ),
        ('{"input": {}}'.encode("utf-16"), "the text is UTF-16; JSON text must be UTF-8"),
        (
            b'{"input": {"n":\n  ' + b"7" * 5000 + b"}}",
            "the number 777777777777\u2026 has 5,000 digits, more than the 4,300 an integer may "
            "have here; send it as a string (line 2, column 3).",
        ),
    ],
)
async def test_bytes_that_are_not_utf8_or_a_number_too_long_are_400_invalid_json(
    served: Served, body: bytes, said: str
) -> None:
    for path in ("/workflows/plain/runs", "/keys", "/runs/r1/steps/v/resolve"):
        answer = await served.http.post(path, content=body, headers=JSON)
        message = _refused(answer, 400, "invalid_json")["message"]
        assert message.startswith(_NOTJSON + said), message
    assert (await served.ops.runs.list(RunFilter())).items == []


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (b"NaN", "NaN is not a JSON value; write a number or a string instead"),
        (b"Infinity", "Infinity is not a JSON value; write a number or a string instead"),
        (b"-Infinity", "-Infinity is not a JSON value; write a number or a string instead"),
        (
            b"1e400",
            "the number 1e400 is out of range: a JSON number here must fit a 64-bit float, "
            "at most about 1.8e308",
        ),
        (
            b"-" + b"9" * 400 + b".5",
            "the number -99999999999\u20269999.5 (403 characters) is out of range",
        ),
    ],
)
async def test_a_number_json_does_not_have_is_400_invalid_json_where_it_is(
    served: Served, token: bytes, said: str
) -> None:
    # The same token inside a string earlier on is text, not the number: the position is the
    # number's.
    text = token.decode()
    body = b'{"input": {"label": "' + token + b'",\n  "amount": ' + token + b"}}"
    where = "(line 2, column 13)."
    answers = [
        await served.http.post("/workflows/plain/runs", content=body, headers=JSON),
        await served.http.post(
            "/runs/r1/steps/v/resolve",
            content=b'{"output": {"label": "' + token + b'",\n  "amount": ' + token + b"}}",
            headers=JSON,
        ),
        await served.http.post("/runs/retry", content=body.replace(b"input", b"ids"), headers=JSON),
    ]
    for answer in answers:
        message = _refused(answer, 400, "invalid_json")["message"]
        assert message.startswith(_NOTJSON + said), message
        assert message.endswith(where), message
        assert text[:12] in message
    assert (await served.ops.runs.list(RunFilter())).items == []


async def test_numbers_json_has_are_taken(served: Served) -> None:
    body = b'{"input": {"big": ' + b"9" * 4300 + b', "small": 1e-400, "top": 1.7e308}}'
    answer = await served.http.post("/workflows/plain/runs", content=body, headers=JSON)
    assert answer.status_code == 201, answer.text
    run = await served.ops.runs.get(answer.json()["id"])
    assert run.input == {"big": int("9" * 4300), "small": 0.0, "top": 1.7e308}


@pytest.mark.parametrize(
    ("method", "path", "body", "refused"),
    [
        ("POST", "/workflows/plain/runs", {"version": True}, {"/version": "int_type"}),
        ("POST", "/workflows/plain/runs", {"version": "1"}, {"/version": "int_type"}),
        ("PUT", "/tenants/acme/limits", {"ratePerMinute": True}, {"/ratePerMinute": "int_type"}),
        (
            "PUT",
            "/destinations/https:%2F%2Fapi.example.com:443/caps",
            {"maxConcurrency": "5", "ratePerSecond": False},
            {"/maxConcurrency": "int_type", "/ratePerSecond": "float_type"},
        ),
        (
            "POST",
            "/runs/retry",
            {"filter": {"workflow": "plain", "version": True}, "limit": "10"},
            {"/filter/version": "int_type", "/limit": "int_type"},
        ),
        (
            "POST",
            "/workflows/plain/deployments",
            {"version": 1, "stages": [{"weight": 50}, {"weight": True}]},
            {"/stages/1/weight": "float_type"},
        ),
        (
            "POST",
            "/keys",
            {"tenantId": "t", "expiresInDays": "90"},
            {"/expiresInDays": "float_type"},
        ),
    ],
)
async def test_true_false_or_text_where_a_number_goes_is_422_at_its_pointer(
    served: Served, method: str, path: str, body: dict[str, Any], refused: dict[str, str]
) -> None:
    # pydantic's lax mode read `true` as 1 and "5" as 5: a client's bug set a tenant's rate
    # to one call a minute, or a destination's cap to one call at a time, with a 200.
    answer = await served.http.request(method, path, json=body)
    problems = _refused(answer, 422, "invalid_request")["details"]["problems"]
    assert {p["pointer"]: p["code"] for p in problems} == refused
    assert all(p["in"] == "body" for p in problems)
    first = problems[0]
    assert answer.json()["message"].startswith(f"body {first['pointer']}: should be ")
    assert "send it as a JSON number, without quotes" in first["message"]
    assert (await served.ops.runs.list(RunFilter())).items == []
    assert not any(t.rate.configured for t in await served.ops.settings.tenants())
    assert not any(d.cap_configured for d in await served.ops.settings.destinations())


async def test_a_number_where_a_number_goes_is_taken_and_input_is_not_looked_into(
    served: Served,
) -> None:
    # A number without a fraction is an integer to JSON Schema; a run's input is the
    # workflow's to judge, so its `true` and "1" stay as they are.
    answer = await served.http.post(
        "/workflows/plain/runs", json={"version": 1.0, "input": {"n": True, "m": "1"}}
    )
    assert answer.status_code == 201, answer.text
    run = await served.ops.runs.get(answer.json()["id"])
    assert run.input == {"n": True, "m": "1"}
