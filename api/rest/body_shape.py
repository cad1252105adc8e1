"""What a route's JSON body is, read from the route itself, for refusals that say how to fix
the body rather than repeat pydantic's words.

- A body that is not JSON: FastAPI parses a body as JSON only when its `Content-Type` says
  JSON (`application/json`, `application/*+json`) and hands the raw bytes to validation
  otherwise, which answered `body /: Input should be a valid dictionary…` to `curl -d @file`
  (curl's default type is form data). `refuse_non_json` answers 415 `unsupported_media_type`
  first, saying which header to send.
- No body at all: `needs_body` says so with the shape the route takes, from its body model's
  fields (`{"input": {...}, "tenantId": "...", "version": 1}`) or the body's description.
- A body, or a value in it, that is not the object its model takes (`[]`, `null`, `"x"`):
  `object_at` shows the object wanted, where pydantic said "Input should be a valid
  dictionary or object to extract fields from" (on a run's submission, "Input" read as the
  run's input).
- A field the body model does not have: `fields_at` gives the names the model at that place
  takes (on the wire: aliases), for a "did you mean".
- A key written twice in one object: `json.loads` keeps the last value without a word (a
  workflow's `"method": "POST", "method": "DELETE"` would publish as DELETE, a run input's
  `"amount": 1, "amount": 100` run with 100). `refuse_body_problems` answers 422
  `duplicate_key` with each key's pointer, on every route that takes a JSON body, as the
  validator does for a workflow file.
- A number sent as `true`, `false` or text (`"ratePerMinute": true`, `"version": "2"`):
  pydantic's lax mode read them as 1 and 2, so a client's bug set a tenant's rate to one
  call a minute. `refuse_body_problems` answers 422 `invalid_request` at each such place
  (`int_type` / `float_type`) where the body's model takes only a number; a number without
  a fraction (`2.0`) is an integer to JSON Schema and stays taken.
- A string or key with an unpaired UTF-16 surrogate (`"\\ud800"`): JSON's escapes allow it,
  Unicode does not, and no UTF-8 encoder takes it (an input's hash, the database, an answer
  quoting it). `refuse_body_problems` answers 422 `not_utf8` with its pointer, before any
  route sees it, as the validator does for a workflow file.

The body is parsed once: every route of the API is a `JsonBodyRoute`, whose request
(`JsonBodyRequest`) parses with `loads_checked` when FastAPI asks for the JSON, and keeps the
problems it found for `refuse_body_problems`.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic_core import PydanticCustomError
from starlette.routing import BaseRoute

from engine.validation import duplicate_key_summary, loads_checked
from engine.validation.common import pointer
from schemas.errors import ApiError, Problem

JSON_MEDIA = "application/json"
UNSUPPORTED_CODE = "unsupported_media_type"
DUPLICATE_KEY_CODE = "duplicate_key"
NOT_UTF8_CODE = "not_utf8"
_UNIONS = (typing.Union, types.UnionType)
_SEQUENCES = (list, tuple, set, frozenset, Sequence)


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this `Content-Type` as JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == JSON_MEDIA or (media.startswith("application/") and media.endswith("+json"))


async def refuse_non_json(request: Request, route: APIRoute) -> None:
    """415 `unsupported_media_type` for a non-empty body on a route that takes JSON, sent
    without a JSON `Content-Type` (`details.contentType`: the one sent, null for none). Reads
    the body FastAPI has already read, so it costs nothing."""
    if route.body_field is None:
        return
    content_type = request.headers.get("content-type")
    if is_json(content_type) or not await request.body():
        return
    sent = f"this one had Content-Type: {content_type}" if content_type else "this one had none"
    if content_type and content_type.startswith("application/x-www-form-urlencoded"):
        sent += ", what curl -d sends unless told otherwise"
    raise ApiError(
        415,
        UNSUPPORTED_CODE,
        f"the body must be JSON sent with the header Content-Type: {JSON_MEDIA} ({sent})",
        {"contentType": content_type},
    )


class JsonBodyRequest(Request):
    """A request whose JSON body is parsed once, by `loads_checked`, which also finds the keys
    written twice and the unpaired surrogates: FastAPI's own parse (`json`) and
    `refuse_body_problems` share it."""

    _checked: tuple[Any, list[Problem]] | None = None

    async def json(self) -> Any:
        return (await self.checked_json())[0]

    async def checked_json(self) -> tuple[Any, list[Problem]]:
        """The body's JSON value and its `not_utf8` and `duplicate_key` problems, parsed on
        the first call (raising what `json.loads` raises, again on each call, as
        `Request.json` does)."""
        if self._checked is None:
            self._checked = loads_checked(await self.body())
        return self._checked


class JsonBodyRoute(APIRoute):
    """The route class of every router of the API (`APIRouter(route_class=JsonBodyRoute)`):
    a route that takes a body reads it through a `JsonBodyRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler  # nothing to parse: no request of another class to build

        async def parsed_once(request: Request) -> Response:
            return await handler(JsonBodyRequest(request.scope, request.receive))

        return parsed_once


def require_json_body_routes(routes: Iterable[BaseRoute]) -> None:
    """Refuse (TypeError, when the app is built) a route that takes a body but is not a
    `JsonBodyRoute`: its request could not say which keys were written twice."""
    for route in routes:
        takes_body = isinstance(route, APIRoute) and route.body_field is not None
        if takes_body and not isinstance(route, JsonBodyRoute):
            methods = ", ".join(sorted(getattr(route, "methods", ())))
            raise TypeError(
                f"{methods} {getattr(route, 'path', '')} takes a body: its router must be "
                "APIRouter(route_class=api.rest.body_shape.JsonBodyRoute)"
            )


async def refuse_body_problems(request: Request, route: APIRoute) -> None:
    """422 for a JSON body that parses but holds what no route may take, each place in
    `details.problems` (`pointer`, `code`, `message`, `in` body): a string or key with an
    unpaired UTF-16 surrogate (`"\\ud800"`, code `not_utf8`, said first: no UTF-8 encoder
    takes it, so hashing, storing or quoting it failed deep in a route as a 500), or else a
    key written twice in one object (`duplicate_key`). FastAPI has parsed the body before the
    app's dependencies run, with `loads_checked` (`JsonBodyRequest`): the problems are read
    from that parse, and only a body that may hold one is walked."""
    if route.body_field is None or not is_json(request.headers.get("content-type")):
        return
    if not await request.body():
        return
    if not isinstance(request, JsonBodyRequest):  # require_json_body_routes prevents it
        raise TypeError(f"{route.path} is not a JsonBodyRoute")
    try:
        problems = (await request.checked_json())[1]
    except (ValueError, RecursionError):
        return  # not JSON at all: FastAPI's parse of the same body reports it
    if problems:
        refused = [p for p in problems if p.code == NOT_UTF8_CODE] or problems
        raise ApiError(
            422,
            refused[0].code,
            duplicate_key_summary("body", refused),
            {"problems": [{**problem.as_dict(), "in": "body"} for problem in refused]},
        )
    body = (await request.checked_json())[0]
    wrong = not_numbers(body, route.body_field.field_info.annotation)
    if wrong:
        first, others = wrong[0], len(wrong) - 1
        more = f"; {others} more problem{'' if others == 1 else 's'} in details" if others else ""
        raise ApiError(
            422,
            "invalid_request",
            f"body {first.pointer or '/'}: {first.message}{more}",
            {"problems": [{**problem.as_dict(), "in": "body"} for problem in wrong]},
        )


_NUMBER_KINDS = {int: ("int_type", "a whole number"), float: ("float_type", "a number")}


def _number_kind(annotation: Any) -> tuple[str, str] | None:
    """(code, words) when a value of `annotation` can only be a number, else None."""
    members = _members(annotation)
    if not members or not all(member in _NUMBER_KINDS for member in members):
        return None
    return _NUMBER_KINDS[int] if all(m is int for m in members) else _NUMBER_KINDS[float]


def not_numbers(value: Any, annotation: Any, path: tuple[str | int, ...] = ()) -> list[Problem]:
    """The places in `value` (a parsed body) where `annotation` (the body's type) takes only
    a number but the body has `true`, `false` or text. Walks only where the body is a model
    or a list or dict of them: a run's input or a document (`Any`) is not looked into."""
    if annotation is None or annotation is Any:
        return []
    kind = _number_kind(annotation)
    if kind is not None:
        if not isinstance(value, bool | str):
            return []
        code, words = kind
        given = json.dumps(value)
        sent = f"the text {given}" if isinstance(value, str) else given
        return [
            Problem(
                pointer(*path),
                f"should be {words}, not {sent}: send it as a JSON number, without quotes",
                code=code,
            )
        ]
    found: list[Problem] = []
    items: Iterable[tuple[str | int, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        found += not_numbers(item, _step(annotation, key), (*path, key))
    return found


def _members(annotation: Any) -> tuple[Any, ...]:
    """The types an annotation may hold: a union's members but None, or itself."""
    if typing.get_origin(annotation) in _UNIONS:
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _model(annotation: Any) -> type[BaseModel] | None:
    found = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    return found[0] if len(found) == 1 else None


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _step(annotation: Any, key: str | int) -> Any:
    """The annotation of the value at `key` inside a value of `annotation`, or None."""
    for member in _members(annotation):
        origin = typing.get_origin(member)
        if isinstance(key, int) and origin in _SEQUENCES:
            return typing.get_args(member)[0] if typing.get_args(member) else None
        if isinstance(key, str) and origin is dict:
            return typing.get_args(member)[1] if typing.get_args(member) else None
        model = _model(member)
        if isinstance(key, str) and model is not None:
            return _field(model, key)
    return None


def _wire_names(model: type[BaseModel]) -> dict[str, str]:
    """Each key the model accepts (its names and its aliases) → the name it has on the wire."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        wire = info.alias or name
        names[wire] = wire
        names.setdefault(name, wire)
    return names


def fields_at(route: APIRoute, path: Sequence[str | int]) -> dict[str, str] | None:
    """The keys the object at `path` inside the route's body accepts (each → its name on the
    wire), or None where the body is not a model there (or the path is not understood)."""
    annotation = None if route.body_field is None else route.body_field.field_info.annotation
    for key in path:
        annotation = _step(annotation, key)
    model = _model(annotation)
    return None if model is None else _wire_names(model)


def _placeholder(annotation: Any) -> str:
    """A value that shows a field's type: `"..."`, `1`, `[...]`, `{...}`."""
    members = _members(annotation)
    member = members[0] if len(members) == 1 else Any
    origin = typing.get_origin(member)
    if origin is typing.Literal:
        return json.dumps(typing.get_args(member)[0])
    if isinstance(member, type) and issubclass(member, enum.Enum):
        return json.dumps(next(iter(member)).value)
    simple = {str: '"..."', bool: "true", int: "1", float: "1.0"}
    if isinstance(member, type) and member in simple:
        return simple[member]
    return "[...]" if origin in _SEQUENCES else "{...}"


def needs_body(route: APIRoute | None) -> str:
    """The refusal of a request without a body: what the route takes, when it is known."""
    field = None if route is None else route.body_field
    if field is None:
        return f"the request needs a JSON body, sent with Content-Type: {JSON_MEDIA}"
    model = _model(field.field_info.annotation)
    if model is None:
        what = (field.field_info.description or "").rstrip(".")
        return "the request needs a JSON body" + (f": {what[:1].lower()}{what[1:]}" if what else "")
    return f"the request needs a JSON body: {_shown(model)}"


def object_at(route: APIRoute | None, path: Sequence[str | int]) -> str | None:
    """The object the route's body takes at `path`, shown as `_shown` shows it, or None
    where the body is not a model there: for a refusal of a value that is not an object."""
    if route is None or route.body_field is None:
        return None
    annotation = route.body_field.field_info.annotation
    for key in path:
        annotation = _step(annotation, key)
    model = _model(annotation)
    return None if model is None else _shown(model)


def _shown(model: type[BaseModel]) -> str:
    """`{"input": {...}, "tenantId": "...", "version": 1} (input required)`: each field with
    a value of its type, and the required ones named."""
    fields = model.model_fields.items()
    shown = ", ".join(
        f'"{info.alias or name}": {_placeholder(info.annotation)}' for name, info in fields
    )
    required = [info.alias or name for name, info in fields if info.is_required()]
    needed = f" ({', '.join(required)} required)" if required else ""
    return f"{{{shown}}}{needed}"


def not_wrapped(code: str, keys: Sequence[str], rest: str) -> PydanticCustomError:
    """The refusal of a body that is the value meant for one of its fields (a run's input, a
    step's output), sent without that field around it: its keys named (the first three), then
    `rest`, which says where the value goes (`'of a resolve: the step's output goes …'`)."""
    named = ", ".join(sorted(keys)[:3]) + (", ..." if len(keys) > 3 else "")
    are = "is not a field" if len(keys) == 1 else "are not fields"
    return PydanticCustomError(code, "{named} {are} " + rest, {"named": named, "are": are})
