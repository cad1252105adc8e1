"""What the audit operations return (camelCase on the wire, like every view)."""

from __future__ import annotations

from typing import Any

from engine.operations.views import Page, View
from engine.store.audit import AuditFilter
from engine.store.models import AuditAction, AuditSubject

__all__ = ["AuditAction", "AuditEventView", "AuditFilter", "AuditSubject"]


class AuditEventView(View):
    """One administrative change, as the audit trail keeps it (docs/security.md, 'Audit')."""

    id: int
    """Increasing with the order the changes committed in (the list is newest first)."""
    at: float
    """Epoch seconds."""
    actor: str | None
    """Who made it, in the words operator actions' logs use: `key:<id>` (a REST API key),
    `demo` (authentication off), `cli` (a command on the database directly), `serve --demo`;
    None when the caller named nobody (only code inside a process: tests, benchmarks)."""
    action: AuditAction
    subject_kind: AuditSubject
    subject_id: str
    """Which one: a workflow's name, a key's id, a tenant id, a destination key, or
    `<tenant>/<NAME>` for a secret."""
    detail: dict[str, Any] | None = None
    """What was set: a version and its hash, a key's role and tenant, a quota, caps (what was
    asked, `changed`, and what resulted), a secret's tenant and name (never a value)."""


class AuditList(Page[AuditEventView]):
    """A page of audit events (`GET /audit`), named as `RunList` is."""
