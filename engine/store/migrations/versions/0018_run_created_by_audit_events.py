"""who submitted a run, and the audit events of administrative changes

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08 09:00:00.000000

`run.created_by` names the key (or `cli`, `demo`) that created a root run, written by the
submission's own INSERT. `audit_event` is append-only: one row per administrative change
(a version published, a key created or revoked, tenant limits, destination caps, secrets set
or deleted), written in the transaction of the change. Both start empty: runs created before
read `createdBy` null, and nothing before this revision is in the audit.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("created_by", sa.String(length=200), nullable=True))
    op.create_table(
        "audit_event",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("subject_kind", sa.String(length=32), nullable=False),
        sa.Column("subject_id", sa.String(length=400), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_actor", "audit_event", ["actor", "id"])
    op.create_index("ix_audit_action", "audit_event", ["action", "id"])
    op.create_index("ix_audit_subject", "audit_event", ["subject_kind", "subject_id", "id"])


def downgrade() -> None:
    for name in ("ix_audit_subject", "ix_audit_action", "ix_audit_actor"):
        op.drop_index(name, table_name="audit_event")
    op.drop_table("audit_event")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("created_by")
