"""Every error the REST API answers is JSON `{"code", "message", "details"}`, all three always.

`code` is stable and machine-readable; `message` is a sentence for people; `details` is an
object (`{}` when there is nothing to add) with context, and for anything invalid
`details.problems`: a list of `{"pointer", "code", "message"}` (plus `"in"`: body, query, path
or header, for a request that does not fit its route). A script can read `.details` of any
error. Never HTML, never a traceback.

| cause                                     | status | code                      |
| ----------------------------------------- | ------ | ------------------------- |
| no route for the path                     | 404    | `not_found`               |
| the route exists, not with this method    | 405    | `method_not_allowed`      |
| the body is not JSON (RFC 8259) at all    | 400    | `invalid_json`            |
| a body without a JSON `Content-Type`      | 415    | `unsupported_media_type`  |
| body or parameters do not fit the route   | 422    | `invalid_request`         |
| a key written twice in one body object    | 422    | `duplicate_key`           |
| a body string with a lone UTF-16 surrogate | 422    | `not_utf8`                |
| a query parameter the route does not take | 422    | `unknown_query_parameter` |
| body over the route's limit (`body_limits`) | 413  | `body_too_large`          |
| no key, or an unknown/revoked/expired     | 401    | `unauthorized`            |
| a tenant key on an admin route            | 403    | `forbidden`               |
| an invalid workflow (`DefinitionError`)   | 422    | `invalid_workflow`        |
| anything unexpected                       | 500    | `internal_error`          |

An `OperationError` keeps its own `code`; its `refusal` gives the status: NOT_FOUND 404,
CONFLICT 409, INVALID 422, LIMITED 429 (with `Retry-After` when the error has
`retry_after_s`), UNAVAILABLE 503 (always with `Retry-After`: `UNAVAILABLE_RETRY_AFTER_S`).
A `DefinitionError` lists every problem. An unexpected error's traceback is logged on the
server, never sent.

Malformed JSON is a 400, not a 422: the body could not be read as JSON at all, so there is
nothing to point at; 422 means "JSON, but not what this route takes". Not JSON either, though
Python's parser would take them or fail without a position, and said with the token and its
line and column all the same (`engine.validation.json_text.NotJson`): bytes that are not
UTF-8, `NaN` and `Infinity`, a number no 64-bit float holds (`1e400`), an integer of more
digits than Python reads (4,300). A body sent as another
type (curl's `-d` sends form data) is a 415 (`api.rest.body_shape`): FastAPI would not even
try to read it as JSON. Where pydantic's words would not say how to fix the body, the message
does: no body at all (`body_missing`) shows the body the route takes, and a field the model
does not have (`extra_forbidden`) offers its close field names, or lists them. A run route's
404 `run_not_found` for an id shaped as a prefix of one (the 8 hex digits the monitor and the
CLI show) points to `GET /run-ids?prefix=`, which finds the whole id (`run_prefix_pointer`); a
deployment route's 404 `deployment_not_found` points to `GET /deployment-ids?prefix=` alike.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute

from api.rest import body_shape
from api.rest.query_params import UNKNOWN_CODE as UNKNOWN_QUERY_CODE
from api.rest.route_errors import operation_statuses
from api.rest.route_paths import methods_at
from engine.operations.id_prefixes import reads_as_prefix
from engine.validation import json_text
from engine.validation.common import pointer
from schemas import value_problems
from schemas.close_names import close_names, did_you_mean
from schemas.errors import ApiError, DefinitionError, LimitReached, OperationError, Refusal

logger = logging.getLogger(__name__)

REFUSAL_STATUS: dict[Refusal, int] = {
    Refusal.NOT_FOUND: 404,
    Refusal.CONFLICT: 409,
    Refusal.INVALID: 422,
    Refusal.LIMITED: 429,
    Refusal.UNAVAILABLE: 503,
}
"""How an `OperationError`'s category is answered."""

UNAVAILABLE_RETRY_AFTER_S: dict[str, int] = {"not_ready": 1}
"""The `Retry-After` (seconds) of a 503 by its code: a process starting or stopping
(`not_ready`) is soon replaced by one that answers (the next request reaches another process
behind a load balancer), so 1 s; any other code, `UNAVAILABLE_DEFAULT_RETRY_AFTER_S`. Every
503 says when to come back, as HTTP asks of it: a client that retries on 503 needs no guess,
and one that honours `Retry-After` does not hammer a database that is coming back."""

UNAVAILABLE_DEFAULT_RETRY_AFTER_S = 5
"""The `Retry-After` of a 503 whose code `UNAVAILABLE_RETRY_AFTER_S` does not name (the
database or Redis not answering): about the time a failover or a restart takes to begin
answering, and the longest pause of the CLI's own reconnection (`api.cli.reconnect`)."""

HTTP_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
}
"""Codes of the HTTP-level refusals Starlette raises itself (unknown path, wrong method)."""

INTERNAL_ERROR_MESSAGE = "an unexpected error occurred; it has been logged on the server"

_PATTERNS_IN_WORDS: dict[str, str] = {}
"""What each parameter `pattern` asks for, in words (`in_words`)."""


def in_words(pattern: str, words: str) -> str:
    """`pattern`, for a parameter's `pattern=`, with what it asks for in `words` ("8 to 32 hex
    digits…"): a value it refuses is answered with those words, not the regular expression."""
    _PATTERNS_IN_WORDS[pattern] = words
    return pattern


class ErrorBody(BaseModel):
    """The body of every error answer."""

    code: str = Field(description="Stable, machine-readable reason.")
    message: str = Field(description="What went wrong, for people.")
    details: dict[str, Any] = Field(
        description="Context, `{}` when there is none; `problems` (pointer, code, message) "
        "for anything invalid.",
    )


RUN_NOT_FOUND = "No such run, or another tenant's (`run_not_found`)"
"""What a run route's 404 says: another tenant's run is answered exactly as one that does not
exist; an id that reads as a prefix of one is told to `GET /run-ids?prefix=`."""

COMMON_CODES: dict[int, str] = {
    401: "No key, or an unknown, revoked or expired one (`unauthorized`).",
    403: "A tenant key on an admin route (`forbidden`).",
    404: "What the path names does not exist (a `…_not_found` code: `run_not_found`, "
    "`workflow_not_found`, …).",
    409: "The state of what the path names does not allow this (the `code` says which; "
    "`details.state` the current state).",
    413: "The body is over `SCHEMABRIDGE_MAX_BODY_BYTES`, or over this route's own limit "
    "(`body_too_large`; the message says which), whitespace aside: a run's submission reads "
    "3 times `SCHEMABRIDGE_MAX_INPUT_BYTES` and 64 KiB, a resolve 3 times "
    "`SCHEMABRIDGE_MAX_RESPONSE_BYTES` and 64 KiB, routes taking workflow documents the "
    "global limit, others 832 KiB.",
    429: "A limit refuses the work for now (`queue_full`, with `Retry-After`).",
    503: "The database or Redis did not answer (`store_unavailable`, "
    "`coordination_unavailable`), or the API is starting or stopping (`not_ready`); nothing "
    "was changed. Always with `Retry-After` (seconds): send the same request again then.",
}
"""What each status means on any route that declares it, with its codes: a route's own codes
are said in its `responses` (the set of codes grows with the API, so `code` is documented per
route rather than closed as an enum)."""


def error_responses(
    *statuses: int, codes: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` declaring `ErrorBody` for each status (for a route's decorator),
    described by `codes` (what the route answers with that status, its codes named) or else
    by `COMMON_CODES`."""
    described = codes or {}
    answers: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        answers[status] = {"model": ErrorBody}
        description = described.get(status) or COMMON_CODES.get(status)
        if description:
            answers[status]["description"] = description
    return answers


def run_read_responses(codes: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """`error_responses` of a route that reads one run (its page, children, logs, events, an
    action's preview): 401, 404 `RUN_NOT_FOUND`, 422, 503; `codes` adds or replaces what a
    status says."""
    return error_responses(401, 404, 422, 503, codes={404: RUN_NOT_FOUND + ".", **(codes or {})})


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of an error answer: always the three keys, `details` `{}` when there is none."""
    return {"code": code, "message": message, "details": details or {}}


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _unknown_field(route: APIRoute | None, loc: Sequence[Any]) -> str | None:
    """The refusal of a body field the model there does not have, with the fields it has."""
    fields = None if route is None else body_shape.fields_at(route, loc[1:-1])
    if not fields:
        return None
    name = str(loc[-1])
    meant = list(dict.fromkeys(fields[n] for n in close_names(name, fields)))
    hint = did_you_mean(meant) or f"the fields here are {', '.join(dict.fromkeys(fields.values()))}"
    return f"{name!r} is not a field here; {hint}"


def _not_an_object(route: APIRoute | None, path: Sequence[Any], given: Any) -> str | None:
    """The refusal of a value that is not the object its model takes, with that object."""
    shape = body_shape.object_at(route, path)
    if shape is None:
        return None
    if not path:
        what = "the body"
    elif isinstance(path[-1], int):  # a list's item: "item 0 of 'stages'", not "'0'"
        what = f"item {path[-1]}" + (f" of {str(path[-2])!r}" if len(path) > 1 else "")
    else:
        what = repr(str(path[-1]))
    return f"{what} must be a JSON object, not {json_text.json_kind(given)}: {shape}"


_UNION_MEMBER = re.compile(r"[a-z_-]+\[.*\]")
"""How pydantic names the member of a union (`dict[str,any]`, `list[dict[str,any]]`) in an
error's location: a type, not a place in the request, so it is no part of the pointer."""

_JSON_TYPE_WORDS = {
    "a valid dictionary or object to extract fields from": "a JSON object",
    "a valid dictionary": "a JSON object",
    "a valid list": "a JSON array",
}
"""pydantic's words for a type, in JSON's; the longest first, as one holds another."""


def _validation_problem(error: dict[str, Any], route: APIRoute | None) -> dict[str, Any]:
    loc: Sequence[Any] = error.get("loc", ())
    where, rest = (str(loc[0]), loc[1:]) if loc else ("body", ())
    rest = [part for part in rest if not (isinstance(part, str) and _UNION_MEMBER.fullmatch(part))]
    message = str(error.get("msg", "invalid value"))
    code = str(error.get("type", "invalid"))
    if code == "string_pattern_mismatch":
        words = _PATTERNS_IN_WORDS.get(str((error.get("ctx") or {}).get("pattern")))
        message = f"should be {words}" if words else message
    elif code == "missing" and tuple(loc) == ("body",) and error.get("input") is None:
        # FastAPI's own "Field required" for no body at all (a model's validator may say
        # "missing" of a body it did get: its message stands)
        code, message = "body_missing", body_shape.needs_body(route)
    elif code == "extra_forbidden" and where == "body" and rest:
        message = _unknown_field(route, loc) or message
    elif code == "model_attributes_type" and where == "body":
        message = _not_an_object(route, rest, error.get("input")) or message
    elif code in value_problems.LENGTHS:
        # "should be at most 256 characters long, not 300", in a body, a query string, a
        # path or a header, rather than "String should have at most 256 characters".
        message = value_problems.length_in_words(error) or message
    elif where == "body" and code in value_problems.BOUNDS:
        # "should be at most 100, not 150" rather than "Input should be less than or equal
        # to 100" (the pointer says where, as for every body problem).
        said = value_problems.problem_in_words(error)
        given = value_problems.given_number_words(error.get("input"))
        message = f"{said}{given}" if said else message
    elif where in _PARAMETERS and rest and (said := value_problems.problem_in_words(error)):
        # "Input should be a valid number" or "… greater than or equal to 1": said as what it
        # takes and the value, in a query string, a path or a header alike. A number that
        # did not parse is not said by its kind alone: the first clause of the parameter's
        # own description says which ("Epoch seconds, inclusive" for
        # `createdAfter=yesterday`); a whole one (`wait`'s) buried it.
        parsing = code in value_problems.TAKES and code != "bool_parsing"
        described = _param_clause(route, where, str(rest[0])) if parsing else None
        message = f"{said} ({described})" if described else said
    return {"pointer": pointer(*rest), "code": code, "message": message, "in": where}


_CLAUSE_CHARS = 60


_PARAMETERS = ("query", "path", "header")
"""Where a request's parameters are, as pydantic's error locations name them."""


def _param_clause(route: APIRoute | None, where: str, name: str) -> str | None:
    """The first clause of the OpenAPI description of `route`'s parameter `name` in `where`
    (a query parameter's "Runs in this page, at most 500" of "…; `next` continues the
    list."), or None when it has none or that clause is longer than a reminder."""
    if route is None:
        return None
    params = {
        "query": route.dependant.query_params,
        "path": route.dependant.path_params,
        "header": route.dependant.header_params,
    }[where]
    for param in params:
        if name in {param.alias, param.name} and param.field_info.description:
            clause = re.split(r"[;:]|\. ", param.field_info.description, maxsplit=1)[0]
            clause = clause.rstrip(".").strip()
            return clause if len(clause) <= _CLAUSE_CHARS else None
    return None


def _deepest_members(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`errors` without those of a union's members that the value is not even shaped like,
    when another member matched its shape and failed inside it: `[1]` for "an object or a
    list of objects" is a list whose item 0 is wrong, not also "not an object"."""
    deeper: dict[tuple[Any, ...], set[str]] = {}
    for error in errors:
        loc = tuple(error.get("loc", ()))
        for at, part in enumerate(loc):
            if isinstance(part, str) and _UNION_MEMBER.fullmatch(part) and at + 1 < len(loc):
                deeper.setdefault(loc[:at], set()).add(part)
    kept = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        member = next(
            (
                at
                for at, part in enumerate(loc)
                if isinstance(part, str) and _UNION_MEMBER.fullmatch(part)
            ),
            None,
        )
        if member is not None and loc[:member] in deeper and member + 1 == len(loc):
            continue  # this member failed at the value itself; another got inside it
        kept.append(error)
    return kept


def _merged(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`problems` with those of one place said once: a value that matches no member of a
    union is one problem ("should be a JSON object or a JSON array"), not one per member."""
    by_place: dict[tuple[str, str], dict[str, Any]] = {}
    for problem in problems:
        place = (problem["in"], problem["pointer"])
        message = str(problem["message"])
        for python, json_words in _JSON_TYPE_WORDS.items():
            message = message.replace(python, json_words)
        if place not in by_place:
            by_place[place] = problem | {"message": message}
            continue
        kept = by_place[place]
        extra = message.removeprefix("Input should be ")
        if extra != message and kept["message"].startswith("Input should be "):
            kept["message"] += f" or {extra}"
        else:
            kept["message"] += f"; {message}"
    return list(by_place.values())


async def _on_validation(request: Request, error: Exception) -> JSONResponse:
    if not isinstance(error, RequestValidationError):  # registered for that class only
        raise error
    errors = list(error.errors())
    for item in errors:
        if item.get("type") == "json_invalid":
            return error_response(400, "invalid_json", _json_syntax(item, error.body))
    route = request.scope.get("route")
    route = route if isinstance(route, APIRoute) else None
    problems = _merged([_validation_problem(item, route) for item in _deepest_members(errors)])
    first = problems[0] if problems else {"pointer": "", "message": "invalid request", "in": ""}
    where = f"{first['in']} {first['pointer'] or '/'}".strip()
    others = len(problems) - 1
    # Said as problems, apart from the first one's words: after a list of fields, a bare
    # "(and 1 more)" read as a fourth field that was never named.
    more = f"; {others} more problem{'' if others == 1 else 's'} in details" if others else ""
    return error_response(
        422, "invalid_request", f"{where}: {first['message']}{more}", {"problems": problems}
    )


def _json_syntax(item: dict[str, Any], body: Any) -> str:
    """`invalid_json`'s message: what is wrong and where, by line and column of the body
    (FastAPI names a character offset) when FastAPI kept the body's text."""
    reason = str((item.get("ctx") or {}).get("error", "invalid JSON"))
    position = item.get("loc", ("body", "?"))[-1]
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not isinstance(position, int):
        return f"the request body is not valid JSON ({reason} at character {position})"
    syntax = json_text.syntax_reason(body, json.JSONDecodeError(reason, body, position))
    return f"the request body is not valid JSON: {syntax}"


async def _on_http(
    request: Request, error: Exception, routes: Sequence[BaseRoute] = ()
) -> JSONResponse:
    if not isinstance(error, HTTPException):
        raise error
    status = error.status_code
    code = HTTP_CODES.get(status, f"http_{status}")
    message = str(error.detail) if error.detail else code.replace("_", " ")
    if status == 404 and message == "Not Found":
        message = f"no route for {request.url.path}"
    headers = dict(error.headers or {})
    if status == 405 and message == "Method Not Allowed":
        allowed = methods_at(request.url.path, [*routes, *request.app.routes]) or {
            k.lower(): v for k, v in headers.items()
        }.get("allow")
        if allowed:
            headers = {k: v for k, v in headers.items() if k.lower() != "allow"}
            headers["Allow"] = allowed
        takes = f"; it takes {allowed}" if allowed else ""
        message = f"{request.url.path} does not accept {request.method}{takes}"
    return error_response(status, code, message, headers=headers)


async def _on_api(request: Request, error: Exception) -> JSONResponse:
    if not isinstance(error, ApiError):
        raise error
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return error_response(error.status, error.code, error.message, error.details, headers)


async def _on_operation(request: Request, error: Exception) -> JSONResponse:
    if not isinstance(error, OperationError):
        raise error
    headers: dict[str, str] = {}
    if isinstance(error, LimitReached) and error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    if error.refusal is Refusal.UNAVAILABLE:
        retry_s = UNAVAILABLE_RETRY_AFTER_S.get(error.code, UNAVAILABLE_DEFAULT_RETRY_AFTER_S)
        headers["Retry-After"] = str(retry_s)
    status = REFUSAL_STATUS[error.refusal]
    message = error.message
    if error.code == "run_not_found":
        message += run_prefix_pointer(request.path_params.get("run_id"))
    elif error.code == "deployment_not_found":
        message += run_prefix_pointer(request.path_params.get("deployment_id"), "deployment")
    return error_response(status, error.code, message, error.details, headers)


def run_prefix_pointer(given: object, kind: str = "run") -> str:
    """What a run route's 404 adds when the id in its path is a prefix of one rather than a
    whole id (the CLI and the monitor take 8 hex digits; the routes under `/runs/` do not):
    the route that finds the run it starts. Empty for a whole id or anything else. `kind`
    "deployment": the same for a deployment route, pointing to `/deployment-ids`."""
    if not reads_as_prefix(given):
        return ""
    return (
        f"; a {kind} route needs the whole id: GET /{kind}-ids?prefix={given} lists the "
        f"{kind}s whose id starts with it"
    )


async def _on_definition(request: Request, error: Exception) -> JSONResponse:
    if not isinstance(error, DefinitionError):
        raise error
    problems = [problem.as_dict() for problem in error.problems]
    return error_response(422, error.code, error.message, {"problems": problems})


async def _on_unexpected(request: Request, error: Exception) -> JSONResponse:
    # The backstop for an error raised outside the routes (in a middleware or a handler);
    # the routes' own unexpected errors are answered by `RequestObserver`.
    logger.error(
        "unexpected error answering %s %s", request.method, request.url.path, exc_info=error
    )
    return error_response(500, "internal_error", INTERNAL_ERROR_MESSAGE)


COMPONENT_REF = "#/components/schemas/{model}"
ERROR_SCHEMA_REF = COMPONENT_REF.format(model="ErrorBody")
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
_GENERIC_422 = {None, "Validation Error", "Unprocessable Entity", "Unprocessable Content"}
UNFIT_DESCRIPTION = (
    "The request does not fit the route (`invalid_request`), or names a query parameter the "
    "route does not take (`unknown_query_parameter`)."
)


BODY_UNFIT_DESCRIPTION = (
    "A body nested past `SCHEMABRIDGE_MAX_NESTING_DEPTH` (`too_deep`), or with a key written "
    "twice in one object (`duplicate_key`), each with `details.problems`."
)
NOT_UNICODE_DESCRIPTION = (
    "A body string or key holding an unpaired UTF-16 surrogate such as `\\ud800` "
    "(`not_utf8`, its pointer in `details.problems`)."
)
_ANSWER_DESCRIPTIONS: dict[int, str] = {
    400: "Not JSON (`invalid_json`).",
    415: "A body sent without `Content-Type: application/json` (`unsupported_media_type`).",
    422: UNFIT_DESCRIPTION,
    500: "A bug (`internal_error`).",
}


RETRY_AFTER_HEADERS: dict[str, dict[str, Any]] = {
    "429": {
        "description": "Seconds to wait before sending the request again, when waiting helps "
        "(`queue_full`); absent when only a change of limits does (`quota_exceeded`).",
        "schema": {"type": "integer", "minimum": 1},
    },
    "503": {
        "description": "Seconds to wait before sending the same request again (always "
        "present: 1 while the process starts or stops, 5 while the database or Redis does "
        "not answer).",
        "schema": {"type": "integer", "minimum": 1},
    },
}
"""The `Retry-After` header of each status that has one, as OpenAPI declares it."""


def _described(answer: dict[str, Any], needed: str, mark: str) -> None:
    """Append `needed` to `answer`'s description unless it already names `mark`."""
    said = answer.get("description") or ""
    if said in _GENERIC_422:
        said = ""
    if mark not in said:
        answer["description"] = f"{said} {needed}".strip()


def _document_errors(operation: dict[str, Any], statuses: set[int]) -> None:
    """Declare on `operation` each of `statuses` it does not declare (`ErrorBody`, described
    by `COMMON_CODES` or `_ANSWER_DESCRIPTIONS`), and put `ErrorBody` where FastAPI put its
    own 422 schema."""
    answers: dict[str, Any] = operation.setdefault("responses", {})
    error = {"content": {"application/json": {"schema": {"$ref": ERROR_SCHEMA_REF}}}}
    for status in sorted(statuses):
        description = COMMON_CODES.get(status) or _ANSWER_DESCRIPTIONS.get(status, "")
        answers.setdefault(str(status), {"description": description, **error})
    for code, header in RETRY_AFTER_HEADERS.items():
        body = answers.get(code, {}).get("content", {}).get("application/json", {})
        if body.get("schema", {}).get("$ref") == ERROR_SCHEMA_REF:  # not /health's report
            answers[code].setdefault("headers", {"Retry-After": header})
    for answer in answers.values():
        content = answer.get("content", {}).get("application/json", {})
        if content.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
            content["schema"] = {"$ref": ERROR_SCHEMA_REF}
    unfit = answers.get("422")
    if unfit is not None and 422 in statuses:
        _described(unfit, UNFIT_DESCRIPTION, UNKNOWN_QUERY_CODE)
        if "requestBody" in operation:
            _described(unfit, BODY_UNFIT_DESCRIPTION, body_shape.DUPLICATE_KEY_CODE)
            _described(unfit, NOT_UNICODE_DESCRIPTION, body_shape.NOT_UTF8_CODE)


def errors_in_openapi(
    schema: dict[str, Any], statuses: dict[tuple[str, str], set[int]]
) -> dict[str, Any]:
    """`schema` (an OpenAPI document) with the answers errors really get: FastAPI's own 422
    schema replaced by `ErrorBody`, and on each operation the error statuses its route answers
    whatever its own code does (`statuses`, by path and method, from
    `api.rest.route_errors.operation_statuses`): 400 `invalid_json`, 401 `unauthorized`, 403
    `forbidden`, 413 `body_too_large`, 415 `unsupported_media_type`, 422 (`invalid_request`,
    `unknown_query_parameter`; `too_deep`, `duplicate_key` and `not_utf8` with a body), 500
    `internal_error`, 503."""
    for path, path_item in schema.get("paths", {}).items():
        for method, operation in path_item.items():
            # Every operation is one of the routes `statuses` was read from; 500 is any's.
            _document_errors(operation, statuses.get((path, method), {500}))
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template=ERROR_SCHEMA_REF))
    return schema


def models_in_openapi(schema: dict[str, Any], models: Sequence[type[BaseModel]]) -> None:
    """Add `models` (and the models they hold) to `schema`'s components, as answers are
    serialised: for bodies no route returns as JSON (an event stream's `data`), which FastAPI
    would not list. A name already there is kept: it is the same model."""
    _, found = models_json_schema(
        [(model, "serialization") for model in models], ref_template=COMPONENT_REF
    )
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in found.get("$defs", {}).items():
        schemas.setdefault(name, definition)


def headers_in_openapi(schema: dict[str, Any]) -> None:
    """A header parameter is a string or left out, never null: FastAPI writes an optional one
    (`str | None`) as `anyOf: [string, null]`, which openapi-python-client turns into an
    argument that takes `None` and then sends it (httpx refuses a `None` header value)."""
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []):
                kept = parameter.get("schema", {})
                options = kept.get("anyOf")
                if parameter.get("in") != "header" or not options:
                    continue
                options = [option for option in options if option.get("type") != "null"]
                if len(options) == 1:
                    del kept["anyOf"]
                    parameter["schema"] = {**options[0], **kept}
                else:
                    kept["anyOf"] = options


def install_error_handlers(
    app: FastAPI,
    extra_models: Sequence[type[BaseModel]] = (),
    routes: Sequence[BaseRoute] = (),
) -> None:
    """Answer every error of `app` as JSON (see the module docstring), and say so in its
    OpenAPI document, with `extra_models` in its components (see `models_in_openapi`) and on
    each operation the refusals its route is built with (`api.rest.route_errors`): `routes`
    are the routers' routes (an app holds an included router's routes wrapped, in some FastAPI
    releases), and the app's own are read too."""
    app.add_exception_handler(RequestValidationError, _on_validation)

    async def on_http(request: Request, error: Exception) -> JSONResponse:
        return await _on_http(request, error, routes)

    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(ApiError, _on_api)
    app.add_exception_handler(OperationError, _on_operation)
    app.add_exception_handler(DefinitionError, _on_definition)
    app.add_exception_handler(Exception, _on_unexpected)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = errors_in_openapi(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                ),
                operation_statuses([*routes, *app.routes]),
            )
            models_in_openapi(document, extra_models)
            headers_in_openapi(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
