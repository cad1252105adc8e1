"""Every query parameter of this API takes one value: a repeated one is refused with 422.

Starlette keeps every value of a repeated parameter and FastAPI quietly uses the last for a
scalar, so `?status=FAILED&status=RUNNING` would list RUNNING runs only and the caller would
never know half the filter was dropped. Refusing says so, with the parameter's name.
"""

from __future__ import annotations

from collections import Counter

from fastapi import Request
from fastapi.exceptions import RequestValidationError


async def refuse_repeated_query_parameters(request: Request) -> None:
    """An app-wide dependency: 422 `invalid_request` naming each repeated parameter."""
    counts = Counter(name for name, _ in request.query_params.multi_items())
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        raise RequestValidationError(
            [
                {
                    "type": "repeated",
                    "loc": ("query", name),
                    "msg": f"given {counts[name]} times; give it once",
                    "input": request.query_params.getlist(name),
                }
                for name in repeated
            ]
        )
