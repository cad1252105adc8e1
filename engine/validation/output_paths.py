"""Paths into the outputs whose shape the engine fixes, checked at validation.

A GATEWAY step's output is `{status, headers, body, bodyTruncated}` (`vertices.gateway`): the
status a number, the headers an object keyed by lower-case names (`vertices.gateway_response`
lower-cases them), the body whatever the destination sent. A MERGE's is `{counts, outputs,
outputsRef}` (`engine.execution.fanout`), its counts `{total, succeeded, failed, cancelled,
pending}` (`vertices.merge.ChildCounts`). A path that leaves these shapes reads null in every
run, so it is refused with the name meant. Only what is certain is checked: nothing under
`body`, nor under a MERGE's `outputs` and `outputsRef`.
"""

from __future__ import annotations

from engine.validation.common import Code, did_you_mean, jmespath_path, quoted_list
from schemas.errors import Problem

GATEWAY_OUTPUT = ("status", "headers", "body", "bodyTruncated")
MERGE_OUTPUT = ("counts", "outputs", "outputsRef")
MERGE_COUNTS = ("total", "succeeded", "failed", "cancelled", "pending")
SCALARS = {"GATEWAY": {"status": "a number", "bodyTruncated": "true or false"}}
"""Fields whose value has no fields of its own, with what it is."""


def output_path_problem(at: str, shown: str, kind: str | None, names: list[str]) -> Problem | None:
    """A problem with `names` (`vertices.<id>.output.…`, read by the expression `shown`) when
    it leaves the output shape of a vertex of type `kind`, else None."""
    fields = {"GATEWAY": GATEWAY_OUTPUT, "MERGE": MERGE_OUTPUT}.get(kind or "")
    if fields is None or len(names) < 4:
        return None
    field = names[3]
    if field not in fields:
        return _unknown(at, shown, f"a {kind}'s output", names, index=3, fields=fields)
    if len(names) < 5:
        return None
    scalar = SCALARS.get(kind or "", {}).get(field)
    if scalar is not None:
        return Problem(
            at,
            f"{shown} reads {jmespath_path(names[:5])}, but {field} is {scalar}, which has no "
            f"fields: read {jmespath_path(names[:4])}.",
            Code.UNKNOWN_OUTPUT_FIELD,
        )
    if kind == "MERGE" and field == "counts":
        if names[4] not in MERGE_COUNTS:
            return _unknown(at, shown, "a MERGE's counts", names, index=4, fields=MERGE_COUNTS)
        if len(names) > 5:
            return Problem(
                at,
                f"{shown} reads {jmespath_path(names[:6])}, but each count is a number, which "
                f"has no fields: read {jmespath_path(names[:5])}.",
                Code.UNKNOWN_OUTPUT_FIELD,
            )
    if kind == "GATEWAY" and field == "headers" and names[4] != names[4].lower():
        fixed = jmespath_path([*names[:4], names[4].lower(), *names[5:]])
        return Problem(
            at,
            f"{shown} reads {jmespath_path(names[:5])}, which is always null: response header "
            f"names are stored in lower case. Write {fixed}.",
            Code.UNKNOWN_OUTPUT_FIELD,
        )
    return None


def _unknown(
    at: str, shown: str, what: str, names: list[str], *, index: int, fields: tuple[str, ...]
) -> Problem:
    wrong = names[index]
    hint = did_you_mean(wrong, fields, any_case=True)
    if hint:
        meant = hint.split('"')[1]
        hint = f" Did you mean {jmespath_path([*names[:index], meant, *names[index + 1 :]])}?"
    return Problem(
        at,
        f'{shown} reads {jmespath_path(names[: index + 1])}, but {what} has no "{wrong}" '
        f"(it has {quoted_list(fields)}), so it is null in every run.{hint}",
        Code.UNKNOWN_OUTPUT_FIELD,
    )
