"""The authoring contract in the OpenAPI document: `POST /workflows` says its body is a
workflow document, or a list of them, as `schemas/workflow.schema.json` defines one, so
`/docs` shows the fields and a client generated from `/openapi.json` gets typed documents
instead of "any object".

The contract's definitions become components named `Workflow…` (`Workflow`,
`WorkflowVertex`, `WorkflowGatewayConfig`, …) with their references rewritten to point at
them, each titled with its component name (a generated client names a class after the title:
the contract's `Vertex` made the class of its `type` `VertexType`, which clashed with the
answers' `VertexType` and cost the client `Workflow` and `WorkflowVertex`). Three things are
not carried over as they are: an `inputSchema` is "a JSON Schema" there (a reference to the
draft 2020-12 meta-schema, which OpenAPI readers would fetch from the network), here an
object; a `type` list whose keywords suit only some of its types (the SPAWNER's `items`, a
string with a `pattern` or an array) is an `anyOf` of one schema a type, each with its own
keywords (a generator reads a `type` list as one schema a type with every keyword: an array
with a `pattern` and no `items` it refuses); and the file's `if`/`then`/`else` on its root
(one document or a list) is a `oneOf` of the two. The request is still read as before: the
route takes any object or list of objects and the validator refuses what breaks the contract
with every problem at once (422 `invalid_workflow`), which a schema check in FastAPI would
not say.
`POST /workflows/validate` keeps the loose body: it answers 200 with the problems of a
document that breaks the contract.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI

from schemas.loader import workflow_schema

PREFIX = "Workflow"
"""Components of the contract are named `Workflow` + the definition's name, capitalised."""
DOCUMENTS = "WorkflowDocuments"
"""The body of `POST /workflows`: one document or a non-empty list."""
EXAMPLE: dict[str, Any] = {
    "name": "customer-lookup",
    "description": "Read one customer record from the CRM.",
    "inputSchema": {
        "type": "object",
        "required": ["customerId"],
        "properties": {"customerId": {"type": "string"}},
    },
    "vertices": {
        "lookup": {
            "type": "GATEWAY",
            "config": {
                "url": "https://crm.example.com/customers/{{ input.customerId }}",
                "destination": "crm",
                "retry": {"maxAttempts": 3},
            },
        }
    },
}
"""What `/docs` shows as the body, instead of a value made up from the types alone."""
_CONTRACT_REF = "#/$defs/"
_COMPONENT_REF = "#/components/schemas/"
META_SCHEMA = "https://json-schema.org/draft/2020-12/schema"


def component_name(definition: str) -> str:
    """`vertex` → `WorkflowVertex`, `workflow` → `Workflow`."""
    if definition == "workflow":
        return PREFIX
    return PREFIX + definition[0].upper() + definition[1:]


_ONE_TYPE_KEYWORDS = {
    "string": ("pattern", "minLength", "maxLength", "format"),
    "array": ("items", "minItems", "maxItems", "uniqueItems"),
}
"""The keywords of a `type` list that apply to one of its types only."""


def _one_type_each(node: dict[str, Any]) -> dict[str, Any]:
    """`node` (whose `type` is a list) as an `anyOf` of one schema a type, each with the
    keywords meant for it and an array with `items` (`{}`: any item, as JSON Schema reads an
    array without them), when some keyword suits one type only; else `node` as it is."""
    types = node["type"]
    specific = {keyword for keywords in _ONE_TYPE_KEYWORDS.values() for keyword in keywords}
    if not specific & node.keys():
        return node
    branches = []
    for kind in types:
        branch: dict[str, Any] = {"type": kind}
        for keyword in _ONE_TYPE_KEYWORDS.get(kind, ()):
            if keyword in node:
                branch[keyword] = node[keyword]
        if kind == "array":
            branch.setdefault("items", {})
        branches.append(branch)
    kept = {key: value for key, value in node.items() if key != "type" and key not in specific}
    return {**kept, "anyOf": branches}


def _rewritten(node: Any) -> Any:
    """`node` with every `#/$defs/x` reference pointing at its component, the reference to
    the meta-schema dropped (its sibling `"type": "object"` stays) and a `type` list with
    keywords of one type split (`_one_type_each`)."""
    if isinstance(node, list):
        return [_rewritten(item) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("type"), list):
        node = _one_type_each(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key != "$ref" or not isinstance(value, str):
            out[key] = _rewritten(value)
        elif value.startswith(_CONTRACT_REF):
            out[key] = _COMPONENT_REF + component_name(value.removeprefix(_CONTRACT_REF))
        elif value != META_SCHEMA:
            out[key] = value
    return out


def contract_components() -> dict[str, dict[str, Any]]:
    """The contract's definitions as OpenAPI components, and `WorkflowDocuments`."""
    contract = workflow_schema()
    components = {
        component_name(name): {**_rewritten(definition), "title": component_name(name)}
        for name, definition in contract["$defs"].items()
    }
    workflow = {"$ref": _COMPONENT_REF + PREFIX}
    components[DOCUMENTS] = {
        "title": DOCUMENTS,
        "description": f"{contract['title']}: {contract['description']}",
        "oneOf": [workflow, {"type": "array", "minItems": 1, "items": workflow}],
    }
    return components


def workflow_documents_in_openapi(document: dict[str, Any], path: str = "/workflows") -> None:
    """Name the contract as the body of `POST path` in `document` (an OpenAPI document) and
    add its components. Does nothing when the document has no such operation."""
    operation = document.get("paths", {}).get(path, {}).get("post")
    if operation is None:
        return
    content = operation["requestBody"]["content"]["application/json"]
    said = content["schema"].get("description")
    content["schema"] = {"$ref": _COMPONENT_REF + DOCUMENTS}
    content["example"] = EXAMPLE
    if said:
        operation["requestBody"]["description"] = said
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in contract_components().items():
        clash = schemas.get(name)
        if clash is not None and clash != definition:
            raise ValueError(f"OpenAPI component {name} is defined twice: {json.dumps(clash)}")
        schemas[name] = definition


def install_workflow_documents(app: FastAPI) -> None:
    """Make `app`'s OpenAPI document name the contract (`workflow_documents_in_openapi`),
    once, when it is first built."""
    built = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        document = built()
        if fresh:
            workflow_documents_in_openapi(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]
