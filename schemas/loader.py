"""Access to the authoring contract, `workflow.schema.json`, shipped inside this package.

The schema is read with `importlib.resources` (so it works from a wheel or a zip) and parsed
once per process on first use: it is immutable package data, so caching it is not the kind of
process-global state the code avoids (docs/architecture.md, 'No process-global state'), and
nothing is read at import time.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, cast

from jsonschema import Draft202012Validator, validators
from jsonschema.protocols import Validator

from schemas.linear_keywords import enum, unique_items
from schemas.pinned_validator import pinned, pinned_validator

SCHEMA_RESOURCE = "workflow.schema.json"
"""File name of the schema inside the `schemas` package."""


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files("schemas").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")


def workflow_schema() -> dict[str, Any]:
    """A fresh copy of the schema as a dict (callers may mutate it freely)."""
    return cast(dict[str, Any], json.loads(_schema_text()))


@lru_cache(maxsize=1)
def _shared_schema() -> dict[str, Any]:
    schema = workflow_schema()
    # Fail loudly at first use if a bad edit ever ships: a broken contract must not validate.
    Draft202012Validator.check_schema(schema)
    return schema


@lru_cache(maxsize=1)
def file_validator() -> Validator:
    """Validator for a whole workflow file: one workflow document or a list of them.

    Built once; it is safe to share because validation does not mutate it. References to the
    draft 2020-12 meta-schema (used by `inputSchema`) resolve from the registry bundled with
    `jsonschema`, never over the network, crawled once (`schemas.pinned_validator`): checking
    an `inputSchema` against the meta-schema costs the same for every sub-schema. Formats are
    asserted so that an `inputSchema` with an invalid `pattern` regex is refused here, not
    when a run starts. `uniqueItems` and `enum` are linear in the array they check
    (`schemas.linear_keywords`), and the class stays this one inside the meta-schema, whose
    `$schema` would otherwise give jsonschema's own.
    """
    cls = pinned(
        validators.extend(  # type: ignore[no-untyped-call]
            Draft202012Validator, {"uniqueItems": unique_items, "enum": enum}
        )
    )
    return pinned_validator(cls, _shared_schema(), format_checker=cls.FORMAT_CHECKER)
