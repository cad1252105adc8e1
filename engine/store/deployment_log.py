"""One structured process-log line per deployment lifecycle event (docs/architecture.md,
'Exposure, abort and rollback'): started, a stage passed, promoted, rolled back (by the engine
or by hand), aborted. Each is logged once, by the process that made the change, when it
commits (an abort whose run stopped: just before, in the transaction that ends both), with the
codebase's logging style: a sentence for a person and the fields a log shipper filters on
(`event` `deployment.<what>`, `deployment_id`, `workflow`, `candidate_version`,
`serving_version`, `stage`, `actor`, and when a check's figures decided it, `runs`, `failed`,
`finished`, `failure_ratio`, `threshold`)."""

from __future__ import annotations

import logging
from typing import Any

from engine.store.records import DeploymentRecord


def figure_fields(figures: dict[str, Any] | None) -> dict[str, Any]:
    """The candidate's counts and the threshold of a check's (or a stop's) figures, as log
    fields; empty without figures."""
    if not figures:
        return {}
    candidate = figures.get("candidate") or {}
    fields = {
        "runs": candidate.get("runs"),
        "failed": candidate.get("failed"),
        "finished": candidate.get("finished"),
        "failure_ratio": candidate.get("failureRatio"),
        "threshold": figures.get("threshold"),
    }
    return {key: value for key, value in fields.items() if value is not None}


def routing_after(record: DeploymentRecord, figures: dict[str, Any] | None = None) -> str:
    """How a deployment that ended without promoting leaves routing, in the words every line
    of it uses: "v4 gets no new runs, v3 serves", then the candidate's figures if any."""
    candidate = record.candidate_version
    shown = figures_text(figures)
    return f"v{candidate} gets no new runs, v{record.serving_version} serves" + (
        f" (v{candidate}: {shown})" if shown else ""
    )


def figures_text(figures: dict[str, Any] | None) -> str:
    """ "v4: 12 runs, 1 failed of 10 finished (ratio 0.100, threshold 0.050)", or "" without
    figures; the version is the caller's to add."""
    fields = figure_fields(figures)
    if not fields:
        return ""
    ratio = fields.get("failure_ratio")
    shown = "-" if ratio is None else f"{ratio:.3f}"
    limit = fields.get("threshold")
    against = "" if limit is None else f", threshold {limit:.3f}"
    return (
        f"{fields.get('runs', 0)} runs, {fields.get('failed', 0)} failed of "
        f"{fields.get('finished', 0)} finished (ratio {shown}{against})"
    )


def log_event(
    logger: logging.Logger,
    level: int,
    event: str,
    message: str,
    record: DeploymentRecord,
    *,
    stage: int,
    actor: str,
    figures: dict[str, Any] | None = None,
    **more: Any,
) -> None:
    """Log `message` as the deployment event `deployment.<event>` of `record`."""
    fields: dict[str, Any] = {
        "event": f"deployment.{event}",
        "deployment_id": record.id,
        "workflow": record.workflow_name,
        "candidate_version": record.candidate_version,
        "serving_version": record.serving_version,
        "stage": stage,
        "actor": actor,
        **figure_fields(figures),
        **{key: value for key, value in more.items() if value is not None},
    }
    logger.log(level, "%s", message, extra=fields)
