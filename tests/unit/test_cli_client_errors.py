"""How the CLI reads what the API (or the network) answered: one message with the fix and an
exit code per case (api/cli/client_errors.py)."""

from __future__ import annotations

from typing import Any

import httpx

from api.cli.client_errors import ExitCode, response_failure, transport_failure
from api.cli.first_contact import changed_nothing

URL = "http://127.0.0.1:8000"


def answer(status: int, body: Any = None, **headers: str) -> httpx.Response:
    request = httpx.Request("GET", f"{URL}/runs")
    if body is None:
        return httpx.Response(
            status,
            request=request,
            text="<html>bad gateway</html>",
            headers={"content-type": "text/html", **headers},
        )
    return httpx.Response(status, request=request, json=body, headers=headers)


def test_each_status_has_its_exit_code_and_fix() -> None:
    cases = [
        (
            401,
            {"code": "unauthorized", "message": "an API key is required"},
            ExitCode.UNREACHABLE,
            "--api-key",
        ),
        (
            403,
            {"code": "forbidden", "message": "this route needs an admin key"},
            ExitCode.UNREACHABLE,
            "admin key",
        ),
        (404, {"code": "run_not_found", "message": "no run 'x'"}, ExitCode.FAILED, "no run 'x'"),
        (
            404,
            {"code": "not_found", "message": "no route for /runs"},
            ExitCode.UNREACHABLE,
            "--api-url",
        ),
        (400, {"code": "invalid_json", "message": "not JSON"}, ExitCode.USAGE, "not JSON"),
        (
            503,
            {"code": "store_unavailable", "message": "db down"},
            ExitCode.FAILED,
            "may be run again",
        ),
        (500, {"code": "internal_error", "message": "boom"}, ExitCode.FAILED, "its log"),
    ]
    for status, body, code, needle in cases:
        failure = response_failure(answer(status, body), URL)
        assert (failure.exit_code, failure.status) == (code, status), body
        assert needle in failure.message and "\n" not in failure.message, failure.message


def test_a_conflict_says_the_current_state() -> None:
    body = {
        "code": "run_not_failed",
        "message": "only a FAILED run can be retried",
        "details": {"state": "RUNNING"},
    }
    failure = response_failure(answer(409, body), URL)
    assert failure.message == "only a FAILED run can be retried (it is RUNNING)"
    assert failure.exit_code is ExitCode.FAILED


def test_a_limit_says_when_to_try_again() -> None:
    body = {"code": "queue_full", "message": "the ready queue is full"}
    assert response_failure(answer(429, body, **{"Retry-After": "5"}), URL).message.endswith(
        "try again in 5 s"
    )


def test_a_used_up_quota_says_how_to_raise_it_never_to_wait() -> None:
    body = {
        "code": "quota_exceeded",
        "message": "tenant acme used its quota of 5 runs",
        "details": {"tenantId": "acme", "usedRuns": 5, "maxRuns": 5},
    }
    failure = response_failure(answer(429, body), URL)
    assert failure.message == (
        "tenant acme used its quota of 5 runs; raise it with "
        "`schemabridge tenants set-quota acme N` or remove it with "
        "`schemabridge tenants reset-quota acme`"
    )
    assert failure.exit_code is ExitCode.FAILED
    one = {**body, "details": {"tenantId": "acme", "usedRuns": 1, "maxRuns": 1}}
    assert "used its quota of 1 run;" in response_failure(answer(429, one), URL).message
    older = {"code": "quota_exceeded", "message": "tenant acme has no runs left in its quota"}
    assert "try again" not in response_failure(answer(429, older), URL).message


def test_invalid_input_lists_every_problem_with_its_pointer() -> None:
    body = {
        "code": "invalid_input",
        "message": "the input does not match",
        "details": {
            "problems": [
                {"pointer": "/subject", "code": "input", "message": "must be a string"},
                {"pointer": "", "code": "input", "message": "missing customerId", "in": "input"},
                {"pointer": "/", "message": "the key named empty"},
            ]
        },
    }
    failure = response_failure(answer(422, body), URL)
    assert failure.exit_code is ExitCode.USAGE
    # The root is "(document)" as `validate` says it: "/" is the member "" (RFC 6901).
    assert failure.message.splitlines() == [
        "the input does not match",
        "  /subject  must be a string  [input]",
        "  input (document)  missing customerId  [input]",
        "  /  the key named empty",
    ]


def test_an_answer_that_is_not_the_api_points_at_the_url() -> None:
    failure = response_failure(answer(404), URL)
    assert failure.exit_code is ExitCode.UNREACHABLE
    assert "404 (text/html), not the SchemaBridge API's JSON" in failure.message
    assert not failure.transient


def test_a_proxy_answering_5xx_is_worth_another_try() -> None:
    failure = response_failure(answer(502), URL)
    assert failure.exit_code is ExitCode.UNREACHABLE
    assert failure.transient
    assert "502 (text/html) instead of the SchemaBridge API: a proxy" in failure.message


def test_which_failures_are_worth_another_try() -> None:
    """5xx and no answer at all are; a 4xx is answered the same way again."""
    store_down = {"code": "store_unavailable", "message": "db down"}
    assert response_failure(answer(503, store_down), URL).transient
    assert response_failure(answer(500, {"code": "internal_error", "message": "x"}), URL).transient
    for status, code in [(401, "unauthorized"), (404, "run_not_found"), (409, "conflict")]:
        refusal = response_failure(answer(status, {"code": code, "message": "m"}), URL)
        assert not refusal.transient, status
    assert transport_failure(httpx.ConnectError("refused"), URL, 30).transient
    dropped = transport_failure(httpx.RemoteProtocolError("peer closed connection"), URL, 30)
    assert dropped.transient and dropped.exit_code is ExitCode.UNREACHABLE
    assert dropped.message == (
        f"the connection to the SchemaBridge API at {URL} broke: peer closed connection"
    )
    assert not transport_failure(httpx.UnsupportedProtocol("ftp"), URL, 30).transient


def test_an_unreachable_api_says_how_to_start_one() -> None:
    error = httpx.ConnectError("All connection attempts failed")
    error.__cause__ = ConnectionRefusedError(111, "Connection refused")
    failure = transport_failure(error, URL, 30)
    assert failure.exit_code is ExitCode.UNREACHABLE
    assert failure.message == (
        f"cannot reach the SchemaBridge API at {URL}: connection refused; start "
        "`schemabridge serve` or set --api-url (SCHEMABRIDGE_API_URL)"
    )
    slow = transport_failure(httpx.ReadTimeout("timed out"), URL, 30)
    assert "did not answer within 30 s" in slow.message


def test_a_message_that_is_its_one_problem_is_printed_once() -> None:
    """The API's 422 for one bad header says the problem in its message and lists it too."""
    problem = {"in": "header", "pointer": "/Idempotency-Key", "message": "String should have"}
    body = {
        "code": "invalid_request",
        "message": "header /Idempotency-Key: String should have",
        "details": {"problems": [problem]},
    }
    assert response_failure(answer(422, body), URL).message == body["message"]
    said = {"pointer": "/tenant", "message": "a tenant id is 1 to 200 characters"}
    body = {"code": "invalid_key", "message": said["message"], "details": {"problems": [said]}}
    assert response_failure(answer(422, body), URL).message == said["message"]


def test_which_failures_are_known_to_have_changed_nothing() -> None:
    """`runs submit --wait` sends a submission without an idempotency key again only after a
    failure that cannot have created its run: no connection made, or the API's own 503
    `not_ready` (starting or stopping, refused before any route ran). A broken connection, a
    timeout or a proxy's 502 may come after the run was made."""
    not_ready = {"code": "not_ready", "message": "the API is starting"}
    assert changed_nothing(transport_failure(httpx.ConnectError("refused"), URL, 30))
    assert changed_nothing(response_failure(answer(503, not_ready), URL))
    store_down = {"code": "store_unavailable", "message": "db down"}
    maybe_made = [
        transport_failure(httpx.RemoteProtocolError("peer closed connection"), URL, 30),
        transport_failure(httpx.ReadTimeout("timed out"), URL, 30),
        response_failure(answer(502), URL),
        response_failure(answer(503, store_down), URL),
    ]
    for failure in maybe_made:
        assert failure.transient and not changed_nothing(failure), failure.message


def test_a_route_not_found_for_a_name_with_a_slash_blames_the_name() -> None:
    """A security review's typo: `workflows show 'a/b'` went as /workflows/a%2Fb, which the
    server reads decoded, and the CLI said the API was not one it knows."""
    request = httpx.Request("GET", f"{URL}/workflows/a%2Fb/versions")
    body = {"code": "not_found", "message": "no route GET /workflows/a/b/versions"}
    failure = response_failure(httpx.Response(404, request=request, json=body), URL)
    assert failure.message == (
        "'a/b' holds '/', which no workflow, version, tenant or key name does: check the name"
    )
    assert failure.exit_code is ExitCode.USAGE
    plain = response_failure(answer(404, body), URL)  # GET /runs: a route this API lacks
    assert plain.message.startswith(f"{URL} is not a SchemaBridge API this command knows")
    assert plain.exit_code is ExitCode.UNREACHABLE
