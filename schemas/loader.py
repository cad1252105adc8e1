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

from jsonschema import Draft202012Validator

from schemas.crawled_validator import crawled_validator

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
def file_validator() -> Draft202012Validator:
    """Validator for a whole workflow file: one workflow document or a list of them.

    Built once; `Draft202012Validator` is safe to share because validation does not mutate it.
    References to the draft 2020-12 meta-schema (used by `inputSchema`) resolve from the
    registry bundled with `jsonschema`, never over the network. Formats are asserted so that
    an `inputSchema` with an invalid `pattern` regex is refused here, not when a run starts.
    Its registry is crawled once (`schemas.crawled_validator`): checking an `inputSchema`
    against the meta-schema costs the same for every sub-schema, whatever the document's size.
    """
    return crawled_validator(
        Draft202012Validator,
        _shared_schema(),
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
