"""The authoring contract itself: well-formed, documented, and in step with the pydantic models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from engine.validation.schema import PATTERN_HELP
from schemas import definitions, loader

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.json") if ".input." not in p.name)

# $defs entry → the pydantic model that mirrors it.
MODELS: dict[str, type[BaseModel]] = {
    "workflow": definitions.Workflow,
    "gatewayConfig": definitions.GatewayConfig,
    "retryPolicy": definitions.RetryPolicy,
    "spawnerConfig": definitions.SpawnerConfig,
    "mergeConfig": definitions.MergeConfig,
    "failureTolerance": definitions.FailureTolerance,
    "vertex": definitions.GatewayVertex,  # shared fields; `config` differs per type
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return loader.workflow_schema()


def _properties(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for def_name, node in schema["$defs"].items():
        for field, prop in node.get("properties", {}).items():
            yield def_name, field, prop


def _resolve(prop: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {**schema["$defs"][ref.removeprefix("#/$defs/")], **prop}
    return prop


def test_is_a_valid_draft_2020_12_schema(schema: dict[str, Any]) -> None:
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("https://")


def test_every_definition_and_field_has_a_title_and_description(schema: dict[str, Any]) -> None:
    missing = [name for name, node in schema["$defs"].items() if not node.get("description")]
    for def_name, field, prop in _properties(schema):
        resolved = _resolve(prop, schema)
        if not resolved.get("title") or not resolved.get("description"):
            missing.append(f"{def_name}.{field}")
    assert missing == []


def test_every_object_rejects_unknown_fields(schema: dict[str, Any]) -> None:
    for name, node in schema["$defs"].items():
        assert node.get("additionalProperties") is False, name


def test_fields_match_the_pydantic_models(schema: dict[str, Any]) -> None:
    for def_name, model in MODELS.items():
        schema_fields = set(schema["$defs"][def_name]["properties"]) - {"$schema"}
        model_fields = {f.alias or name for name, f in model.model_fields.items()}
        assert schema_fields == model_fields, def_name


@pytest.mark.parametrize("def_name", sorted(MODELS))
def test_schema_defaults_match_the_pydantic_defaults(schema: dict[str, Any], def_name: str) -> None:
    model = MODELS[def_name]
    properties = schema["$defs"][def_name]["properties"]
    for name, info in model.model_fields.items():
        if info.is_required():
            continue
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(by_alias=True, mode="json")
        prop = properties[info.alias or name]
        if default is None:
            assert "default" not in prop, f"{def_name}.{name}"
        else:
            assert prop.get("default") == default, f"{def_name}.{name}"


PUBLISHED_MINIMUM: dict[tuple[str, str], tuple[int, int]] = {
    ("gatewayConfig", "timeout_ms"): (
        definitions.MIN_TIMEOUT_MS,
        definitions.LOADED_MIN_TIMEOUT_MS,
    ),
}
"""Fields whose schema minimum is stricter than the model's, as (schema, model): a version
stored before the schema's floor was raised must still load."""


def test_numeric_ranges_match_the_pydantic_constraints(schema: dict[str, Any]) -> None:
    for def_name, model in MODELS.items():
        properties = schema["$defs"][def_name]["properties"]
        for name, info in model.model_fields.items():
            prop = _resolve(properties[info.alias or name], schema)
            published, loaded = PUBLISHED_MINIMUM.get((def_name, name), (None, None))
            for meta in info.metadata:
                if hasattr(meta, "ge") and published is not None:
                    assert (prop.get("minimum"), meta.ge) == (published, loaded), name
                elif hasattr(meta, "ge"):
                    assert prop.get("minimum") == meta.ge, f"{def_name}.{name}"
                if hasattr(meta, "le"):
                    assert prop.get("maximum") == meta.le, f"{def_name}.{name}"


def test_every_pattern_has_a_plain_explanation(schema: dict[str, Any]) -> None:
    patterns: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert patterns
    assert sorted(set(patterns) - set(PATTERN_HELP)) == []


def test_the_validator_is_built_once() -> None:
    assert loader.file_validator() is loader.file_validator()


def test_workflow_schema_returns_a_private_copy() -> None:
    first = loader.workflow_schema()
    first["title"] = "changed"
    assert loader.workflow_schema()["title"] != "changed"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_satisfy_the_schema(path: Path) -> None:
    errors = list(loader.file_validator().iter_errors(json.loads(path.read_text())))
    assert errors == []


def test_there_are_at_least_four_examples_each_with_an_input() -> None:
    assert len(EXAMPLES) >= 4
    for path in EXAMPLES:
        assert path.with_name(path.stem + ".input.json").is_file(), path.name


@pytest.mark.parametrize(
    "document",
    [
        {"name": "x", "vertices": {"a": {"type": "GATEWAY", "config": {"url": "http://h"}}}},
        [{"name": "x", "vertices": {"m": {"type": "MERGE"}}}],
    ],
)
def test_minimal_documents_pass(document: Any) -> None:
    assert list(loader.file_validator().iter_errors(document)) == []


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"name": "x", "vertices": {}},
        {"name": "x", "vertices": {"a": {"type": "GATEWAY"}}},
        {"name": "x", "vertices": {"a": {"type": "SPAWNER", "config": {"items": "x"}}}},
        {"name": "x", "vertices": {"a": {"type": "MERGE", "config": {"failFast": 1}}}},
        {"name": "x", "extra": 1, "vertices": {"a": {"type": "MERGE"}}},
    ],
)
def test_invalid_documents_fail(document: Any) -> None:
    assert list(loader.file_validator().iter_errors(document)) != []
