"""jsonschema validator classes that stay themselves, and resolve `$ref`s in a registry crawled
once that never fetches (docs/security.md, 'Input limits').

Two of jsonschema's defaults are unsafe for a schema someone else wrote:

- **The class changes under `$schema`.** Each time a validator descends into a sub-schema it
  asks `validator_for(subschema)`, which answers jsonschema's own class for whatever dialect
  the sub-schema's `$schema` names. A sub-schema of an inputSchema written
  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "pattern": "^(a+)+$"}` was so
  matched by Python's backtracking `re`, not RE2: 22 characters of input took 0.3 s, each one
  more doubles it. `pinned` makes a class derive only itself, whatever `$schema` says; the
  schema is checked as draft 2020-12 at publication anyway.
- **The root schema is never crawled for good.** Every validator's registry holds the root
  schema uncrawled, and registries are immutable: what a lookup crawls is dropped when it
  returns. `$dynamicRef` (the 2020-12 meta-schema's `"$dynamicRef": "#meta"`, once for every
  sub-schema it checks) asks each schema of its dynamic scope for its anchor, the root first,
  and each miss crawled the whole root again: checking an `inputSchema` against the
  meta-schema cost 2-3 ms per sub-schema. `pinned_validator` crawls the registry once, when it
  builds the validator. Its registry holds the JSON Schema meta-schemas
  (`jsonschema_specifications`, shipped with jsonschema) and the schema; it has no retrieval
  function, so a `$ref` to anything else is `Unresolvable` where jsonschema's default would
  fetch it with urllib, from the process that validates.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing.jsonschema import DRAFT202012

from schemas.schema_work import spend

V = TypeVar("V", bound=type[Validator])


def pinned(cls: V) -> V:
    """`cls` (a class from `jsonschema.validators.create` or `extend`), made to derive only
    itself when it descends into a sub-schema, whatever the sub-schema's `$schema`, and to
    count each sub-schema it enters against a bounded check's work."""
    init_fields = [(f.name, f.alias) for f in attrs.fields(cls) if f.init]  # type: ignore[arg-type]

    def evolve(self: Any, **changes: Any) -> Any:
        # jsonschema's own `evolve`, without its `validator_for(schema, default=cls)`; one
        # sub-schema entered, so one unit of a bounded check's work (`schemas.schema_work`).
        spend()
        changes.setdefault("schema", self.schema)
        for name, alias in init_fields:
            if alias not in changes:
                changes[alias] = getattr(self, name)
        return cls(**changes)

    cls.evolve = evolve  # type: ignore[method-assign]
    return cls


def pinned_validator(cls: type[Validator], schema: Any, **kwargs: Any) -> Validator:
    """`cls(schema, **kwargs)` (a `pinned` draft 2020-12 class), resolving `$ref`s through a
    registry crawled once, that fetches nothing (see the module's docstring)."""
    resource = DRAFT202012.create_resource(schema)
    uri = resource.id() or ""
    registry = SPECIFICATIONS.with_resource(uri, resource).crawl()
    # `_resolver` is how jsonschema hands its resolver to the validators it derives
    # (`evolve`); it is the only way to give one a registry with the root already crawled:
    # `registry=` adds the root uncrawled again. tests/unit/test_validation_work.py fails if
    # a lookup ever crawls the root again.
    return cls(schema, _resolver=registry.resolver(base_uri=uri), **kwargs)  # type: ignore[call-arg]
