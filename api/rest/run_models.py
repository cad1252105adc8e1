"""Request and response bodies of the workflow and run routes that are not operations views.

Like the views, they are camelCase on the wire. The views themselves (`RunSummary`,
`RunDetail`, `Page`, ...) are returned as they are.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from api.rest.body_shape import not_wrapped
from engine.operations.pagination import MAX_INTEGER
from engine.operations.views import (
    ErrorView,
    GraphView,
    RunProgress,
    RunStatus,
    RunSummary,
    VersionSummary,
    WorkflowSummary,
)
from schemas.tenant_ids import MAX_TENANT_CHARS, TENANT_ID_RULE


class _Body(BaseModel):
    """A request's body: a key it does not know is refused (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class _Answer(BaseModel):
    """An answer's body: no `extra="forbid"`, whose `additionalProperties: false` would tell a
    client generated from the document that no field is ever added (one that validates
    answers then breaks on the next release's field), and makes openapi-python-client drop
    the fields it does not know instead of keeping them in `additional_properties`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class SubmitRequest(_Body):
    """A run to start. A tenant key submits for its own tenant: `tenantId` may be left out or
    name that tenant. An admin key's run is for `tenantId` ("default" when left out)."""

    input: Any = Field(default_factory=dict, description="The run's input (default `{}`).")
    tenant_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TENANT_CHARS,
        description=f"The tenant the run is for: {TENANT_ID_RULE}.",
    )
    version: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INTEGER,
        description=(
            "The workflow version to run; default: its serving version (the first one "
            "published, or the one a deployment or `POST /workflows/{name}/serving` made serve),"
            " as a running deployment routes it."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _input_is_wrapped(cls, data: Any) -> Any:
        """A body that is the input itself (the sample input files are) gets the one fix that
        helps, not one "extra inputs" error per field of the input."""
        if isinstance(data, dict) and "input" not in data:
            known = {name for name in cls.model_fields} | {to_camel(n) for n in cls.model_fields}
            unknown = [str(key) for key in data if key not in known]
            if unknown:
                raise not_wrapped(
                    "input_not_wrapped",
                    unknown,
                    'of a submission: the run\'s input goes under "input", as in '
                    '{"input": {...}, "tenantId": "..."}',
                )
        return data


CREATED_DESCRIPTION = (
    "True: this request created the run; false: the same `Idempotency-Key` and request were "
    "submitted before, and this is that run (nothing was created)."
)


class SubmittedRun(_Answer):
    """A submission's answer (201: created; 200: the same `Idempotency-Key` and request were
    submitted before, and this is that run)."""

    id: str
    url: str = Field(description="Where the run is read (also the `Location` header).")
    created: bool = Field(description=CREATED_DESCRIPTION)
    run: RunSummary


class RunOutcome(_Answer):
    """A run that SUCCEEDED while `?wait=true` waited for it (200, whether this request
    created the run or replayed an `Idempotency-Key`: `created` says which)."""

    id: str
    url: str = Field(description="Where the run is read (also the `Location` header).")
    created: bool = Field(description=CREATED_DESCRIPTION)
    status: Literal[RunStatus.SUCCEEDED]
    output: Any = Field(description="The run's output: one entry per sink, by vertex id.")
    run: RunSummary


class _WaitDetails(_Answer):
    run_id: str = Field(description="The run this request submitted (or replayed).")
    url: str = Field(description="Where the run is read (also the `Location` header).")
    created: bool = Field(description=CREATED_DESCRIPTION)


class RunFailedDetails(_WaitDetails):
    status: Literal[RunStatus.FAILED]
    error: ErrorView | None = Field(description="The run's error (null: none was recorded).")


class RunCancelledDetails(_Answer):
    """The `details` of every `run_cancelled`: `runId` and `state`, from an operator action
    (resolve, reprocess) as from `?wait=true`; `url`, `created` and `status` only from
    `?wait=true`."""

    run_id: str = Field(description="The CANCELLED run.")
    state: Literal[RunStatus.CANCELLED] = Field(
        description="The run's state, as every 409 names it in `details.state`."
    )
    url: str | None = Field(
        default=None,
        description="Only from `?wait=true`: where the run is read (also the `Location` header).",
    )
    created: bool | None = Field(
        default=None, description="Only from `?wait=true`: " + CREATED_DESCRIPTION
    )
    status: Literal[RunStatus.CANCELLED] | None = Field(
        default=None,
        deprecated=True,
        description="Deprecated, only from `?wait=true`: the same as `state`, under the name "
        "`?wait=true`'s other outcomes use.",
    )


class RunStillRunningDetails(_WaitDetails):
    status: Literal[RunStatus.RUNNING]
    progress: RunProgress = Field(
        description="The run as it was when the wait ended, as `GET /runs/{id}/events` sends "
        "it: each step's status and, while a step waits, why and until when "
        "(`steps[].waiting`: the tenant's rate limit, an open breaker, a retry's backoff, …), "
        "and the fan-out's counters. The message names the first waiting step's reason too."
    )


class RunFailedError(BaseModel):
    """502 of `?wait=true`: the run FAILED. Its `code` tells it from a proxy's 502."""

    code: Literal["run_failed"]
    message: str
    details: RunFailedDetails


class RunCancelledError(BaseModel):
    """409 `run_cancelled`: the run is CANCELLED. From `?wait=true` it was cancelled while
    the request waited; from an operator action (resolve, reprocess) the action does not
    apply to a CANCELLED run. One `details` shape either way (`RunCancelledDetails`)."""

    code: Literal["run_cancelled"]
    message: str
    details: RunCancelledDetails


class RunStillRunningError(BaseModel):
    """504 of `?wait=true`: the run had not ended when the wait did; it goes on. Its `code`
    tells it from a proxy's 504."""

    code: Literal["run_still_running"]
    message: str
    details: RunStillRunningDetails


class ProblemView(_Answer):
    """One thing wrong with a workflow document."""

    pointer: str = Field(description="RFC 6901 pointer into the document as sent.")
    code: str
    message: str


class ValidationReport(_Answer):
    """What `POST /workflows/validate` found: every problem (empty when valid)."""

    valid: bool
    problems: list[ProblemView]


class PreviewReport(ValidationReport):
    """What `POST /workflows/preview` found: every problem, and each document's graph as
    written (version 0: not published), drawn even when the document is invalid."""

    graphs: list[GraphView]


class WorkflowList(_Answer):
    items: list[WorkflowSummary]


class VersionList(_Answer):
    items: list[VersionSummary]


__all__ = [
    "CREATED_DESCRIPTION",
    "PreviewReport",
    "ProblemView",
    "RunCancelledDetails",
    "RunCancelledError",
    "RunFailedDetails",
    "RunFailedError",
    "RunOutcome",
    "RunStillRunningDetails",
    "RunStillRunningError",
    "SubmitRequest",
    "SubmittedRun",
    "ValidationReport",
    "VersionList",
    "WorkflowList",
]
