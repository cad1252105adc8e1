"""jsonschema validators whose `$ref`s resolve in a registry crawled once, never fetched.

jsonschema gives every validator a resolver over its registry with the root schema added
*uncrawled*. Registries are immutable, so what a lookup crawls is dropped when it returns, and
`$dynamicRef` (the draft 2020-12 meta-schema's `"$dynamicRef": "#meta"`, once for every
sub-schema it checks) asks every schema of its dynamic scope, the root first, for the anchor:
the root does not have it, and each miss crawls the whole root schema again. Checking an
`inputSchema` against the meta-schema so cost 2-3 ms per sub-schema, a document of 3,000
empty sub-schemas 10 s (docs/security.md, 'Input limits'). Crawled before the first lookup, a
miss is one dict probe.

The registry holds the JSON Schema meta-schemas (`jsonschema_specifications`, shipped with
jsonschema) and the schema itself; it has no retrieval function, so a `$ref` to anything else
is `Unresolvable` rather than fetched over the network (jsonschema's default registry fetches
unknown `http(s)://` URIs with `urllib`, from the process that validates).
"""

from __future__ import annotations

from typing import Any, TypeVar

from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing.jsonschema import DRAFT202012

V = TypeVar("V", bound=Validator)


def crawled_validator(cls: type[V], schema: Any, **kwargs: Any) -> V:
    """`cls(schema, **kwargs)` (a draft 2020-12 validator class), resolving `$ref`s through a
    registry crawled once (see the module's docstring)."""
    resource = DRAFT202012.create_resource(schema)
    uri = resource.id() or ""
    registry = SPECIFICATIONS.with_resource(uri, resource).crawl()
    # `_resolver` is how jsonschema hands its resolver to the validators it derives
    # (`evolve`); it is the only way to give one a registry with the root already crawled:
    # `registry=` adds the root uncrawled again. tests/unit/test_validation_limits.py fails
    # if the root is ever crawled more than once per check again.
    return cls(schema, _resolver=registry.resolver(base_uri=uri), **kwargs)  # type: ignore[call-arg]
