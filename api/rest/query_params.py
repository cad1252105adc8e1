"""The query parameters a route takes, and the refusals of the others.

Starlette hands a route the whole query string and FastAPI reads only the parameters the route
declares, so a misspelt one (`GET /runs?statsu=FAILED`) or one the route never had
(`?since=yesterday`) used to be dropped without a word: the list answered every run, and a
script's typo got everything. A route's names are read from its FastAPI dependant (the
endpoint's parameters and its dependencies'), and a name outside them is refused with 422
`unknown_query_parameter`: the message names it and offers the close ones
(`schemas.close_names`), or else says what the route takes.

Every query parameter of this API takes one value: a repeated one is refused with 422
`invalid_request`. Starlette keeps every value of a repeated parameter and FastAPI quietly
uses the last for a scalar, so `?status=FAILED&status=RUNNING` would list RUNNING runs only and
the caller would never know half the filter was dropped. Refusing says so, with the name.

`api.rest.route_inputs` runs both for every request, as one app-wide dependency.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Sequence

from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.datastructures import QueryParams

from engine.validation.common import pointer
from schemas.close_names import close_names, did_you_mean
from schemas.errors import ApiError

UNKNOWN_CODE = "unknown_query_parameter"


def dependants(dependant: Dependant) -> Iterator[Dependant]:
    """`dependant` and every dependency under it, breadth first (in declaration order)."""
    pending = deque([dependant])
    while pending:
        current = pending.popleft()
        yield current
        pending.extend(current.dependencies)


def declared_names(dependant: Dependant) -> tuple[str, ...]:
    """The query parameters a route reads (their names on the wire: aliases), in declaration
    order: its own and those of every dependency it has, a query model's fields each."""
    names: dict[str, None] = {}
    for current in dependants(dependant):
        for field in current.query_params:
            model = field.field_info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                for name, info in model.model_fields.items():
                    names[info.alias or name] = None
            else:
                names[field.alias] = None
    return tuple(names)


def _problem(label: str, name: str, declared: Sequence[str]) -> dict[str, str]:
    if not declared:
        message = f"{label} takes no query parameters: leave out {name!r}"
    else:
        hint = did_you_mean(close_names(name, declared)) or f"it takes {', '.join(declared)}"
        message = f"{label} takes no query parameter {name!r}; {hint}"
    return {
        "pointer": pointer(name),
        "code": UNKNOWN_CODE,
        "message": message,
        "in": "query",
    }


def refuse_unknown(method: str, path: str, declared: Sequence[str], query: QueryParams) -> None:
    """422 `unknown_query_parameter` when `query` names a parameter outside `declared` (those
    of the route `method` `path`, "GET /runs" in the message). `details`: `problems`, one
    per unknown name (`pointer` /name), and `accepted`, the route's names."""
    unknown = [name for name in dict.fromkeys(query.keys()) if name not in declared]
    if not unknown:
        return
    label = f"{method} {path}"
    problems = [_problem(label, name, declared) for name in unknown]
    message = problems[0]["message"]
    if len(unknown) > 1:
        names = ", ".join(repr(name) for name in unknown)
        takes = f"it takes {', '.join(declared)}" if declared else "it takes none"
        message = f"{label} takes none of the query parameters {names}; {takes}"
    raise ApiError(422, UNKNOWN_CODE, message, {"problems": problems, "accepted": list(declared)})


def refuse_repeated(query: QueryParams) -> None:
    """422 `invalid_request` naming each parameter `query` gives more than once."""
    counts = Counter(name for name, _ in query.multi_items())
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        raise RequestValidationError(
            [
                {
                    "type": "repeated",
                    "loc": ("query", name),
                    "msg": f"given {counts[name]} times; give it once",
                    "input": query.getlist(name),
                }
                for name in repeated
            ]
        )
