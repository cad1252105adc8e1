"""indexes for keyset-paginated run lists, children by status and start-over links

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

ROOTS = sa.text("parent_run_id IS NULL")
RESTARTED = sa.text("restarted_from IS NOT NULL")
FULL = {
    "ix_run_created": ["created_at", "id"],
    "ix_run_status_created": ["status", "created_at", "id"],
    "ix_run_tenant_created": ["tenant_id", "created_at", "id"],
    "ix_run_workflow_created": ["workflow_name", "created_at", "id"],
    "ix_run_parent_status_item": ["parent_run_id", "status", "parent_vertex_id", "item_index"],
}
ROOTS_ONLY = {
    "ix_run_roots_created": ["created_at", "id"],
    "ix_run_roots_status_created": ["status", "created_at", "id"],
    "ix_run_roots_tenant_created": ["tenant_id", "created_at", "id"],
    "ix_run_roots_workflow_version_created": [
        "workflow_name",
        "workflow_version",
        "created_at",
        "id",
    ],
}


def upgrade() -> None:
    # Two indexes gain `id` as their last column (the tie-break of the list order).
    op.drop_index("ix_run_status_created", table_name="run")
    op.drop_index("ix_run_workflow_created", table_name="run")
    for name, columns in FULL.items():
        op.create_index(name, "run", columns)
    for name, columns in ROOTS_ONLY.items():
        op.create_index(name, "run", columns, postgresql_where=ROOTS, sqlite_where=ROOTS)
    op.create_index(
        "ix_run_restarted_from",
        "run",
        ["restarted_from"],
        postgresql_where=RESTARTED,
        sqlite_where=RESTARTED,
    )


def downgrade() -> None:
    for name in ["ix_run_restarted_from", *ROOTS_ONLY, *FULL]:
        op.drop_index(name, table_name="run")
    op.create_index("ix_run_workflow_created", "run", ["workflow_name", "created_at"])
    op.create_index("ix_run_status_created", "run", ["status", "created_at"])
