"""Old names the API still takes in requests, for clients written before a rename.

One concept has one name in every body, answer and query string: a tenant is `tenantId`
(as in a submission, a run and `/tenants`). Keys, secrets, the batch-retry filter, `GET /runs`
and a breaker reset said `tenant` until then; requests may still say it:

- in a body, `renamed_fields` (a model's `mode="before"` validator) moves an old name to the
  new one (not in the schema: the body's schema shows the new name only);
- in a query string, the old name is a parameter of its own, `deprecated: true` in OpenAPI,
  and `one_of` takes whichever was given.

Both given with different values is refused (422), never settled by a silent preference.
Answers carry the new name only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic_core import PydanticCustomError

TENANT_RENAMES: Mapping[str, str] = {"tenant": "tenantId"}
"""A body's old field names, each with its new one."""
OLD_TENANT_PARAMETER = "Deprecated: the old name of `tenantId`, still taken (give one of the two)."
"""The description of a query string's `tenant`."""


def renamed_fields(data: Any, renames: Mapping[str, str] = TENANT_RENAMES) -> Any:
    """`data` (a request body's object, before validation) with each old name in `renames`
    moved to its new one. Both names given with different values: a `renamed_conflict`
    error (422 `invalid_request`)."""
    if not isinstance(data, dict) or not any(old in data for old in renames):
        return data
    moved = dict(data)
    for old, new in renames.items():
        if old not in moved:
            continue
        value = moved.pop(old)
        if new in moved and moved[new] != value:
            raise PydanticCustomError(
                "renamed_conflict",
                f"`{old}` is the old name of `{new}` and they differ: give only `{new}`",
            )
        moved[new] = value
    return moved


def one_of(new: str | None, old: str | None, *, name: str, old_name: str) -> str | None:
    """The query parameter `name`'s value, given under it or under its deprecated `old_name`;
    both with different values: 422 `invalid_request` pointing at the old one."""
    if new is not None and old is not None and new != old:
        raise RequestValidationError(
            [
                {
                    "type": "renamed_conflict",
                    "loc": ("query", old_name),
                    "msg": f"the old name of {name!r}, with another value: give only {name!r}",
                    "input": old,
                }
            ]
        )
    return new if new is not None else old


def required(value: str | None, *, name: str) -> str:
    """A query parameter a route needs under one of its names: 422 `invalid_request`
    (`missing`, at the new name) when neither was given."""
    if value is None:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("query", name), "msg": "Field required", "input": None}]
        )
    return value
